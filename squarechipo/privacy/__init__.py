"""Label privacy: the mechanisms (as functions and as measurements), the one dataset-level release, the
ledger, the privacy record, debiasing and the lineage of models.

The names below are imported on first use, so ``import squarechipo.privacy.mechanisms.calibration`` (which the losses
need) does not load ``datasets`` and the release machinery."""

from typing import TYPE_CHECKING

from squarechipo._lazy import lazy_exports

_EXPORTS = {
    "get_ledger": "squarechipo.privacy.ledger.binding",
    **dict.fromkeys(
        ("debias_factor", "debias_factor_from_flip_rate", "flip_probability"),
        "squarechipo.privacy.mechanisms.calibration",
    ),
    **dict.fromkeys(("PrivacyLedger", "Release"), "squarechipo.privacy.ledger.records"),
    **dict.fromkeys(
        ("KaryRR", "LabelPipeline", "RRWithPrior", "SubsetMechanism"), "squarechipo.privacy.mechanisms.measurements"
    ),
    **dict.fromkeys(
        ("ADVERSARIES", "ctl", "huber_corruption", "ltc", "randomized_response"),
        "squarechipo.privacy.mechanisms.binary",
    ),
    "combine_parts": "squarechipo.privacy.release.rows",
    **dict.fromkeys(
        ("load_privatized", "load_release", "release_dataset", "save_privatized", "save_release"),
        "squarechipo.privacy.release.store",
    ),
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = [
    "ADVERSARIES",
    "KaryRR",
    "LabelPipeline",
    "PrivacyLedger",
    "RRWithPrior",
    "Release",
    "SubsetMechanism",
    "combine_parts",
    "ctl",
    "debias_factor",
    "debias_factor_from_flip_rate",
    "flip_probability",
    "get_ledger",
    "huber_corruption",
    "load_privatized",
    "load_release",
    "ltc",
    "randomized_response",
    "release_dataset",
    "save_privatized",
    "save_release",
]

if TYPE_CHECKING:
    from squarechipo.privacy.ledger.binding import get_ledger
    from squarechipo.privacy.ledger.records import PrivacyLedger, Release
    from squarechipo.privacy.mechanisms.binary import ADVERSARIES, ctl, huber_corruption, ltc, randomized_response
    from squarechipo.privacy.mechanisms.calibration import (
        debias_factor,
        debias_factor_from_flip_rate,
        flip_probability,
    )
    from squarechipo.privacy.mechanisms.measurements import KaryRR, LabelPipeline, RRWithPrior, SubsetMechanism
    from squarechipo.privacy.release.rows import combine_parts
    from squarechipo.privacy.release.store import (
        load_privatized,
        load_release,
        release_dataset,
        save_privatized,
        save_release,
    )
