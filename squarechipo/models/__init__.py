"""Model resolution: the embedded default model and hub ids / local paths."""

from squarechipo.models.embedded import (
    EMBEDDED_MODEL_ALIASES,
    embedded_model_path,
    resolve_model_path,
)

__all__ = ["EMBEDDED_MODEL_ALIASES", "embedded_model_path", "resolve_model_path"]
