"""Iterative Square-χPO for causal LMs (Zhou et al. 2025 (Square-χPO), Algorithm 3, lines 8–13) around
:class:`SelfPlayTrainer`.

1. D_x: for each prompt, two responses a, b sampled from π_ref (line 8); log π_ref(a|x), log π_ref(b|x) are computed
   once.
2. For t = 1, 2, …: sample one b̃ ~ πᵗ(x) per prompt, score r̂ᵗ(x, ·) = ℓ̂(x, ·, b̃) with the
   preference model, record log πᵗ(a|x), log πᵗ(b|x), and fit π^{t+1} from πᵗ by eq. (11).
3. Output (``output_policy``): ``mixture`` (default) — the uniform mixture of π¹..π^T that
   Zhou et al. 2025 (Square-χPO) returns and for which Theorem 4.4 bounds the duality gap; on a non-transitive
   preference the iterates cycle and the last one carries no guarantee (the lab shows its gap staying high). The folder
   then holds ``mixture.json`` and the iterates; generation samples one iterate per prompt
   (:func:`squarechipo.models.generation.generate_responses`). ``last`` — π^{T+1} as a plain model folder, one more
   update.

The labels were privatized before the preference model was trained; self-play itself reads only
prompts and model samples, so the privacy guarantee is the preference model's (its ledger is carried
into the output's ``squarechipo_privacy.json``: post-processing, no extra ε).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import datasets
import numpy as np
from accelerate import PartialState
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from squarechipo.data.label_roles import label_free
from squarechipo.models.generation import MIXTURE_FILE, generate_with_model
from squarechipo.models.logprobs import model_logps, preference_collator, tokenize_preferences
from squarechipo.models.preference import PreferenceModel
from squarechipo.privacy.door import rows_without_labels
from squarechipo.privacy.provenance.lineage import LineageReport, ModelLineage, check_lineage
from squarechipo.privacy.provenance.record import PRIVACY_FILE, PrivacyRecord, write_privacy_record
from squarechipo.trainer.self_play import SelfPlayConfig, SelfPlayTrainer

__all__ = ["inherited_record", "iterative_square_chipo", "self_play_dataset"]

logger = logging.getLogger("squarechipo")


@label_free("samples of π_ref and targets of a preference model (post-processing of its release)")
def self_play_dataset(pairs: datasets.Dataset, ref_logps, previous_logps, target: np.ndarray) -> datasets.Dataset:
    """The rows of one update: prompt/chosen(=a)/rejected(=b) and the five columns of :mod:`self_play`."""
    columns = {
        "ref_chosen_logps": ref_logps[0].tolist(),
        "ref_rejected_logps": ref_logps[1].tolist(),
        "previous_chosen_logps": previous_logps[0].tolist(),
        "previous_rejected_logps": previous_logps[1].tolist(),
        "self_play_target": np.asarray(target, dtype=np.float64).tolist(),
    }
    out = pairs
    for name, values in columns.items():
        out = out.add_column(name, values)
    return out


def _sample(model, tokenizer, prompts, args: SelfPlayConfig, seed: int, desc: str) -> list[str]:
    return generate_with_model(
        model,
        tokenizer,
        prompts,
        max_new_tokens=args.responses_max_new_tokens,
        batch_size=args.responses_batch_size,
        do_sample=True,
        temperature=args.responses_temperature,
        top_p=args.responses_top_p,
        seed=seed,
        desc=desc,
    )


def _check_reference(policy, prompts: list, preference_record: PrivacyRecord | None, args: SelfPlayConfig):
    """π_ref must not have seen the private rows behind ℓ̂: neither these prompts nor (by its sketch) the
    preference model's training prompts. The run's privacy is the preference model's, so ℓ̂'s ε decides."""
    return check_lineage(
        [("reference (π¹ = π_ref)", ModelLineage.of_model(policy))],
        datasets.Dataset.from_dict({"prompt": list(prompts)}),
        private=preference_record is not None and preference_record.epsilon is not None,
        override=args.override_lineage_guard,
        override_field="override_lineage_guard",
        context="iterative Square-χPO",
        extra_prompt_hashes=(preference_record.prompt_sketch if preference_record is not None else None) or (),
    )


def _reference_pairs(policy, tokenizer, prompts: list, args: SelfPlayConfig) -> datasets.Dataset:
    """Line 8: D_x, two samples a, b from π_ref per prompt (the seeds differ so a ≠ b in distribution)."""
    first = _sample(policy, tokenizer, prompts, args, args.seed * 1000 + 1, "D_x: a ~ π_ref")
    second = _sample(policy, tokenizer, prompts, args, args.seed * 1000 + 2, "D_x: b ~ π_ref")
    return datasets.Dataset.from_dict(
        {
            "prompt": list(prompts),
            "chosen": _as_completion(prompts, first),
            "rejected": _as_completion(prompts, second),
        }
    )


def iterative_square_chipo(
    policy: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: list,
    preference_model: PreferenceModel,
    args: SelfPlayConfig,
    *,
    reference_name: str,
    preference_record: PrivacyRecord | None = None,
) -> Path:
    """Run Zhou et al. 2025 (Square-χPO), Algorithm 3's policy optimisation from ``policy`` = π_ref; returns the output
    folder.

    ``reference_name`` is how the mixture names π¹ (a path or ``embedded``); ``preference_record`` is
    the preference model's privacy record (:func:`~squarechipo.privacy.provenance.record.read_privacy_record`),
    whose label privacy the output inherits.
    """
    # Long: the loop is Zhou et al. 2025 (Square-χPO), Algorithm 3, lines 8–13, in order; its state (samples,
    # log-probs, iterates) is local.
    if len(prompts) == 0:
        raise ValueError("prompts is empty: self-play needs the prompts x of D_x.")
    out = Path(args.output_dir)
    if (out / MIXTURE_FILE).exists() or (out / PRIVACY_FILE).exists():
        raise FileExistsError(f"{out} already holds a self-play output; choose a new output_dir.")
    lineage = _check_reference(policy, prompts, preference_record, args)
    collator = preference_collator(tokenizer, max_length=args.max_length, truncation_mode=args.truncation_mode)
    pairs = _reference_pairs(policy, tokenizer, prompts, args)
    first, second = (pairs[c] for c in ("chosen", "rejected"))
    rows = tokenize_preferences(
        rows_without_labels(pairs, "two samples of the reference policy per prompt"), tokenizer
    )
    ref_logps = model_logps(policy, rows, collator, args.responses_batch_size, "log π_ref(a|x), log π_ref(b|x)")
    members = [reference_name]
    targets_summary = []
    for t in range(1, args.updates + 1):
        opponent = _sample(policy, tokenizer, prompts, args, args.seed * 1000 + 10 + t, f"round {t}: b̃ ~ π^{t}")
        target = preference_model.preference(prompts, first, opponent) - preference_model.preference(
            prompts, second, opponent
        )
        targets_summary.append(float(np.abs(target).mean()))
        # π¹ = π_ref: its log-probs were just computed; later iterates need a pass of their own.
        previous = (
            ref_logps
            if t == 1
            else model_logps(policy, rows, collator, args.responses_batch_size, f"round {t}: log π^{t}")
        )
        iterate_dir = out / f"iterate_{t + 1}"
        trainer = SelfPlayTrainer(
            policy,
            args=dataclasses.replace(args, output_dir=str(iterate_dir), push_to_hub=False),
            train_dataset=self_play_dataset(pairs, ref_logps, previous, target),
            processing_class=tokenizer,
        )
        trainer.train()
        policy = trainer.accelerator.unwrap_model(trainer.model)
        if args.output_policy == "mixture" or t < args.updates:
            trainer.save_model(str(iterate_dir))
            members.append(iterate_dir.name)
        else:
            trainer.save_model(str(out))
        del trainer
    details = {
        "algorithm": "iterative Square-χPO (Zhou et al. 2025 (Square-χPO), Algorithm 3)",
        "beta": args.beta,
        "eta": args.eta,
        "iterations": args.iterations,
        "output_policy": args.output_policy,
        "num_prompts": len(prompts),
        "mean_abs_target_per_round": targets_summary,
        **({"members": members} if args.output_policy == "mixture" else {}),
    }
    record = inherited_record(preference_record, "self_play", details, lineage)
    if PartialState().is_main_process:
        _save_output(out, record, members, tokenizer, args.output_policy == "mixture")
    PartialState().wait_for_everyone()
    return out


def inherited_record(
    preference_record: PrivacyRecord | None, stage: str, details: dict, lineage: LineageReport
) -> PrivacyRecord:
    """The self-play output's record: the preference model's label privacy (self-play reads only prompts
    and samples, so it is post-processing of ℓ̂: no extra ε), this run's details and its π_ref lineage."""
    source = preference_record or PrivacyRecord(stage="none")
    return PrivacyRecord.build(
        {
            **{key: getattr(source, key) for key in _LABEL_PRIVACY_FIELDS},
            "debiasing_flip_rate": source.debiasing_flip_rate or 0.0,
            "privacy_source": f"preference model ({source.privacy_source or 'no record'})",
            "stage": stage,
            **details,
            **lineage.record(),
        }
    )


