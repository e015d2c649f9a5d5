"""Label-DP mechanisms beyond binary randomized response, for K labels (K = 2 is a preference).

- :func:`rr_with_prior` — RRWithPrior of Ghazi et al. 2021 (label DP) (Algorithm 2): given a prior p over the K labels,
  keep only the top-k* labels, k* = argmax_k w_k·e^ε/(e^ε + k − 1) with w_k the prior mass of the top k, and run K-ary
  RR inside that set (a true label outside it maps to a uniform member). ε-label-DP for any prior that does not depend
  on the label. For K = 2 it is plain RR unless max(p) > e^ε/(1+e^ε), where it outputs the prior's argmax — which then
  says nothing about y.
- :func:`k_rr` — K-ary randomized response (keep w.p. e^ε/(e^ε + K − 1)); :func:`k_rr_weights`
  its unbiased analyzer weights.
- :func:`subset_mechanism` — the √K randomizer of Chua et al. 2024 (local label DP): every label k is reported in a
  subset S independently, the true one w.p. 1/2, the others w.p. 1/(e^ε + 1); :func:`subset_weights` its unbiased
  analyzer a_k = c·(1[k ∈ S] − 1/(e^ε + 1)), c = 2(e^ε + 1)/(e^ε − 1).

Every sampler takes an explicit ``numpy.random.Generator``. Unbiased weights a ∈ R^K satisfy
E[a | y] = one_hot(y), so any loss linear in the one-hot label (top-1 Plackett–Luce, the BT log
loss, squared error) is debiased by replacing the one-hot label with a.
"""

from __future__ import annotations

import math

import numpy as np

from squarechipo.privacy.mechanisms.binary import check_labels
from squarechipo.privacy.mechanisms.calibration import check_epsilon

__all__ = [
    "optimal_top_k",
    "rr_with_prior",
    "rr_with_prior_distribution",
    "k_rr",
    "k_rr_weights",
    "subset_inclusion_probabilities",
    "subset_mechanism",
    "subset_weights",
    "analyzer_variance",
]


def _priors(prior: np.ndarray) -> np.ndarray:
    p = np.asarray(prior, dtype=np.float64)
    if p.ndim != 2 or p.shape[1] < 2:
        raise ValueError(f"prior must have shape (n, K) with K ≥ 2 (got {p.shape}).")
    if (p < 0).any() or not np.allclose(p.sum(axis=1), 1.0, atol=1e-6):
        raise ValueError("prior rows must be probability vectors (non-negative, summing to 1).")
    return p


def optimal_top_k(prior: np.ndarray, epsilon: float) -> tuple[np.ndarray, np.ndarray]:
    """k* per row and the label order (descending prior) of Ghazi et al. 2021 (label DP), Alg. 2; ties go to the
    smaller k.

    Returns ``(k_star (n,), order (n, K))``: the top-k* set of row i is ``order[i, :k_star[i]]``.
    """
    eps = check_epsilon(epsilon, finite=True)
    p = _priors(prior)
    order = np.argsort(-p, axis=1, kind="stable")
    mass = np.cumsum(np.take_along_axis(p, order, axis=1), axis=1)
    k = np.arange(1, p.shape[1] + 1)
    # w_k·e^ε/(e^ε + k − 1), computed as w_k/(1 + (k − 1)e^{−ε}) so large ε cannot overflow.
    utility = mass / (1.0 + (k - 1) * math.exp(-eps))
    return np.argmax(utility >= utility.max(axis=1, keepdims=True) - 1e-12, axis=1) + 1, order


