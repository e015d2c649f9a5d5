"""From the pilot to the pre-registration: the between-seed SD, the seeds for 80% power, the MDE, the budget.

The rule, fixed before any pilot was run:

1. The primary metric is the gold expected win rate against the SFT policy, in points. For each pair of pilot
   arms, the paired differences by seed give the between-seed SD; with 3 pilot seeds the SD has 2 degrees of
   freedom, so the power calculation uses its one-sided 80% upper confidence limit (Browne 1995,
   *On the use of a pilot sample for sample size determination*), SD·√((n − 1)/χ²_{0.2, n−1}).
2. The seeds needed: the fewest n whose two-sided paired t-test at α = 0.05 has 80% power against the design's
   effect (``effect_points``; 2 points in the first study), from the noncentral t
   (:func:`squarechipo.stats.seeds_for_power`).
3. The budget: the pilot's mean minutes per cell (training and evaluation) and per seed (its labels) give the
   hours of a plan. Arms are cut by tier (tier 3, then tier 2), never seeds; if tier 1 alone does not fit, the
   seeds are as many as fit, never fewer than the design's ``min_seeds``, and the MDE at that size is stated. The
   main seeds start at the design's ``main_seeds_from``.
   Cells another study already measured under the same settings (``cells_from``) cost nothing.
4. A gate (``pilot_gate``), when the design has one, is read off the pilot: if its arm's mean metric at the end of
   training (or at the gate's checkpoint ``epoch``) is below the bar, the plan says so and the main run does not start.
5. The plan, the sizes and the MDE are written to ``preregistration.json`` before the main run starts. The main
   run reads them from there and refuses a design that differs.
6. An amendment (``study amend --reason ...``) may change what the main run spends, never what the pilot
   measured: only the fields in :data:`AMENDABLE`, and only before any main cell exists. It is appended to the
   pre-registration with its reason, its time and commit, the power step redone on the same pilot records; the
   original plan stays in the file and in the report.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import math
import subprocess
from collections.abc import Callable
from dataclasses import asdict
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from squarechipo.data.label_roles import label_free
from squarechipo.reproduce.study.claims import claim_values, metric_at, reference_epochs
from squarechipo.reproduce.study.design import Arm, StudyDesign
from squarechipo.stats import mde, seeds_for_power

__all__ = [
    "AMENDABLE",
    "PREREGISTRATION",
    "amend",
    "analyse_pilot",
    "check_gate",
    "check_preregistration",
    "design_in_force",
    "pilot_sizes",
    "plan_main",
    "preregister",
    "read_preregistration",
]

PREREGISTRATION = "preregistration.json"
_SETUP_HOURS = 0.0  # the set-up (SFT, gold judge, SFT record) is done by the pilot and shared by the main run
#: What an amendment may change: what the main run spends (its arms and tiers, claims, effect and budget). Every
#: other field decides what a pilot cell measures, so changing it needs a new study with its own pilot.
AMENDABLE = ("main_arms", "claims", "effect_points", "budget_hours")


def _by_arm(records: list[dict]) -> dict[str, dict[int, float]]:
    out: dict[str, dict[int, float]] = {}
    for r in records:
        out.setdefault(r["arm"], {})[r["seed"]] = 100.0 * r["summary"]["expected_win"]["mean"]
    return out


def upper_sd(sd: float, n: int, confidence: float = 0.8) -> float:
    """One-sided upper confidence limit of an SD from n paired values (χ² with n − 1 df)."""
    return float(sd * math.sqrt((n - 1) / stats.chi2.ppf(1 - confidence, n - 1)))


def _spread(by_seed: dict[int, float]) -> dict[str, Any]:
    values = list(by_seed.values())
    sd = float(np.std(values, ddof=1)) if len(values) > 1 else math.nan
    return {
        "seeds": sorted(by_seed),
        "differences_points": values,
        "mean": float(np.mean(values)),
        "sd": sd,
        "sd_upper80": upper_sd(sd, len(values)),
    }


def _pilot_arm(records: list[dict], arm: str, by_method: bool) -> str | None:
    """The pilot arm that stands in for ``arm``: itself, or (``by_method``) the pilot arm of the same method."""
    arms = {r["arm"] for r in records}
    if arm in arms or not by_method:
        return arm if arm in arms else None
    return next((a for a in sorted(arms) if a.split("_", 2)[2] == arm.split("_", 2)[2]), None)


def _pilot_differences(records: list[dict], design: StudyDesign) -> tuple[dict[str, dict], dict[str, float]]:
    """(per quantity, its paired values over the pilot's seeds; the reference epochs of drop claims).

    The first study compares every pair of pilot arms on the expected win. A design with its own claims takes each
    claim whose arms the pilot ran; for a drop claim, the pilot arm of the same method stands in (the pilot may run
    one label setting of several: how much a method's own curve falls is its behaviour, not a comparison)."""
    if design.claims is None:
        wins = _by_arm(records)
        return {
            f"{a} − {b}": _spread({s: wins[a][s] - wins[b][s] for s in sorted(set(wins[a]) & set(wins[b]))})
            for a, b in combinations(sorted(wins), 2)
        }, {}
    reference = reference_epochs(records, design.claims, design.checkpoints or ())
    found = {}
    for claim in design.claims:
        stand_in = {arm: _pilot_arm(records, arm, claim.measures_a_drop) for arm in claim.arms}
        if None in stand_in.values() or len(set(stand_in.values())) < len(stand_in):
            continue
        renamed = {pilot: arm for arm, pilot in stand_in.items()}
        pilot = [{**r, "arm": renamed[r["arm"]]} for r in records if r["arm"] in renamed]
        values = claim_values(pilot, claim, reference)
        if len(values) > 1:
            found[claim.name] = _spread(values)
    return found, reference


def _at_chosen_betas(records: list[dict], design: StudyDesign, betas: dict[str, float]) -> list[dict]:
    """The pilot records of the β the rule chose for each main arm, named as that arm; the other β are left out."""
    from dataclasses import replace

    chosen = {replace(arm, beta=betas[arm.key]).key: arm.key for arm in design.main_arms if arm.key in betas}
    grid = {(r["method"], r["setting"]) for r in records if r["arm"] in chosen}
    return [
        {**r, "arm": chosen.get(r["arm"], r["arm"])}
        for r in records
        if r["arm"] in chosen or (r["method"], r["setting"]) not in grid
    ]


@label_free("result records of released-label runs, no row of data")
def analyse_pilot(records: list[dict], design: StudyDesign) -> dict[str, Any]:
    """Between-seed SDs of the paired differences, the seeds for power, and the measured cost of a cell. With
    ``target_kl`` the differences are those of the β the rule chooses (:func:`choose_betas`)."""
    every = records
    if design.chooses_beta:
        records = _at_chosen_betas(records, design, choose_betas(design, final_kl(records, design.beta_by_gain_at)))
    differences, reference = _pilot_differences(records, design)
    if not differences:
        raise ValueError("the pilot gives no paired difference: it needs two seeds of the arms a claim compares.")
    wins = _by_arm(records)
    sd_plan = max(d["sd_upper80"] for d in differences.values())
    needed = seeds_for_power(design.effect_points, sd_plan, target=design.power, alpha=design.alpha)
    cell_minutes = float(np.mean([(r["train_seconds"] + r["eval_seconds"]) / 60 for r in every]))
    return {
        "primary_metric": "gold expected win rate vs SFT (points)" if design.claims is None else "the claims' metrics",
        "arms": {arm: {"seeds": sorted(v), "win_points": [v[s] for s in sorted(v)]} for arm, v in wins.items()},
        "differences": differences,
        **({"reference_epochs": reference} if reference else {}),
        "sd_for_power": sd_plan,
        "seeds_needed": needed,
        **({"final_kl": final_kl(every, design.beta_by_gain_at)} if design.chooses_beta else {}),
        # A gate naming a main arm reads the pilot arm its rule chose (renamed to it in ``records``).
        **({"gate": gate_result(every + _renamed(records, every), design)} if design.pilot_gate is not None else {}),
        "cell_minutes": cell_minutes,
    }


@label_free("result records of released-label runs, no row of data")
def gate_result(records: list[dict], design: StudyDesign) -> dict[str, Any] | None:
    """The pilot gate's reading: its arm's mean metric at the end of training over the pilot seeds, and whether it
    clears the bar. None when the design has no gate."""
    gate = design.pilot_gate
    if gate is None:
        return None
    values = [metric_at(r, gate.metric, gate.epoch) for r in records if r["arm"] == gate.arm]
    if not values:
        raise ValueError(f"pilot_gate: the pilot has no record of arm {gate.arm!r}.")
    mean = float(np.mean(values))
    return {**asdict(gate), "values": values, "mean": mean, "passed": bool(mean >= gate.at_least)}


def check_gate(prereg: dict[str, Any]) -> None:
    """Refuse a main run whose pre-registered pilot gate was not cleared."""
    gate = prereg["pilot"].get("gate")
    if gate and not gate["passed"]:
        raise ValueError(
            f"the pilot gate was not cleared: {gate['arm']} reached a mean {gate['metric']} of {gate['mean']:.3g} "
            f"over the pilot seeds, below the pre-registered {gate['at_least']:g}, so the main run does not start. "
            "Report the pilot (study report); a new design needs a new --results folder and its own pilot."
        )


def _renamed(records: list[dict], every: list[dict]) -> list[dict]:
    """The records ``_at_chosen_betas`` renamed to a main arm (their names are not pilot arms')."""
    pilot = {r["arm"] for r in every}
    return [r for r in records if r["arm"] not in pilot]


@label_free("result records of released-label runs, no row of data")
def final_kl(records: list[dict], gain_at: float | None = None) -> dict[str, dict[str, Any]]:
    """Per pilot arm: its method, label setting, rows, β and mean KL(π‖π_ref) at the end of training over seeds; with
    ``gain_at``, also its mean gold gain at that checkpoint epoch (``gain_at_epoch``)."""
    out: dict[str, dict[str, Any]] = {}
    for r in records:
        entry = out.setdefault(
            r["arm"],
            {"method": r["method"], "setting": r["setting"], "rows": r.get("rows"), "beta": r.get("beta"), "kl": []},
        )
        entry["kl"].append(r["summary"]["kl"]["mean"])
        if gain_at is not None:
            entry.setdefault("gain_at_epoch", []).append(metric_at(r, "gold_gain", gain_at))
    return {arm: {k: float(np.mean(v)) if isinstance(v, list) else v for k, v in e.items()} for arm, e in out.items()}


def choose_betas(design: StudyDesign, kl: dict[str, dict[str, Any]]) -> dict[str, float]:
    """β for each main arm written without one, among the pilot β of its method and setting (and rows, where the
    pilot records them): with ``target_kl``, the one whose final KL is closest to it on a log scale (a rule on KL
    alone); with ``beta_by_gain_at``, the one whose mean gold gain at that epoch is largest. Both fixed before the
    pilot."""
    rule = "target_kl" if design.target_kl is not None else "beta_by_gain_at"
    chosen = {}
    for arm in design.main_arms:
        if arm.beta is not None:
            continue
        rows = arm.rows or design.train_rows
        grid = [
            e for e in kl.values()
            if (e["method"], e["setting"]) == (arm.method, arm.setting) and e["beta"]
            and (e.get("rows") or design.train_rows) == rows
        ]  # fmt: skip
        if not grid:
            raise ValueError(
                f"{rule}: the pilot ran no {arm.method} arm on {arm.setting} labels and {rows} rows to choose β from."
            )
        if design.target_kl is not None:
            best = min(grid, key=lambda e: abs(math.log(max(e["kl"], 1e-6) / design.target_kl)))
        else:
            best = max(grid, key=lambda e: e["gain_at_epoch"])
        chosen[arm.key] = float(best["beta"])
    return chosen


def plan_main(
    design: StudyDesign,
    analysis: dict[str, Any],
    seed_minutes: float = 1.0,
    reused: Callable[[Arm, int], bool] | None = None,
) -> dict[str, Any]:
    """The main run's arms and seeds under the budget (the rule in the module docstring); with ``target_kl``, the
    β each main arm takes from the pilot (``arm_betas``). ``reused(arm, seed)``: whether that cell is another
    study's record (it costs no time)."""
    needed, cell = max(analysis["seeds_needed"], design.min_seeds), analysis["cell_minutes"]
    free = reused or (lambda arm, seed: False)
    first = design.main_seeds_from

    def hours(arms: list[Arm], n_seeds: int) -> float:
        minutes = sum(seed_minutes + cell * sum(not free(a, s) for a in arms) for s in range(first, first + n_seeds))
        return _SETUP_HOURS + minutes / 60

    for max_tier in (3, 2, 1):
        arms = [a for a in design.main_arms if a.tier <= max_tier]
        if hours(arms, needed) <= design.budget_hours:
            seeds, binds = needed, False
            break
    else:
        arms = [a for a in design.main_arms if a.tier == 1]
        seeds = design.min_seeds  # a floor fixed before the pilot, even past the budget
        while seeds < needed and hours(arms, seeds + 1) <= design.budget_hours:
            seeds += 1
        binds = True
    sd = analysis["sd_for_power"]
    betas = choose_betas(design, analysis["final_kl"]) if design.chooses_beta else None
    return {
        **({"reference_epochs": analysis["reference_epochs"]} if "reference_epochs" in analysis else {}),
        **({"arm_betas": betas} if betas is not None else {}),
        "seeds": list(range(first, first + seeds)),
        "arms": [a.key for a in arms],
        "cut_arms": [a.key for a in design.main_arms if a not in arms],
        "budget_binds_seeds": binds,
        "expected_hours": round(hours(arms, seeds), 2),
        "mde_points": mde(seeds, sd, target=design.power, alpha=design.alpha),
        "mde_points_at_pilot_sd": mde(
            seeds, max(d["sd"] for d in analysis["differences"].values()), target=design.power, alpha=design.alpha
        ),
    }


def _commit() -> str | None:
    """The git commit of the working folder, when it is a checkout (a record of the code that ran)."""
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (done.stdout.strip() or None) if done.returncode == 0 else None


def preregister(results: Path, design: StudyDesign, analysis: dict, plan: dict) -> dict[str, Any]:
    """Write ``preregistration.json`` once; an existing one is returned after checking it holds this design."""
    path = results / PREREGISTRATION
    if path.exists():
        return check_preregistration(results, design)
    record = {
        "written": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": _commit(),
        "version": importlib.metadata.version("squarechipo"),
        "design": design.to_dict(),
        "pilot": analysis,
        "plan": plan,
    }
    results.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2, ensure_ascii=False))
    return record


