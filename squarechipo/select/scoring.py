"""Score candidate policies on private preference rows: L(π) = Σ_i (2σ(m_i) − 1 − 1)²
(Zhou et al. 2025 (Square-χPO), Algorithm 2). Private to the selector, which passes the scores only to the
exponential mechanism.

The reference log-probabilities are computed once; each candidate then runs one batched, gradient-free forward per
batch with the lean LM head (completion positions only, each prompt once). Across processes every rank scores a
contiguous shard of the rows and the per-candidate sums are all-reduced, so the main process holds L for every
candidate; nothing here logs or prints a score. Log-probabilities come from :mod:`squarechipo.models.logprobs`. Rows
are never dropped: a row whose completions are truncated away has h = 0 and adds the same loss 1 to every candidate, so
the selection cannot depend on it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from accelerate import PartialState
from accelerate.utils import reduce
from transformers import PreTrainedModel
from trl.trainer.dpo_trainer import DataCollatorForPreference

from squarechipo.losses import margins as policy_margins
from squarechipo.models.logprobs import model_logps
from squarechipo.privacy.door import CheckedRows, require_checked
from squarechipo.select.exponential import row_square_losses

__all__: list[str] = []  # private: L(π) of raw rows leaves this package only through the exponential mechanism


def _score_candidates(
    rows: CheckedRows,
    load_reference: Callable[[], PreTrainedModel],
    load_candidates: Sequence[Callable[[], PreTrainedModel]],
    *,
    pad_token_id: int,
    beta: float,
    link: str,
    clip: float | None,
    max_length: int | None,
    truncation_mode: str = "keep_start",
    batch_size: int = 8,
    all_reduce: bool = True,
    is_reference: Sequence[bool] = (),
) -> torch.Tensor:
    """L(π_k) for every candidate, float64, summed over this process's ``rows`` and all-reduced.

    Private: the result must only be passed to :func:`squarechipo.select.exponential.select_index` (the selector,
    :func:`squarechipo.select.selector.select_policy`, does so and returns only the index). ``rows`` are the
    mechanism's input (:func:`squarechipo.privacy.door.mechanism_input`) or checked rows. Models are loaded one at a
    time through the given callables and freed after use; a candidate that ``is_reference`` (the same model folder) is
    not loaded: its log-probs are the reference's. With ``all_reduce=False`` the sums cover this process's rows only.
    """
    rows = require_checked(rows, "the central selector's scoring")
    collator = DataCollatorForPreference(
        pad_token_id=pad_token_id, max_length=max_length, truncation_mode=truncation_mode
    )
    reference = load_reference()
    ref_logps = model_logps(reference, rows, collator, batch_size, "reference log-probs")
    del reference
    state = PartialState()
    totals = torch.zeros(len(load_candidates), dtype=torch.float64)
    for k, load in enumerate(load_candidates):
        if k < len(is_reference) and is_reference[k]:
            logps = ref_logps  # the same weights give the same log-probs: the SFT policy is often both
        else:
            candidate = load()
            desc = f"scoring candidate {k + 1}/{len(load_candidates)}"
            logps = model_logps(candidate, rows, collator, batch_size, desc)
            del candidate
        m = policy_margins(logps[0], logps[1], ref_logps[0], ref_logps[1], beta=beta, link=link, clip=clip)
        totals[k] = row_square_losses(m).sum()
    if all_reduce and state.num_processes > 1:
        backend_device = state.device if state.backend == "nccl" else torch.device("cpu")
        totals = reduce(totals.to(backend_device), reduction="sum").cpu()
    return totals
