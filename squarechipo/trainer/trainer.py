"""``SquareChiPOTrainer``: TRL's ``DPOTrainer`` with the squarechipo losses.

What is TRL's and reused as is: tokenization (``_prepare_dataset``), the collator, the reference
model handling — a separate model, the PEFT adapter switch and ``precompute_ref_log_probs`` — via
``compute_ref_log_probs``, logging (``self._metrics`` / ``log``), checkpointing and the Hub.

What is overridden: ``_compute_loss`` — the policy forward (through the lean LM head, see
:mod:`squarechipo.models.lm_head`), the loss from :func:`squarechipo.losses.preference_loss` and the
metrics; ``_prepare_dataset`` (counting the rows TRL's length filter drops); ``_set_signature_columns_if_needed``
and ``_precompute_ref_logps`` (extra dataset columns such as ``label_from_prior`` reach the batch);
and ``create_model_card``, which adds the privacy record.

TRL internals this relies on are listed in :data:`TRL_INTERNALS` and checked by a test.
"""

from __future__ import annotations

import logging
import os

import torch
from accelerate.utils import is_peft_model
from trl import DPOTrainer

from squarechipo.data.columns import FROM_PRIOR_COLUMN
from squarechipo.losses import SATURATED_MARGIN, preference_loss, saturation
from squarechipo.models.lm_head import add_lean_lm_head
from squarechipo.models.reference_cache import ReferenceLogpCache
from squarechipo.privacy.provenance.record import PRIVACY_FILE
from squarechipo.trainer.checkpoints import EpochCheckpoints
from squarechipo.trainer.config import SquareChiPOConfig
from squarechipo.trainer.private_base import PrivateTrainerMixin

__all__ = ["SquareChiPOTrainer", "TRL_INTERNALS", "PRIVACY_FILE", "check_hub_reachable"]

logger = logging.getLogger("squarechipo")

#: Attributes of TRL's DPOTrainer this subclass uses; a test fails loudly when one disappears.
TRL_INTERNALS = (
    "_compute_loss",
    "compute_ref_log_probs",
    "_prepare_dataset",
    "_metrics",
    "precompute_ref_logps",
    "ref_model",
    "beta",
    "aux_loss_enabled",
    "router_aux_loss_coef",
    "_total_train_tokens",
    "_tp_size",
    "create_model_card",
    "_set_signature_columns_if_needed",
    "_signature_columns",
    "_precompute_ref_logps",
    "_precompute_model_hash",
    "ld_alpha",
    "data_collator",
)
_NON_MODEL_KEYS = {"completion_mask", "ref_chosen_logps", "ref_rejected_logps"}


def check_hub_reachable(args) -> None:
    """Fail before anything is released or trained when ``push_to_hub`` is set but the Hub cannot be reached (one
    request, no retries: an offline machine answers at once) or no token is configured; one line (ValueError)."""
    if not getattr(args, "push_to_hub", False):
        return
    import huggingface_hub

    from squarechipo.models.hub import hub_unreachable

    fix = "fix the network or HF_ENDPOINT, or drop --push_to_hub and upload the saved folder later (hf upload)."
    why = hub_unreachable(timeout=10)
    if why:
        raise ValueError(f"push_to_hub is set but {why}: nothing can be pushed. Checked before anything was released "
                         f"or trained: {fix}")  # fmt: skip
    if huggingface_hub.get_token() is None:
        raise ValueError(
            "push_to_hub is set but no Hugging Face token is configured: run `hf auth login` or set HF_TOKEN."
        )


class ColumnsCollator:
    """A TRL collator plus extra per-row dataset columns, passed through as tensors."""

    def __init__(self, base, columns: dict[str, torch.dtype]):
        self.base = base
        self.columns = dict(columns)

    def __call__(self, examples):
        batch = self.base(examples)
        for key, dtype in self.columns.items():
            batch[key] = torch.tensor([example[key] for example in examples], dtype=dtype)
        return batch