#: What the guarantee of a post-processed model rests on: the label privacy of the model it came from.
_LABEL_PRIVACY_FIELDS = (
    "epsilon",
    "debiasing",
    "privacy_override",
    "mechanism",
    "corruption_rate",
    "adversary",
    "order",
    "ledger",
    "dataset_fingerprint",
    "prompt_sketch",
)


def _save_output(out: Path, record: PrivacyRecord, members: list[str], tokenizer, mixture: bool) -> None:
    out.mkdir(parents=True, exist_ok=True)
    if mixture:
        (out / MIXTURE_FILE).write_text(
            json.dumps({"members": members, "weights": "uniform", "algorithm": record.details["algorithm"]}, indent=2),
            encoding="utf-8",
        )
        tokenizer.save_pretrained(str(out))
    intro = (
        "This policy was aligned with iterative Square-χPO (Zhou et al. 2025 (Square-χPO), Algorithm 3) against a "
        "pairwise "
        "preference model trained on labels released through the mechanism below."
    )
    write_privacy_record(out, record, intro=intro)
    for member in members[1:]:  # each member's record names its own weights
        write_privacy_record(out / member, record, intro=intro)


def _as_completion(prompts: list, responses: list[str]) -> list:
    """Responses in the prompts' format: assistant messages for conversational prompts, strings otherwise."""
    if prompts and not isinstance(prompts[0], str):
        return [[{"role": "assistant", "content": r}] for r in responses]
    return list(responses)
