"""Release preference labels with RRWithPrior (001 Alg. 2, K = 2) for multi-stage training (LP-2ST).

The prior must not depend on the label. A stored raw row says which response is preferred by its
order (chosen first), so the prior is computed on a *canonical* presentation (u, v) of each pair —
ordered by a hash of the two responses, whatever the label — and the label is y = 1[u is preferred].
:func:`canonical_pairs` gives that presentation for scoring (e.g. σ(β·h(u, v)/τ) under a stage-1
policy); :func:`release_with_prior` runs the mechanism and marks, in the public column
``label_from_prior``, the rows whose release is the prior's argmax (k* = 1: a function of the prior
alone, carrying no information about the label). Those rows are pseudo-labels for training; the
others are RR rows with flip rate 1/(1+e^ε) and get the usual c(ε) debiasing.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass

import datasets
import numpy as np

from squarechipo.data.fingerprint import preference_fingerprint
from squarechipo.data.validation import validate_preference_dataset
from squarechipo.privacy.label_dp import rr_with_prior
from squarechipo.privacy.ledger import PrivacyLedger, Release, get_ledger, with_ledger

__all__ = [
    "FROM_PRIOR_COLUMN",
    "RRWithPriorRelease",
    "canonical_first_is_chosen",
    "canonical_pairs",
    "combine_parts",
    "release_with_prior",
]

logger = logging.getLogger("squarechipo")

#: Public per-row flag: the released label is the prior's argmax (k* = 1).
FROM_PRIOR_COLUMN = "label_from_prior"


def _key(response) -> str:
    return hashlib.sha256(json.dumps(response, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


def canonical_first_is_chosen(dataset: datasets.Dataset) -> np.ndarray:
    """True where the canonical first response u (smaller hash) is the stored ``chosen``. Private: it is the label."""
    return np.array([_key(c) <= _key(r) for c, r in zip(dataset["chosen"], dataset["rejected"])], dtype=bool)


def canonical_pairs(dataset: datasets.Dataset) -> datasets.Dataset:
    """prompt / chosen = u / rejected = v in the canonical, label-free order (for computing a prior)."""
    first = canonical_first_is_chosen(dataset)
    u = [c if f else r for c, r, f in zip(dataset["chosen"], dataset["rejected"], first)]
    v = [r if f else c for c, r, f in zip(dataset["chosen"], dataset["rejected"], first)]
    return datasets.Dataset.from_dict({"prompt": dataset["prompt"], "chosen": u, "rejected": v})


def _prior_digest(prior_first: np.ndarray) -> str:
    """A digest of the prior (public: it depends on no label it releases), rounded to absorb float noise."""
    rounded = np.round(np.asarray(prior_first, dtype=np.float64), 6)
    return "sha256:" + hashlib.sha256(rounded.tobytes()).hexdigest()[:16]


@dataclass(frozen=True, eq=False)
class RRWithPriorRelease:
    """RRWithPrior (001 Alg. 2, K = 2) with a given prior, as a release for
    :func:`squarechipo.privacy.release.release_once`: its ``to_dict`` names the prior by a digest, so
    a re-run with another prior (another stage-1 policy, another temperature) stops instead of
    silently reusing a release made with the old one."""

    epsilon: float
    prior_first: np.ndarray
    temperature: float | None = None

    def to_dict(self) -> dict:
        return {
            "mechanism": "rr_with_prior",
            "epsilon": float(self.epsilon),
            "num_labels": 2,
            "prior_temperature": self.temperature,
            "prior_digest": _prior_digest(self.prior_first),
        }

    def release(
        self, dataset: datasets.Dataset, *, seed: int | None = None, part: str | None = None
    ) -> datasets.Dataset:
        return release_with_prior(
            dataset, self.prior_first, self.epsilon, part=part, seed=seed, temperature=self.temperature
        )


def release_with_prior(
    dataset: datasets.Dataset,
    prior_first: np.ndarray,
    epsilon: float,
    *,
    part: str | None = None,
    seed: int | None = None,
    temperature: float | None = None,
) -> datasets.Dataset:
    """Release the labels of raw rows (``chosen`` = truly preferred) once through RRWithPrior.

    ``prior_first[i]`` is the prior probability that the canonical first response u of row i is
    preferred (see :func:`canonical_pairs`). Returns the rows with chosen/rejected as released, the
    public ``label_from_prior`` column and the ledger extended by one ``rr_with_prior`` release.
    ``seed`` = None draws from OS entropy (real labels); an integer is for simulations only.
    """
    existing = get_ledger(dataset)
    if existing is not None and existing.releases:
        raise ValueError("dataset was already privatized; RRWithPrior must see the raw labels, each queried once.")
    validate_preference_dataset(dataset)
    prior = np.asarray(prior_first, dtype=np.float64)
    if prior.shape != (len(dataset),) or not np.all((prior >= 0) & (prior <= 1)):
        raise ValueError(
            f"prior_first must be {len(dataset)} probabilities in [0, 1], one per row (got shape {prior.shape})."
        )
    first_is_chosen = canonical_first_is_chosen(dataset)
    rng = np.random.default_rng(seed)
    released, from_prior = rr_with_prior(
        first_is_chosen.astype(np.int64), np.stack([1 - prior, prior], axis=1), epsilon, rng
    )
    swap = released.astype(bool) != first_is_chosen  # the released winner is not the true one
    chosen = [r if s else c for c, r, s in zip(dataset["chosen"], dataset["rejected"], swap)]
    rejected = [c if s else r for c, r, s in zip(dataset["chosen"], dataset["rejected"], swap)]
    out = dataset.remove_columns(["chosen", "rejected"]).add_column("chosen", chosen).add_column("rejected", rejected)
    out = out.add_column(FROM_PRIOR_COLUMN, from_prior.tolist())
    del swap, chosen, rejected, first_is_chosen, released, rng
    release = Release.now(
        "rr_with_prior",
        epsilon,
        len(dataset),
        fixed_seed=seed is not None,
        pipeline={
            **RRWithPriorRelease(epsilon, prior, temperature).to_dict(),
            "rows_from_prior": int(from_prior.sum()),
        },
        data_fingerprint=preference_fingerprint(dataset),
        part=part,
    )
    logger.info(
        "released %d rows through RRWithPrior (ε = %s): %d from the prior, %d by RR",
        len(out),
        epsilon,
        int(from_prior.sum()),
        int((~from_prior).sum()),
    )
    return with_ledger(out, PrivacyLedger().with_release(release))


def combine_parts(first: datasets.Dataset, second: datasets.Dataset) -> datasets.Dataset:
    """Concatenate two released disjoint parts; the ledger lists both releases (parallel composition)."""
    ledgers = [get_ledger(part) for part in (first, second)]
    if any(ledger is None for ledger in ledgers):
        raise ValueError("both parts must be released datasets with a privacy ledger.")
    parts = [r.part for ledger in ledgers for r in ledger.releases]
    if None in parts or len(set(parts)) != len(parts):
        raise ValueError(f"each part's releases must name a distinct part (got {parts}); pass part=… when releasing.")
    parts_data = [
        p if FROM_PRIOR_COLUMN in p.column_names else p.add_column(FROM_PRIOR_COLUMN, [False] * len(p))
        for p in (first, second)
    ]
    combined = datasets.concatenate_datasets([parts_data[0].cast(parts_data[1].features), parts_data[1]])
    ledger = PrivacyLedger(releases=ledgers[0].releases + ledgers[1].releases)
    return with_ledger(combined, ledger)
