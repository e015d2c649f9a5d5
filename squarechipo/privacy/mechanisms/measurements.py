"""Mechanisms as measurements: each release mechanism is a small object with its parameters, a label-level
``release_labels(labels, num_labels, rng, **context)``, its privacy claim and what a loss needs to debias it.

(OpenDP's idea, in a small form.) The dataset-level release
(:func:`squarechipo.privacy.release.transaction.release_dataset`) turns rows into label arrays, calls the measurement,
writes the released labels back and records the measurement's :meth:`to_dict` in the ledger; the ledger then answers
how to debias (a flip rate and c(ε) for binary randomized response, analyzer weights for K-RR and the subset
mechanism).

- :class:`LabelPipeline`: binary randomized response and α-Huber corruption in one of two orders (CTL, LTC),
  Zhou et al. 2025 (Square-χPO), §3. Its fields map one-to-one onto the ``label_*`` fields of the recipes' YAML
  configs.
- :class:`KaryRR`, :class:`SubsetMechanism`: K-ary label DP with unbiased analyzers
  (Chua et al. 2024 (local label DP)).
- :class:`RRWithPrior`: Ghazi et al. 2021 (label DP), Algorithm 2 with a label-independent prior (LP-2ST's stage 2, or
  best-of-K rows).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from squarechipo.privacy.mechanisms import label_dp
from squarechipo.privacy.mechanisms.binary import ADVERSARIES, ctl, ltc
from squarechipo.privacy.mechanisms.calibration import (
    check_corruption_rate,
    check_epsilon,
    flip_probability,
)

__all__ = [
    "FIXED_PREFERENCES",
    "KaryRR",
    "LabelPipeline",
    "LabelRelease",
    "MECHANISMS",
    "MechanismKind",
    "Measurement",
    "ORDERS",
    "RRWithPrior",
    "SubsetMechanism",
    "prior_digest",
]

ORDERS: tuple[str, ...] = ("ctl", "ltc")
#: Built-in rules of the ``fixed`` adversary at the dataset level; any other value names a boolean
#: column that is True where the adversary prefers the ``rejected`` response.
FIXED_PREFERENCES: tuple[str, ...] = ("longer", "shorter")


@dataclass(frozen=True)
class LabelRelease:
    """What a measurement returns for n labels (its output, never the input).

    ``labels``: the released label per row (an index, or a boolean (n, K) subset for the subset mechanism);
    ``weights``: the unbiased analyzer (n, K) where the mechanism has one; ``from_prior``: rows whose
    release is the prior's argmax (RRWithPrior); ``outcome``: public counts for the ledger.
    """

    labels: np.ndarray
    weights: np.ndarray | None = None
    from_prior: np.ndarray | None = None
    outcome: dict[str, Any] = field(default_factory=dict)


class Measurement:
    """The interface every mechanism object implements (see the module docstring)."""

    #: The ledger's name of the mechanism (``Release.mechanism``).
    name: str
    epsilon: float | None
    #: Released-label column of best-of-K rows (``released_best`` or ``released_subset``).
    kary_column: str = "released_best"
    #: Whether a pair's labels are presented in the canonical, label-free order (the prior is given in it).
    canonical_pairs: bool = False

    def release_labels(self, labels: np.ndarray, num_labels: int, rng: np.random.Generator, **context) -> LabelRelease:
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def ledger_fields(self) -> dict[str, Any]:
        """The ``Release`` fields this mechanism sets: its name, ε, and corruption where it has any."""
        return {"mechanism": self.name, "epsilon": self.epsilon}


@dataclass(frozen=True)
class LabelPipeline(Measurement):
    """What happens to the labels before training.

    Args:
        epsilon: local-DP budget of randomized response; ``None`` (or ``inf``) = no privacy.
        corruption_rate: Huber contamination rate α ∈ [0, 0.5]; 0 = no corruption.
        adversary: ``flip``, ``random``, ``targeted`` or ``fixed`` (see ``huber_corruption``).
        order: ``ctl`` (corruption then LDP) or ``ltc`` (LDP then corruption), Zhou et al. 2025 (Square-χPO), §3.
        target_column / target_values: for ``targeted`` at the dataset level, attack rows whose
            ``target_column`` value is in ``target_values`` (a boolean column needs no values).
        fixed_preference: for ``fixed`` at the dataset level: ``longer``, ``shorter``, or the name
            of a boolean column that is True where the adversary prefers ``rejected``.
    """

    epsilon: float | None = None
    corruption_rate: float = 0.0
    adversary: str = "flip"
    order: str = "ctl"
    target_column: str | None = None
    target_values: tuple[Any, ...] | None = field(default=None)
    fixed_preference: str | None = None

    def __post_init__(self) -> None:
        epsilon = check_epsilon(self.epsilon)
        object.__setattr__(self, "epsilon", None if math.isinf(epsilon) else epsilon)
        object.__setattr__(self, "corruption_rate", check_corruption_rate(self.corruption_rate))
        if self.order not in ORDERS:
            raise ValueError(f"order must be one of {ORDERS} (got {self.order!r}): ctl = corrupt then privatize.")
        if self.adversary not in ADVERSARIES:
            raise ValueError(f"adversary must be one of {ADVERSARIES} (got {self.adversary!r}).")
        if self.target_values is not None and not isinstance(self.target_values, tuple):
            values = self.target_values
            values = tuple(values) if isinstance(values, (list, set)) else (values,)
            object.__setattr__(self, "target_values", values)
        if self.corruption_rate > 0 and self.adversary == "fixed" and self.fixed_preference is None:
            raise ValueError(
                "adversary='fixed' needs fixed_preference: 'longer', 'shorter', or a boolean column name."
            )

    @property
    def is_private(self) -> bool:
        """True when randomized response is applied."""
        return self.epsilon is not None

    @property
    def is_corrupted(self) -> bool:
        return self.corruption_rate > 0

    def apply(
        self,
        true_labels: np.ndarray,
        rng: np.random.Generator,
        *,
        target: np.ndarray | None = None,
        fixed_labels: np.ndarray | None = None,
    ) -> np.ndarray:
        """Run the pipeline on a label array (the order picks ``ctl`` or ``ltc``)."""
        run = ctl if self.order == "ctl" else ltc
        return run(
            true_labels,
            self.epsilon,
            self.corruption_rate,
            rng,
            adversary=self.adversary,
            target=target,
            fixed_labels=fixed_labels,
        )

    def expected_flip_rate(self) -> float:
        """Closed-form probability that an observed label is wrong, for data-independent adversaries.

        With q = 1/(1+e^ε) and the ``flip`` adversary: CTL α + q − 2αq, LTC α + q − αq
        (Zhou et al. 2025 (Square-χPO), App. E). With ``random`` the adversary is wrong half the time (α → α/2 in CTL;
        (1−α)q + α/2 in LTC). ``targeted`` and ``fixed`` depend on the data: raises.
        """
        q = flip_probability(self.epsilon)
        alpha = self.corruption_rate
        if alpha == 0:
            return q
        if self.adversary == "flip":
            return alpha + q - 2 * alpha * q if self.order == "ctl" else alpha + q - alpha * q
        if self.adversary == "random":
            wrong_before = alpha / 2
            return wrong_before + q - 2 * wrong_before * q if self.order == "ctl" else (1 - alpha) * q + alpha / 2
        raise ValueError(
            f"the flip rate of adversary={self.adversary!r} depends on the data; "
            "pass flip_rate explicitly to the robust loss."
        )

    @property
    def name(self) -> str:
        return "randomized_response" if self.is_private else "none"

    def release_labels(self, labels: np.ndarray, num_labels: int, rng: np.random.Generator, **context) -> LabelRelease:
        """Binary labels only; ``context`` holds ``target`` / ``fixed_labels`` for those adversaries."""
        if num_labels != 2:
            raise ValueError(
                f"LabelPipeline releases binary labels (preference pairs); these rows have K = {num_labels}. "
                "Use KaryRR, SubsetMechanism or RRWithPrior for best-of-K rows."
            )
        return LabelRelease(self.apply(labels, rng, **context))

    def ledger_fields(self) -> dict[str, Any]:
        return {
            "mechanism": self.name,
            "epsilon": self.epsilon,
            "corruption_rate": self.corruption_rate,
            "adversary": self.adversary if self.is_corrupted else None,
            "order": self.order if (self.is_private and self.is_corrupted) else None,
        }

    def to_dict(self) -> dict[str, Any]:
        record = asdict(self)
        if record["target_values"] is not None:
            record["target_values"] = list(record["target_values"])
        return record


@dataclass(frozen=True)
class KaryRR(Measurement):
    """K-ary randomized response with its unbiased analyzer (``label_weights``), ε-label-DP."""

    epsilon: float
    name = "k_rr"

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_epsilon(self.epsilon, finite=True))

    def release_labels(self, labels, num_labels: int, rng: np.random.Generator, **context) -> LabelRelease:
        released = label_dp.k_rr(labels, num_labels, self.epsilon, rng)
        return LabelRelease(released, weights=label_dp.k_rr_weights(released, num_labels, self.epsilon))

    def to_dict(self) -> dict[str, Any]:
        return {"mechanism": self.name, "epsilon": float(self.epsilon)}


@dataclass(frozen=True)
class SubsetMechanism(Measurement):
    """Chua et al. 2024 (local label DP)'s √K subset randomizer with its unbiased analyzer (``label_weights``),
    ε-label-DP."""

    epsilon: float
    name = "subset"
    kary_column = "released_subset"

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_epsilon(self.epsilon, finite=True))

    def release_labels(self, labels, num_labels: int, rng: np.random.Generator, **context) -> LabelRelease:
        subsets = label_dp.subset_mechanism(labels, num_labels, self.epsilon, rng)
        return LabelRelease(subsets, weights=label_dp.subset_weights(subsets, self.epsilon))

    def to_dict(self) -> dict[str, Any]:
        return {"mechanism": self.name, "epsilon": float(self.epsilon)}


def prior_digest(prior: np.ndarray) -> str:
    """A digest of a prior (public: it depends on no label it releases), rounded to absorb float noise."""
    rounded = np.round(np.asarray(prior, dtype=np.float64), 6)
    return "sha256:" + hashlib.sha256(rounded.tobytes()).hexdigest()[:16]


@dataclass(frozen=True, eq=False)
class RRWithPrior(Measurement):
    """RRWithPrior (Ghazi et al. 2021 (label DP), Algorithm 2) with a given, label-independent prior.

    ``prior`` is (n, K) for best-of-K rows, or (n,) for preference pairs: p(u ≻ v) in the canonical
    label-free order (u, v) of :func:`squarechipo.privacy.release.rows.canonical_pairs`. Rows whose release is
    the prior's argmax are marked (``label_from_prior``): pseudo-labels, carrying no information about the
    label. Binary RR rows flip at q(ε) and get the usual c(ε). ``to_dict`` names the prior by a digest, so a
    re-run with another prior (another stage-1 policy, another temperature) stops instead of silently
    reusing a release made with the old one.
    """

    epsilon: float
    prior: np.ndarray
    temperature: float | None = None
    name = "rr_with_prior"
    canonical_pairs = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_epsilon(self.epsilon, finite=True))
        object.__setattr__(self, "prior", np.asarray(self.prior, dtype=np.float64))

    def prior_matrix(self, n: int) -> np.ndarray:
        """The (n, K) prior; a pair's p(u ≻ v) becomes (p(v), p(u)), so label 1 means u."""
        prior = self.prior
        if prior.ndim == 1:
            if prior.shape != (n,) or not np.all((prior >= 0) & (prior <= 1)):
                raise ValueError(f"prior must be {n} probabilities in [0, 1], one per row (got shape {prior.shape}).")
            return np.stack([1 - prior, prior], axis=1)
        if prior.shape[0] != n:
            raise ValueError(f"prior has {prior.shape[0]} rows; the dataset has {n}. Give one prior row per row.")
        return prior

    def release_labels(self, labels, num_labels: int, rng: np.random.Generator, **context) -> LabelRelease:
        prior = self.prior_matrix(len(labels))
        if prior.shape[1] != num_labels:
            raise ValueError(f"prior has K = {prior.shape[1]} columns; the rows have K = {num_labels} labels.")
        released, from_prior = label_dp.rr_with_prior(labels, prior, self.epsilon, rng)
        return LabelRelease(released, from_prior=from_prior, outcome={"rows_from_prior": int(from_prior.sum())})

    def to_dict(self) -> dict[str, Any]:
        return {
            "mechanism": self.name,
            "epsilon": float(self.epsilon),
            "prior_temperature": self.temperature,
            "prior_digest": prior_digest(self.prior),
        }


