"""Cells another study already trained and measured (``cells_from``), reused only where they are this study's cells.

A record is reused when it is the same arm and seed, or the same method, labels and rows recorded at this arm's β
under another arm name (a β the other study chose from its pilot), and only if the other study's pre-registered
design agrees with this one on every setting that decides what a cell trains and measures
(:data:`squarechipo.reproduce.study.provenance.CELL_FIELDS`). A reused record carries the evaluation that design
measured it under, so the report's check that paired cells share one evaluation applies to it too.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from squarechipo.reproduce.study.design import Arm, StudyDesign
from squarechipo.reproduce.study.power import design_in_force
from squarechipo.reproduce.study.provenance import evaluation_record, reuse_check

__all__ = ["cell_name", "is_reusable", "reused_record"]


def cell_name(arm: Arm, seed: int) -> str:
    return f"{arm.key}_seed{seed}"


def _source(design: StudyDesign, arm: Arm, seed: int, stage: str, beta: float) -> Path | None:
    """This cell's record in ``cells_from``: under this arm's own name, else under its β-less name if recorded at
    ``beta`` (the other study's arm at another β is another cell, which this study trains)."""
    if not design.cells_from:
        return None
    folder = Path(design.cells_from) / stage
    own = folder / f"{cell_name(arm, seed)}.json"
    if own.exists():
        return own
    if arm.beta is None:
        return None
    other = folder / f"{cell_name(replace(arm, beta=None), seed)}.json"
    if other.exists() and json.loads(other.read_text()).get("beta", beta) == beta:
        return other
    return None


def is_reusable(design: StudyDesign, arm: Arm, seed: int, beta: float, stage: str = "main") -> bool:
    """Whether the cell (trained at ``beta``) is another study's record: the plan counts it as free."""
    source = _source(design, arm, seed, stage, beta)
    return source is not None and json.loads(source.read_text()).get("beta", beta) == beta


def reused_record(
    design: StudyDesign, results: Path, arm: Arm, seed: int, stage: str, beta: float
) -> dict[str, Any] | None:
    """The record of this cell (trained at ``beta``) in ``cells_from``, renamed as this arm's and marked as reused;
    None when there is none. Raises when the record found is another cell's or the other design differs."""
    source = _source(design, arm, seed, stage, beta)
    if source is None:
        return None
    record = json.loads(source.read_text())
    same_arm = record.get("arm") == arm.key
    same_beta = arm.beta is not None and record.get("arm") == replace(arm, beta=None).key
    wrong_beta = record.get("beta", beta) != beta
    if record.get("seed") != seed or wrong_beta or not (same_arm or same_beta):
        raise ValueError(f"{source} is not the record of {cell_name(arm, seed)}; it cannot be reused.")
    if not (Path(design.cells_from) / "preregistration.json").is_file():
        raise ValueError(
            f"cells_from {design.cells_from}: it holds no preregistration.json, so nothing shows its cells were "
            "trained and measured as this study's would be; they are not reused. Point cells_from at a study's "
            "results folder (with its pre-registration), or drop cells_from to train these cells."
        )
    other = design_in_force(Path(design.cells_from))
    reuse_check(other, Path(design.cells_from), design, results)
    evaluation = record.get("evaluation") or evaluation_record(StudyDesign.from_dict(other))
    return {**record, "cell": cell_name(arm, seed), "arm": arm.key, "evaluation": evaluation,
            "reused_from": str(source)}  # fmt: skip
