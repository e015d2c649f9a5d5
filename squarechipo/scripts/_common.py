"""What the training scripts share: logging set-up, which labels the config declares public, and the script tail."""

from __future__ import annotations

import logging

from squarechipo.data.label_roles import label_free

__all__ = ["declare_public_labels", "setup_logging"]

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
