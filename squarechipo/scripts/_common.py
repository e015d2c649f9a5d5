"""What the training scripts share: logging set-up, which labels the config declares public, and the script tail."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from squarechipo.data.label_roles import label_free
from squarechipo.models.runtime import end_run

__all__ = ["declare_public_labels", "finish_run", "setup_logging"]

logger = logging.getLogger("squarechipo")


def setup_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


@label_free("sets the config's public flags; reads no row")
def declare_public_labels(script_args, training_args, eval_dataset) -> None:
    """Which raw labels the config declares public, for the trainer's label rule.

    A config with no label pipeline (``label_epsilon`` unset and no corruption) chose to train on the labels as they
    are: that is its declaration that they are public (simulated or public labels), and no privacy is claimed. An
    evaluation split listed in ``public_splits`` is public; with no pipeline, so is the evaluation split. Evaluation
    is turned off when the data has no evaluation split (the loader logged it)."""
    pipeline = script_args.label_pipeline()
    if not (pipeline.is_private or pipeline.is_corrupted):
        logger.warning(
            "no label pipeline (label_epsilon unset, label_corruption_rate 0): the training labels are used as they "
            "are and declared public by this config; no privacy is claimed for the model."
        )
        training_args.train_labels_public = True
        training_args.eval_labels_public = True
    if script_args.dataset_test_split in (script_args.public_splits or []):
        training_args.eval_labels_public = True
    if eval_dataset is None and training_args.eval_strategy != "no":
        training_args.eval_strategy = "no"
        training_args.do_eval = False


def finish_run(
    trainer,
    result,
    dataset_name: str | None,
    done: str,
    *,
    evaluate: bool,
    after_card: Callable[[], None] | None = None,
) -> None:
    """The end every training script shares, as TRL's scripts end: save the model, the train metrics, a final
    evaluation (``evaluate``), the card (then ``after_card``, e.g. a record of its own), the state, the push, and a
    clean exit: every process waits for the others, so none shuts the group down while the main one writes."""
    args = trainer.args
    trainer.save_model(args.output_dir)
    if result is not None:
        trainer.log_metrics("train", result.metrics)
        trainer.save_metrics("train", result.metrics)
    if evaluate:
        metrics = trainer.evaluate()
        trainer.log_metrics("eval", metrics)
        trainer.save_metrics("eval", metrics)
    trainer.create_model_card(dataset_name=dataset_name)
    if after_card is not None:
        after_card()
    trainer.save_state()
    if args.push_to_hub:
        trainer.push_to_hub(dataset_name=dataset_name)
        trainer.accelerator.print(f"Pushed to https://huggingface.co/{trainer.hub_model_id}")
    trainer.accelerator.print(f"Done. {done} in {Path(args.output_dir).resolve()}")
    state = trainer.accelerator.state
    logger.info("rank %d/%d: finished; waiting for the other processes", state.process_index, state.num_processes)
    trainer.accelerator.wait_for_everyone()
    end_run(trainer)  # finishes trackers and shuts the process group down cleanly
    logger.info("rank %d/%d: process group closed", state.process_index, state.num_processes)