def _differing(recorded: dict, design: StudyDesign) -> list[str]:
    current = json.loads(json.dumps(design.to_dict()))
    # A field added after the record was written ran at its default then: a new field's default keeps the old
    # behaviour (generation_batch_size 32 is how the first study sampled before the field existed).
    defaults = json.loads(json.dumps(StudyDesign().to_dict()))
    recorded = {**{k: v for k, v in defaults.items() if k not in recorded}, **recorded}
    # Likewise an Arm field added later (rows, beta): absent from a recorded arm, it ran at its default.
    arm_defaults = {"rows": None, "beta": None}
    for key in ("pilot_arms", "main_arms"):
        if isinstance(recorded.get(key), list):
            recorded[key] = [{**arm_defaults, **arm} for arm in recorded[key]]
    if isinstance(recorded.get("pilot_gate"), dict):  # and a gate's (epoch: the end of training)
        recorded["pilot_gate"] = {"epoch": None, **recorded["pilot_gate"]}
    return sorted(k for k in set(recorded) | set(current) if recorded.get(k) != current.get(k))


def _in_force(record: dict[str, Any]) -> dict[str, Any]:
    """The pre-registration with its last amendment's design, pilot analysis and plan in force."""
    if not record.get("amendments"):
        return record
    last = record["amendments"][-1]
    return {
        **record,
        "design": last["design"],
        "pilot": last["pilot"],
        "plan": last["plan"],
        "first_plan": record["plan"],
    }