@dataclass(frozen=True)
class MechanismKind:
    """One mechanism a ledger may name: the measurement that releases with it, whether its binary release flips a
    label with q(ε) = 1/(1+e^ε) (so a loss debiases it with c(ε)), what a learner uses, and its reference."""

    measurement: type[Measurement]
    flips_binary: bool
    analyzer: str
    reference: str


#: The ledger's mechanism name (``Release.mechanism``) → :class:`MechanismKind`: every mechanism a release can state,
#: in one table (as :data:`squarechipo.losses.METHODS` is for the losses). "none" is a LabelPipeline without ε.
MECHANISMS: dict[str, MechanismKind] = {
    "none": MechanismKind(LabelPipeline, False, "the labels as given (no privacy noise)", "-"),
    "randomized_response": MechanismKind(
        LabelPipeline, True, "the loss debiased by c(ε)", "Zhou et al. 2025 (Square-χPO), Alg. 1 and §3 (CTL, LTC)"
    ),
    "rr_with_prior": MechanismKind(
        RRWithPrior, True, "RR rows debiased by c(ε), prior rows as given", "Ghazi et al. 2021 (label DP), Alg. 2"
    ),
    "k_rr": MechanismKind(
        KaryRR, False, "unbiased analyzer weights (label_weights)", "Chua et al. 2024 (local label DP)"
    ),
    "subset": MechanismKind(
        SubsetMechanism, False, "unbiased analyzer weights (label_weights)", "Chua et al. 2024 (local label DP)"
    ),
}
