"""Real runs on the tiny models, and their configs, for the tests that check what a run saves."""

from __future__ import annotations


def tiny_config(output_dir, **overrides):
    """A SquareChiPOConfig for the tiny models: one seeded step, nothing saved or reported, no progress bar."""
    from squarechipo.trainer import SquareChiPOConfig

    values = dict(
        output_dir=str(output_dir),
        per_device_train_batch_size=4,
        max_steps=1,
        learning_rate=1e-3,
        report_to="none",
        save_strategy="no",
        gradient_checkpointing=False,
        max_length=128,
        seed=0,
        disable_tqdm=True,
    )
    return SquareChiPOConfig(**{**values, **overrides})


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


def preference_config(tmp_path, **overrides):
    """A PrivateRewardConfig for a pairwise preference model (least squares, eq. 10) on the tiny classifier."""
    from squarechipo.reward import PrivateRewardConfig

    values = dict(
        output_dir=str(tmp_path / "pm"),
        model_type="preference",
        loss="square_dpo",
        max_margin=None,
        max_steps=16,
        learning_rate=3e-3,
        per_device_train_batch_size=8,
        report_to="none",
        save_strategy="no",
        max_length=256,
    )
    return PrivateRewardConfig(**{**values, **overrides})


class SingleProcessState:
    """A single process (what Accelerate's PartialState reports without a launcher)."""

    is_main_process, process_index, num_processes = True, 0, 1

    def wait_for_everyone(self):
        return None
