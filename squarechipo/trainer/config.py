"""Training configuration: TRL's ``DPOConfig`` plus the method, R_max and privacy fields."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from trl import DPOConfig, SFTConfig

from squarechipo.losses import METHODS, margin_clip
from squarechipo.models.runtime import adopt_checkpointing_name, apply_cpu_defaults, check_resume
from squarechipo.privacy.mechanisms.calibration import check_epsilon, check_flip_rate

__all__ = ["SFTRecipeConfig", "SquareChiPOConfig"]


@dataclass
class SquareChiPOConfig(DPOConfig):
    """``DPOConfig`` with the squarechipo methods (Zhou et al. 2025 (Square-χPO), Algorithm 1).

    The privacy parameters are read from the training dataset's ledger by default. ``debias_epsilon`` and
    ``flip_rate`` are for data privatized elsewhere; a value that disagrees with the ledger raises
    unless ``privacy_override`` is set.
    """

    method: str = field(
        default="square_chipo",
        metadata={"help": f"Preference method: one of {', '.join(METHODS)}.", "choices": list(METHODS)},
    )
    r_max: float | None = field(
        default=None,
        metadata={
            "help": "R_max of Zhou et al. 2025 (Square-χPO): the margin β·h is clipped to ±2·R_max. None = no clip."
        },
    )
    debias_epsilon: float | None = field(
        default=None,
        metadata={
            "help": "The RR ε to debias for when the data carries no ledger (privatized elsewhere): asserted by the "
            "config, not backed by a ledger, and the card says so. Default: read from the dataset's ledger."
        },
    )
    flip_rate: float | None = field(
        default=None,
        metadata={"help": "Label flip rate ρ for rdpo/robust_chipo (e.g. RR plus corruption). Default: from ε."},
    )
    privacy_override: bool = field(
        default=False,
        metadata={"help": "Allow epsilon/flip_rate to disagree with the dataset's ledger (recorded in the card)."},
    )
    override_lineage_guard: bool = field(
        default=False,
        metadata={
            "help": "Train even if the initial policy or the reference was trained on these rows or their "
            "prompts (private labels exposed through it). Recorded in the privacy record and card."
        },
    )
    prior_row_weight: float = field(
        default=1.0,
        metadata={
            "help": "LP-2ST (Ghazi et al. 2021 (label DP)): weight of rows whose label was released from the prior "
            "(pseudo-labels, not debiased); 0 drops them. Used only when the data has a label_from_prior column."
        },
    )
    push_seeded_release: bool = field(
        default=False,
        metadata={"help": "Allow push_to_hub of a model trained on a seeded (reproducible, not private) release."},
    )
    train_labels_public: bool = field(
        default=False,
        metadata={
            "help": "The training split's raw labels are public (simulated or public labels): train on them as "
            "they are, claiming no privacy. Otherwise raw training labels are refused: release them first."
        },
    )
    eval_labels_public: bool = field(
        default=False,
        metadata={
            "help": "The evaluation split's labels are public: evaluate on them as they are. Otherwise raw "
            "evaluation labels are refused (metrics on them would reveal them): release the split too."
        },
    )
    heavy_metrics: bool = field(
        default=False,
        metadata={"help": "Also compute TRL's entropy, top-1 accuracy and mean-logit metrics (slower)."},
    )
    share_prompt: bool | None = field(
        default=None,
        metadata={
            "help": "Run each prompt once for both responses (how: share_prompt_layout). Default: on for CPU "
            "processes, where it saves the prompt's compute, and off on accelerators until the packed layout is "
            "measured there (on an H100 the cache layout made a step 1.8-8x TRL's). Always off under FSDP/DeepSpeed; "
            "the cache layout is also off under gradient checkpointing."
        },
    )
    share_prompt_layout: str = field(
        default="packed",
        metadata={
            "help": "How a shared prompt runs (with share_prompt): 'cache' runs the prompt, then both responses on "
            "its KV cache (two backbone calls); 'packed' runs [prompt, chosen, rejected] as one row in one backbone "
            "call under a block-causal mask (SDPA or eager attention; works under gradient checkpointing). Default "
            "packed, the faster and leaner of the two on a CPU (figures in docs/benchmarks.md)."
        },
    )
    checkpoint_epochs: list[float] | None = field(
        default=None,
        metadata={
            "help": "Also save a checkpoint (checkpoint-<step>) when training reaches each of these epochs, whatever "
            "save_strategy says: e.g. [1, 2, 4, 8, 16] for log-spaced checkpoints of a long run. save_only_model "
            "keeps them small."
        },
    )
    resume_every_epochs: float | None = field(
        default=None,
        metadata={
            "help": "Also save the whole training state (optimizer, scheduler, RNG) every this many epochs, keeping "
            "only the newest of these resume points beside the checkpoint_epochs ones, so that a long run cut off "
            "resumes (resume_from_checkpoint) losing at most this much training. Needs save_only_model: false."
        },
    )
    reference_logps_cache: str | None = field(
        default=None,
        metadata={
            "help": "SQLite file of reference log-probs shared by runs on the same reference model (with "
            "precompute_ref_log_probs): keyed by each single (prompt, response) sequence, never by a pair, so it "
            "holds no label and is reused across methods, seeds and label releases."
        },
    )

    def __post_init__(self) -> None:
        apply_cpu_defaults(self)
        adopt_checkpointing_name(self)
        check_resume(self)
        super().__post_init__()
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {tuple(METHODS)} (got {self.method!r}).")
        if self.r_max is not None and not (self.r_max > 0 and math.isfinite(self.r_max)):
            raise ValueError(f"r_max must be a positive number or None for no clip (got {self.r_max!r}).")
        if self.debias_epsilon is not None:
            self.debias_epsilon = check_epsilon(self.debias_epsilon, field="debias_epsilon")
            if math.isinf(self.debias_epsilon):
                self.debias_epsilon = None
        if self.flip_rate is not None:
            self.flip_rate = check_flip_rate(self.flip_rate)
        if self.share_prompt_layout not in ("cache", "packed"):
            raise ValueError(f"share_prompt_layout must be 'cache' or 'packed' (got {self.share_prompt_layout!r}).")
        if not (math.isfinite(self.prior_row_weight) and self.prior_row_weight >= 0):
            raise ValueError(f"prior_row_weight must be ≥ 0 (got {self.prior_row_weight!r}); 0 drops the prior rows.")
        if self.checkpoint_epochs is not None:
            self.checkpoint_epochs = [float(e) for e in self.checkpoint_epochs]
            if not self.checkpoint_epochs or any(not (math.isfinite(e) and e > 0) for e in self.checkpoint_epochs):
                got = self.checkpoint_epochs
                raise ValueError(f"checkpoint_epochs must be a list of positive epochs, e.g. [1, 2, 4] (got {got!r}).")
        if self.resume_every_epochs is not None:
            if not (math.isfinite(self.resume_every_epochs) and self.resume_every_epochs > 0):
                raise ValueError(
                    f"resume_every_epochs must be a positive number of epochs (got {self.resume_every_epochs!r})."
                )
            if self.save_only_model:
                raise ValueError(
                    "resume_every_epochs saves resume points, which need the optimizer's state: set save_only_model: "
                    "false, or drop resume_every_epochs."
                )
        if self.reference_logps_cache is not None and not self.precompute_ref_log_probs:
            raise ValueError(
                "reference_logps_cache works with precompute_ref_log_probs: true (the reference log-probs are "
                "computed once, before training); set it, or remove reference_logps_cache."
            )
        unsupported = []
        if list(self.loss_type) != ["sigmoid"] or self.loss_weights not in (None, [1.0]):
            unsupported.append("loss_type/loss_weights (choose the loss with `method`)")
        if self.f_divergence_type != "reverse_kl":
            unsupported.append("f_divergence_type (the link is part of `method`)")
        if self.ld_alpha is not None:
            unsupported.append("ld_alpha")
        if self.use_weighting:
            unsupported.append("use_weighting")
        if self.label_smoothing:
            unsupported.append("label_smoothing (use rdpo with flip_rate)")
        if unsupported:
            raise ValueError(
                "SquareChiPOConfig does not support these DPOConfig options: " + "; ".join(unsupported) + ". "
                "Leave them at their defaults, or use trl.DPOTrainer for TRL's own losses."
            )

    @property
    def clip(self) -> float | None:
        """The margin bound 2·R_max passed to the loss."""
        return margin_clip(self.r_max)


@dataclass
class SFTRecipeConfig(SFTConfig):
    """TRL's ``SFTConfig`` with the CPU defaults of :func:`squarechipo.models.runtime.apply_cpu_defaults`
    (used by ``recipes/sft.py``)."""

    def __post_init__(self) -> None:
        apply_cpu_defaults(self)
        adopt_checkpointing_name(self)
        check_resume(self)
        super().__post_init__()
