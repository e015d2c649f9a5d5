"""Label privacy: the mechanisms (as functions and as measurements), the one dataset-level release, the
ledger, the privacy record, debiasing and the lineage of models."""

from squarechipo.privacy.binding import get_ledger
from squarechipo.privacy.calibration import (
    debias_factor,
    debias_factor_from_flip_rate,
    flip_probability,
)
from squarechipo.privacy.ledger import PrivacyLedger, Release
from squarechipo.privacy.measurements import KaryRR, LabelPipeline, RRWithPrior, SubsetMechanism
from squarechipo.privacy.mechanisms import (
    ADVERSARIES,
    ctl,
    huber_corruption,
    ltc,
    randomized_response,
)
from squarechipo.privacy.release import combine_parts, release_dataset
from squarechipo.privacy.release_store import (
    load_privatized,
    load_release,
    release_once,
    save_privatized,
    save_release,
)

__all__ = [
    "ADVERSARIES",
    "KaryRR",
    "LabelPipeline",
    "RRWithPrior",
    "SubsetMechanism",
    "release_once",
    "combine_parts",
    "load_release",
    "save_release",
    "PrivacyLedger",
    "Release",
    "ctl",
    "debias_factor",
    "debias_factor_from_flip_rate",
    "flip_probability",
    "get_ledger",
    "huber_corruption",
    "load_privatized",
    "ltc",
    "release_dataset",
    "randomized_response",
    "save_privatized",
]
