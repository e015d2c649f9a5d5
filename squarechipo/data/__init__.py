"""Preference data: format detection and validation (loaders and generators build on this)."""

from squarechipo.data.loading import load_preference_dataset
from squarechipo.data.validation import (
    PreferenceFormat,
    ValidationReport,
    detect_format,
    validate_preference_dataset,
)

__all__ = [
    "PreferenceFormat",
    "ValidationReport",
    "detect_format",
    "load_preference_dataset",
    "validate_preference_dataset",
]
