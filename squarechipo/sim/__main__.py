"""python -m squarechipo.sim [bandit|bt|general|labeldp|all] [--full] [--seeds N] [--out DIR]

Runs the default reduced grid (minutes on 2 CPU cores) or ``--full`` (hours; resumable: a re-run
skips finished grid points), writes ``<out>/<experiment>.csv`` and PNG plots, and prints every
claim's figures with 95% confidence intervals.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from squarechipo.sim import experiments as ex
from squarechipo.sim.report import (bandit_report, bt_report, general_report, kary_report, load_rows,
                                     multistage_report)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m squarechipo.sim", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("experiment", nargs="?", default="all", choices=["all", "bandit", "bt", "general", "labeldp"])
    parser.add_argument("--full", action="store_true", help="the full grid (hours; resumable)")
    parser.add_argument("--seeds", type=int, default=None, help="seeds per point (default 20 bandit and general, 100 bt)")
    parser.add_argument("--out", default="outputs/sim", help="results folder (CSV + PNG)")
    parser.add_argument("--base-seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.seeds is not None and args.seeds < 2:
        parser.error("--seeds must be at least 2 (confidence intervals need two seeds)")
    out = Path(args.out) / ("full" if args.full else "default")
    out.mkdir(parents=True, exist_ok=True)
    lines = []
    if args.experiment in ("all", "bandit"):
        start = time.perf_counter()
        path = out / "bandit.csv"
        ran = ex.run_grid(ex.bandit_grid(args.full), ex.run_bandit_point, ex.BANDIT_COLUMNS, path,
                          list(range(args.seeds or 20)), base_seed=args.base_seed, desc="bandit")
        print(f"bandit: {ran} grid points run ({time.perf_counter() - start:.0f} s), results in {path}")
        lines += bandit_report(load_rows(path), out)
    if args.experiment in ("all", "bt"):
        start = time.perf_counter()
        path = out / "bt.csv"
        ran = ex.run_grid(ex.bt_grid(args.full), ex.run_bt_point, ex.BT_COLUMNS, path, list(range(args.seeds or 100)),
                          rows_per_seed=len(ex.BT_NS), base_seed=args.base_seed, desc="bt")
        print(f"bt: {ran} grid points run ({time.perf_counter() - start:.0f} s), results in {path}")
        lines += bt_report(load_rows(path), out)
    if args.experiment in ("all", "general"):
        start = time.perf_counter()
        path = out / "general.csv"
        ran = ex.run_grid(ex.general_grid(args.full), ex.run_general_point, ex.GENERAL_COLUMNS, path,
                          list(range(args.seeds or 20)), rows_per_seed=len(ex.GENERAL_ITERATIONS),
                          base_seed=args.base_seed, desc="general")
        print(f"general: {ran} grid points run ({time.perf_counter() - start:.0f} s), results in {path}")
        lines += general_report(load_rows(path), out)
    if args.experiment in ("all", "labeldp"):
        start = time.perf_counter()
        path = out / "multistage.csv"
        ran = ex.run_grid(ex.multistage_grid(args.full), ex.run_multistage_point, ex.MULTISTAGE_COLUMNS, path,
                          list(range(args.seeds or 20)), rows_per_seed=len(ex.MULTISTAGE_METHODS),
                          base_seed=args.base_seed, desc="labeldp")
        print(f"labeldp: {ran} grid points run ({time.perf_counter() - start:.0f} s), results in {path}")
        lines += multistage_report(load_rows(path), out)
        lines += kary_report(out)
    print("\n".join(["", "== Figures (95% confidence intervals)", *lines, "",
                     f"plots: {', '.join(sorted(p.name for p in out.glob('*.png')))} in {out.resolve()}"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
