"""Which debiasing the trainer applies: from the dataset's ledger, or from the config when none exists."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from squarechipo.privacy.ledger.ledger import Debiasing, PrivacyLedger
from squarechipo.privacy.mechanisms.calibration import flip_probability

__all__ = ["PrivacySettings", "resolve_privacy"]

logger = logging.getLogger("squarechipo")
_TOLERANCE = 1e-9


@dataclass(frozen=True)
class PrivacySettings:
    """``flip_rate``: the label flip rate the loss corrects for (0 = none); ``source``: where it came from."""

    flip_rate: float
    epsilon: float | None
    source: str  # "ledger", "config", "config (override of ledger)", "none"
    ledger: PrivacyLedger | None
    #: The ledger's answer (or the config's) to "how do I debias these labels".
    debiasing: Debiasing = Debiasing("none")

    @property
    def seeded(self) -> bool:
        """Whether a release drew its noise from a fixed seed: anyone with the seed can undo it."""
        return self.ledger is not None and any(r.randomness == "fixed_seed" for r in self.ledger.releases)

    def refuse_seeded_push(self, push_to_hub: bool, allowed: bool) -> None:
        if push_to_hub and self.seeded and not allowed:
            raise ValueError(
                "push_to_hub: these labels were released with a fixed label_seed, so anyone with the seed can "
                "recover every raw label, and the model is not private. Release them again without a seed (OS "
                "entropy) before publishing, or set push_seeded_release=True to publish a simulation knowingly "
                "(its card says it is seeded)."
            )

    @property
    def binary(self) -> bool:
        """Whether the loss debiases a flip rate (K-ary releases use analyzer weights or the labels as is)."""
        return self.debiasing.method in ("flip_rate", "none")

    def require(self, methods: tuple[str, ...], trainer: str, instead: str) -> None:
        """Raise when this trainer's loss cannot apply the debiasing the labels need."""
        if self.debiasing.method not in methods:
            raise ValueError(
                f"{trainer} cannot debias these labels: their ledger says {self.debiasing.describe()}. {instead}"
            )

    @property
    def loss_kwargs(self) -> dict[str, float]:
        """Keyword arguments for :func:`squarechipo.losses.preference_loss`."""
        return {"flip_rate": self.flip_rate} if self.flip_rate > 0 else {}

    def record(self, override: bool) -> dict[str, Any]:
        """The public privacy fields every trained model records (card and ``squarechipo_privacy.json``)."""
        last = self.ledger.releases[-1] if self.ledger is not None and self.ledger.releases else None
        if self.ledger is not None and self.ledger.releases and self.source == "ledger":
            debiasing = "; ".join(r.semantics for r in self.ledger.releases)
        else:
            debiasing = f"flip rate {self.flip_rate:.6f}" if self.flip_rate > 0 else "none"
        return {
            "epsilon": self.epsilon,
            # Only binary releases have a flip rate; K-ary ones record their analyzer under `debiasing`.
            "debiasing_flip_rate": self.flip_rate if self.binary else None,
            "debiasing": debiasing,
            "privacy_source": self.source,
            "privacy_override": bool(override),
            "mechanism": last.mechanism if last else None,
            "corruption_rate": last.corruption_rate if last else None,
            "adversary": last.adversary if last else None,
            "order": last.order if last else None,
            # Without its row sets (they cost 16 bytes a row), its seal intact: anyone with the signer's public key
            # can check what the card states (squarechipo key verify).
            "ledger": self.ledger.summary() if self.ledger is not None else None,
            "ledger_seal": self.ledger.seal.describe() if self.ledger is not None and self.ledger.seal else None,
        }


def _from_config(epsilon: float | None, flip_rate: float | None) -> PrivacySettings:
    """Data privatized outside squarechipo (no ledger): the config's ε or flip rate, or no debiasing."""
    rate = flip_rate if flip_rate is not None else (flip_probability(epsilon) if epsilon is not None else 0.0)
    source = "config" if flip_rate is not None or epsilon is not None else "none"
    return PrivacySettings(rate, epsilon, source, None, Debiasing("flip_rate" if rate > 0 else "none", rate))


def resolve_privacy(
    ledger: PrivacyLedger | None,
    *,
    epsilon: float | None,
    flip_rate: float | None,
    override: bool,
) -> PrivacySettings:
    """Reconcile the config with the ledger (privacy parameters travel with the data).

    - A ledger and no config value: the ledger's answer (:meth:`PrivacyLedger.debiasing`): the RR flip rate
      composed over binary releases, or the K-ary analyzer.
    - A config ε whose flip rate differs from the ledger's, or a config flip rate below the ledger's RR flip rate (it
      cannot be lower than the noise that was added), raises unless ``override``.
    - No ledger: the config values (data privatized outside squarechipo), or no debiasing.
    """
    if ledger is None:
        return _from_config(epsilon, flip_rate)
    answer = ledger.debiasing()
    if answer.method not in ("flip_rate", "none"):
        if flip_rate is not None:
            raise ValueError(
                f"flip_rate does not apply to these labels (the ledger says {answer.describe()}); remove it."
            )
        if epsilon is not None and abs(epsilon - (ledger.own_epsilon or 0.0)) > _TOLERANCE and not override:
            raise ValueError(
                f"config debias_epsilon={epsilon} disagrees with the dataset's privacy ledger (epsilon "
                f"{ledger.own_epsilon}). Remove it to use the ledger."
            )
        return PrivacySettings(0.0, ledger.total_epsilon, "ledger", ledger, answer)
    ledger_rate = answer.flip_rate
    if epsilon is None and flip_rate is None:
        return PrivacySettings(ledger_rate, ledger.total_epsilon, "ledger", ledger, answer)
    config_rate = flip_rate if flip_rate is not None else flip_probability(epsilon)
    disagrees = (
        abs(config_rate - ledger_rate) > _TOLERANCE if flip_rate is None else config_rate < ledger_rate - _TOLERANCE
    )
    if disagrees and not override:
        given = f"flip_rate={flip_rate}" if flip_rate is not None else f"debias_epsilon={epsilon}"
        raise ValueError(
            f"config {given} disagrees with the dataset's privacy ledger (total epsilon "
            f"{ledger.total_epsilon}, RR flip rate {ledger_rate:.6f}). Remove it to use the ledger, or set "
            "privacy_override=True if you really mean to debias differently (the card records it)."
        )
    source = "config (override of ledger)" if disagrees else "config"
    if disagrees:
        logger.warning(
            "privacy_override: debiasing for flip rate %.6f instead of the ledger's %.6f", config_rate, ledger_rate
        )
    used = Debiasing("flip_rate" if config_rate > 0 else "none", config_rate)
    return PrivacySettings(config_rate, epsilon if epsilon is not None else ledger.total_epsilon, source, ledger, used)
