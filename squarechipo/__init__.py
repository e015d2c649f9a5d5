"""squarechipo: private and robust preference alignment on top of Hugging Face TRL.

The package follows the data flow of ``DESIGN.md`` §7::

    data (validate) -> privacy (privatize / corrupt, ledger) -> losses / trainer -> select -> judge

Papers are cited by their file name in ``shared/papers``:
``003_53b198bad124db21.txt`` (Square-χPO), ``000_fe20ab905a4b4c66.txt`` (private BTL
reward estimation), ``001_4a60f6186f1046a1.txt`` (RRWithPrior), ``002_3ce59a2791aa1be8.txt``
(√K label randomizer).
"""

from squarechipo.losses import METHODS, PreferenceLossOutput, preference_loss
from squarechipo.privacy.calibration import debias_factor, flip_probability
from squarechipo.privacy.measurements import LabelPipeline

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "METHODS",
    "PreferenceLossOutput",
    "preference_loss",
    "debias_factor",
    "flip_probability",
    "LabelPipeline",
]
