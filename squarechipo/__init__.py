"""squarechipo: private and robust preference alignment on top of Hugging Face TRL.

The package follows the data flow, each stage a subpackage that imports only the ones before it::

    data (load, validate) -> privacy (release once, ledger) -> losses / trainer / reward -> select -> judge
    -> evaluation -> scripts (the ``squarechipo`` command's jobs) -> reproduce / audit

Papers are cited by author, year and title; ``docs/references.md`` lists them (Zhou, Wu, Weng, Orabona 2025,
Square-χPO, is the one the losses, pipelines and selector come from).
"""

from squarechipo.losses import METHODS, PreferenceLossOutput, preference_loss
from squarechipo.privacy.calibration import debias_factor, flip_probability
from squarechipo.privacy.measurements import LabelPipeline

__version__ = "0.3.0"

__all__ = [
    "__version__",
    "METHODS",
    "PreferenceLossOutput",
    "preference_loss",
    "debias_factor",
    "flip_probability",
    "LabelPipeline",
]
