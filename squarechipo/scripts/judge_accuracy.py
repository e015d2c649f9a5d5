"""Gold accuracy of judges on every gold pair of a split, under the hard and the soft rule, side by side.

    python eval/judge_accuracy.py --dataset data/finance_preference_conversational --split test \
        --local embedded --reward-model outputs/gold_judge [--server http://127.0.0.1:8080/v1 --server-model smollm2]

Each judge sees every (chosen, rejected) pair in both orders. The hard rule counts a pair right when
both orders pick ``chosen``; the soft rule when the mean log-odds over the two orders favour it by
more than ``--tie-band`` (:mod:`squarechipo.judge.stats`). Intervals are 95% Wilson (scipy).
Writes a Markdown table and JSON to ``--out`` when given.
"""

from __future__ import annotations

import json
from pathlib import Path

from trl import TrlParser

from squarechipo.data import load_preference_dataset
from squarechipo.evaluation.config import JudgeAccuracyConfig
from squarechipo.evaluation.pipeline import calibrate_judge
from squarechipo.evaluation.report import format_interval, format_percent
from squarechipo.judge.templates import TEMPLATES
from squarechipo.privacy.door import require_released_or_public


def _judges(args):
    template = TEMPLATES[args.template]
    if args.local:
        from squarechipo.judge.local import TransformersJudge

        yield TransformersJudge(args.local, template, batch_size=args.batch_size)
    if args.server:
        from squarechipo.judge.openai_compatible import OpenAICompatibleJudge

        yield OpenAICompatibleJudge(
            args.server,
            args.server_model,
            template,
            max_tokens=1,
            logprobs=True,
            max_concurrency=args.server_concurrency,
            api_key_env=None,
        )
    if args.reward_model:
        from squarechipo.judge.reward_model import RewardModelJudge

        yield RewardModelJudge(args.reward_model, batch_size=args.batch_size)


def main(argv: list[str] | None = None) -> list[dict]:
    """Flags or ``--config x.yaml`` (the fields of :class:`JudgeAccuracyConfig`)."""
    (args,) = TrlParser((JudgeAccuracyConfig,), prog="squarechipo judge-accuracy").parse_args_and_config(argv)
    gold = load_preference_dataset(args.dataset_name, split=args.dataset_test_split)
    split = args.dataset_test_split
    require_released_or_public(
        gold,
        split=split,
        public=split in (args.public_splits or ()),
        reader="judge accuracy on gold pairs",
        declare=f"--public_splits {split}",
    )
    results = []
    for judge in _judges(args):
        cal = calibrate_judge(
            judge,
            gold,
            args.max_eval_samples,
            tie_band=args.tie_band,
            labels_public=split in (args.public_splits or ()),
        )
        results.append({"judge": judge.name, **cal})
    lines = [
        f"Gold accuracy on {results[0]['n_pairs']} pairs of {args.dataset_name}:{args.dataset_test_split} "
        f"(95% Wilson intervals; soft tie band {args.tie_band:g})",
        "",
        "| judge | hard rule | soft rule | single judgment | position bias |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        soft = (
            f"{format_percent(r['soft_accuracy'])} {format_interval(r['soft_accuracy_ci'])}"
            if r["soft_accuracy"] is not None
            else "n/a"
        )
        lines.append(
            f"| {r['judge']} | {format_percent(r['hard_accuracy'])} {format_interval(r['hard_accuracy_ci'])} | "
            f"{soft} | {format_percent(r['accuracy'])} | {format_percent(r['position_bias_rate'])} |"
        )
    text = "\n".join(lines)
    print(text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "judge_accuracy.md").write_text(text + "\n", encoding="utf-8")
        (out / "judge_accuracy.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
    return results


if __name__ == "__main__":
    main()
