"""Multi-stage training with RRWithPrior for preferences (Ghazi et al. 2021 (label DP) LP-2ST), the model side.

:func:`policy_prior` turns a stage-1 policy into the prior of stage 2: for each raw row, in its canonical label-free
order (u, v), p(u ≻ v) = σ(m/τ) with m = clip(β·h(u, v)) the policy's implicit reward margin under the trained method's
link (Zhou et al. 2025 (Square-χPO): h_χPO for χPO methods) and τ a temperature. The prior depends only on the stage-1
model (trained on part 1's released labels) and the part-2 prompts and responses, never on part-2 labels.
"""

from __future__ import annotations

import datasets
import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from squarechipo.data.label_roles import label_free
from squarechipo.losses import METHODS, margins
from squarechipo.models.logprobs import model_logps, preference_collator, tokenize_preferences
from squarechipo.privacy.door import rows_without_labels
from squarechipo.privacy.release.rows import canonical_pairs

__all__ = ["policy_prior"]


@label_free("scores each pair in its label-free canonical order with the stage-1 policy (trained on released labels)")
def policy_prior(
    policy: PreTrainedModel,
    reference: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    raw_rows: datasets.Dataset,
    *,
    method: str,
    beta: float,
    clip: float | None,
    temperature: float = 1.0,
    max_length: int | None = None,
    batch_size: int = 8,
) -> np.ndarray:
    """p(u ≻ v) per row of ``raw_rows`` (canonical order of :func:`canonical_pairs`), float64 in [0, 1]."""
    if not temperature > 0:
        raise ValueError(f"temperature must be positive (got {temperature!r}); larger values flatten the prior.")
    canonical = rows_without_labels(canonical_pairs(raw_rows), "each pair in its label-free canonical order (u, v)")
    rows = tokenize_preferences(canonical, tokenizer)
    collator = preference_collator(tokenizer, max_length=max_length)
    policy_logps = model_logps(policy, rows, collator, batch_size, "stage-1 prior: policy log-probs")
    ref_logps = model_logps(reference, rows, collator, batch_size, "stage-1 prior: reference log-probs")
    m = margins(
        policy_logps[0], policy_logps[1], ref_logps[0], ref_logps[1], beta=beta, link=METHODS[method].link, clip=clip
    )
    return torch.sigmoid(m / temperature).numpy()
