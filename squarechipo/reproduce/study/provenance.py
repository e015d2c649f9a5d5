"""What a cell record says about the code and the evaluation that made it, and the check that only cells measured
the same way are paired.

A record written since this module carries ``code`` (the commit of the checkout that trained it, whether that
checkout had uncommitted changes, the library's version) and ``evaluation`` (every design setting that decides
what its numbers measure). The report pairs cells only when their evaluations are equal, unless the design says
that the ones it pairs are equivalent (``evaluations_equivalent``); a record written before carries neither and was
measured under its own study's design. A record another study reused carries what is known of both
(:func:`unrecorded_code`).
"""

from __future__ import annotations

import json
import subprocess
from importlib.metadata import version
from pathlib import Path
from typing import Any

from squarechipo.data.label_roles import label_free
from squarechipo.reproduce.study.design import SETUP_FIELDS, StudyDesign

__all__ = [
    "CELL_FIELDS",
    "EVALUATION_FIELDS",
    "cell_provenance",
    "check_same_evaluation",
    "code_record",
    "evaluation_record",
    "read_record",
    "reuse_check",
    "unrecorded_code",
]

#: The design settings that decide what a cell's numbers measure.
EVALUATION_FIELDS = (
    "test_prompts",
    "samples_per_prompt",
    "max_new_tokens",
    "generation_batch_size",
    "eval_dtype",
    "checkpoints",
)
#: The design settings that decide what a cell trains and measures (its arm's method, labels, rows and β aside): a
#: cell recorded by another study is reused only if that study's design agrees on every one.
CELL_FIELDS = tuple(
    dict.fromkeys(
        (*SETUP_FIELDS, *EVALUATION_FIELDS, "data_dir", "label_source", "corruption_rate", "train_rows", "epochs")
        + ("learning_rate", "r_max", "lr_scheduler_type")
    )
)
_ROOT = Path(__file__).resolve().parents[3]


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=_ROOT, capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def read_record(path: Path) -> dict[str, Any]:
    """A cell record (or any study JSON record) as a dict; an edited or cut-off file is refused naming it."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        why = None if isinstance(record, dict) else "not a JSON object"
    except (OSError, ValueError) as error:
        record, why = None, str(error)
    if why:
        raise ValueError(
            f"{path}: not a readable record ({why}); restore it from git (git checkout -- {path}), or delete it so "
            "its cell is trained again."
        )
    return record


def code_record() -> dict[str, Any]:
    """The commit of the checkout this package runs from (None outside a git checkout), whether its package files
    had uncommitted changes, and the library's version."""
    commit = _git("rev-parse", "HEAD")
    changed = _git("status", "--porcelain", "--", "squarechipo") if commit else None
    return {"commit": commit, "uncommitted_changes": bool(changed), "library_version": version("squarechipo")}


def unrecorded_code(preregistration: dict[str, Any], stage: str, record_file: Path) -> dict[str, Any]:
    """What is known of the code behind a record written before records named it (no ``code``), from its study's
    ``preregistration`` and git. A pilot run writes the pre-registration from the checkout that trained its cells:
    ``commit`` is that checkout's. A main cell ran after the plan in force (the last amendment, else the
    pre-registration) from a checkout no file names: ``commit`` is None, ``trained_after`` is the plan's commit, and
    ``committed_in`` (the commit that added ``record_file``, when git knows it) bounds it from the other side."""
    plan = (preregistration.get("amendments") or [preregistration])[-1]
    added = _git("log", "--diff-filter=A", "--format=%H", "--", str(Path(record_file).resolve()))
    known = {
        "commit": preregistration.get("commit") if stage == "pilot" else None,
        "uncommitted_changes": None,
        "library_version": preregistration.get("version"),
        "recorded": "from the study's pre-registration and git: the record predates records naming their code",
        "committed_in": added.split()[-1] if added else None,
    }
    return known if stage == "pilot" else {**known, "trained_after": plan.get("commit")}


def evaluation_record(design: StudyDesign) -> dict[str, Any]:
    """The design settings that decide what a cell's numbers measure (:data:`EVALUATION_FIELDS`)."""
    return json.loads(json.dumps({name: getattr(design, name) for name in EVALUATION_FIELDS}))


def cell_provenance(design: StudyDesign, setup_digests: dict | None) -> dict[str, Any]:
    """The fields a new cell record carries about its code, its evaluation, the machine that ran it and (portable
    set-ups) its set-up."""
    from squarechipo.models.runtime import machine_record  # torch: only where a cell is recorded

    extra = {"setup_digests": setup_digests} if setup_digests else {}
    return {"code": code_record(), "evaluation": evaluation_record(design), "machine": machine_record(), **extra}


@label_free("cell records' evaluation settings, no row of data")
def check_same_evaluation(records: list[dict[str, Any]], design: StudyDesign) -> None:
    """Refuse to pair cells measured under different evaluations, unless the design declares them equivalent. A
    record without ``evaluation`` was written by this study's runner before records named it: ``design`` measured
    it."""
    seen: dict[str, list[str]] = {}
    own = evaluation_record(design)
    for record in records:
        key = json.dumps(record.get("evaluation") or own, sort_keys=True)
        seen.setdefault(key, []).append(record.get("cell") or f"{record.get('arm')} seed {record.get('seed')}")
    if len(seen) > 1 and not design.evaluations_equivalent:
        groups = "; ".join(
            f"{json.loads(key)} for {len(cells)} cell(s), e.g. {cells[0]}" for key, cells in seen.items()
        )
        raise ValueError(
            f"the records of study {design.name!r} were measured under {len(seen)} different evaluations ({groups}), "
            "so their cells cannot be paired as one study. Measure them again under one evaluation, or, if the design "
            "shows the evaluations measure the same thing, say so in it: evaluations_equivalent: true."
        )


@label_free("study designs, no row of data")
def reuse_check(other: dict[str, Any], other_results: Path, design: StudyDesign, results: Path) -> None:
    """Refuse to reuse cells of the study in ``other_results`` (its design in force: ``other``) unless it trained on
    the same set-up and agrees with ``design`` on every :data:`CELL_FIELDS` setting."""
    mine, other = json.loads(json.dumps(design.to_dict())), dict(other)
    # A study without setup_from trained its own set-up: the one it shares is itself.
    other["set-up"], mine["set-up"] = (
        str(Path(d.get("setup_from") or r).resolve()) for d, r in ((other, other_results), (mine, results))
    )
    differ = [name for name in (*CELL_FIELDS, "set-up") if other.get(name) != mine.get(name)]
    if differ:
        raise ValueError(
            f"cells_from {other_results}: its design differs from {design.name!r} in {differ} "
            f"({', '.join(f'{n}: {other.get(n)!r} there, {mine.get(n)!r} here' for n in differ[:3])}), so its cells "
            "trained or measured something else and cannot be reused. Train these cells (drop cells_from), or make "
            "the design agree."
        )
