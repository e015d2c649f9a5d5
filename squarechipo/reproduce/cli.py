"""python -m squarechipo.reproduce table1|study ...

``table1`` reproduces Zhou et al. 2025 (Square-χPO), Table 1 (App. E) at a named scale. ``study`` is the
controlled, powered study of the methods on private and corrupted labels under a gold reward:

    python -m squarechipo.reproduce study pilot   # set-up, the pilot cells, the power step -> preregistration.json
    python -m squarechipo.reproduce study amend   # before the main run: new arms, claims or budget, with --reason
    python -m squarechipo.reproduce study main    # the pre-registered main run (resumable; refuses changed sizes)
    python -m squarechipo.reproduce study report  # tables, verdicts and the frontier plot from the records
    python -m squarechipo.reproduce study close   # a study that cannot decide here: closure.json, with --reason

Both are resumable: run the same command again after an interruption. Their steps run the installed package's
scripts (:mod:`squarechipo.scripts`), so they work from any folder; ``squarechipo reproduce ...`` is the same command.
"""

from __future__ import annotations

import argparse
import json
import logging

from squarechipo.reproduce.scales import SCALES, load_scale
from squarechipo.reproduce.table1 import Table1Run, plan_cells

STUDY_HELP = """\
pilot:  the set-up (data, SFT of the base model, the gold reward r*, the SFT policy's record), then the pilot
        cells (design.pilot_arms x design.pilot_seeds), then the power step: the between-seed SD of each paired
        method difference of the gold expected win rate, the seeds needed for 80%% power at alpha = 0.05
        (two-sided, paired) to detect design.effect_points, the MDE of the planned sizes and the arms that fit
        design.budget_hours. It writes them to RESULTS/preregistration.json, once.
main:   the pre-registered main run: every (arm, seed) of the plan, seed by seed; refuses a design that differs
        from the pre-registration. Then the report.
report: RESULTS/report.md, summary.json and frontier.png from the records; --readme FILE also rewrites the
        study block of FILE.
"""


def _table1(args) -> None:
    scale = load_scale(args.scale)
    run = Table1Run(scale, args.out or f"outputs/table1_{scale.name}")
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


def main(argv: list[str] | None = None, prog: str = "squarechipo reproduce") -> None:
    """Table 1 or the study; ``prog`` names the command in usage lines (``squarechipo`` for ``squarechipo study``)."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="experiment", required=True)
    table1 = commands.add_parser("table1", help="Table 1 of Zhou et al. 2025 (Square-χPO) at a named scale")
    table1.add_argument(
        "--scale", default="cpu", help=f"{' or '.join(SCALES)} (default cpu), or a YAML file of Scale fields"
    )
    table1.add_argument("--out", default=None, help="output folder (default: outputs/table1_<scale>)")
    table1.add_argument("--dry-run", action="store_true", help="print the plan and the expected time, run nothing")
    study = commands.add_parser(
        "study",
        help="the controlled, powered study under a gold reward (pilot, power, main run, report)",
        description=STUDY_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    study.add_argument("step", choices=["pilot", "amend", "main", "report", "close", "verdicts"])
    study.add_argument("--design", default=None, help="YAML file of StudyDesign fields (default: the built-in design)")
    study.add_argument("--out", default="outputs/study", help="work folder: models, releases, samples (not committed)")
    study.add_argument("--results", default="results/study", help="small records to commit (default results/study)")
    study.add_argument(
        "--readme",
        default=None,
        help="with report: rewrite this file's study block; with verdicts: its verdicts block, from every study "
        "beside --results",
    )
    study.add_argument(
        "--page",
        action="append",
        default=[],
        help="with verdicts: also rewrite this page's generated blocks (verdicts, main-job, main-job-runs)",
    )
    study.add_argument(
        "--reason",
        default=None,
        help="with amend: why the plan changes (kept in the pre-registration); with close: why it cannot decide here",
    )
    study.add_argument(
        "--reopen",
        action="store_true",
        help="run a closed study's pilot or main run (where a machine that can run it is lent): refused otherwise",
    )
    study.add_argument(
        "--allow-emulated-bf16",
        action="store_true",
        help="train and measure a bf16 design's cells on a CPU without bf16 kernels (several times slower; bf16 "
        "rounds differently there): refused otherwise",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.experiment == "table1":
        _table1(args)
    else:
        from squarechipo.reproduce.study.cli import run_step

        run_step(args)


if __name__ == "__main__":
    main()
