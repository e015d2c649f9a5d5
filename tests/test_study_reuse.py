"""Property tests of study reuse and of reading records. Whatever records another study's folder holds (hostile
ones included), a cell is reused only if it is this cell — same arm (or its β-less name) and seed, trained at this
cell's β — and the plan's count of free cells (``is_reusable``) agrees with what the run then reuses."""

from __future__ import annotations

import json
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from squarechipo.reproduce.study.design import Arm, StudyDesign
from squarechipo.reproduce.study.provenance import read_record
from squarechipo.reproduce.study.report import load_records
from squarechipo.reproduce.study.reuse import cell_name, is_reusable, reused_record

BETAS = (0.01, 0.05)
_MISSING = "missing"


def _seed0(value) -> bool:
    """Seed 0 as the runner writes it (JSON false equals 0 in Python, and is not a seed)."""
    return type(value) is int and value == 0


@st.composite
def _file(draw, arm_keys):
    """A record as a user's edit or another study may leave it: any arm, seed and β, re-typed, or no β at all."""
    retyped = st.sampled_from((None, False, "0", "0.01", [0], {"a": 1}, ["ctl_eps1_dpo"]))
    record = {
        "arm": draw(st.sampled_from(arm_keys) | retyped),
        "seed": draw(st.sampled_from((0, 1)) | retyped),
        "x": 1,
    }
    beta = draw(st.sampled_from((*BETAS, _MISSING)) | retyped)
    return record if beta == _MISSING else {**record, "beta": beta}


@st.composite
def _case(draw):
    arm_beta = draw(st.sampled_from((None, *BETAS)))
    arm = Arm("dpo", "CTL", 1.0, beta=arm_beta)
    plain = replace(arm, beta=None)
    keys = sorted({arm.key, plain.key, Arm("dpo", "CTL", 2.0).key})
    names = sorted({cell_name(arm, 0), cell_name(plain, 0)})
    files = {name: draw(_file(keys)) for name in names if draw(st.booleans())}
    return arm, files, draw(st.sampled_from(BETAS)), draw(st.sampled_from(BETAS))


@settings(max_examples=150, deadline=None)
@given(_case())
def test_a_cell_is_reused_only_if_it_is_this_cell_and_the_plan_agrees_with_the_run(case):
    arm, files, this_design_beta, other_design_beta = case
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        source = tmp / "other"
        (source / "main").mkdir(parents=True)
        for name, record in files.items():
            (source / "main" / f"{name}.json").write_text(json.dumps(record))
        base = StudyDesign(setup_from=str(tmp / "setup"))
        (source / "preregistration.json").write_text(
            json.dumps({"design": replace(base, beta=other_design_beta).to_dict()})
        )
        design = replace(base, beta=this_design_beta, cells_from=str(source), main_arms=(arm,))
        beta = arm.beta if arm.beta is not None else this_design_beta
        free = is_reusable(design, arm, 0, beta)
        try:
            reused = reused_record(design, tmp / "results", arm, 0, "main", beta)
        except ValueError as refusal:
            assert not free and "cannot be reused" in str(refusal)
            return
    assert free == (reused is not None), "the plan counts as free a cell the run does not reuse, or the reverse"
    plain, own = (files.get(cell_name(a, 0)) for a in (replace(arm, beta=None), arm))
    if reused is None:
        # Liveness: the other study's record of exactly this cell, under its β-less name, is not passed over.
        assert own is None and not (
            plain is not None and plain["arm"] == replace(arm, beta=None).key and _seed0(plain["seed"])
            and plain.get("beta", other_design_beta) == beta
        )  # fmt: skip
        return
    source = own if own is not None else plain
    assert _seed0(source["seed"]) and source["arm"] in (arm.key, replace(arm, beta=None).key)
    assert source.get("beta", other_design_beta) == beta, "a cell trained at another β was reused"
    assert (reused["arm"], reused["cell"], reused["x"]) == (arm.key, cell_name(arm, 0), 1)


def test_a_record_that_is_not_json_is_refused_naming_its_file(tmp_path):
    source = tmp_path / "other"
    (source / "main").mkdir(parents=True)
    arm = Arm("dpo", "CTL", 1.0)
    (source / "main" / f"{cell_name(arm, 0)}.json").write_text('{"arm": "ctl_eps1_dpo", "se')
    design = StudyDesign(setup_from=str(tmp_path / "setup"), cells_from=str(source), main_arms=(arm,))
    (source / "preregistration.json").write_text(json.dumps({"design": design.to_dict()}))
    with pytest.raises(ValueError, match=r"ctl_eps1_dpo_seed0\.json: not a readable record .*restore it from git"):
        is_reusable(design, arm, 0, 0.1)


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(
        st.text(max_size=40),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=5),
            lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
        ).map(json.dumps),
    )
)
def test_a_record_file_is_read_as_its_object_or_refused_naming_it(text):
    """Whatever a user leaves in a record file (cut off, edited, re-typed as a list or a number): the study reads
    the JSON object it holds, or refuses in one line that names the file; it never runs on with something else."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ctl_eps1_dpo_seed0.json"
        path.write_text(text, encoding="utf-8")
        try:
            expected = json.loads(text)
        except ValueError:
            expected = None
        if isinstance(expected, dict):
            assert read_record(path) == expected
            assert load_records(Path(tmp)) == [expected]
        else:
            for read in (lambda: read_record(path), lambda: load_records(Path(tmp))):
                with pytest.raises(ValueError, match="ctl_eps1_dpo_seed0.json: not a readable record") as refusal:
                    read()
                assert "\n" not in str(refusal.value)
