"""A real policy-trainer run on the tiny model, for the tests that check what a run saves."""

from __future__ import annotations


def train_tiny(tmp_path, tiny_model_factory, tokenizer, train, eval_dataset=None, **config):
    """A real SquareChiPOTrainer run on the tiny model (reference log-probs precomputed from the start model)."""
    from squarechipo.trainer import SquareChiPOConfig, SquareChiPOTrainer

    args = SquareChiPOConfig(
        output_dir=str(tmp_path / "run"),
        per_device_train_batch_size=4,
        per_device_eval_batch_size=len(eval_dataset) if eval_dataset is not None else 8,
        max_length=64,
        learning_rate=1e-3,
        report_to="none",
        precompute_ref_log_probs=True,
        **config,
    )
    trainer = SquareChiPOTrainer(
        tiny_model_factory(), args=args, train_dataset=train, eval_dataset=eval_dataset, processing_class=tokenizer
    )
    trainer.train()
    return trainer


class SingleProcessState:
    """A single process (what Accelerate's PartialState reports without a launcher)."""

    is_main_process, process_index, num_processes = True, 0, 1

    def wait_for_everyone(self):
        return None
