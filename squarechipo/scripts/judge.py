"""LLM-as-judge win rate of a policy against a baseline (Zhou et al. 2025 (Square-χPO), App. E).

    python eval/judge.py --policy outputs/square_chipo --baseline outputs/sft \
        --dataset data/finance_preference_conversational --split test --out outputs/eval/square_chipo
    python eval/judge.py --config my_eval.yaml   # the same fields as YAML keys (TrlParser)

Judges:

- ``--judge reward-model --judge-model PATH``: any sequence-classification reward model (a TRL
  ``RewardTrainer`` output, ``PrivateRewardTrainer`` with ``model_type: reward``, the finance gold
  judge of ``recipes/gold_judge.py``, Skywork-Reward, ArmoRM ...); position-free by construction;
- ``--judge local`` (default): a transformers causal LM (default: the embedded SmolLM2) comparing
  next-token probabilities of "A" and "B";
- ``--judge openai``: any OpenAI-compatible endpoint (with ``--judge-logprobs`` where the server
  returns logprobs, e.g. vLLM, llama.cpp server, OpenAI):

    --judge openai --judge-base-url http://localhost:8000/v1 --judge-model meta-llama/Llama-3.1-70B-Instruct   # vLLM
    --judge openai --judge-base-url http://localhost:11434/v1 --judge-model llama3:70b                       # Ollama

Every pair is judged in both orders. Judges that report log-odds use the soft rule (the mean
log-odds over the two orders, which cancels a position prior, with ``--tie-band``); others the
hard rule (a win needs both orders to agree). Before judging, the judge is scored on gold pairs
(the split's chosen vs rejected) and its hard and soft accuracy are reported beside the win rate
(``--calibration-pairs 0`` skips it).
"""

from __future__ import annotations

import sys
from pathlib import Path

from trl import TrlParser

from squarechipo.data import load_preference_dataset
from squarechipo.evaluation.config import WinRateConfig
from squarechipo.evaluation.pipeline import GenerationSettings, evaluate_win_rate
from squarechipo.evaluation.report import format_line
from squarechipo.evaluation.same_model import same_model_notes
from squarechipo.judge.registry import JUDGES
from squarechipo.judge.templates import FINANCE_TEMPLATE, GENERAL_TEMPLATE, TEMPLATES, JudgeTemplate
from squarechipo.models.runtime import torch_dtype
from squarechipo.privacy.door import require_released_or_public
from squarechipo.scripts._common import setup_logging


def _template(args, test) -> JudgeTemplate:
    if args.template_file:
        return JudgeTemplate.from_file(args.template_file)
    if args.template != "auto":
        return TEMPLATES[args.template]
    from squarechipo.data.finance import CATEGORIES

    finance = "category" in test.column_names and set(test["category"]) <= {c.name for c in CATEGORIES}
    return FINANCE_TEMPLATE if finance else GENERAL_TEMPLATE


def build_judge(args: WinRateConfig, template: JudgeTemplate):
    """The judge ``--judge`` names (:data:`squarechipo.judge.registry.JUDGES`), built from the run's options."""
    judge = JUDGES[args.judge].load()
    if args.judge == "reward-model":
        return judge(args.judge_model, batch_size=args.judge_batch_size, dtype=torch_dtype(args.dtype))
    if args.judge == "local":
        return judge(
            args.judge_model or "embedded", template, batch_size=args.judge_batch_size, dtype=torch_dtype(args.dtype)
        )
    return judge(
        args.judge_base_url,
        args.judge_model,
        template,
        api_key_env=args.judge_api_key_env,
        max_concurrency=args.judge_concurrency,
        timeout=args.judge_timeout,
        max_retries=args.judge_retries,
        cache_path=args.judge_cache or Path(args.out) / "judge_cache.sqlite",
        logprobs=args.judge_logprobs,
    )


def make_parser() -> TrlParser:
    return TrlParser((WinRateConfig,), prog="squarechipo judge")


def main(argv: list[str] | None = None) -> dict:
    """Flags or ``--config eval.yaml`` (the fields of :class:`WinRateConfig`)."""
    setup_logging()
    (args,) = make_parser().parse_args_and_config(argv)
    for note in same_model_notes(args.policy, args.baseline):
        print(f"squarechipo judge: note: {note}", file=sys.stderr)
    test = load_preference_dataset(args.dataset_name, split=args.dataset_test_split)
    if args.calibration_pairs != 0:  # calibration reads the split's labels and writes them to calibration.jsonl
        split = args.dataset_test_split
        require_released_or_public(
            test,
            split=split,
            public=split in (args.public_splits or ()),
            reader="the judge's calibration (calibration.jsonl)",
            declare=f"--public_splits {split} (or --calibration-pairs 0 to skip calibration)",
        )
    template = _template(args, test)
    judge = build_judge(args, template)
    generation = GenerationSettings(
        max_new_tokens=args.max_new_tokens,
        batch_size=args.batch_size,
        do_sample=args.do_sample,
        temperature=args.temperature,
        top_p=args.top_p,
        seed=args.seed,
        dtype=args.dtype,
    )
    result = evaluate_win_rate(
        args.policy,
        args.baseline,
        test,
        judge,
        args.out,
        generation=generation,
        max_prompts=args.max_eval_samples,
        calibration_pairs=args.calibration_pairs,
        tie_band=args.tie_band,
        labels_public=args.dataset_test_split in (args.public_splits or ()),
        label={"setting": args.setting, "method": args.method or Path(args.policy).name, "seed": str(args.seed)},
    )
    print(f"Win rate of {args.policy} vs {args.baseline}: {format_line(result.summary)}")
    print(f"Report: {Path(args.out).resolve() / 'report.md'} (chart win_rates.png, judgments.jsonl)")
    return result.summary


if __name__ == "__main__":
    main()
