"""squarechipo.reproduce.study.provenance: records name their code and evaluation, and cells measured under different
evaluations are not paired unless the design says they are equivalent."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from squarechipo.reproduce.study.design import StudyDesign
from squarechipo.reproduce.study.provenance import check_same_evaluation, code_record, evaluation_record

ROOT = Path(__file__).resolve().parents[1]


def test_a_record_names_the_checkout_it_ran_from_and_the_settings_that_measured_it():
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    code = code_record()
    assert code["commit"] == (head or None)  # outside a git checkout (a copy) there is no commit to name
    assert isinstance(code["uncommitted_changes"], bool) and code["library_version"]
    design = StudyDesign()
    assert evaluation_record(design)["test_prompts"] == design.test_prompts
    assert evaluation_record(replace(design, max_new_tokens=64)) != evaluation_record(design)


def test_cells_from_two_evaluations_are_paired_only_if_the_design_says_they_are_equivalent():
    """The rows-needed study reused cells evaluated in another run (about 300-350 s against 200 s a cell), an
    equivalence nobody tested: the report now refuses to pair cells from different evaluations by default."""
    design = StudyDesign()
    one, other = evaluation_record(design), evaluation_record(replace(design, test_prompts=64))
    records = [{"cell": "a_seed0", "evaluation": one}, {"cell": "b_seed0", "evaluation": other}]
    with pytest.raises(ValueError, match=r"2 different evaluations .* evaluations_equivalent: true"):
        check_same_evaluation(records, design)
    check_same_evaluation(records, replace(design, evaluations_equivalent=True))
    check_same_evaluation([{"cell": "a_seed0"}, {"cell": "b_seed0"}], design)  # records written before: one group
    check_same_evaluation(records[:1] * 2, design)


def test_a_record_without_an_evaluation_was_measured_under_its_own_studys_design():
    """Records written before records named their evaluation pair with this design's, not with another's."""
    design = StudyDesign()
    one, other = evaluation_record(design), evaluation_record(replace(design, test_prompts=64))
    check_same_evaluation([{"cell": "a_seed0"}, {"cell": "b_seed0", "evaluation": one}], design)
    with pytest.raises(ValueError, match=r"2 different evaluations"):
        check_same_evaluation([{"cell": "a_seed0"}, {"cell": "b_seed0", "evaluation": other}], design)


def _reused(design, stage: str, arm_key: str, seed: int, beta: float) -> dict:
    from squarechipo.reproduce.study.reuse import reused_record

    arms = {a.key: a for a in (design.pilot_arms if stage == "pilot" else design.main_arms)}
    return reused_record(design, ROOT / "results" / design.name, arms[arm_key], seed, stage, beta)


def test_a_reused_record_names_the_code_that_trained_it_not_the_reusing_checkouts(monkeypatch):
    """The β study reused the noisy study's cells, written before records named their code: they carried none (an
    audit found `code: null`). A pilot cell names the checkout whose pilot wrote the noisy study's pre-registration; a
    main cell names the plan's commit it was trained after and the commit that added it, never this checkout."""
    from squarechipo.reproduce.study.design import load_design

    monkeypatch.chdir(ROOT)  # the designs name their folders relative to the checkout
    design = load_design("recipes/studies/overoptimisation_beta.yaml")
    source = json.loads((ROOT / design.cells_from / "preregistration.json").read_text())
    head = code_record()["commit"]
    pilot = _reused(design, "pilot", "ctl_eps1_dpo_beta0.1", 4000, 0.1)["code"]
    assert pilot["commit"] == source["commit"] != head and pilot["library_version"] == source["version"]
    main = _reused(design, "main", "ctl_eps1_square_chipo_beta0.01", 0, 0.01)
    assert main["code"]["commit"] is None and main["code"]["trained_after"] == source["commit"]
    added, path = main["code"]["committed_in"], main["reused_from"]
    if not _git("rev-parse", "HEAD"):  # a copy that is not a git checkout: git knows no commit
        assert added is None
    else:
        assert _git("cat-file", "-e", f"{added}:{path}") and not _git("cat-file", "-e", f"{added}^:{path}")
    assert main["evaluation"] == evaluation_record(design)  # the settings agree, or it would not be reused


def _git(*args: str) -> bool:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True).returncode == 0


def test_every_committed_reused_record_carries_its_code_and_evaluation():
    reused = [p for p in ROOT.glob("results/*/*/*.json") if "reused_from" in json.loads(p.read_text())]
    assert reused
    for path in reused:
        record = json.loads(path.read_text())
        code = record.get("code") or {}
        assert record.get("evaluation") and (code.get("commit") or code.get("trained_after")), path
