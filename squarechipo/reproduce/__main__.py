"""python -m squarechipo.reproduce table1 [--scale cpu|paper|SCALE.yaml] [--out DIR] [--dry-run]

Reproduces 003's Table 1 (App. E): SFT, then χPO, Square-χPO, DPO and rDPO under CTL and LTC at ε = 0.5,
α = 0.1 over seeds, Square-χPO on clean labels and at more ε, each judged against SFT. Resumable: run the same
command again after an interruption. Run it from the root of a squarechipo checkout (it runs ``recipes/``).
"""

from __future__ import annotations

import argparse
import json
import logging

from squarechipo.reproduce.scales import SCALES, load_scale
from squarechipo.reproduce.table1 import Table1Run, plan_cells


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m squarechipo.reproduce", description=__doc__.splitlines()[0])
    parser.add_argument("experiment", choices=["table1"])
    parser.add_argument(
        "--scale", default="cpu", help=f"{' or '.join(SCALES)} (default cpu), or a YAML file of Scale fields"
    )
    parser.add_argument("--out", default=None, help="output folder (default: outputs/table1_<scale>)")
    parser.add_argument("--root", default=".", help="the squarechipo checkout whose recipes/ it runs")
    parser.add_argument("--dry-run", action="store_true", help="print the plan and the expected time, run nothing")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    scale = load_scale(args.scale)
    run = Table1Run(scale, args.out or f"outputs/table1_{scale.name}", root=args.root)
    if args.dry_run:
        cells = plan_cells(scale)
        pending, minutes = run.estimate(cells)
        print(json.dumps(scale.to_dict(), indent=2))
        print(f"{len(cells)} cells ({pending} to run); expected about {minutes:.0f} min:")
        for cell in cells:
            print(f"  {cell.name}")
        return
    run.run()
    print((run.out / "table1.md").read_text())
    print(f"Table, CSV, plot and per-cell reports: {run.out.resolve()}")


if __name__ == "__main__":
    main()
