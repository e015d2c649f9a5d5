"""Label privacy: the mechanisms (as functions and as measurements), the one dataset-level release, the
ledger, the privacy record, debiasing and the lineage of models.

The names below are imported on first use, so ``import squarechipo.privacy.calibration`` (which the losses need)
does not load ``datasets`` and the release machinery."""

from typing import TYPE_CHECKING

from squarechipo._lazy import lazy_exports

_EXPORTS = {
    "get_ledger": "squarechipo.privacy.binding",
    **dict.fromkeys(
        ("debias_factor", "debias_factor_from_flip_rate", "flip_probability"), "squarechipo.privacy.calibration"
    ),
    **dict.fromkeys(("PrivacyLedger", "Release"), "squarechipo.privacy.ledger"),
    **dict.fromkeys(("KaryRR", "LabelPipeline", "RRWithPrior", "SubsetMechanism"), "squarechipo.privacy.measurements"),
    **dict.fromkeys(
        ("ADVERSARIES", "ctl", "huber_corruption", "ltc", "randomized_response"), "squarechipo.privacy.mechanisms"
    ),
    **dict.fromkeys(("combine_parts", "release_dataset"), "squarechipo.privacy.release"),
    **dict.fromkeys(
        ("load_privatized", "load_release", "release_once", "save_privatized", "save_release"),
        "squarechipo.privacy.release_store",
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
    "release_once",
    "save_privatized",
    "save_release",
]

if TYPE_CHECKING:
    from squarechipo.privacy.binding import get_ledger
    from squarechipo.privacy.calibration import debias_factor, debias_factor_from_flip_rate, flip_probability
    from squarechipo.privacy.ledger import PrivacyLedger, Release
    from squarechipo.privacy.measurements import KaryRR, LabelPipeline, RRWithPrior, SubsetMechanism
    from squarechipo.privacy.mechanisms import ADVERSARIES, ctl, huber_corruption, ltc, randomized_response
    from squarechipo.privacy.release import combine_parts, release_dataset
    from squarechipo.privacy.release_store import (
        load_privatized,
        load_release,
        release_once,
        save_privatized,
        save_release,
    )
