"""Iterative Square-χPO for causal LMs (003 Algorithm 3, lines 8–13) around :class:`SelfPlayTrainer`.

1. D_x: for each prompt, two responses a, b sampled from π_ref (line 8); log π_ref(a|x), log π_ref(b|x)
   are computed once.
2. For t = 1, 2, …: sample one b̃ ~ πᵗ(x) per prompt, score r̂ᵗ(x, ·) = ℓ̂(x, ·, b̃) with the
   preference model, record log πᵗ(a|x), log πᵗ(b|x), and fit π^{t+1} from πᵗ by eq. (11).
3. Output (``output_policy``): ``mixture`` (default) — the uniform mixture of π¹..π^T that 003
   returns and for which Theorem 4.4 bounds the duality gap; on a non-transitive preference the
   iterates cycle and the last one carries no guarantee (the lab shows its gap staying high). The
   folder then holds ``mixture.json`` and the iterates; generation samples one iterate per prompt
   (:func:`squarechipo.evaluation.generation.generate_responses`). ``last`` — π^{T+1} as a plain
   model folder, one more update.

The labels were privatized before the preference model was trained; self-play itself reads only
prompts and model samples, so the privacy guarantee is the preference model's (its ledger is carried
into the output's ``squarechipo_privacy.json``: post-processing, no extra ε).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import shutil
from pathlib import Path

import datasets
import numpy as np
from accelerate import PartialState
from transformers import PreTrainedModel, PreTrainedTokenizerBase
from trl.trainer.dpo_trainer import DataCollatorForPreference

from squarechipo.evaluation.generation import MIXTURE_FILE, generate_with_model
from squarechipo.privacy.lineage import PRIVACY_FILE, ModelLineage, check_lineage
from squarechipo.reward.pairs import PreferenceModel
from squarechipo.select.scoring import model_logps, tokenize_preferences
from squarechipo.trainer.self_play import SelfPlayConfig, SelfPlayTrainer
from squarechipo.trainer.trainer import write_privacy_record

__all__ = ["self_play_dataset", "iterative_square_chipo"]

logger = logging.getLogger("squarechipo")


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


def iterative_square_chipo(
    policy: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: list,
    preference_model: PreferenceModel,
    args: SelfPlayConfig,
    *,
    reference_name: str,
    preference_record: dict | None = None,
) -> Path:
    """Run 003 Algorithm 3's policy optimisation from ``policy`` = π_ref; returns the output folder.

    ``reference_name`` is how the mixture names π¹ (a path or ``embedded``); ``preference_record`` is
    the preference model's privacy record (its ``squarechipo_privacy.json``), carried into the output.
    """
    if len(prompts) == 0:
        raise ValueError("prompts is empty: self-play needs the prompts x of D_x.")
    state = PartialState()
    out = Path(args.output_dir)
    if (out / MIXTURE_FILE).exists() or (out / PRIVACY_FILE).exists():
        raise FileExistsError(f"{out} already holds a self-play output; choose a new output_dir.")
    # π_ref must not have seen the private rows behind ℓ̂: neither these prompts nor (by its sketch) the
    # preference model's training prompts. The run's privacy is the preference model's, so ℓ̂'s ε decides.
    lineage = check_lineage(
        [("reference (π¹ = π_ref)", ModelLineage.of_model(policy))],
        datasets.Dataset.from_dict({"prompt": list(prompts)}),
        private=(preference_record or {}).get("epsilon") is not None,
        override=args.override_lineage_guard,
        override_field="override_lineage_guard",
        context="iterative Square-χPO",
        extra_prompt_hashes=(preference_record or {}).get("prompt_sketch") or (),
    )
    collator = DataCollatorForPreference(
        pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id,
        max_length=args.max_length,
        truncation_mode=args.truncation_mode,
    )
    # Line 8: D_x, two samples from π_ref per prompt (seeds differ so a ≠ b in distribution draws).
    first = _sample(policy, tokenizer, prompts, args, args.seed * 1000 + 1, "D_x: a ~ π_ref")
    second = _sample(policy, tokenizer, prompts, args, args.seed * 1000 + 2, "D_x: b ~ π_ref")
    pairs = datasets.Dataset.from_dict(
        {
            "prompt": list(prompts),
            "chosen": _as_completion(prompts, first),
            "rejected": _as_completion(prompts, second),
        }
    )
    rows = tokenize_preferences(pairs, tokenizer)
    ref_logps = model_logps(policy, rows, collator, args.responses_batch_size, "log π_ref(a|x), log π_ref(b|x)")
    members = [reference_name]
    targets_summary = []
    for t in range(1, args.updates + 1):
        opponent = _sample(policy, tokenizer, prompts, args, args.seed * 1000 + 10 + t, f"round {t}: b̃ ~ π^{t}")
        r_first = preference_model.preference(prompts, first, opponent)
        r_second = preference_model.preference(prompts, second, opponent)
        target = r_first - r_second
        targets_summary.append(float(np.abs(target).mean()))
        # π¹ = π_ref: its log-probs were just computed; later iterates need a pass of their own.
        previous = (
            ref_logps
            if t == 1
            else model_logps(policy, rows, collator, args.responses_batch_size, f"round {t}: log π^{t}")
        )
        iterate_dir = out / f"iterate_{t + 1}"
        round_args = dataclasses.replace(args, output_dir=str(iterate_dir), push_to_hub=False)
        trainer = SelfPlayTrainer(
            policy,
            args=round_args,
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
    record = {
        "algorithm": "iterative Square-χPO (003 Algorithm 3)",
        "beta": args.beta,
        "eta": args.eta,
        "iterations": args.iterations,
        "output_policy": args.output_policy,
        "num_prompts": len(prompts),
        "mean_abs_target_per_round": targets_summary,
        **_privacy_fields(preference_record),
        **lineage.record(),
    }
    if state.is_main_process:
        out.mkdir(parents=True, exist_ok=True)
        if args.output_policy == "mixture":
            record["members"] = members
            (out / MIXTURE_FILE).write_text(
                json.dumps({"members": members, "weights": "uniform", "algorithm": record["algorithm"]}, indent=2),
                encoding="utf-8",
            )
            tokenizer.save_pretrained(str(out))
        intro = (
            "This policy was aligned with iterative Square-χPO (003 Algorithm 3) against a pairwise preference "
            "model trained on labels released through the mechanism below."
        )
        write_privacy_record(str(out), record, intro=intro)
        for member in members[1:]:
            shutil.copy(out / PRIVACY_FILE, out / member / PRIVACY_FILE)
    state.wait_for_everyone()
    return out


def _as_completion(prompts: list, responses: list[str]) -> list:
    """Responses in the prompts' format: assistant messages for conversational prompts, strings otherwise."""
    if prompts and not isinstance(prompts[0], str):
        return [[{"role": "assistant", "content": r}] for r in responses]
    return list(responses)


def _privacy_fields(preference_record: dict | None) -> dict:
    """The label-privacy fields of the preference model's record (what the guarantee rests on)."""
    keys = (
        "epsilon",
        "debiasing_flip_rate",
        "debiasing",
        "privacy_source",
        "privacy_override",
        "mechanism",
        "corruption_rate",
        "adversary",
        "order",
        "ledger",
        "dataset_fingerprint",
        "prompt_sketch",
    )
    record = copy.deepcopy(preference_record or {})
    fields = {key: record.get(key) for key in keys}
    fields["debiasing_flip_rate"] = fields["debiasing_flip_rate"] or 0.0
    fields["privacy_source"] = f"preference model ({fields['privacy_source'] or 'no record'})"
    return fields
