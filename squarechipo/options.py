"""Option names that changed: an old name keeps working for one release, with a warning naming the new one.

The scripts use TRL's data option names (``dataset_name``, ``dataset_train_split``, ``dataset_test_split``,
``max_train_samples``, ``max_eval_samples``) everywhere, and the three epsilons have names that say which they are:
``label_epsilon`` (the local release of the labels), ``debias_epsilon`` (the ε a trainer debiases for when the data
carries no ledger: asserted, not backed) and ``central_epsilon`` (the exponential-mechanism selector).
"""

from __future__ import annotations

import warnings
from dataclasses import field
from typing import Any

__all__ = ["REMOVED_AFTER", "deprecated", "apply_renames"]

#: The release after which the old names stop working.
REMOVED_AFTER = "0.2"


def deprecated(new: str) -> Any:
    """A dataclass field for an old option name: None unless given; :func:`apply_renames` moves it to ``new``."""
    return field(
        default=None, metadata={"help": f"Deprecated: use {new} (removed after squarechipo {REMOVED_AFTER})."}
    )


def apply_renames(config: Any, renames: dict[str, str]) -> None:
    """Move each given old option (``old → new``) to its new name, with a ``FutureWarning``."""
    for old, new in renames.items():
        value = getattr(config, old, None)
        if value is None:
            continue
        warnings.warn(
            f"option `{old}` is renamed `{new}`; the old name stops working after squarechipo {REMOVED_AFTER}.",
            FutureWarning,
            stacklevel=3,
        )
        setattr(config, new, value)
        setattr(config, old, None)
