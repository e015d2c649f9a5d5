"""squarechipo.reproduce.study.provenance: records name their code and evaluation, and cells measured under different
evaluations are not paired unless the design says they are equivalent."""

from __future__ import annotations

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
    assert code["commit"] == head and isinstance(code["uncommitted_changes"], bool) and code["library_version"]
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
