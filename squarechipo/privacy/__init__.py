"""Label privacy: the mechanisms (as functions and as measurements), the one dataset-level release, the
ledger, the privacy record, debiasing and the lineage of models.

The names below are imported on first use, so ``import squarechipo.privacy.mechanisms.calibration`` (which the losses
need) does not load ``datasets`` and the release machinery."""

from squarechipo._lazy import lazy_exports

#: Each public name once, under the module that defines it.
_EXPORTS = {
    "squarechipo.privacy.mechanisms.calibration": (
        "debias_factor",
        "debias_factor_from_flip_rate",
        "flip_probability",
    ),
    "squarechipo.privacy.mechanisms.binary": ("ADVERSARIES", "ctl", "huber_corruption", "ltc", "randomized_response"),
    "squarechipo.privacy.mechanisms.measurements": ("KaryRR", "LabelPipeline", "RRWithPrior", "SubsetMechanism"),
    "squarechipo.privacy.ledger.ledger": ("PrivacyLedger", "Release"),
    "squarechipo.privacy.ledger.binding": ("get_ledger",),
    "squarechipo.privacy.release.rows": ("combine_parts",),
    "squarechipo.privacy.release.release_dataset": ("release_dataset",),
    "squarechipo.privacy.release.saved": ("load_privatized", "load_release", "save_privatized"),
    "squarechipo.privacy.release.folder": ("save_release",),
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
