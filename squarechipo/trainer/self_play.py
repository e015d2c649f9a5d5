"""``SelfPlayTrainer``: one policy update of iterative Square-χPO (Zhou et al. 2025 (Square-χPO), Algorithm 3, eq.
(11)).

Each row is an unlabelled pair (x, a, b) with a, b ~ π_ref, stored as ``prompt``/``chosen``/``rejected``
(``chosen`` = a; nothing is preferred), plus five per-row numbers computed before the update:

- ``ref_chosen_logps`` / ``ref_rejected_logps``: log π_ref(a|x), log π_ref(b|x) (TRL's precomputed
  reference columns; π_ref never changes across iterations, so they are computed once);
- ``previous_chosen_logps`` / ``previous_rejected_logps``: log πᵗ(a|x), log πᵗ(b|x) of the frozen
  iterate πᵗ (held as numbers, so no second model is kept in memory);
- ``self_play_target``: r̂ᵗ(x, a) − r̂ᵗ(x, b) with r̂ᵗ(x, ·) = ℓ̂(x, ·, b̃), b̃ ~ πᵗ(x).

The loss is (clip_4(f) − target)² with f = (1 + 1/η)·β·h_χPO,π − (β/η)·h_χPO,πᵗ (eq. (8)).
Everything else — tokenization, collation, the lean LM head, logging, checkpoints — is the
:class:`~squarechipo.trainer.SquareChiPOTrainer` / TRL ``DPOTrainer`` machinery.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from squarechipo.losses import SELF_PLAY_CLIP, self_play_loss, self_play_margin
from squarechipo.trainer.config import SquareChiPOConfig
from squarechipo.trainer.trainer import SquareChiPOTrainer

__all__ = ["SelfPlayConfig", "SelfPlayTrainer", "SELF_PLAY_COLUMNS", "OUTPUT_POLICIES"]

#: Columns a self-play dataset must carry besides prompt/chosen/rejected.
SELF_PLAY_COLUMNS = (
    "ref_chosen_logps",
    "ref_rejected_logps",
    "previous_chosen_logps",
    "previous_rejected_logps",
    "self_play_target",
)
_EXTRA_COLUMNS = SELF_PLAY_COLUMNS[2:]
#: ``mixture``: the uniform mixture of π¹..π^T that Zhou et al. 2025 (Square-χPO), Alg. 3 outputs (its guarantee, Thm
#: 4.4, is for
#: the mixture); ``last``: the last iterate π^{T+1} (one more update; no guarantee on a non-transitive game).
OUTPUT_POLICIES = ("mixture", "last")


@dataclass
class SelfPlayConfig(SquareChiPOConfig):
    """``SquareChiPOConfig`` plus the self-play fields of Zhou et al. 2025 (Square-χPO), Algorithm 3.

    ``method``, ``r_max``, ``epsilon`` and ``flip_rate`` do not apply: the loss is eq. (11), and the
    label privacy lives in the preference model (its ledger is carried into the output record).
    """

    eta: float = field(
        default=1.0, metadata={"help": "Mirror-descent step size η of Zhou et al. 2025 (Square-χPO), eq. (8)."}
    )
    iterations: int = field(
        default=2, metadata={"help": "T, the number of self-play rounds of Zhou et al. 2025 (Square-χPO), Alg. 3."}
    )
    output_policy: str = field(
        default="mixture", metadata={"help": "mixture (default; Zhou et al. 2025 (Square-χPO), Alg. 3) or last."}
    )
    responses_max_new_tokens: int = field(default=64, metadata={"help": "Length of the sampled responses a, b, b̃."})
    responses_temperature: float = field(
        default=1.0, metadata={"help": "Sampling temperature for a, b ~ π_ref and b̃ ~ πᵗ."}
    )
    responses_top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling for the sampled responses."})
    responses_batch_size: int = field(default=8, metadata={"help": "Generation and scoring batch size."})

    def __post_init__(self) -> None:
        self.precompute_ref_log_probs = True  # π_ref's log-probs are dataset columns (computed once)
        # The rows are samples of π_ref and targets of the preference model (post-processing of its release): no
        # raw label is read here; the preference model's record carries the privacy of its labels.
        self.train_labels_public = True
        super().__post_init__()
        if not (isinstance(self.eta, (int, float)) and math.isfinite(self.eta) and self.eta > 0):
            raise ValueError(
                f"eta must be a positive number (got {self.eta!r}); Zhou et al. 2025 (Square-χPO) uses a constant "
                "step size."
            )
        if not (isinstance(self.iterations, int) and self.iterations >= 1):
            raise ValueError(f"iterations (T) must be a positive integer (got {self.iterations!r}).")
        if self.output_policy not in OUTPUT_POLICIES:
            raise ValueError(f"output_policy must be one of {OUTPUT_POLICIES} (got {self.output_policy!r}).")
        if self.output_policy == "mixture" and self.iterations < 2:
            raise ValueError("output_policy='mixture' with iterations=1 is π_ref alone: set iterations ≥ 2.")
        if not self.responses_temperature > 0:
            raise ValueError("responses_temperature must be positive: a, b and b̃ are samples, not greedy decodes.")

    @property
    def updates(self) -> int:
        """Policy updates to run: π²..π^T for the mixture, π²..π^{T+1} for the last iterate."""
        return self.iterations - 1 if self.output_policy == "mixture" else self.iterations


class SelfPlayTrainer(SquareChiPOTrainer):
    """Fit π^{t+1} by the self-play regression of Zhou et al. 2025 (Square-χPO), eq. (11); the model passed in is πᵗ
    (warm start)."""

    _tag_names = ["trl", "squarechipo", "self-play"]

    def __init__(self, model, args: SelfPlayConfig | None = None, train_dataset=None, **kwargs):
        if not isinstance(args, SelfPlayConfig):
            raise TypeError(f"args must be a SelfPlayConfig (got {type(args).__name__}).")
        columns = getattr(train_dataset, "column_names", None) or []
        missing = [c for c in SELF_PLAY_COLUMNS if c not in columns]
        if missing:
            raise ValueError(
                f"the self-play dataset is missing {missing}; build it with "
                "squarechipo.trainer.iterative.self_play_dataset."
            )
        super().__init__(model, ref_model=None, args=args, train_dataset=train_dataset, **kwargs)

    def _extra_columns_for(self, columns: list[str]) -> dict[str, torch.dtype]:
        return {key: torch.float64 for key in _EXTRA_COLUMNS}

    def _precompute_ref_logps(self, dataset, name, batch_size):
        # The reference columns come with the dataset (π_ref is fixed across iterations).
        self._install_lean_lm_head()
        return dataset

    def _compute_loss(self, model, inputs, return_outputs):
        mode = "train" if self.model.training else "eval"
        outputs, model_kwargs, chosen, rejected, ref_chosen, ref_rejected = self._policy_and_reference_logps(
            model, inputs
        )
        device = chosen.device
        f = self_play_margin(
            chosen,
            rejected,
            inputs["previous_chosen_logps"].to(device),
            inputs["previous_rejected_logps"].to(device),
            ref_chosen.to(device),
            ref_rejected.to(device),
            beta=self.beta,
            eta=self.args.eta,
        )
        target = inputs["self_play_target"].to(device)
        loss = self_play_loss(f, target).mean()
        gather = self.accelerator.gather_for_metrics
        metrics = self._metrics[mode]
        with torch.no_grad():
            metrics["self_play/f"].append(gather(f.detach().float()).mean().item())
            metrics["self_play/clipped_fraction"].append(
                gather((f.detach().abs() > SELF_PLAY_CLIP).float()).mean().item()
            )
            metrics["self_play/target"].append(gather(target.float()).mean().item())
            drift = (chosen.detach() - inputs["previous_chosen_logps"].to(device)).abs()
            metrics["self_play/abs_logp_change"].append(gather(drift.float()).mean().item())
        if return_outputs:
            with torch.no_grad():
                outputs = model(**model_kwargs)
            return loss, outputs
        return loss
