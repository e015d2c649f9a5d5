"""``squarechipo data finance``: write the finance_preference datasets (built by
:mod:`squarechipo.data.finance`)."""

from __future__ import annotations

import argparse

import datasets

from squarechipo.data.finance import DEFAULT_JUDGE_ROWS, DEFAULT_ROWS, DEFAULT_SFT_ROWS, write_datasets

__all__ = ["main"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="squarechipo data finance",
        description="Generate the finance_preference dataset (Zhou et al. 2025 (Square-χPO), App. E/F).",
    )
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--seed", type=int, default=0, help="generation seed (the data is a function of it)")
    parser.add_argument(
        "--rows", type=int, default=DEFAULT_ROWS, help=f"preference rows, split 85/5/10 (default {DEFAULT_ROWS})"
    )
    parser.add_argument(
        "--sft-rows",
        type=int,
        default=DEFAULT_SFT_ROWS,
        help=f"SFT rows, disjoint from the preference rows (default {DEFAULT_SFT_ROWS})",
    )
    parser.add_argument(
        "--judge-rows",
        type=int,
        default=DEFAULT_JUDGE_ROWS,
        help=f"public gold rows for the evaluation judge (default {DEFAULT_JUDGE_ROWS})",
    )
    args = parser.parse_args(argv)
    written = write_datasets(args.out, args.rows, args.seed, sft_rows=args.sft_rows, judge_rows=args.judge_rows)
    for name, folder in written.items():
        sizes = ", ".join(f"{k} {v}" for k, v in datasets.load_from_disk(str(folder)).num_rows.items())
        print(f"{name}: {folder} ({sizes})")


if __name__ == "__main__":
    main()
