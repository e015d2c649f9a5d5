"""Script arguments for ``recipes/train.py``: TRL's ``ScriptArguments`` plus the label pipeline."""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from trl import ScriptArguments

from squarechipo.privacy.measurements import LabelPipeline

logger = logging.getLogger("squarechipo")

__all__ = ["TrainScriptArguments"]


@dataclass
class TrainScriptArguments(ScriptArguments):
    """Dataset and label-pipeline fields (YAML keys of ``recipes/configs/*.yaml``)."""

    dataset_test_split: str = field(default="validation", metadata={"help": "Evaluation split."})
    max_train_samples: int | None = field(
        default=None, metadata={"help": "Train on the first N rows of the training split (before privatization)."}
    )
    max_eval_samples: int | None = field(default=None, metadata={"help": "Evaluate on the first N rows."})
    label_epsilon: float | None = field(
        default=None, metadata={"help": "Randomized-response ε for the training labels; None = no local DP."}
    )
    label_corruption_rate: float = field(default=0.0, metadata={"help": "Huber corruption rate α in [0, 0.5]."})
    label_adversary: str = field(default="flip", metadata={"help": "flip, random, targeted or fixed."})
    label_order: str = field(default="ctl", metadata={"help": "ctl (corrupt, then LDP) or ltc (LDP, then corrupt)."})
    label_target_column: str | None = field(default=None, metadata={"help": "targeted adversary: column to match."})
    label_target_values: list[str] | None = field(
        default=None, metadata={"help": "targeted adversary: values of label_target_column to attack."}
    )
    label_fixed_preference: str | None = field(
        default=None, metadata={"help": "fixed adversary: longer, shorter, or a boolean column name."}
    )
    label_seed: int | None = field(
        default=None,
        metadata={"help": "Seed for the label noise. Leave unset for real data (OS entropy); set it for simulations."},
    )
    privatized_dir: str | None = field(
        default=None,
        metadata={
            "help": "Where the released training split is saved and reused (default: <output_dir>/released_train). "
            "A re-run reuses it instead of drawing fresh noise."
        },
    )

    def label_pipeline(self) -> LabelPipeline:
        return LabelPipeline(
            epsilon=self.label_epsilon,
            corruption_rate=self.label_corruption_rate,
            adversary=self.label_adversary,
            order=self.label_order,
            target_column=self.label_target_column,
            target_values=tuple(self.label_target_values) if self.label_target_values else None,
            fixed_preference=self.label_fixed_preference,
        )

    def load_splits(self, output_dir: str, state, with_eval: bool, release: bool = True):
        """(released train split, eval split or None): loaded, subset, and released once through the pipeline.

        The training split goes through the label pipeline on the main process, is saved with its
        ledger under ``privatized_dir`` (default ``<output_dir>/released_train``) and reused by every
        rank and every re-run, so no fresh noise is drawn. ``release=False`` returns the raw split
        (for callers that release parts of it themselves, e.g. LP-2ST).
        """
        from squarechipo.data import load_preference_dataset
        from squarechipo.privacy.release import release_once

        data = load_preference_dataset(self.dataset_name, config=self.dataset_config)
        if not hasattr(data, "keys"):
            raise ValueError(f"{self.dataset_name} has no splits; expected train/validation splits.")
        train = data[self.dataset_train_split]
        if self.max_train_samples is not None:
            train = train.select(range(min(self.max_train_samples, len(train))))
        eval_dataset = None
        if with_eval and self.dataset_test_split in data:
            eval_dataset = data[self.dataset_test_split]
            if self.max_eval_samples is not None:
                eval_dataset = eval_dataset.select(range(min(self.max_eval_samples, len(eval_dataset))))
        pipeline = self.label_pipeline()
        if release and (pipeline.is_private or pipeline.is_corrupted):
            folder = Path(self.privatized_dir or Path(output_dir) / "released_train")
            train = release_once(train, pipeline, folder, seed=self.label_seed, state=state)
            logger.info(
                "rank %d/%d trains on %d released rows from %s (labels digest %s)",
                state.process_index,
                state.num_processes,
                len(train),
                folder,
                labels_digest(train),
            )
        return train, eval_dataset


def labels_digest(dataset) -> str:
    """Hash of the released rows as stored (labels included): equal on every rank iff the labels are."""
    digest = hashlib.sha256()
    for chosen, rejected in zip(dataset["chosen"], dataset["rejected"]):
        digest.update(json.dumps([chosen, rejected], sort_keys=True).encode("utf-8"))
    return digest.hexdigest()[:16]
