"""Cells another study already trained and measured (``cells_from``), reused only where they are this study's cells.

A record is reused when it is the same arm and seed, or the same method, labels and rows recorded at this arm's β
under another arm name (a β the other study chose from its pilot), and only if the other study's pre-registered
design agrees with this one on every setting that decides what a cell trains and measures
(:data:`squarechipo.reproduce.study.provenance.CELL_FIELDS`). A reused record carries the code that trained it and
the evaluation that design measured it under (a record older than those fields: what its study's pre-registration
and git show of them), so the report's check that paired cells share one evaluation applies to it too.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from squarechipo.reproduce.study.design import Arm, StudyDesign
from squarechipo.reproduce.study.power import design_in_force, read_preregistration
from squarechipo.reproduce.study.provenance import evaluation_record, read_record, reuse_check, unrecorded_code

__all__ = ["cell_name", "is_reusable", "reused_record"]


def cell_name(arm: Arm, seed: int) -> str:
    return f"{arm.key}_seed{seed}"


def _trained_beta(design: StudyDesign, record: dict[str, Any]) -> float | None:
    """The β a record was trained at: its own ``beta``, else (records written before arms had their own β) the β of
    the design that trained it; None when that design is not on record."""
    if "beta" in record:
        return record["beta"]
    if not (Path(design.cells_from) / "preregistration.json").is_file():
        return None
    return design_in_force(Path(design.cells_from))["beta"]


def _is_this_cell(design: StudyDesign, record: dict[str, Any], arm: Arm, seed: int, beta: float) -> bool:
    """The record is this arm's (or, for an arm named by its β, the same arm's without one) at this seed and β."""
    names = (arm.key, replace(arm, beta=None).key) if arm.beta is not None else (arm.key,)  # any JSON type may come
    same_seed = record.get("seed") == seed and not isinstance(record.get("seed"), bool)  # JSON false == 0 in Python
    return record.get("arm") in names and same_seed and _trained_beta(design, record) == beta


def _source(design: StudyDesign, arm: Arm, seed: int, stage: str, beta: float) -> tuple[Path, dict] | None:
    """This cell's record in ``cells_from``: under this arm's own name, else under its β-less name if that is this
    cell (the other study's arm at another β is another cell, which this study trains)."""
    if not design.cells_from:
        return None
    folder = Path(design.cells_from) / stage
    own = folder / f"{cell_name(arm, seed)}.json"
    if own.exists():
        return own, read_record(own)
    other = folder / f"{cell_name(replace(arm, beta=None), seed)}.json"
    if arm.beta is None or not other.exists():
        return None
    record = read_record(other)
    return (other, record) if _is_this_cell(design, record, arm, seed, beta) else None


def is_reusable(design: StudyDesign, arm: Arm, seed: int, beta: float, stage: str = "main") -> bool:
    """Whether the cell (trained at ``beta``) is another study's record: the plan counts it as free."""
    found = _source(design, arm, seed, stage, beta)
    return found is not None and _is_this_cell(design, found[1], arm, seed, beta)


def reused_record(
    design: StudyDesign, results: Path, arm: Arm, seed: int, stage: str, beta: float
) -> dict[str, Any] | None:
    """The record of this cell (trained at ``beta``) in ``cells_from``, renamed as this arm's and marked as reused;
    None when there is none. Raises when the record found is another cell's or the other design differs."""
    found = _source(design, arm, seed, stage, beta)
    if found is None:
        return None
    source, record = found
    if not (Path(design.cells_from) / "preregistration.json").is_file():
        raise ValueError(
            f"cells_from {design.cells_from}: it holds no preregistration.json, so nothing shows its cells were "
            "trained and measured as this study's would be; they are not reused. Point cells_from at a study's "
            "results folder (with its pre-registration), or drop cells_from to train these cells."
        )
    if not _is_this_cell(design, record, arm, seed, beta):
        raise ValueError(
            f"{source} is not the record of {cell_name(arm, seed)} (arm {arm.key}, seed {seed}, β {beta:g}); it "
            "cannot be reused. Restore the file from git, or drop cells_from to train this study's cells."
        )
    other = design_in_force(Path(design.cells_from))
    reuse_check(other, Path(design.cells_from), design, results)
    # Its own code and evaluation, else what its study's records show of them (amendments change no evaluation
    # setting, so the design in force measured every one of its cells), never this study's.
    evaluation = record.get("evaluation") or evaluation_record(StudyDesign.from_dict(other))
    code = record.get("code") or unrecorded_code(read_preregistration(Path(design.cells_from)), stage, source)
    return {**record, "cell": cell_name(arm, seed), "arm": arm.key, "code": code, "evaluation": evaluation,
            "reused_from": str(source)}  # fmt: skip
