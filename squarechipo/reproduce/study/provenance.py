"""What a cell record says about the code and the evaluation that made it, and the check that only cells measured
the same way are paired.

A record written since this module carries ``code`` (the commit of the checkout that trained it, whether that
checkout had uncommitted changes, the library's version) and ``evaluation`` (every design setting that decides
what its numbers measure). The report pairs cells only when their evaluations are equal, unless the design says
that the ones it pairs are equivalent (``evaluations_equivalent``); records written before carry neither and are
taken as one evaluation, as they were.
"""

from __future__ import annotations

import json
import subprocess
from importlib.metadata import version
from pathlib import Path
from typing import Any

from squarechipo.data.label_roles import label_free
from squarechipo.reproduce.study.design import StudyDesign

__all__ = ["EVALUATION_FIELDS", "cell_provenance", "check_same_evaluation", "code_record", "evaluation_record"]

#: The design settings that decide what a cell's numbers measure.
EVALUATION_FIELDS = (
    "test_prompts",
    "samples_per_prompt",
    "max_new_tokens",
    "generation_batch_size",
    "eval_dtype",
    "checkpoints",
)
_ROOT = Path(__file__).resolve().parents[3]


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=_ROOT, capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def code_record() -> dict[str, Any]:
    """The commit of the checkout this package runs from (None outside a git checkout), whether its package files
    had uncommitted changes, and the library's version."""
    commit = _git("rev-parse", "HEAD")
    changed = _git("status", "--porcelain", "--", "squarechipo") if commit else None
    return {"commit": commit, "uncommitted_changes": bool(changed), "library_version": version("squarechipo")}


def evaluation_record(design: StudyDesign) -> dict[str, Any]:
    """The design settings that decide what a cell's numbers measure (:data:`EVALUATION_FIELDS`)."""
    return json.loads(json.dumps({name: getattr(design, name) for name in EVALUATION_FIELDS}))


def cell_provenance(design: StudyDesign, setup_digests: dict | None) -> dict[str, Any]:
    """The fields a new cell record carries about its code, its evaluation and (portable set-ups) its set-up."""
    extra = {"setup_digests": setup_digests} if setup_digests else {}
    return {"code": code_record(), "evaluation": evaluation_record(design), **extra}


@label_free("cell records' evaluation settings, no row of data")
def check_same_evaluation(records: list[dict[str, Any]], design: StudyDesign) -> None:
    """Refuse to pair cells measured under different evaluations, unless the design declares them equivalent."""
    seen: dict[str, list[str]] = {}
    for record in records:
        key = json.dumps(record.get("evaluation"), sort_keys=True)
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
