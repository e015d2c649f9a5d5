"""``squarechipo gold-report``: a policy against the SFT policy under a gold reward, in plain words
(:mod:`squarechipo.evaluation.gold_report` computes it)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from squarechipo.evaluation.gold_report import format_summary, gold_comparison
from squarechipo.evaluation.same_model import same_model_notes
from squarechipo.models.runtime import WEIGHT_DTYPES, default_dtype

__all__ = ["main"]

DESCRIPTION = "A policy's gold-reward gain and gold expected win rate over the SFT policy, with 95% intervals."


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="squarechipo gold-report",
        description=DESCRIPTION,
    )
    parser.add_argument("--policy", required=True, help="the aligned policy's folder")
    parser.add_argument("--sft", required=True, help="the SFT policy's folder (the baseline and π_ref)")
    parser.add_argument("--gold", required=True, help="a one-output reward model folder (e.g. recipes/gold_judge.py)")
    parser.add_argument("--dataset_name", required=True, help="preference data whose split holds the test prompts")
    parser.add_argument("--dataset_test_split", default="test", help="the split whose prompts are answered")
    parser.add_argument("--max_eval_samples", type=int, default=128, help="test prompts (default 128)")
    parser.add_argument(
        "--samples",
        type=int,
        default=1,
        help="samples per prompt and policy (default 1: for a fixed number of samples, more prompts give the "
        "narrower interval)",
    )
    parser.add_argument(
        "--generation_batch_size",
        type=int,
        default=64,
        help="prompts answered at once (default 64; lower on a small GPU)",
    )
    parser.add_argument(
        "--max_new_tokens",
        type=int,
        default=128,
        help="tokens generated per response (default 128; fewer answers sooner and cuts responses short, so the "
        "figures are those of shorter answers: recorded as max_new_tokens)",
    )
    parser.add_argument(
        "--dtype",
        choices=WEIGHT_DTYPES,
        default=None,
        help="the policies' and the judge's weight dtype (default: bfloat16 where this machine runs it natively, "
        "float32 on a CPU without bf16 kernels, where bf16 is emulated; `squarechipo env --fast-dtype` names it)",
    )
    parser.add_argument("--out", default=None, help="write the figures to this JSON file")
    parser.add_argument(
        "--skip_generation_free",
        action="store_true",
        help="leave out the measures that need no sample of the policy (implicit-reward accuracy on the test pairs, "
        "pool value): three log-prob passes and two scoring passes fewer; the printed lines do not use them",
    )
    parser.add_argument(
        "--public_splits",
        nargs="*",
        default=[],
        help="splits whose labels are public (gold pairs): the implicit-reward "
        "accuracy reads the test split's labels, which must be released or public",
    )
    return parser


def main(argv: list[str] | None = None) -> dict:
    parser = _parser()
    args = parser.parse_args(argv)
    _check(parser, args)
    for note in same_model_notes(args.policy, args.sft):
        print(f"squarechipo gold-report: note: {note}", file=sys.stderr)
    summary = gold_comparison(
        args.policy,
        args.sft,
        args.gold,
        args.dataset_name,
        split=args.dataset_test_split,
        prompts=args.max_eval_samples,
        samples=args.samples,
        batch_size=args.generation_batch_size,
        labels_public=args.dataset_test_split in args.public_splits,
        generation_free=not args.skip_generation_free,
        dtype=default_dtype(args.dtype, "dtype"),
        max_new_tokens=args.max_new_tokens,
    )
    for line in format_summary(summary):
        print(line)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(summary, indent=1))
    return summary


def _check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Sizes of at least 1 and model folders that exist, or the parser's one-line error naming the flag."""
    for name in ("max_eval_samples", "samples", "generation_batch_size", "max_new_tokens"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} {getattr(args, name)}: must be at least 1")
    for name in ("policy", "sft", "gold"):
        if not Path(getattr(args, name)).is_dir():
            parser.error(f"--{name} {getattr(args, name)}: no such model folder")


if __name__ == "__main__":
    main()
