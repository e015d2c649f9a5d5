"""Best-of-K rows: a prompt, K responses and the index of the best one; K-ary label DP on them
(Ghazi et al. 2021 (label DP); Chua et al. 2024 (local label DP)).

Format (standard or conversational, like TRL's): ``prompt``, ``responses`` (a list of K ≥ 2 responses,
the same K on every row) and ``best`` (the index of the preferred response, 0 ≤ best < K).

- :func:`validate_kary` checks the format and names the field and the fix.
- :func:`squarechipo.privacy.release.transaction.release_dataset` releases ``best`` once through K-RR, the
  Chua et al. 2024 (local label DP) subset mechanism or RRWithPrior (the K-ary measurements of
  :mod:`squarechipo.privacy.mechanisms.measurements`).
- :func:`kary_to_pairs` turns raw rows into K − 1 preference pairs (best vs each other response) for the pairwise
  trainers.
"""

from __future__ import annotations

import datasets
import numpy as np

from squarechipo.data.label_roles import label_free
from squarechipo.data.metadata import read_block

__all__ = ["validate_kary", "kary_to_pairs"]


@label_free("checks the format")
def validate_kary(dataset: datasets.Dataset) -> int:
    """Check the best-of-K format; returns K."""
    missing = {"prompt", "responses", "best"} - set(dataset.column_names)
    if missing:
        raise ValueError(f"best-of-K rows need prompt/responses/best columns; missing {sorted(missing)}.")
    if len(dataset) == 0:
        raise ValueError("the best-of-K dataset is empty.")
    sizes = {len(r) for r in dataset["responses"]}
    if len(sizes) != 1 or min(sizes) < 2:
        raise ValueError(
            f"responses must hold the same number K ≥ 2 of responses on every row (found sizes "
            f"{sorted(sizes)}); pad or split the rows so K is constant."
        )
    k = sizes.pop()
    best = np.asarray(dataset["best"])
    if not np.issubdtype(best.dtype, np.integer) or best.min() < 0 or best.max() >= k:
        raise ValueError(
            f"best must be an integer index in 0..{k - 1} on every row (the position of the preferred "
            "response in responses)."
        )
    return k


@label_free("reshapes raw rows into raw pairs (no ledger): the pairs stay raw and meet the rule where they are read")
def kary_to_pairs(dataset: datasets.Dataset) -> datasets.Dataset:
    """Raw best-of-K rows → K − 1 prompt/chosen/rejected rows each (best vs every other response)."""
    k = validate_kary(dataset)
    if read_block(dataset) is not None:  # released rows carry a privacy ledger
        raise ValueError(
            "kary_to_pairs takes raw rows: pairs from a released label would lose its debiasing; "
            "train on label_weights with plackett_luce_top1_loss instead."
        )
    prompts, chosen, rejected = [], [], []
    for prompt, responses, best in zip(dataset["prompt"], dataset["responses"], dataset["best"]):
        for j in range(k):
            if j != best:
                prompts.append(prompt)
                chosen.append(responses[best])
                rejected.append(responses[j])
    return datasets.Dataset.from_dict({"prompt": prompts, "chosen": chosen, "rejected": rejected})
