"""Empirical ε lower bounds for every label mechanism and the exponential-mechanism selector.

For each mechanism a worst-case pair of neighbouring inputs (D, D') and a worst-case output event S are fixed
in advance, from the mechanism's analysis. The mechanism runs ``n`` times on each input, and the counts of S give
Clopper–Pearson bounds: a lower bound on P(S | D) and an upper bound on P(S | D'), each at confidence 1 − α/2.
With probability at least 1 − α both hold, so ε ≥ log(P_low(S | D) / P_high(S | D')) (the audit of
Jagielski et al. 2020 (auditing DP-SGD) and Nasr et al. 2021 (adversary instantiation), here in the local model where
one run is one draw). A bound above the claimed ε refutes the claim. A planted broken mechanism shows the audit has the
power to catch a wrong one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import stats
from tqdm.auto import tqdm

from squarechipo.privacy.mechanisms.binary import ctl, ltc, randomized_response
from squarechipo.privacy.mechanisms.label_dp import k_rr, optimal_top_k, rr_with_prior, subset_mechanism
from squarechipo.select.exponential import ROW_LOSS_SENSITIVITY, select_indices

__all__ = ["AuditCase", "AuditResult", "audit_case", "epsilon_lower_bound", "mechanism_cases"]

#: One minus the confidence of every bound (OpenDP tests its samplers at this level).
ALPHA = 1e-6
_CHUNK = 1_000_000


def epsilon_lower_bound(hits: int, n: int, hits_neighbour: int, n_neighbour: int, alpha: float = ALPHA) -> float:
    """log(P_low(S | D) / P_high(S | D')) with exact Clopper–Pearson bounds at 1 − α/2 each; 0 when not positive."""
    low = stats.binomtest(hits, n).proportion_ci(1 - alpha / 2, method="exact").low if hits > 0 else 0.0
    high = stats.binomtest(hits_neighbour, n_neighbour).proportion_ci(1 - alpha / 2, method="exact").high
    if low <= 0.0:
        return 0.0
    return max(0.0, math.log(low / high))


@dataclass(frozen=True)
class AuditCase:
    """A mechanism with its claim: ``draw(neighbour, n, rng)`` returns how often S happened in n runs on D
    (``neighbour=False``) or D' (``True``)."""

    name: str
    claimed_epsilon: float
    draw: Callable[[bool, int, np.random.Generator], int]
    neighbours: str
    event: str
    #: Runs per input for this case (None: the audit's default).
    samples: int | None = None
    planted_bug: bool = False


@dataclass(frozen=True)
class AuditResult:
    name: str
    claimed_epsilon: float
    lower_bound: float
    samples: int
    neighbours: str
    event: str
    planted_bug: bool

    @property
    def verdict(self) -> str:
        refuted = self.lower_bound > self.claimed_epsilon
        if self.planted_bug:
            return "caught (planted bug)" if refuted else "MISSED the planted bug"
        return "REFUTED: the claim is false" if refuted else "consistent with the claim"

    @property
    def ok(self) -> bool:
        return (self.lower_bound > self.claimed_epsilon) == self.planted_bug


def _chunked(n: int, event: Callable[[int], int]) -> int:
    return sum(event(min(_CHUNK, n - start)) for start in range(0, n, _CHUNK))


def _binary(run: Callable[[np.ndarray, np.random.Generator], np.ndarray]):
    """D: the label is 0, D': it is 1; S: the released label is 0."""

    def draw(neighbour: bool, n: int, rng: np.random.Generator) -> int:
        return _chunked(n, lambda m: int(np.count_nonzero(run(np.full(m, neighbour), rng) == 0)))

    return draw


def _kary(run: Callable[[np.ndarray, np.random.Generator], np.ndarray], event):
    """D: the label is 0, D': it is 1; S as ``event`` on the released outputs."""

    def draw(neighbour: bool, n: int, rng: np.random.Generator) -> int:
        return _chunked(n, lambda m: int(np.count_nonzero(event(run(np.full(m, int(neighbour)), rng)))))

    return draw


def _broken_rr(epsilon: float):
    """A planted bug: the flip probability computed with e^{2ε} (a doubled exponent), so the mechanism is 2ε-DP."""

    def run(labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return labels ^ (rng.random(labels.shape) < 1.0 / (1.0 + math.exp(2 * epsilon)))

    return run


def _selector(epsilon: float, candidates: int):
    """D: losses (0, Δ, …, Δ), D': (Δ, 0, …, 0), each loss moved by at most Δ; S: candidate 0 is selected.
    P(S | D)/P(S | D') → e^ε as the number of candidates grows (the factor 2 in ε/(2Δ) is then tight)."""
    delta = ROW_LOSS_SENSITIVITY
    first = np.r_[0.0, np.full(candidates - 1, delta)]
    second = np.r_[delta, np.zeros(candidates - 1)]

    def draw(neighbour: bool, n: int, rng: np.random.Generator) -> int:
        losses = second if neighbour else first
        return _chunked(n, lambda m: int(np.count_nonzero(select_indices(losses, epsilon, rng, m) == 0)))

    return draw


_ONE_LABEL = "one label: 0 vs 1"


def _binary_cases(epsilon: float, corruption_rate: float) -> list[AuditCase]:
    """Binary RR and the two orders with the flip adversary (Zhou et al. 2025 (Square-χPO), §3)."""
    orders = [(f"{name} (α = {corruption_rate}, flip adversary)", run) for name, run in (("CTL", ctl), ("LTC", ltc))]
    return [
        AuditCase(
            "binary RR", epsilon, _binary(lambda y, r: randomized_response(y, epsilon, r)), _ONE_LABEL, "out = 0"
        ),
        *(
            AuditCase(
                name,
                epsilon,
                _binary(lambda y, r, run=run: run(y, epsilon, corruption_rate, r)),
                _ONE_LABEL,
                "out = 0",
            )
            for name, run in orders
        ),
    ]


def _kary_cases(epsilon: float, num_labels: int) -> list[AuditCase]:
    """K-RR, the subset mechanism (Chua et al. 2024 (local label DP)) and RRWithPrior with a two-label top
    (Ghazi et al. 2021 (label DP), Alg. 2)."""
    prior = np.array([0.4, 0.4, 0.1, 0.1])[:num_labels] if num_labels == 4 else np.full(num_labels, 1 / num_labels)
    k_star = int(optimal_top_k(prior[None], epsilon)[0][0])

    def with_prior(labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return rr_with_prior(labels, np.tile(prior, (len(labels), 1)), epsilon, rng)[0]

    return [
        AuditCase(
            f"K-RR (K = {num_labels})",
            epsilon,
            _kary(lambda y, r: k_rr(y, num_labels, epsilon, r), lambda out: out == 0),
            _ONE_LABEL,
            "out = 0",
        ),
        AuditCase(
            f"subset mechanism (K = {num_labels})",
            epsilon,
            _kary(lambda y, r: subset_mechanism(y, num_labels, epsilon, r), lambda s: s[:, 0] & ~s[:, 1]),
            _ONE_LABEL,
            "0 ∈ S and 1 ∉ S",
        ),
        AuditCase(
            f"RRWithPrior (K = {num_labels}, prior {prior.round(2).tolist()}, k* = {k_star})",
            epsilon,
            _kary(with_prior, lambda out: out == 0),
            "one label: 0 vs 1 (both in the top k*)",
            "out = 0",
        ),
    ]


def mechanism_cases(epsilon: float = 1.0, corruption_rate: float = 0.1, num_labels: int = 4) -> list[AuditCase]:
    """Every mechanism at ``epsilon``, with its worst-case neighbours and event, and the planted broken one."""
    return [
        *_binary_cases(epsilon, corruption_rate),
        *_kary_cases(epsilon, num_labels),
        AuditCase(
            "exponential-mechanism selector (50 candidates, Δ = 4)",
            epsilon,
            _selector(epsilon, 50),
            "losses (0, Δ, …, Δ) vs (Δ, 0, …, 0)",
            "candidate 0 selected",
            samples=200_000,
        ),
        AuditCase(
            "planted bug: RR with q = 1/(1 + e^{2ε})",
            epsilon,
            _binary(_broken_rr(epsilon)),
            _ONE_LABEL,
            "out = 0",
            planted_bug=True,
        ),
    ]


def audit_case(case: AuditCase, samples: int, rng: np.random.Generator, alpha: float = ALPHA) -> AuditResult:
    """Run ``case`` on both inputs and bound ε from below at confidence 1 − α."""
    n = case.samples or samples
    hits = [case.draw(neighbour, n, rng) for neighbour in tqdm((False, True), desc=case.name, leave=False)]
    bound = epsilon_lower_bound(hits[0], n, hits[1], n, alpha)
    return AuditResult(case.name, case.claimed_epsilon, bound, n, case.neighbours, case.event, case.planted_bug)