def rr_with_prior(
    labels, prior: np.ndarray, epsilon: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """RRWithPrior (Ghazi et al. 2021 (label DP), Algorithm 2) per row. Returns ``(released labels, from_prior)``.

    ``from_prior[i]`` is True where k* = 1: the release is the prior's top label, a function of the
    prior alone (public); those rows carry no information about the label.
    """
    eps = check_epsilon(epsilon, finite=True)
    p = _priors(prior)
    y = check_labels(labels, p.shape[1])
    if y.shape != (p.shape[0],):
        raise ValueError(f"labels has shape {y.shape}; expected ({p.shape[0]},) to match the prior.")
    k_star, order = optimal_top_k(p, eps)
    rank = np.argsort(order, axis=1)[np.arange(len(y)), y]  # position of y in the descending order
    inside = rank < k_star
    keep = rng.random(len(y)) < math.exp(eps) / (math.exp(eps) + k_star - 1)
    # Outside the top-k*: a uniform member; inside and not kept: a uniform *other* member.
    uniform = np.floor(rng.random(len(y)) * k_star).astype(np.int64)
    other = np.floor(rng.random(len(y)) * np.maximum(k_star - 1, 1)).astype(np.int64)
    other = other + (other >= rank)  # skip y's own position
    position = np.where(~inside, uniform, np.where(keep, rank, other))
    released = order[np.arange(len(y)), position]
    return released.astype(y.dtype), k_star == 1


def rr_with_prior_distribution(label: int, prior: np.ndarray, epsilon: float) -> np.ndarray:
    """Exact output distribution of RRWithPrior for one row with true ``label`` and prior (K,)."""
    eps = check_epsilon(epsilon, finite=True)
    p = _priors(np.asarray(prior)[None])
    k_star, order = optimal_top_k(p, eps)
    k, top = int(k_star[0]), order[0, : int(k_star[0])]
    out = np.zeros(p.shape[1])
    if label in top:
        keep = math.exp(eps) / (math.exp(eps) + k - 1)
        out[top] = (1.0 - keep) / max(k - 1, 1)
        out[label] = keep
    else:
        out[top] = 1.0 / k
    return out


def k_rr(labels, num_labels: int, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """K-ary randomized response: keep w.p. e^ε/(e^ε + K − 1), else a uniform other label."""
    eps = check_epsilon(epsilon, finite=True)
    y = check_labels(labels, num_labels)
    keep = rng.random(y.shape) < math.exp(eps) / (math.exp(eps) + num_labels - 1)
    other = rng.integers(0, num_labels - 1, size=y.shape)
    other = other + (other >= y)
    return np.where(keep, y, other).astype(y.dtype)


def k_rr_weights(released, num_labels: int, epsilon: float) -> np.ndarray:
    """Unbiased analyzer of K-RR: a_k = ((e^ε + K − 1)·1[k = ỹ] − 1)/(e^ε − 1), E[a | y] = one_hot(y)."""
    eps = check_epsilon(epsilon, finite=True)
    y = check_labels(released, num_labels, field="released")
    one_hot = np.eye(num_labels)[y]
    return ((math.exp(eps) + num_labels - 1) * one_hot - 1.0) / math.expm1(eps)


def subset_inclusion_probabilities(labels, num_labels: int, epsilon: float) -> np.ndarray:
    """(n, K) P(k ∈ S | y) of the subset mechanism (Chua et al. 2024 (local label DP)): 1/2 for the true label,
    1/(e^ε+1) for each other; labels enter independently, so P(S | y) is the product over k."""
    eps = check_epsilon(epsilon, finite=True)
    y = check_labels(labels, num_labels)
    probability = np.full((len(y), num_labels), 1.0 / (math.exp(eps) + 1.0))
    probability[np.arange(len(y)), y] = 0.5
    return probability


def subset_mechanism(labels, num_labels: int, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """Chua et al. 2024 (local label DP)'s randomizer: a boolean (n, K) subset, each label drawn independently with
    its :func:`subset_inclusion_probabilities`."""
    probability = subset_inclusion_probabilities(labels, num_labels, epsilon)
    return rng.random(probability.shape) < probability


def subset_weights(subsets: np.ndarray, epsilon: float) -> np.ndarray:
    """Chua et al. 2024 (local label DP)'s unbiased analyzer a_k = c·(1[k ∈ S] − 1/(e^ε + 1)), c = 2(e^ε + 1)/(e^ε −
    1)."""
    eps = check_epsilon(epsilon, finite=True)
    s = np.asarray(subsets, dtype=bool)
    scale = 2.0 * (math.exp(eps) + 1.0) / math.expm1(eps)
    return scale * (s - 1.0 / (math.exp(eps) + 1.0))


def analyzer_variance(mechanism: str, num_labels: int, epsilon: float) -> float:
    """Σ_k Var(a_k | y), exact, for ``k_rr`` or ``subset`` (it does not depend on y).

    This is the per-sample variance of the unbiased one-hot estimate: the squared-error factor of
    any frequency or linear-loss estimate built on the analyzer (Chua et al. 2024 (local label DP): O(K) for the subset
    mechanism against O(K²) for K-RR when ε = O(1)).
    """
    eps = check_epsilon(epsilon, finite=True)
    e, k = math.exp(eps), num_labels
    if mechanism == "k_rr":
        scale = (e + k - 1) / (e - 1)
        keep = e / (e + k - 1)
        flip = 1.0 / (e + k - 1)
        return scale**2 * (keep * (1 - keep) + (k - 1) * flip * (1 - flip))
    if mechanism == "subset":
        scale = 2 * (e + 1) / (e - 1)
        q = 1.0 / (e + 1)
        return scale**2 * (0.25 + (k - 1) * q * (1 - q))
    raise ValueError(f"mechanism must be k_rr or subset (got {mechanism!r}).")
