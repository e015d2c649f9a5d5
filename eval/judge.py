"""LLM-as-judge win rate of a policy against a baseline (003 App. E).

    python eval/judge.py --policy outputs/square_chipo --baseline outputs/sft \
        --dataset data/finance_preference_conversational --split test --out outputs/eval/square_chipo

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

import argparse
import logging
from pathlib import Path

from squarechipo.data import load_preference_dataset
from squarechipo.evaluation.pipeline import GenerationSettings, evaluate_win_rate
from squarechipo.evaluation.report import format_line
from squarechipo.judge.templates import FINANCE_TEMPLATE, GENERAL_TEMPLATE, TEMPLATES, JudgeTemplate


def _template(args, test) -> JudgeTemplate:
    if args.template_file:
        import yaml

        spec = yaml.safe_load(Path(args.template_file).read_text())
        return JudgeTemplate(
            name=spec.get("name", Path(args.template_file).stem), system=spec["system"], user=spec["user"]
        )
    if args.template != "auto":
        return TEMPLATES[args.template]
    from data_gen.finance import CATEGORIES

    finance = "category" in test.column_names and set(test["category"]) <= {c.name for c in CATEGORIES}
    return FINANCE_TEMPLATE if finance else GENERAL_TEMPLATE


def build_judge(args, template: JudgeTemplate):
    if args.judge == "reward-model":
        from squarechipo.judge.reward_model import RewardModelJudge

        if not args.judge_model:
            raise SystemExit(
                "--judge reward-model needs --judge-model PATH (a sequence-classification reward model, "
                "e.g. outputs/gold_judge from recipes/gold_judge.py)"
            )
        return RewardModelJudge(args.judge_model, batch_size=args.judge_batch_size)
    if args.judge == "local":
        from squarechipo.judge.local import TransformersJudge

        return TransformersJudge(args.judge_model or "embedded", template, batch_size=args.judge_batch_size)
    from squarechipo.judge.openai_compatible import OpenAICompatibleJudge

    if not args.judge_base_url or not args.judge_model:
        raise SystemExit("--judge openai needs --judge-base-url and --judge-model")
    return OpenAICompatibleJudge(
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


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="Win rate of a policy vs a baseline, judged by an LLM.")
    p.add_argument("--policy", required=True, help="aligned model: path or hub id ('embedded' works)")
    p.add_argument("--baseline", required=True, help="baseline model, e.g. the SFT policy")
    p.add_argument("--dataset", default="data/finance_preference_conversational")
    p.add_argument("--split", default="test")
    p.add_argument("--max-prompts", type=int, default=None)
    p.add_argument("--out", required=True)
    g = p.add_argument_group("generation")
    g.add_argument("--max-new-tokens", type=int, default=128)
    g.add_argument("--batch-size", type=int, default=8)
    g.add_argument("--do-sample", action="store_true", help="sample (default: greedy)")
    g.add_argument("--temperature", type=float, default=0.7)
    g.add_argument("--top-p", type=float, default=0.95)
    g.add_argument("--seed", type=int, default=0)
    j = p.add_argument_group("judge")
    j.add_argument("--judge", choices=["local", "reward-model", "openai"], default="local")
    j.add_argument(
        "--judge-model",
        default=None,
        help="local: model path/id (default: embedded); reward-model: its folder or hub id; openai: model name",
    )
    j.add_argument(
        "--tie-band",
        type=float,
        default=0.0,
        help="soft rule: |mean log-odds| at or below this is a tie (log-odds units; rewards for reward-model)",
    )
    j.add_argument(
        "--judge-logprobs",
        action="store_true",
        help="openai: ask for top logprobs of the answer letter, so the soft rule applies",
    )
    j.add_argument("--judge-base-url", default=None, help="OpenAI-compatible base URL, e.g. http://localhost:8000/v1")
    j.add_argument("--judge-api-key-env", default="OPENAI_API_KEY", help="environment variable holding the API key")
    j.add_argument("--judge-concurrency", type=int, default=4)
    j.add_argument("--judge-timeout", type=float, default=60.0)
    j.add_argument("--judge-retries", type=int, default=4)
    j.add_argument("--judge-cache", default=None, help="SQLite cache (default: <out>/judge_cache.sqlite)")
    j.add_argument("--judge-batch-size", type=int, default=8, help="local and reward-model judge batch size")
    j.add_argument("--template", choices=["auto", *TEMPLATES], default="auto")
    j.add_argument(
        "--template-file", default=None, help="YAML with name, system, user ({prompt}, {response_a}, {response_b})"
    )
    j.add_argument("--calibration-pairs", type=int, default=64, help="gold pairs to score the judge on (0 = skip)")
    r = p.add_argument_group("labels for aggregation")
    r.add_argument("--setting", default="all", help="e.g. CTL or LTC")
    r.add_argument("--method", default=None, help="e.g. square_chipo (default: the policy folder name)")
    return p


def main(argv: list[str] | None = None) -> dict:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = make_parser().parse_args(argv)
    test = load_preference_dataset(args.dataset, split=args.split)
    template = _template(args, test)
    judge = build_judge(args, template)
    generation = GenerationSettings(
        args.max_new_tokens, args.batch_size, args.do_sample, args.temperature, args.top_p, args.seed
    )
    result = evaluate_win_rate(
        args.policy,
        args.baseline,
        test,
        judge,
        args.out,
        generation=generation,
        max_prompts=args.max_prompts,
        calibration_pairs=args.calibration_pairs,
        tie_band=args.tie_band,
        label={"setting": args.setting, "method": args.method or Path(args.policy).name, "seed": str(args.seed)},
    )
    print(f"Win rate of {args.policy} vs {args.baseline}: {format_line(result.summary)}")
    print(f"Report: {Path(args.out).resolve() / 'report.md'} (chart win_rates.png, judgments.jsonl)")
    return result.summary


if __name__ == "__main__":
    main()
