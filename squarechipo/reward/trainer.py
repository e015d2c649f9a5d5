"""``PrivateRewardTrainer``: TRL's ``RewardTrainer`` with label-private losses.

- ``model_type: reward``, ``loss: rdpo``: the RR-debiased Bradley–Terry loss of
  Chowdhury et al. 2024 (private reward estimation), §4, eq. 4: [−(1−ρ)·log σ(m) + ρ·log σ(−m)]/(1−2ρ), ρ = 1/(1+e^ε),
  on the clipped reward margin m = clip(r(x, a⁺) − r(x, a⁻), ±B). It is unbiased for the clean BT loss but unbounded
  below, so the margin bound B (``max_margin``) plays the role of that paper's parameter bound.
- ``loss: square_dpo``: (2σ(m) − 1 − c(ε))², Zhou et al. 2025 (Square-χPO), eq. (10); with ``model_type:
  preference`` the rows are text pairs (see :mod:`squarechipo.reward.pairs`) and this fits the general preference
  model ℓ̂.

What is TRL's: tokenization, the collator, logging, checkpointing, the Hub. What is overridden:
``compute_loss``; the privacy set-up, every read of labels, the dropped-row count and the record (with the card and
beside every saved checkpoint) come from :class:`squarechipo.trainer.private_base.PrivateTrainerMixin`.
"""

from __future__ import annotations

import logging

import torch
from trl import RewardTrainer

from squarechipo.losses import METHODS, robust_log_loss, square_loss
from squarechipo.privacy.mechanisms.calibration import debias_factor_from_flip_rate
from squarechipo.privacy.provenance.lineage import ModelLineage
from squarechipo.reward.config import PAIRWISE_REWARD_LOSSES, PrivateRewardConfig
from squarechipo.trainer.private_base import PrivateTrainerMixin

__all__ = ["PrivateRewardTrainer", "reward_loss"]

logger = logging.getLogger("squarechipo")


def reward_loss(margin: torch.Tensor, loss: str, flip_rate: float, max_margin: float | None) -> torch.Tensor:
    """Per-row loss on the reward margin m = r(a⁺) − r(a⁻) (clipped to ±max_margin), debiased for ``flip_rate``.

    ``loss`` names a method of :data:`squarechipo.losses.METHODS` whose link is the identity (the margin is already a
    reward difference): ``rdpo`` is the debiased Bradley–Terry loss of
    Chowdhury et al. 2024 (private reward estimation), eq. 4; ``square_dpo`` is
    Zhou et al. 2025 (Square-χPO), eq. (10)."""
    if loss not in PAIRWISE_REWARD_LOSSES:
        raise ValueError(f"loss must be one of {PAIRWISE_REWARD_LOSSES} (got {loss!r}).")
    if max_margin is not None:
        margin = torch.clamp(margin, -max_margin, max_margin)
    if METHODS[loss].loss == "robust_log":
        return robust_log_loss(margin.float(), flip_rate)
    return square_loss(margin.float(), debias_factor_from_flip_rate(flip_rate))


class PrivateRewardTrainer(PrivateTrainerMixin, RewardTrainer):
    """Reward or pairwise preference model on privatized labels; ε from the dataset's ledger."""

    _tag_names = ["trl", "reward-trainer", "squarechipo"]
    _best_of_k = False
    record_stage = "reward_model"
    _debiasing_instead = (
        "BestOfKRewardTrainer trains on K-ary analyzer weights; pairwise reward models on binary labels."
    )

    def __init__(self, model, args: PrivateRewardConfig | None = None, train_dataset=None, **kwargs):
        if not isinstance(args, PrivateRewardConfig):
            raise TypeError(f"args must be a PrivateRewardConfig (got {type(args).__name__}).")
        if (args.loss == "plackett_luce") != self._best_of_k:
            raise ValueError(
                "loss='plackett_luce' is for best-of-K rows with BestOfKRewardTrainer; pairwise rows use "
                "rdpo or square_dpo."
                if not self._best_of_k
                else "BestOfKRewardTrainer needs loss: plackett_luce."
            )
        self._set_up_privacy(model, None, train_dataset, kwargs.get("eval_dataset"), args)
        super().__init__(model, args=args, train_dataset=train_dataset, **kwargs)
        logger.info(
            "squarechipo reward model: type=%s loss=%s flip_rate=%.6f (source: %s)",
            args.model_type,
            args.loss,
            self.privacy.flip_rate,
            self.privacy.source,
        )

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        mode = "train" if self.model.training else "eval"
        inputs["use_cache"] = False
        outputs = model(**inputs)
        chosen, rejected = torch.chunk(outputs.logits.squeeze(-1), chunks=2)
        margin = chosen - rejected
        if "margin" in inputs:
            margin = margin - inputs["margin"]
        loss = reward_loss(margin, self.args.loss, self.privacy.flip_rate, self.args.max_margin).mean()
        if self.args.center_rewards_coefficient is not None:
            loss = loss + self.args.center_rewards_coefficient * torch.mean((chosen + rejected) ** 2)
        if mode == "train":
            tokens = self.accelerator.gather_for_metrics(inputs["attention_mask"].sum()).sum().item()
            self._total_train_tokens += tokens // self._tp_size
        self._metrics[mode]["num_tokens"] = [self._total_train_tokens]
        with torch.no_grad():
            margins = self.accelerator.gather_for_metrics(margin.detach())
            # Accuracy on the observed (privatized) labels, not on the private true labels.
            self._metrics[mode]["accuracy"].append((margins > 0).float().mean().item())
            self._metrics[mode]["margin"].append(margins.mean().item())
        return (loss, outputs) if return_outputs else loss

    def record_details(self) -> dict:
        return {"model_type": self.args.model_type, "loss": self.args.loss, "max_margin": self.args.max_margin}

    def _card_intro(self) -> str:
        kind = (
            "a pairwise preference model ℓ(x, a⁰, a¹) (Zhou et al. 2025 (Square-χPO), Alg. 3)"
            if self.args.model_type == "preference"
            else "a reward model (Chowdhury et al. 2024 (private reward estimation), debiased Bradley–Terry)"
        )
        return f"This is {kind} trained with squarechipo on labels released through the mechanism below."

    def _starting_models(self, model, ref_model):
        return [("initial", ModelLineage.of_model(model))]
