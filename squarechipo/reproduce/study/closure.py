"""Closing a study that cannot decide what it was built to decide, as a record: ``closure.json``.

A study closed this way stays a pilot: nothing of its records is read as a decision. Its closure states, computed
from the committed pilot records with the pre-registered power rule (the 80% upper limit of the between-seed SD,
:func:`squarechipo.reproduce.study.power.analyse_pilot`), what deciding would take: the seeds for 80% power on each
claim the pilot can size, the power of the design's seed floor, and the CPU hours at the pilot's measured cell
times. ``study pilot`` and ``study main`` refuse a closed study unless ``--reopen`` is given (on a machine where it
can run: a GPU, or a CPU with bf16 kernels), so the runner can still resume it where such a machine is lent.
"""

from __future__ import annotations

import datetime
import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from squarechipo.data.label_roles import label_free
from squarechipo.reproduce.study.design import StudyDesign
from squarechipo.reproduce.study.power import _commit, analyse_pilot
from squarechipo.reproduce.study.provenance import read_record
from squarechipo.reproduce.study.reuse import cell_name
from squarechipo.stats import power, seeds_for_power

__all__ = ["CLOSURE", "check_open", "close_study"]

CLOSURE = "closure.json"


def check_open(results: Path, reopen: bool) -> None:
    """Refuse a closed study's pilot or main run unless ``reopen`` (one line naming the closure and the flag)."""
    path = Path(results) / CLOSURE
    if path.is_file() and not reopen:
        reason = json.loads(path.read_text(encoding="utf-8")).get("reason", "")
        raise ValueError(
            f"{path}: this study was closed as a pilot ({reason[:160]}). Nothing more runs on it here; where a "
            "machine that can run it is lent (a GPU, or a CPU with bf16 kernels), pass --reopen."
        )


@label_free("result records of released-label runs, no row of data")
def close_study(results: Path, design: StudyDesign, reason: str) -> dict[str, Any]:
    """Write ``closure.json``: the reason, the pilot cells committed, and what deciding would take (see the module).
    Refused after a main cell exists, without a reason, or when the study is closed already."""
    results = Path(results)
    if not reason.strip():
        raise ValueError("closing a study needs --reason: why it cannot decide here, written before any main cell.")
    if (results / CLOSURE).exists():
        raise ValueError(f"{results / CLOSURE} exists: the study is closed already.")
    main = sorted((results / "main").glob("*.json"))
    if main:
        raise ValueError(f"{results / 'main'} holds main cells ({len(main)}): a study with main results is reported.")
    planned = [(arm, seed) for seed in design.pilot_seeds for arm in design.pilot_arms]
    paths = [results / "pilot" / f"{cell_name(arm, seed)}.json" for arm, seed in planned]
    records = [read_record(p) for p in paths if p.is_file()]
    if not records:
        raise ValueError(f"{results / 'pilot'} holds no pilot cell: there is nothing to close, only a design.")
    analysis = analyse_pilot(records, design)
    closure = {
        "closed": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": _commit(),
        "reason": reason.strip(),
        "pilot_cells": {
            "committed": sorted(r["cell"] for r in records),
            "planned": len(planned),
            # What the figures below were computed from, by digest: the closure describes these files and no other.
            "sha256": {p.stem: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths if p.is_file()},
        },
        "claims": [_claim_size(design, name, d) for name, d in analysis["differences"].items()],
        "claims_not_sized": [c.name for c in design.claims or () if c.name not in analysis["differences"]],
        "cell_hours_by_arm": _cell_hours(records),
    }
    closure["cpu_hours_to_decide"] = _hours(closure, design)
    (results / CLOSURE).write_text(json.dumps(closure, indent=2, ensure_ascii=False), encoding="utf-8")
    return closure


def _claim_size(design: StudyDesign, name: str, difference: dict) -> dict[str, Any]:
    """One claim's pilot figures and the seeds it needs, at the planning SD (the rule's) and at the SD itself."""
    effect, alpha = design.effect_points, design.alpha
    return {
        "claim": name,
        "pilot_seeds": difference["seeds"],
        "pilot_values": difference["differences_points"],
        "sd": difference["sd"],
        "sd_upper80": difference["sd_upper80"],
        "effect": effect,
        "seeds_for_80pct_power": seeds_for_power(effect, difference["sd_upper80"], target=design.power, alpha=alpha),
        "seeds_for_80pct_power_at_the_sd_itself": seeds_for_power(
            effect, difference["sd"], target=design.power, alpha=alpha
        ),
        "power_at_min_seeds": {
            "seeds": design.min_seeds,
            "at_sd_upper80": power(design.min_seeds, effect, difference["sd_upper80"], alpha=alpha),
            "at_sd": power(design.min_seeds, effect, difference["sd"], alpha=alpha),
        },
    }


def _cell_hours(records: list[dict]) -> dict[str, float]:
    """Each pilot arm's median hours a cell (training and evaluation), as measured."""
    by_arm: dict[str, list[float]] = {}
    for r in records:
        by_arm.setdefault(r["arm"], []).append((r["train_seconds"] + r["eval_seconds"]) / 3600)
    return {arm: float(np.median(hours)) for arm, hours in sorted(by_arm.items())}


def _hours(closure: dict, design: StudyDesign) -> dict[str, float] | None:
    """The main run's hours at the measured cell times: one cell of each main arm a seed (the stand-in pilot arm of
    the same method and setting), for the most seeds any sized claim needs."""
    if not closure["claims"]:
        return None
    hours = closure["cell_hours_by_arm"]
    per_seed = 0.0
    for arm in design.main_arms:
        stand_in = [h for name, h in hours.items() if name.startswith(arm.key)]
        per_seed += max(stand_in) if stand_in else max(hours.values())
    seeds = max(c["seeds_for_80pct_power"] for c in closure["claims"])
    at_sd = max(c["seeds_for_80pct_power_at_the_sd_itself"] for c in closure["claims"])
    return {
        "hours_a_seed": round(per_seed, 2),
        "at_the_planning_sd": round(per_seed * seeds, 1),
        "at_the_sd_itself": round(per_seed * max(at_sd, design.min_seeds), 1),
    }