def read_preregistration(results: Path) -> dict[str, Any]:
    """A study's ``preregistration.json`` as written, its amendments in order."""
    path = results / PREREGISTRATION
    if not path.exists():
        raise FileNotFoundError(
            f"{path} not found: run the pilot first (python -m squarechipo.reproduce study pilot), which writes the "
            "pre-registered sizes the main run uses."
        )
    try:
        record = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not JSON ({error}); {_RESTORE}") from None
    amendments = record.get("amendments", []) if isinstance(record, dict) else None
    parts = ("design", "pilot", "plan")  # what an amendment puts in force
    if not isinstance(amendments, list) or not all(isinstance(a, dict) and set(parts) <= set(a) for a in amendments):
        raise ValueError(
            f"{path}: not a pre-registration as `study pilot` and `study amend` write it (an object whose "
            f"`amendments` are a list of objects with a design, a pilot and a plan); {_RESTORE}"
        )
    return record


#: What to do with a pre-registration that was edited: it is the study's record, written only by its commands.
_RESTORE = "restore it from git (git checkout -- the file); change a plan only with `study amend --reason`"


def design_in_force(results: Path) -> dict[str, Any]:
    """The design a study's pre-registration holds in force, every field (those added since at their defaults)."""
    recorded = _in_force(read_preregistration(results))["design"]
    defaults = json.loads(json.dumps(StudyDesign().to_dict()))
    return {**defaults, **recorded}


