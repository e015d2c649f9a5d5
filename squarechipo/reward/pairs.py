"""Pairwise preference models ℓ(x, a⁰, a¹) ∈ [−1, 1] on a sequence classifier (Zhou et al. 2025 (Square-χPO), §4, Alg.
3 line 4).

A sequence classifier with one output scores the text of (x, a, b): s(x, a, b). The preference
model is ℓ(x, a, b) = 2σ(m) − 1 with m = s(x, a, b) − s(x, b, a), so ℓ(x, a, b) = −ℓ(x, b, a) and
ℓ(x, a, a) = 0 by construction, whatever the classifier learns. ℓ = 2P(a ≻ b | x) − 1.
The model itself is :class:`squarechipo.models.preference.PreferenceModel`.

Training reuses TRL's ``RewardTrainer`` layout: a preference row (x, a⁺, a⁻) becomes the pair of
texts ``chosen`` = text(x, a⁺, a⁻) and ``rejected`` = text(x, a⁻, a⁺), so the trainer's margin
r(chosen) − r(rejected) is exactly m and the square loss (2σ(m) − 1 − c(ε))² is Zhou et al. 2025 (Square-χPO), eq.
(10).
"""

from __future__ import annotations

import datasets

from squarechipo.data.label_roles import label_free
from squarechipo.data.text import pair_text
from squarechipo.models.preference import PreferenceModel
from squarechipo.privacy.ledger.binding import pairwise_rows

__all__ = ["pair_text", "to_pairwise_dataset", "PreferenceModel"]


@label_free("derives text pairs row by row (pairwise_rows carries a checked ledger over; raw stays raw)")
def to_pairwise_dataset(dataset: datasets.Dataset) -> datasets.Dataset:
    """prompt/chosen/rejected rows → text pairs (chosen = text(x, a⁺, a⁻), rejected = text(x, a⁻, a⁺)).

    Row count and order are kept; the privacy ledger of ``dataset`` travels with the result.
    """
    return pairwise_rows(dataset)
