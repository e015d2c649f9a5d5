"""The exponential mechanism over a score vector (Zhou et al. 2025 (Square-χPO), Algorithm 2).

Scores in, index out: given each candidate's total loss L(π) on the private data, sample π with
probability ∝ exp(−ε·L(π)/(2Δ)), Δ = 4 the per-row sensitivity of the bounded square loss, i.e.
exp(−ε·L/8). That is ε-DP for the whole row (prompt, responses and label). Sampling uses the
Gumbel-max trick in float64 — argmax(−ε·L/8 + Gumbel noise) — so nothing is exponentiated and losses
up to 1e9 with ε up to 100 stay exact. Only the index may be released: the losses, logits and
probabilities are private and are neither logged nor returned.

The simulation lab, the LLM selector and the general-preference algorithm all sample through
:func:`select_index`.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from squarechipo.losses import square_loss
from squarechipo.privacy.mechanisms.calibration import check_epsilon

__all__ = ["ROW_LOSS_SENSITIVITY", "row_preference_losses", "row_square_losses", "select_index", "select_indices"]

#: Each row's square loss lies in [0, 4], so replacing one row moves a candidate's L by at most 4.
ROW_LOSS_SENSITIVITY = 4.0


def row_square_losses(margins: torch.Tensor) -> torch.Tensor:
    """Per-row loss (2σ(m) − 1 − ȳ')² with ȳ' = +1 for stored rows (Zhou et al. 2025 (Square-χPO), Alg. 2): always in
    [0, 4].

    ``margins`` are the clipped m = clip(β·h, ±2R_max) of :func:`squarechipo.losses.margins`. No
    c(ε) here: the central model sees raw (possibly corrupted) labels.
    """
    return square_loss(margins, scale=1.0)


def row_preference_losses(values):
    """Per-row loss (ℓ(x, a⁺, a⁻) − 1)² of a general preference model ℓ ∈ [−1, 1] (Zhou et al. 2025 (Square-χPO), Alg.
    3, line 6): in [0, 4].

    The same loss as :func:`row_square_losses` with ℓ = 2σ(m) − 1, for models that give ℓ directly.
    Works on numpy arrays and torch tensors.
    """
    return (values - 1.0) ** 2


def _mechanism_logits(losses, epsilon: float, sensitivity: float = ROW_LOSS_SENSITIVITY) -> np.ndarray:
    """−ε·L/(2Δ) in float64, shifted to max 0 (log-probabilities up to a constant). Private: never released."""
    check_epsilon(epsilon, finite=True)
    if not (isinstance(sensitivity, (int, float)) and 0 < sensitivity < math.inf):
        raise ValueError(f"sensitivity must be positive and finite (got {sensitivity!r}).")
    scores = np.asarray(losses, dtype=np.float64)
    if scores.ndim != 1 or scores.size == 0:
        raise ValueError(
            f"losses must be a non-empty 1-D vector, one total loss per candidate (got shape {scores.shape})."
        )
    if not np.all(np.isfinite(scores)):
        raise ValueError("losses must be finite; a NaN or inf loss would make the selection meaningless.")
    logits = -float(epsilon) * scores / (2.0 * float(sensitivity))
    return logits - logits.max()


def select_index(losses, epsilon: float, rng: np.random.Generator, sensitivity: float = ROW_LOSS_SENSITIVITY) -> int:
    """Sample a candidate index with probability ∝ exp(−ε·L/(2Δ)) by the Gumbel-max trick (float64)."""
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator (got {type(rng).__name__}).")
    logits = _mechanism_logits(losses, epsilon, sensitivity)
    return int(np.argmax(logits + rng.gumbel(size=logits.shape)))


def select_indices(
    losses, epsilon: float, rng: np.random.Generator, n: int, sensitivity: float = ROW_LOSS_SENSITIVITY
) -> np.ndarray:
    """``n`` independent selections at once (for audits and tests of the mechanism's law). The noise is drawn in
    the order ``n`` calls of :func:`select_index` would draw it, so both give the same indices on one stream."""
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator (got {type(rng).__name__}).")
    logits = _mechanism_logits(losses, epsilon, sensitivity)
    return np.argmax(logits + rng.gumbel(size=(int(n), logits.size)), axis=1)
