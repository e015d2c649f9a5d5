"""Configuration of the private reward / preference-model trainer: TRL's ``RewardConfig`` plus privacy fields."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from trl import RewardConfig

from squarechipo.models.runtime import adopt_checkpointing_name, apply_cpu_defaults, check_resume
from squarechipo.privacy.mechanisms.calibration import check_epsilon

__all__ = ["PrivateRewardConfig", "MODEL_TYPES", "PAIRWISE_REWARD_LOSSES", "REWARD_LOSSES"]

#: ``reward``: a scalar r(x, a) compared by Bradley–Terry (Chowdhury et al. 2024 (private reward estimation));
#: ``preference``: a pairwise
#: ℓ(x, a⁰, a¹) ∈ [−1, 1], antisymmetric, for general (non-transitive) preferences (Zhou et al. 2025 (Square-χPO), §4).
MODEL_TYPES = ("reward", "preference")
#: ``rdpo``: the RR-debiased Bradley–Terry log loss of Chowdhury et al. 2024 (private reward estimation) (eq.
#: 4); ``square_dpo``: (2σ(m) − 1 − c(ε))²,
#: Zhou et al. 2025 (Square-χPO), eq. (10) (for a preference model m = s(x,a,b) − s(x,b,a), so 2σ(m) − 1 = ℓ);
#: ``plackett_luce``: the
#: debiased top-1 Plackett–Luce loss on best-of-K rows (``BestOfKRewardTrainer``).
#: The pairwise losses are the methods of squarechipo.losses.METHODS with the identity link (the names are shared).
PAIRWISE_REWARD_LOSSES = ("rdpo", "square_dpo")
REWARD_LOSSES = (*PAIRWISE_REWARD_LOSSES, "plackett_luce")


@dataclass
class PrivateRewardConfig(RewardConfig):
    """``RewardConfig`` with the label-privacy debiasing (Chowdhury et al. 2024 (private reward estimation);
    Zhou et al. 2025 (Square-χPO), Alg. 3 line 4).

    The ε of the labels is read from the training dataset's ledger by default; ``debias_epsilon`` is for
    data privatized elsewhere (a disagreement with the ledger raises unless ``privacy_override``).
    """

    model_type: str = field(default="reward", metadata={"help": "reward (scalar, BT) or preference (pairwise ℓ)."})
    train_labels_public: bool = field(
        default=False,
        metadata={"help": "The training split's raw labels are public (see SquareChiPOConfig.train_labels_public)."},
    )
    eval_labels_public: bool = field(
        default=False,
        metadata={"help": "The evaluation split's labels are public (see SquareChiPOConfig.eval_labels_public)."},
    )
    loss: str = field(
        default="rdpo",
        metadata={
            "help": "rdpo (the debiased Bradley–Terry loss, Chowdhury et al. 2024 (private reward estimation)) or "
            "square_dpo (Zhou et al. 2025 (Square-χPO), eq. 10): the names of squarechipo.losses.METHODS; "
            "plackett_luce for best-of-K rows."
        },
    )
    max_margin: float | None = field(
        default=8.0,
        metadata={
            "help": "Bound B on the reward margin |r(x,a⁺) − r(x,a⁻)| (clipped). The debiased BT loss is "
            "unbounded below without it (Chowdhury et al. 2024 (private reward estimation) bounds ‖θ‖). None = no "
            "bound (square loss only)."
        },
    )
    debias_epsilon: float | None = field(
        default=None, metadata={"help": "The RR ε to debias for when the data has no ledger (asserted by the config)."}
    )
    privacy_override: bool = field(
        default=False, metadata={"help": "Allow debias_epsilon to disagree with the ledger."}
    )
    override_lineage_guard: bool = field(
        default=False,
        metadata={
            "help": "Train even if the initial model was trained on these rows or their prompts (private "
            "labels exposed through it). Recorded in the privacy record and card."
        },
    )

    def __post_init__(self) -> None:
        apply_cpu_defaults(self)
        adopt_checkpointing_name(self)
        check_resume(self)
        super().__post_init__()
        if self.model_type not in MODEL_TYPES:
            raise ValueError(f"model_type must be one of {MODEL_TYPES} (got {self.model_type!r}).")
        if self.loss not in REWARD_LOSSES:
            raise ValueError(f"loss must be one of {REWARD_LOSSES} (got {self.loss!r}).")
        if self.model_type == "preference" and self.loss != "square_dpo":
            raise ValueError(
                "model_type='preference' is fitted by least squares (Zhou et al. 2025 (Square-χPO), eq. 10): "
                "set loss: square_dpo."
            )
        if self.max_margin is not None and not (self.max_margin > 0 and math.isfinite(self.max_margin)):
            raise ValueError(f"max_margin must be positive and finite, or None (got {self.max_margin!r}).")
        if self.loss in ("rdpo", "plackett_luce") and self.max_margin is None:
            raise ValueError(f"loss={self.loss!r} is unbounded below: set max_margin (e.g. 8.0) to bound the margin.")
        if self.center_rewards_coefficient is not None and self.model_type == "preference":
            raise ValueError("center_rewards_coefficient does not apply to a preference model; leave it unset.")
        if self.debias_epsilon is not None:
            self.debias_epsilon = check_epsilon(self.debias_epsilon, field="debias_epsilon")
            if math.isinf(self.debias_epsilon):
                self.debias_epsilon = None