def check_preregistration(results: Path, design: StudyDesign) -> dict[str, Any]:
    """The pre-registration in force in ``results``; raises if there is none or if ``design`` differs from it."""
    record = _in_force(read_preregistration(results))
    changed = _differing(record["design"], design)
    if changed:
        raise ValueError(
            f"{results / PREREGISTRATION} pre-registered another design (fields {changed} differ). The main run keeps "
            "the pre-registered sizes: drop the changes, amend the plan before the main run (study amend --reason, "
            f"fields {list(AMENDABLE)} only), or use a new --results folder for a new study (with its own pilot)."
        )
    return record


@label_free("result records of released-label runs, no row of data")
def amend(
    results: Path,
    design: StudyDesign,
    records: list[dict],
    reason: str,
    seed_minutes: float = 1.0,
    reused: Callable[[Arm, int], bool] | None = None,
) -> dict[str, Any]:
    """Append an amendment (rule 5): ``design`` differs from the one in force only in :data:`AMENDABLE` fields, no
    main cell exists yet, and ``reason`` says why. The power step is redone on the pilot ``records``."""
    record = read_preregistration(results)
    if not reason.strip():
        raise ValueError("an amendment needs --reason: why the plan changes, written before any main cell runs.")
    done = sorted(p.stem for p in (results / "main").glob("*.json"))
    if done:
        raise ValueError(
            f"{results / 'main'} already holds main cells ({len(done)}, e.g. {done[0]}): a plan cannot be amended "
            "after main results exist. Finish the pre-registered plan, or start a new study in a new --results folder."
        )
    changed = _differing(_in_force(record)["design"], design)
    if not changed:
        raise ValueError("the design is the one in force: there is nothing to amend.")
    fixed = [k for k in changed if k not in AMENDABLE]
    if fixed:
        raise ValueError(
            f"fields {fixed} change what the pilot measured; an amendment may change only {list(AMENDABLE)}. "
            "Run a new study (new --results folder) with its own pilot."
        )
    analysis = analyse_pilot(records, design)
    entry = {
        "written": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": _commit(),
        "reason": reason.strip(),
        "changed": changed,
        "design": design.to_dict(),
        "pilot": analysis,
        "plan": plan_main(design, analysis, seed_minutes=seed_minutes, reused=reused),
    }
    record.setdefault("amendments", []).append(entry)
    (results / PREREGISTRATION).write_text(json.dumps(record, indent=2, ensure_ascii=False))
    return _in_force(record)


@label_free("a study's pre-registration, no row of data")
def pilot_sizes(prereg: dict, design: StudyDesign) -> dict[str, Any]:
    """The pilot's planning SD (the largest 80% upper bound of a claim's between-seed SD) and the seeds it needs,
    beside the seeds needed at that claim's SD itself, so a reader sees how much the bound adds."""
    pilot = prereg.get("pilot") or {}
    sizes = {k: pilot.get(k) for k in ("sd_for_power", "seeds_needed")}
    planning = [
        d for d in (pilot.get("differences") or {}).values() if d.get("sd_upper80") == pilot.get("sd_for_power")
    ]
    if planning and planning[0].get("sd"):
        sizes["seeds_needed_at_sd"] = seeds_for_power(
            design.effect_points, planning[0]["sd"], target=design.power, alpha=design.alpha
        )
    return sizes
