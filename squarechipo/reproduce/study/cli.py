"""The steps of ``python -m squarechipo.reproduce study``: pilot (with the power step), amend, main, report, close,
and verdicts (every study's, for the README)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from squarechipo.reproduce.study.closure import check_open, close_study
from squarechipo.reproduce.study.design import StudyDesign, load_design
from squarechipo.reproduce.study.power import (
    amend,
    analyse_pilot,
    check_gate,
    check_preregistration,
    plan_main,
    preregister,
)
from squarechipo.reproduce.study.provenance import read_record
from squarechipo.reproduce.study.report import (
    PRIVACY_PLOT,
    ROWS_PLOT,
    TRAINING_PLOT,
    markdown,
    update_readme,
    write_report,
)
from squarechipo.reproduce.study.reuse import cell_name
from squarechipo.reproduce.study.runner import Study
from squarechipo.reproduce.study.verdicts import VERDICTS_BEGIN, VERDICTS_END, verdicts_block

__all__ = ["amend_plan", "pilot", "main_run", "report", "run_step", "verdicts"]


def pilot(study: Study) -> dict:
    """Set-up, pilot cells, power step; writes ``pilot.json`` and the pre-registration (once)."""
    d = study.design
    start = time.time()
    setup = study.setup()
    records = study.run_cells(d.pilot_arms, d.pilot_seeds, "pilot")
    analysis = analyse_pilot(records, d)
    label_minutes = _label_minutes(study, d.pilot_seeds)
    plan = plan_main(d, analysis, seed_minutes=label_minutes, reused=study.reusable)
    (study.results / "pilot.json").write_text(
        json.dumps(
            {"setup": setup, "analysis": analysis, "plan": plan, "seconds": round(time.time() - start)}, indent=2
        )
    )
    prereg = preregister(study.results, d, analysis, plan)
    _print_plan(analysis, prereg["plan"], d.effect_points, d.effect_unit)
    return prereg


def _label_minutes(study: Study, seeds) -> float:
    """Minutes a seed's labels took in the pilot (1 where the work folder no longer holds their records)."""
    done = [study.out / "labels" / f"seed{s}" / "done.json" for s in seeds]
    seconds = [json.loads(p.read_text()).get("seconds", 60) for p in done if p.exists()] or [60]
    return sum(seconds) / len(seconds) / 60


def _print_plan(analysis: dict, plan: dict, effect: float, unit: str = "points") -> None:
    for name, diff in analysis["differences"].items():
        print(
            f"pilot: {name}: differences {[round(v, 2) for v in diff['differences_points']]} {unit}, "
            f"SD {diff['sd']:.2f} (80% upper limit {diff['sd_upper80']:.2f})"
        )
    print(
        f"power: {analysis['seeds_needed']} seeds for 80% power against {effect:g} {unit} "
        f"(SD {analysis['sd_for_power']:.2f}); "
        f"a cell takes {analysis['cell_minutes']:.1f} min"
    )
    gate = analysis.get("gate")
    if gate:
        print(
            f"gate: {gate['arm']} mean {gate['metric']} {gate['mean']:.3g} (bar {gate['at_least']:g}): "
            + ("cleared, the main run may start" if gate["passed"] else "NOT cleared, the main run will not start")
        )
    print(
        f"plan: {len(plan['seeds'])} seeds x {len(plan['arms'])} arms, about {plan['expected_hours']} h; "
        f"MDE {plan['mde_points']:.2f} {unit}; cut: {plan['cut_arms'] or 'nothing'}"
        + (" (the budget binds the seeds)" if plan["budget_binds_seeds"] else "")
    )


def amend_plan(study: Study, reason: str) -> dict:
    """The power step again on the committed pilot records, for an amended design (before any main cell)."""
    d = study.design
    records = [
        read_record(study.results / "pilot" / f"{cell_name(arm, seed)}.json")
        for seed in d.pilot_seeds
        for arm in d.pilot_arms
    ]
    minutes = _label_minutes(study, d.pilot_seeds)
    prereg = amend(study.results, d, records, reason, seed_minutes=minutes, reused=study.reusable)
    _print_plan(prereg["pilot"], prereg["plan"], d.effect_points, d.effect_unit)
    return prereg