_PAPER_TITLE = "Square-χPO: Differentially Private and Robust χ²-Preference Optimization in Offline Direct Alignment"


class SquareChiPOTrainer(PrivateTrainerMixin, DPOTrainer):
    """Align a causal LM with χPO / Square-χPO / DPO / rDPO on privatized or corrupted labels.

    The training dataset is a preference dataset in any TRL format; when it carries a
    squarechipo privacy ledger (see :func:`squarechipo.privacy.release_dataset`), the debiasing
    is taken from it. See :class:`SquareChiPOConfig` for the fields.
    """

    _tag_names = ["trl", "dpo", "squarechipo"]
    _name = "squarechipo"
    _debiasing_instead = (
        "Its losses debias binary labels; train a reward model on K-ary labels with BestOfKRewardTrainer."
    )
    _paper = {
        "title": _PAPER_TITLE,
        "citation": (
            "@inproceedings{zhou2025squarechipo,\n"
            "    title     = {{Square$\\chi$PO: Differentially Private and Robust $\\chi^2$-Preference "
            "Optimization in Offline Direct Alignment}},\n"
            "    author    = {Xingyu Zhou and Yulian Wu and Wenqian Weng and Francesco Orabona},\n"
            "    booktitle = {International Conference on Machine Learning (ICML)},\n"
            "    year      = 2025,\n"
            "}"
        ),
    }

    def __init__(self, model, ref_model=None, args: SquareChiPOConfig | None = None, train_dataset=None, **kwargs):
        if args is None:
            args = SquareChiPOConfig(output_dir="squarechipo-output")
        if not isinstance(args, SquareChiPOConfig):
            raise TypeError(f"args must be a SquareChiPOConfig (got {type(args).__name__}).")
        eval_dataset = kwargs.get("eval_dataset")
        self._set_up_privacy(model, ref_model, train_dataset, eval_dataset, args, flip_rate=args.flip_rate)
        self.privacy.refuse_seeded_push(args.push_to_hub, args.push_seeded_release)
        if args.push_to_hub:
            check_hub_reachable(args)
        self.lean_lm_head = False
        #: Whether the lean head runs each prompt once (decided with the head, see ``_share_prompt``).
        self.shares_prompt = False
        columns = getattr(train_dataset, "column_names", None) or []
        #: Rows released from an RRWithPrior prior (LP-2ST, Ghazi et al. 2021 (label DP)) are pseudo-labels: not
        #: debiased, weighted.
        self.has_prior_rows = FROM_PRIOR_COLUMN in columns
        self._extra_columns = self._extra_columns_for(columns)
        super().__init__(model, ref_model=ref_model, args=args, train_dataset=train_dataset, **kwargs)
        if self._extra_columns:
            self.data_collator = ColumnsCollator(self.data_collator, self._extra_columns)
        # Always: it also marks each checkpoint once saved whole, which resume_from_checkpoint: true looks for.
        self.add_callback(EpochCheckpoints(args.checkpoint_epochs, args.resume_every_epochs))
        self._tag_names = list(self._tag_names) + [args.method]
        self._warn_if_fsdp_fell_back(args)
        self._install_lean_lm_head()
        if self.lean_lm_head and args.gradient_checkpointing and self.shares_prompt is True:  # the cache layout
            logger.warning(
                "gradient_checkpointing is on: the policy forward cannot share each prompt between chosen and "
                "rejected (the reference forward still does). Set gradient_checkpointing=False when memory allows."
            )
        logger.info(
            "squarechipo: method=%s beta=%s r_max=%s flip_rate=%.6f (source: %s)",
            args.method,
            args.beta,
            args.r_max,
            self.privacy.flip_rate,
            self.privacy.source,
        )

    def _warn_if_fsdp_fell_back(self, args) -> None:
        """Accelerate selects FSDP only on accelerators: on CPU processes a request for it runs plain DDP."""
        requested = bool(getattr(args, "fsdp", None)) or os.environ.get("ACCELERATE_USE_FSDP", "").lower() == "true"
        if requested and not self.is_fsdp_enabled:
            logger.warning(
                "FSDP was requested, but Accelerate runs this job as %s: it selects FSDP only for GPU-like devices "
                "(accelerate/state.py), so on CPU processes every rank holds the whole model (data parallel, as "
                "DDP). Use a GPU for FSDP; the losses are those of a DDP run.",
                self.accelerator.distributed_type,
            )

    def _install_lean_lm_head(self) -> None:
        """Replace TRL's fused head with the lean one (completion log-probs only; see ``lm_head``).

        TRL's head also computes entropy/top-1/mean-logit metrics and, off Triton devices, scores
        prompt and padding positions. Idempotent; skipped with ``heavy_metrics``.
        """
        if self.args.heavy_metrics or self.lean_lm_head:
            return
        share_prompt = self.shares_prompt = self._share_prompt()
        policy = self.model.get_base_model() if is_peft_model(self.model) else self.model
        self.lean_lm_head = add_lean_lm_head(policy, share_prompt=share_prompt)
        if self.ref_model is not None:
            # Under DeepSpeed TRL hands back the reference as a DeepSpeedEngine, whose ``config`` is the DS config:
            # patch the model inside it (the engine's forward calls it).
            add_lean_lm_head(self.accelerator.unwrap_model(self.ref_model), share_prompt=share_prompt)
        logger.info(
            "squarechipo: %s, lean LM head %s, prompts shared between chosen and rejected: %s",
            self.accelerator.distributed_type,
            "on" if self.lean_lm_head else "off (model not covered)",
            share_prompt,
        )

    def _share_prompt(self) -> bool | str:
        """Whether the lean head runs each prompt once (``share_prompt``; its default follows the device), and
        how: True (on a KV cache) or "packed" (``share_prompt_layout``)."""
        # Running each prompt once calls the backbone twice in one forward; that is checked with DDP
        # and single processes, not with FSDP or DeepSpeed, where each prompt is run twice as in TRL.
        if self.is_fsdp_enabled or self.is_deepspeed_enabled:
            if self.args.share_prompt:
                logger.warning("share_prompt is ignored under FSDP/DeepSpeed: each prompt runs twice, as in TRL.")
            return False
        share = self.accelerator.device.type == "cpu" if self.args.share_prompt is None else self.args.share_prompt
        return share and ("packed" if self.args.share_prompt_layout == "packed" else True)

    def _extra_columns_for(self, columns: list[str]) -> dict[str, torch.dtype]:
        """Dataset columns the collator passes through to the loss (name → tensor dtype)."""
        return {FROM_PRIOR_COLUMN: torch.bool} if FROM_PRIOR_COLUMN in columns else {}

    def _set_signature_columns_if_needed(self):
        super()._set_signature_columns_if_needed()
        extra = [c for c in getattr(self, "_extra_columns", {}) if c not in self._signature_columns]
        self._signature_columns = list(self._signature_columns) + extra

    def _precompute_ref_logps(self, dataset, name, batch_size):
        # Called from DPOTrainer.__init__ after TRL installed its head: precompute with the lean one.
        self._install_lean_lm_head()
        return super()._precompute_ref_logps(dataset, name, batch_size)

    # ------------------------------------------------------------------ loss

    def compute_ref_log_probs(self, model, inputs):
        """TRL's reference log-probs, through the on-disk cache when ``reference_logps_cache`` is set."""
        cache = self._reference_cache()
        if cache is None:
            return super().compute_ref_log_probs(model, inputs)
        keys = cache.keys(inputs)
        cached = cache.lookup(keys)
        if cached is not None:
            return cached.to(device=inputs["input_ids"].device, dtype=torch.float32).chunk(2, dim=0)
        chosen, rejected = super().compute_ref_log_probs(model, inputs)
        cache.store_batch(keys, torch.cat([chosen, rejected]))
        return chosen, rejected

    def _reference_cache(self) -> ReferenceLogpCache | None:
        if self.args.reference_logps_cache is None:
            return None
        if getattr(self, "_reference_logps_cache", None) is None:
            settings = {
                "ld_alpha": self.ld_alpha,
                "dtype": str(next((self.ref_model or self.model).parameters()).dtype),
            }
            self._reference_logps_cache = ReferenceLogpCache(
                self.args.reference_logps_cache, self._precompute_model_hash, settings
            )
        return self._reference_logps_cache

    def _policy_and_reference_logps(self, model, inputs) -> tuple[torch.Tensor, ...]:
        model_kwargs = {k: v for k, v in inputs.items() if k not in _NON_MODEL_KEYS and k not in self._extra_columns}
        model_kwargs["use_cache"] = False
        if self.aux_loss_enabled:
            model_kwargs["output_router_logits"] = True
        completion_mask = inputs["completion_mask"]
        labels = inputs["input_ids"].masked_fill(completion_mask == 0, -100)
        outputs = model(**model_kwargs, labels=labels, fused_lm_head=True)
        seq_len = completion_mask.size(1) - 1
        logps = outputs.log_probs[:, -seq_len:].sum(dim=1)
        chosen_logps, rejected_logps = logps.chunk(2, dim=0)  # the collator stacks [chosen; rejected]
        if self.precompute_ref_logps:
            ref_chosen_logps, ref_rejected_logps = inputs["ref_chosen_logps"], inputs["ref_rejected_logps"]
        else:
            reference = self.ref_model if self.ref_model is not None else self.model
            ref_chosen_logps, ref_rejected_logps = self.compute_ref_log_probs(reference, inputs)
        return outputs, model_kwargs, chosen_logps, rejected_logps, ref_chosen_logps, ref_rejected_logps

    def _compute_loss(self, model, inputs, return_outputs):
        mode = "train" if self.model.training else "eval"
        outputs, model_kwargs, chosen, rejected, ref_chosen, ref_rejected = self._policy_and_reference_logps(
            model, inputs
        )
        result = preference_loss(
            self.args.method,
            chosen,
            rejected,
            ref_chosen.to(chosen.device),
            ref_rejected.to(chosen.device),
            beta=self.beta,
            clip=self.args.clip,
            **self.privacy.loss_kwargs,
        )
        loss = result.losses.mean()
        if FROM_PRIOR_COLUMN in inputs:
            loss = self._with_prior_rows(
                inputs[FROM_PRIOR_COLUMN].to(chosen.device),
                result.losses,
                chosen,
                rejected,
                ref_chosen.to(chosen.device),
                ref_rejected.to(chosen.device),
            )
        if self.aux_loss_enabled and outputs.aux_loss is not None:
            loss = loss + self.router_aux_loss_coef * outputs.aux_loss
            self._metrics[mode]["aux_loss"].append(self.accelerator.gather_for_metrics(outputs.aux_loss).mean().item())
        self._log_metrics(mode, inputs, outputs, result.margins.detach(), chosen, rejected, ref_chosen, ref_rejected)
        if return_outputs:
            with torch.no_grad():
                outputs = model(**model_kwargs)
            return loss, outputs
        return loss

    def _with_prior_rows(self, from_prior, debiased, chosen, rejected, ref_chosen, ref_rejected) -> torch.Tensor:
        """RR rows keep the debiased loss; prior rows (pseudo-labels) take the plain loss with weight
        ``prior_row_weight`` (0 drops them). Weighted mean over the batch."""
        plain = preference_loss(
            self.args.method, chosen, rejected, ref_chosen, ref_rejected, beta=self.beta, clip=self.args.clip
        ).losses
        losses = torch.where(from_prior, plain, debiased)
        weight = torch.where(from_prior, torch.full_like(losses, self.args.prior_row_weight), torch.ones_like(losses))
        mode = "train" if self.model.training else "eval"
        self._metrics[mode]["prior_rows"].append(self.accelerator.gather_for_metrics(from_prior.float()).mean().item())
        return (weight * losses).sum() / weight.sum().clamp(min=1e-12)

    def _log_metrics(self, mode, inputs, outputs, margins, chosen, rejected, ref_chosen, ref_rejected) -> None:
        gather = self.accelerator.gather_for_metrics
        metrics = self._metrics[mode]
        chosen_rewards = self.beta * (chosen.detach() - ref_chosen.to(chosen.device))
        rejected_rewards = self.beta * (rejected.detach() - ref_rejected.to(chosen.device))
        metrics["rewards/chosen"].append(gather(chosen_rewards).mean().item())
        metrics["rewards/rejected"].append(gather(rejected_rewards).mean().item())
        all_margins = gather(margins.float())
        clipped, no_gradient = saturation(all_margins, self.args.clip)
        metrics["margins/clipped"].append(clipped)
        metrics["margins/no_gradient"].append(no_gradient)
        # Accuracy on the *observed* (possibly privatized) labels: the method's margin favours `chosen`.
        metrics["rewards/accuracies"].append((all_margins > 0).float().mean().item())
        metrics["rewards/margins"].append(all_margins.mean().item())
        metrics["implied_p_chosen"].append(torch.sigmoid(all_margins).mean().item())
        metrics["logps/chosen"].append(gather(chosen.detach()).mean().item())
        metrics["logps/rejected"].append(gather(rejected.detach()).mean().item())
        if mode == "train":
            tokens = gather(inputs["attention_mask"].sum()).sum().item()
            self._total_train_tokens += tokens // self._tp_size
        metrics["num_tokens"] = [self._total_train_tokens]
        if getattr(outputs, "entropy", None) is not None:  # heavy_metrics: TRL's fused head computed them
            mask = inputs["completion_mask"][..., 1:]
            seq_len = mask.size(1)
            entropy = (outputs.entropy[:, -seq_len:].detach() * mask).sum()
            tokens_in_batch = gather(mask.sum()).sum()
            metrics["entropy"].append((gather(entropy).sum() / tokens_in_batch.clamp(min=1)).item())
            chosen_mask, _ = mask.chunk(2, dim=0)
            chosen_top1, _ = outputs.is_top1[:, -seq_len:].chunk(2, dim=0)
            correct = gather((chosen_top1 & chosen_mask.bool()).sum()).sum()
            metrics["mean_token_accuracy"].append((correct / gather(chosen_mask.sum()).sum().clamp(min=1)).item())

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """TRL's log, then a warning (once) when most rows of the window since the last log got no gradient."""
        window = self._metrics["train"].get("margins/no_gradient") if self.model.training else None
        share = sum(window) / len(window) if window else 0.0
        super().log(logs, start_time)
        if share > 0.5 and not getattr(self, "_warned_saturation", False):
            self._warned_saturation = True
            logger.warning(
                "step %d: %.0f%% of the rows since the last log got no gradient: their margin sits at the clip "
                "±2·R_max = ±%s or the loss is saturated (|m| > %.1f). Training has stopped learning from them. "
                "Lower beta or raise r_max, or shorten the responses: χPO's link grows as e^ℓ of the log-ratio summed "
                "over the response's tokens (docs/training.md, 'Where training stops learning').",
                self.state.global_step,
                100 * share,
                self.args.clip,
                SATURATED_MARGIN,
            )

    # ------------------------------------------------------------------ model card

    def record_details(self) -> dict:
        """The method, β and R_max (and the prior rows' weight for LP-2ST) in the record and card."""
        return {
            "method": self.args.method,
            "beta": self.beta,
            "r_max": self.args.r_max,
            **({"prior_row_weight": self.args.prior_row_weight} if self.has_prior_rows else {}),
        }

    #: ``stage`` of the privacy record this trainer writes.
    record_stage = "preference_optimization"
