"""Central DP for general preferences: pick a preference model by the exponential mechanism
(Zhou et al. 2025 (Square-χPO), Alg. 3, line 6).

Given candidate pairwise preference models ℓ_1..ℓ_K chosen without the private data and the private
(possibly corrupted) rows, L(ℓ) = Σ_i (ℓ(x_i, a⁺_i, a⁻_i) − 1)² with ℓ ∈ [−1, 1], so each row moves
L by at most 4 and :func:`select_index` (probability ∝ exp(−ε·L/8)) is ε-DP for whole rows. Only the
index is returned; the losses stay inside this function.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import datasets
import numpy as np

from squarechipo.data.label_roles import releases_labels
from squarechipo.models.preference import PreferenceModel
from squarechipo.select.exponential import row_preference_losses, select_index

__all__ = ["select_preference_model"]


@releases_labels("central DP: the exponential mechanism stands between the raw labels and the one choice it releases")
def select_preference_model(
    candidates: Sequence[Callable[[], PreferenceModel]],
    private_rows: datasets.Dataset,
    epsilon: float,
    rng: np.random.Generator,
) -> int:
    """The index of the sampled candidate (loaded one at a time through the callables)."""
    if len(candidates) < 2:
        raise ValueError(f"candidates must hold at least 2 preference models (got {len(candidates)}).")
    missing = {"prompt", "chosen", "rejected"} - set(private_rows.column_names)
    if missing:
        raise ValueError(f"private_rows needs prompt/chosen/rejected columns; missing {sorted(missing)}.")
    losses = np.zeros(len(candidates))
    for k, load in enumerate(candidates):
        model = load()
        values = model.preference(private_rows["prompt"], private_rows["chosen"], private_rows["rejected"])
        losses[k] = float(row_preference_losses(values).sum())
        del model
    index = select_index(losses, epsilon, rng)
    del losses
    return index