def main_run(study: Study) -> dict:
    prereg = check_preregistration(study.results, study.design)
    check_gate(prereg)
    plan = prereg["plan"]
    arms = [a for a in study.design.main_arms if a.key in plan["arms"]]
    study.planned_betas = plan.get("arm_betas") or {}
    study.setup()
    study.run_cells(arms, plan["seeds"], "main")
    return report(study)


def report(study: Study, readme: str | None = None) -> dict:
    prereg = check_preregistration(study.results, study.design)
    summary = write_report(study.results, study.design, prereg)
    print((study.results / "report.md").read_text())
    if readme:
        plots = [("Reward–KL frontier", "frontier.png")]
        if study.design.checkpoints:
            plots = [("Gold gain against KL along training", TRAINING_PLOT)]
        if len({h["epsilon"] for h in summary["headline"]}) > 1:
            plots.append(("Share of the clean gain kept against ε", PRIVACY_PLOT))
        if summary["rows_needed"]:
            plots.append(("Share of the clean gain kept against the private rows", ROWS_PLOT))
        where = Path(readme).resolve().parent
        links = "".join(f"\n\n![{title}]({os.path.relpath(study.results / f, where)})" for title, f in plots)
        update_readme(Path(readme), markdown(summary, study.design) + links, study.design.name)
    return summary


def verdicts(root: Path, readme: str | None, pages: list[str] = ()) -> None:
    """Print the verdicts of every study under ``root``; with ``readme`` and ``pages``, rewrite each file's generated
    blocks from the records beside the studies: the verdicts, the main job's reliability, its time, the table of its
    fresh clones and those of its fresh releases. Every file is checked before any is written: a missing file, a
    README without the verdicts block or a page with no block leaves every file as it was."""
    from squarechipo.evaluation.blocks import has_block, replace_block
    from squarechipo.evaluation.reliability import releases_block, reliability_block, runs_block, time_block

    block = verdicts_block(root)
    blocks = {"verdicts": block, "main-job": reliability_block(root), "main-job-runs": runs_block(root)}
    blocks["main-job-time"] = time_block(root)
    for part, folder in (("v1", "main_job_releases"), ("v2", "main_job_releases_v2"), ("v3", "main_job_releases_v3")):
        blocks[f"main-job-releases:{part}"] = releases_block(root, folder)
    files = [Path(p) for p in (readme, *pages) if p]
    texts = {path: path.read_text(encoding="utf-8") for path in files}
    if readme and not has_block(texts[Path(readme)], "verdicts"):
        raise ValueError(
            f"{readme} has no verdicts block: add the lines {VERDICTS_BEGIN!r} and {VERDICTS_END!r} first."
        )
    for path, text in texts.items():
        if not any(has_block(text, name) for name in blocks):
            raise ValueError(
                f"{path} has no generated block: add the lines '<!-- NAME:begin (generated by squarechipo study "
                f"verdicts) -->' and '<!-- NAME:end -->' for a NAME of {', '.join(blocks)}."
            )
    for path in files:
        for name, text in blocks.items():
            replace_block(path, name, text)
    print(block)


def run_step(args) -> None:
    if args.step == "verdicts":
        verdicts(Path(args.results).parent, args.readme, args.page)
        return
    design: StudyDesign = load_design(args.design)
    study = Study(design, args.out, args.results, allow_emulated_bf16=args.allow_emulated_bf16)
    if args.step in ("pilot", "main"):
        check_open(study.results, getattr(args, "reopen", False))
    if args.step == "close":
        closure = close_study(study.results, design, args.reason or "")
        print(json.dumps(closure, indent=2, ensure_ascii=False))
    elif args.step == "pilot":
        pilot(study)
    elif args.step == "amend":
        amend_plan(study, args.reason or "")
    elif args.step == "main":
        main_run(study)
    else:
        report(study, args.readme)
