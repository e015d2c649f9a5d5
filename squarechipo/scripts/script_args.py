"""Script arguments for ``recipes/train.py``: TRL's ``ScriptArguments`` plus the label pipeline (fields only;
:func:`squarechipo.scripts.splits.load_training_splits` loads and releases the data they name)."""

from __future__ import annotations

from dataclasses import dataclass, field

from trl import ScriptArguments

from squarechipo.privacy.mechanisms.measurements import LabelPipeline

__all__ = ["TrainScriptArguments"]


@dataclass
class TrainScriptArguments(ScriptArguments):
    """Dataset and label-pipeline fields (YAML keys of ``recipes/configs/*.yaml``)."""

    dataset_test_split: str = field(default="validation", metadata={"help": "Evaluation split."})
    max_train_samples: int | None = field(
        default=None, metadata={"help": "Train on the first N rows of the training split (before privatization)."}
    )
    train_rows_from: int = field(
        default=0,
        metadata={
            "help": "Start at this row of the training split (max_train_samples then counts from it): examples that "
            "must not release rows another example released (docs/privacy.md's LP-2ST) take rows of their own."
        },
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
    label_public_columns: list[str] | None = field(
        default=None,
        metadata={
            "help": "Columns kept beside the released labels because they do not depend on the label (e.g. id, "
            "category). Label-carrying columns (scores, ratings, messages) are dropped; any other column is refused."
        },
    )
    label_rerelease: bool = field(
        default=False,
        metadata={
            "help": "Allow releasing rows that were released before on this machine (into another folder). Fresh "
            "noise on the same rows adds up: the ledger and the card then state the composed epsilon of all "
            "releases of those rows. Off by default: a second release is refused."
        },
    )
    label_privacy_unit: str | None = field(
        default=None,
        metadata={
            "help": "A column that identifies the unit of privacy (a labeller or comparison id). Unset, the unit is "
            "one comparison and copies of a comparison (retyped, look-alike letters, near-copies) are refused; set, "
            "rows of one unit compose (the ledger's ε is per unit) and the registry of releases counts units."
        },
    )
    public_splits: list[str] | None = field(
        default=None,
        metadata={
            "help": "Splits whose labels are public (e.g. a gold split). Every other evaluation split is released "
            "through the same pipeline as train, with a ledger of its own, before any metric is computed on it."
        },
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
