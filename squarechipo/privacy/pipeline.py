"""A label pipeline: local DP (randomized response) and Huber corruption in one of two orders.

:class:`LabelPipeline` is a validated, serialisable description (it maps one-to-one onto the
``label_*`` fields of the recipes' YAML configs); :meth:`LabelPipeline.apply` runs it on a label
array with :func:`~squarechipo.privacy.mechanisms.ctl` or :func:`~squarechipo.privacy.mechanisms.ltc`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from squarechipo.privacy.calibration import (
    check_corruption_rate,
    check_epsilon,
    flip_probability,
)
from squarechipo.privacy.mechanisms import ADVERSARIES, ctl, ltc

__all__ = ["LabelPipeline", "ORDERS", "FIXED_PREFERENCES"]

ORDERS: tuple[str, ...] = ("ctl", "ltc")
#: Built-in rules of the ``fixed`` adversary at the dataset level; any other value names a boolean
#: column that is True where the adversary prefers the ``rejected`` response.
FIXED_PREFERENCES: tuple[str, ...] = ("longer", "shorter")


@dataclass(frozen=True)
class LabelPipeline:
    """What happens to the labels before training.

    Args:
        epsilon: local-DP budget of randomized response; ``None`` (or ``inf``) = no privacy.
        corruption_rate: Huber contamination rate α ∈ [0, 0.5]; 0 = no corruption.
        adversary: ``flip``, ``random``, ``targeted`` or ``fixed`` (see ``huber_corruption``).
        order: ``ctl`` (corruption then LDP) or ``ltc`` (LDP then corruption), 003 §3.
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
        (003 App. E). With ``random`` the adversary is wrong half the time (α → α/2 in CTL;
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

    def to_dict(self) -> dict[str, Any]:
        record = asdict(self)
        if record["target_values"] is not None:
            record["target_values"] = list(record["target_values"])
        return record
