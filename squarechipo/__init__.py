"""squarechipo: private and robust preference alignment on top of Hugging Face TRL.

The package follows the data flow, each stage a subpackage that imports only the ones before it::

    data (load, validate) -> privacy (release once, ledger) -> losses / trainer / reward -> select -> judge
    -> evaluation -> reproduce / audit -> scripts (every ``squarechipo`` command's ``main()``)

Papers are cited by author, year and title; ``docs/references.md`` lists them (Zhou, Wu, Weng, Orabona 2025,
Square-χPO, is the one the losses, pipelines and selector come from).
"""

from squarechipo._lazy import lazy_exports

__version__ = "0.4.0"

#: The top-level names, imported on first use: ``import squarechipo`` stays cheap.
_EXPORTS = {
    "squarechipo.losses": ("METHODS", "PreferenceLossOutput", "preference_loss"),
    "squarechipo.privacy.mechanisms.calibration": ("debias_factor", "flip_probability"),
    "squarechipo.privacy.mechanisms.measurements": ("LabelPipeline",),
}
__getattr__, __dir__, _names = lazy_exports(__name__, _EXPORTS)
__all__ = ["__version__", *_names]
