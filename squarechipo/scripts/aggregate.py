"""Aggregate several eval/judge.py runs (seeds) into mean ± std, in the form of Zhou et al. 2025 (Square-χPO)'s Table
1.

python eval/aggregate.py --out outputs/eval/table outputs/eval/*/seed*
"""

from __future__ import annotations

import argparse

from squarechipo.evaluation.report import aggregate_runs


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(prog="squarechipo aggregate", description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="output folders of eval/judge.py (each with summary.json)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    text = aggregate_runs(args.runs, args.out)
    print(text)
    return text


if __name__ == "__main__":
    main()
