"""squarechipo sim [bandit|overopt|bt|general|labeldp|all] [--smoke | --full] [--seeds N] [--out DIR]

Runs the default reduced grid (minutes on 2 CPU cores), ``--smoke`` (seconds: every study at its smallest, to check
an install) or ``--full`` (hours; resumable: a re-run skips finished grid points), writes
``<out>/<experiment>.csv`` and PNG plots, and prints every claim as the papers make it, its conditions, its figures
with 95% confidence intervals and a verdict.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from squarechipo.sim import experiments as ex
from squarechipo.sim.experiments import (
    bandit_report,
    bt_report,
    general_report,
    kary_report,
    load_rows,
    multistage_report,
    overopt_report,
)


def _labeldp_report(rows, out):
    return multistage_report(rows, out) + kary_report(out)


#: name → (CSV, grid, runner, columns, default seeds, rows per seed, report)
EXPERIMENTS = {
    "bandit": ("bandit.csv", ex.bandit_grid, ex.run_bandit_point, ex.BANDIT_COLUMNS, 20, 1, bandit_report),
    "overopt": (
        "overopt.csv",
        ex.overopt_grid,
        ex.run_overopt_point,
        ex.OVEROPT_COLUMNS,
        ex.OVEROPT_SEEDS,
        ex.overopt_rows_per_seed,
        overopt_report,
    ),
    "bt": ("bt.csv", ex.bt_grid, ex.run_bt_point, ex.BT_COLUMNS, 100, len(ex.BT_NS), bt_report),
    "general": (
        "general.csv",
        ex.general_grid,
        ex.run_general_point,
        ex.GENERAL_COLUMNS,
        20,
        ex.general_rows_per_seed,
        general_report,
    ),
    "labeldp": (
        "multistage.csv",
        ex.multistage_grid,
        ex.run_multistage_point,
        ex.MULTISTAGE_COLUMNS,
        20,
        len(ex.MULTISTAGE_METHODS),
        _labeldp_report,
    ),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="squarechipo sim", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("experiment", nargs="?", default="all", choices=["all", *EXPERIMENTS])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--full", action="store_true", help="the full grid (hours; resumable)")
    size.add_argument(
        "--smoke", action="store_true", help="every study at its smallest (about 20 s on 2 cores; checks an install)"
    )
    parser.add_argument(
        "--seeds", type=int, default=None, help="seeds per point (default 20 bandit and general, 100 bt and overopt)"
    )
    parser.add_argument("--out", default="outputs/sim", help="results folder (CSV + PNG)")
    parser.add_argument("--base-seed", type=int, default=0)
    parser.add_argument(
        "--readme",
        default=None,
        help="rewrite this page's lab block with the figures (docs/lab.md; a finished grid is only reported)",
    )
    args = parser.parse_args(argv)
    _check(parser, args)
    scale = "full" if args.full else "smoke" if args.smoke else "default"
    out = Path(args.out) / scale
    out.mkdir(parents=True, exist_ok=True)
    lines = []
    for name, (csv_name, grid, runner, columns, default_seeds, rows_per_seed, report) in EXPERIMENTS.items():
        if args.experiment not in ("all", name):
            continue
        start = time.perf_counter()
        path = out / csv_name
        ran = ex.run_grid(
            grid(scale),
            runner,
            columns,
            path,
            list(range(args.seeds or (2 if args.smoke else default_seeds))),
            rows_per_seed=rows_per_seed,
            base_seed=args.base_seed,
            desc=name,
        )
        print(f"{name}: {ran} grid points run ({time.perf_counter() - start:.0f} s), results in {path}")
        lines += report(load_rows(path), out)
    print(
        "\n".join(
            [
                "",
                "== Figures (95% confidence intervals)",
                *lines,
                "",
                f"plots: {', '.join(sorted(p.name for p in out.glob('*.png')))} in {out.resolve()}",
            ]
        )
    )
    if args.readme:
        _write_block(Path(args.readme), lines, args)
    return 0


#: The command that generates docs/lab.md's block, as its markers name it.
LAB_COMMAND = "python -m squarechipo.sim --out results/sim --readme docs/lab.md"


def _write_block(page: Path, lines: list[str], args) -> None:
    """The page's lab block: the figures of the default grid, from the CSVs under ``--out``."""
    from squarechipo.evaluation.blocks import replace_block

    replace_block(page, "lab", "\n".join(["```text", *lines, "```"]), by=LAB_COMMAND)


def _check(parser: argparse.ArgumentParser, args) -> None:
    """Refuse what cannot run, before any grid point does."""
    if args.seeds is not None and args.seeds < 2:
        parser.error("--seeds must be at least 2 (confidence intervals need two seeds)")
    if args.readme and (args.experiment != "all" or args.full or args.smoke or args.seeds or args.base_seed):
        parser.error("--readme writes the default grid's figures: give no experiment, --full, --smoke or seeds")
    if args.readme and not _has_block(Path(args.readme)):
        parser.error(f"{args.readme} has no lab block: add '<!-- lab:begin (generated by {LAB_COMMAND}) -->' first")


def _has_block(page: Path) -> bool:
    """Whether ``page`` exists and holds the lab block's markers (checked before the grid runs)."""
    from squarechipo.evaluation.blocks import has_block

    return page.is_file() and has_block(page.read_text(encoding="utf-8"), "lab", by=LAB_COMMAND)


if __name__ == "__main__":
    raise SystemExit(main())
