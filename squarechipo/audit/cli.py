"""python -m squarechipo.audit mechanisms [--epsilon 1.0] [--samples 10000000] [--out DIR] [--seed N]
python -m squarechipo.audit training --config TRAIN.yaml [--canaries 300] [--leak sft]
    [--canary-text random|rows] [--alpha 0.05] [--out DIR] [--seed N]

``mechanisms``: every label mechanism and the exponential-mechanism selector on worst-case neighbouring inputs;
ε is bounded from below with Clopper–Pearson intervals at confidence 1 − 1e-6 and reported beside the claimed ε
(Markdown and JSON in ``--out``). A planted broken mechanism must be caught.
``training``: canaries with random labels planted in a training run (:mod:`squarechipo.audit.canaries`); the
bound holds at confidence 1 − ``--alpha``, so an honest run is refuted with probability at most ``--alpha``.
Exit status 1 if any verdict fails.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np

from squarechipo.audit.canaries import CANARY_TEXTS, GUESS_FRACTIONS
from squarechipo.audit.mechanisms import ALPHA, audit_case, mechanism_cases


def _markdown(results, epsilon: float, seed: int) -> str:
    lines = [
        f"# Mechanism audit at ε = {epsilon:g}",
        "",
        f"Empirical lower bounds on ε at confidence 1 − {ALPHA:g} (Clopper–Pearson, worst-case neighbours and "
        f"event fixed in advance; seed {seed}). A bound above the claimed ε refutes the claim.",
        "",
        "| mechanism | claimed ε | empirical lower bound | runs per input | neighbours | event | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.name} | {r.claimed_epsilon:g} | {r.lower_bound:.4f} | {r.samples:,} | {r.neighbours} | {r.event} "
            f"| {r.verdict} |"
        )
    return "\n".join(lines) + "\n"


def _training(args) -> int:
    from squarechipo.audit.training import audit_training_run

    audit = audit_training_run(
        args.config,
        args.out,
        canaries=args.canaries,
        leak=args.leak,
        canary_text=args.canary_text,
        seed=args.seed,
        alpha=args.alpha,
    )
    record = {**asdict(audit), "guess_fractions": GUESS_FRACTIONS, "bounds": audit.bounds()}
    record.update(lower_bound=audit.lower_bound, verdict=audit.verdict, leak=args.leak, canary_text=args.canary_text)
    out = Path(args.out)
    (out / "training_audit.json").write_text(json.dumps(record, indent=2), encoding="utf-8")
    summary = (
        f"{audit.canaries} canaries planted ({args.canary_text} text, leak: {args.leak or 'none'}); empirical ε lower "
        f"bound {audit.lower_bound:.3f} at confidence {1 - audit.alpha:g} (Bonferroni over {len(audit.guesses)} "
        f"abstention levels); claimed ε {audit.claimed_epsilon}: {audit.verdict}"
    )
    table = ["| guessed (most confident) | right | ε lower bound |", "|---|---|---|"]
    for correct, guesses, bound in zip(audit.correct, audit.guesses, audit.bounds()):
        print(f"  {correct}/{guesses} right when guessing the {guesses} most confident canaries: ε ≥ {bound:.3f}")
        table.append(f"| {guesses} | {correct} | {bound:.3f} |")
    print(summary)
    report = [f"# Training-run audit: {args.config}", "", summary, "", *table]
    (out / "training_audit.md").write_text("\n".join(report) + "\n", encoding="utf-8")
    return 0 if audit.verdict != "REFUTED: the run leaks more than ε" or args.leak else 1


def _parser() -> argparse.ArgumentParser:
    """One sub-command per audit, so an option of the other audit is refused rather than silently ignored."""
    description = "Empirical lower bounds on ε for the label mechanisms and for training runs."
    parser = argparse.ArgumentParser(prog="squarechipo audit", description=description)
    audits = parser.add_subparsers(dest="audit", required=True, metavar="{mechanisms,training}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--seed", type=int, default=0)
    common.add_argument("--out", default="outputs/audit")
    mechanisms = audits.add_parser("mechanisms", parents=[common], help="every label mechanism and the selector")
    mechanisms.add_argument("--epsilon", type=float, default=1.0, help="the ε every mechanism claims")
    mechanisms.add_argument("--samples", type=int, default=10_000_000, help="runs per input")
    training = audits.add_parser("training", parents=[common], help="canaries planted in a training run")
    training.add_argument("--config", required=True, help="a recipes/train.py YAML config")
    training.add_argument("--canaries", type=int, default=300, help="canary pairs to plant")
    training.add_argument(
        "--canary-text",
        choices=CANARY_TEXTS,
        default="random",
        help="random word strings as the canaries' responses (the easiest to detect), or the rows' own",
    )
    training.add_argument("--leak", choices=["sft"], default=None, help="reproduce the SFT leak")
    training.add_argument(
        "--alpha",
        type=float,
        default=0.05,
        help="the bound holds at confidence 1 - alpha; an honest run is refuted with at most this chance",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    for name in ("samples", "canaries"):
        if getattr(args, name, 1) < 1:
            parser.error(f"--{name} must be a positive number (got {getattr(args, name)}); e.g. --{name} 1000")
    if args.audit == "training":
        if not 0 < args.alpha < 1:
            parser.error(f"--alpha must be in (0, 1) (got {args.alpha}); e.g. --alpha 0.05 for a bound at 95%")
        return _training(args)
    rng = np.random.default_rng(args.seed)
    results = [audit_case(case, args.samples, rng) for case in mechanism_cases(args.epsilon)]
    text = _markdown(results, args.epsilon, args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "mechanisms.md").write_text(text, encoding="utf-8")
    records = [{**asdict(r), "verdict": r.verdict} for r in results]
    (out / "mechanisms.json").write_text(json.dumps(records, indent=2), encoding="utf-8")
    print(text)
    print(f"Report: {(out / 'mechanisms.md').resolve()}")
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
