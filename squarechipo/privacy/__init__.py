"""Label privacy (randomized response, local DP), Huber corruption, their orders and the ledger."""

from squarechipo.privacy.calibration import (
    debias_factor,
    debias_factor_from_flip_rate,
    flip_probability,
)
from squarechipo.privacy.dataset import privatize_dataset
from squarechipo.privacy.ledger import (
    PrivacyLedger,
    Release,
    get_ledger,
    load_privatized,
    save_privatized,
)
from squarechipo.privacy.mechanisms import (
    ADVERSARIES,
    ctl,
    huber_corruption,
    ltc,
    randomized_response,
)
from squarechipo.privacy.pipeline import LabelPipeline

__all__ = [
    "ADVERSARIES",
    "LabelPipeline",
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
    "privatize_dataset",
    "randomized_response",
    "save_privatized",
]
