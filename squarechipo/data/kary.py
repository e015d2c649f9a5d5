"""Best-of-K rows: a prompt, K responses and the index of the best one; K-ary label DP on them (001, 002).

Format (standard or conversational, like TRL's): ``prompt``, ``responses`` (a list of K ≥ 2 responses,
the same K on every row) and ``best`` (the index of the preferred response, 0 ≤ best < K).

- :func:`validate_kary` checks the format and names the field and the fix.
- :func:`release_kary` releases ``best`` once through K-RR, the 002 subset mechanism or RRWithPrior
  (with a prior per row): the raw ``best`` column is removed, the release (``released_best`` or
  ``released_subset``) and the unbiased analyzer weights ``label_weights`` (for
  :func:`squarechipo.losses.plackett_luce_top1_loss`) are added, and the ledger records ε.
- :func:`kary_to_pairs` turns raw rows into K − 1 preference pairs (best vs each other response) for
  the pairwise trainers.
"""

from __future__ import annotations

import logging

import datasets
import numpy as np

from squarechipo.data.fingerprint import preference_fingerprint
from squarechipo.privacy import label_dp as ld
from squarechipo.privacy.ledger import PrivacyLedger, Release, get_ledger, with_ledger

__all__ = ["KARY_MECHANISMS", "validate_kary", "release_kary", "kary_to_pairs"]

logger = logging.getLogger("squarechipo")
KARY_MECHANISMS = ("k_rr", "subset", "rr_with_prior")


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


def release_kary(
    dataset: datasets.Dataset,
    mechanism: str,
    epsilon: float,
    *,
    seed: int | None = None,
    prior: np.ndarray | None = None,
) -> datasets.Dataset:
    """Release ``best`` once through a K-ary mechanism; the raw labels do not appear in the output.

    ``seed`` = None draws from OS entropy (real labels); an integer is for simulations only.
    ``prior`` (n, K) is required for ``rr_with_prior`` (it must not depend on the labels).
    """
    if mechanism not in KARY_MECHANISMS:
        raise ValueError(f"mechanism must be one of {KARY_MECHANISMS} (got {mechanism!r}).")
    existing = get_ledger(dataset)
    if existing is not None and existing.releases:
        raise ValueError("dataset was already released; releasing again would spend more ε on the same labels.")
    k = validate_kary(dataset)
    best = np.asarray(dataset["best"], dtype=np.int64)
    rng = np.random.default_rng(seed)
    out = dataset.remove_columns(["best"])
    if mechanism == "subset":
        subsets = ld.subset_mechanism(best, k, epsilon, rng)
        out = out.add_column("released_subset", subsets.tolist())
        weights = ld.subset_weights(subsets, epsilon)
    elif mechanism == "k_rr":
        released = ld.k_rr(best, k, epsilon, rng)
        out = out.add_column("released_best", released.tolist())
        weights = ld.k_rr_weights(released, k, epsilon)
    else:
        if prior is None:
            raise ValueError(
                "mechanism='rr_with_prior' needs prior: an (n, K) array of label-independent probabilities."
            )
        released, from_prior = ld.rr_with_prior(best, prior, epsilon, rng)
        out = out.add_column("released_best", released.tolist()).add_column("label_from_prior", from_prior.tolist())
        weights = np.eye(k)[released]  # RRWithPrior has no unbiased linear analyzer: the release itself
    out = out.add_column("label_weights", weights.tolist())
    del best, rng
    release = Release.now(
        mechanism,
        epsilon,
        len(dataset),
        fixed_seed=seed is not None,
        pipeline={"mechanism": mechanism, "epsilon": float(epsilon), "num_labels": k},
        data_fingerprint=preference_fingerprint(dataset),
    )
    logger.info("released %d best-of-%d labels through %s (ε = %s)", len(out), k, mechanism, epsilon)
    return with_ledger(out, PrivacyLedger().with_release(release))


def kary_to_pairs(dataset: datasets.Dataset) -> datasets.Dataset:
    """Raw best-of-K rows → K − 1 prompt/chosen/rejected rows each (best vs every other response)."""
    k = validate_kary(dataset)
    if get_ledger(dataset) is not None:
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
