"""A privacy budget the custodian sets (squarechipo.privacy.release.budget): the registry refuses a release that
would spend more ε than it allows, before any noise is drawn and again in the transaction that enters it; the ledger,
the model's record and `key verify` state it; bad budgets, an analyst's budget and a budget edited by hand are
refused, nothing spent. The team's server (roles, a race, a migration) is tested in tests/test_team_registry.py."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from squarechipo.cli import main
from squarechipo.privacy import LabelPipeline, get_ledger, release_dataset
from squarechipo.privacy.release.registry import REGISTRY_ENV, RegistryError
from squarechipo.privacy.release.registry_admin import describe
from tests.helpers.rows import distinct_pairs


def _budget(capsys, *args: str) -> dict | list:
    capsys.readouterr()
    assert main(["registry", "budget", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_release_that_would_pass_the_budget_is_refused_naming_rows_spent_asked_and_remaining(
    tmp_path, capsys, caplog
):
    """A budget of ε 1.5: a first release at ε 1 passes and its ledger says 0.5 remains; a re-release at ε 1 of the
    same rows is refused in one line, before any noise is drawn (no folder, no staging, nothing entered); at ε 0.5
    it passes and uses the rest; near-copies of those rows count as the rows."""
    assert _budget(capsys, "set", "--epsilon", "1.5")["epsilon"] == 1.5
    rows = distinct_pairs(6, offset=9500)
    first = release_dataset(rows, LabelPipeline(epsilon=1.0), tmp_path / "first")
    (release,) = get_ledger(first).releases
    assert release.budget["scope"] == "registry" and release.budget["epsilon"] == 1.5
    assert release.budget["remaining"] == pytest.approx(0.5)
    with pytest.raises(RegistryError) as refused:
        release_dataset(rows, LabelPipeline(epsilon=1.0), tmp_path / "again", rerelease=True)
    assert (
        "privacy budget (registry, ε 1.5) would be passed: 6 of 6 rows have spent up to ε 1, this release asks ε 1, "
        "and ε 0.5 remains for them" in str(refused.value)
    )
    assert "\n" not in str(refused.value) and "drew a release" not in caplog.text
    assert not (tmp_path / "again").exists() and not list(tmp_path.glob(".again*staging"))
    assert describe()["releases"] == 1
    rest = release_dataset(rows, LabelPipeline(epsilon=0.5), tmp_path / "rest", rerelease=True)
    assert get_ledger(rest).releases[0].budget["remaining"] == pytest.approx(0.0)
    near = rows.map(lambda row: {"chosen": row["chosen"] + " Then review it."})
    with pytest.raises(RegistryError, match=r"\d of 6 rows have spent up to ε 1.5, this release asks ε 0.1"):
        release_dataset(near, LabelPipeline(epsilon=0.1), rerelease=True)
    shown = _budget(capsys, "show")
    assert shown[0]["spent"] == pytest.approx(1.5) and shown[0]["remaining"] == pytest.approx(0.0)
    assert {r["folder"] for r in shown[0]["closest_releases"]} == {str(tmp_path / "first"), str(tmp_path / "rest")}
    capsys.readouterr()
    assert main(["registry", "show"]) == 0
    assert json.loads(capsys.readouterr().out)["budgets"][0]["scope"] == "registry"


def test_budgets_by_dataset_and_by_unit_apply_to_their_releases_only(tmp_path, capsys):
    """A dataset's budget binds the releases naming that dataset; a unit's budget the releases declaring that unit
    (per unit: two rows of one labeller spend 2ε); rows holding the unit column but declaring no unit are refused."""
    _budget(capsys, "set", "--epsilon", "0.5", "--dataset", "tight")
    with pytest.raises(RegistryError, match=r"budget \(dataset:tight, ε 0.5\) would be passed: 4 of 4 rows"):
        release_dataset(distinct_pairs(4, offset=9600), LabelPipeline(epsilon=1.0), dataset_name="tight")
    release_dataset(distinct_pairs(4, offset=9600), LabelPipeline(epsilon=1.0), dataset_name="loose")
    _budget(capsys, "set", "--epsilon", "1.5", "--unit", "labeller")
    rows = distinct_pairs(4, offset=9700).add_column("labeller", ["a", "a", "b", "c"])
    with pytest.raises(RegistryError, match=r"declares no privacy unit: declare it \(privacy_unit='labeller'"):
        release_dataset(rows, LabelPipeline(epsilon=1.0))
    with pytest.raises(RegistryError, match=r"budget \(unit:labeller, ε 1.5\) would be passed: .* asks ε 2"):
        release_dataset(rows, LabelPipeline(epsilon=1.0), privacy_unit="labeller")  # labeller a: two rows, 2ε
    released = release_dataset(rows, LabelPipeline(epsilon=0.5), privacy_unit="labeller")
    assert get_ledger(released).releases[0].budget["scope"] == "unit:labeller"


def test_a_budget_lowered_below_what_was_spent_keeps_the_releases_and_refuses_new_ones(tmp_path, capsys, caplog):
    _budget(capsys, "set", "--epsilon", "2")
    rows = distinct_pairs(4, offset=9800)
    release_dataset(rows, LabelPipeline(epsilon=1.0), tmp_path / "kept")
    lowered = _budget(capsys, "set", "--epsilon", "0.5")
    assert lowered["spent"] == 1.0 and lowered["remaining"] == 0.0 and "below what was spent" in caplog.text
    from squarechipo.privacy import load_release

    assert get_ledger(load_release(tmp_path / "kept")).total_epsilon == 1.0  # the earlier release stays readable
    with pytest.raises(RegistryError, match=r"4 of 4 rows have spent up to ε 1, this release asks ε 0.1"):
        release_dataset(rows, LabelPipeline(epsilon=0.1), rerelease=True)
    release_dataset(distinct_pairs(4, offset=9850), LabelPipeline(epsilon=0.5))  # other rows, within it


@pytest.mark.parametrize("value", ["-1", "0", "nan", "inf", "lots"])
def test_a_budget_that_is_not_a_positive_finite_epsilon_is_refused_in_one_line(value, tmp_path, monkeypatch, capsys):
    assert main(["registry", "budget", "set", "--epsilon", value]) == 1
    err = capsys.readouterr().err
    assert f"budget ε {value!r}: give a finite number above 0" in err and len(err.strip().splitlines()) == 1
    target = tmp_path / "new.sqlite"
    assert main(["registry", "init", "--path", str(target), "--budget", value]) == 1
    assert not target.exists()  # refused before the registry was started
    assert main(["registry", "budget", "show"]) == 0 and json.loads(capsys.readouterr().out) == []


def test_an_analyst_cannot_set_a_budget_and_an_edited_one_is_refused_nothing_spent(tmp_path, monkeypatch, capsys):
    """Only a holder of the signing key signs a budget; one edited in the SQLite file by hand (raised) does not verify,
    and no release is made against it; `registry init --budget` starts a registry with one."""
    from tests.helpers.keys import roles

    keys = roles(tmp_path, monkeypatch)
    keys.analyst()
    assert main(["registry", "budget", "set", "--epsilon", "3"]) == 1
    assert "needs the custodian's signing key" in capsys.readouterr().err
    started = tmp_path / "analysts.sqlite"
    assert main(["registry", "init", "--path", str(started), "--budget", "3"]) == 1
    assert "the custodian starts the registry" in capsys.readouterr().err and not started.exists()
    keys.custodian()
    target = tmp_path / "budgeted.sqlite"
    assert main(["registry", "init", "--path", str(target), "--budget", "1"]) == 0
    monkeypatch.setenv(REGISTRY_ENV, str(target))
    release_dataset(distinct_pairs(4, offset=9900), LabelPipeline(epsilon=1.0))
    with sqlite3.connect(target) as db:
        db.execute("UPDATE budgets SET entry = replace(entry, '\"epsilon\": 1.0', '\"epsilon\": 100.0')")
    with pytest.raises(RegistryError, match=r"budget entry 1\].*does not match its digest.*No release is made"):
        release_dataset(distinct_pairs(4, offset=9900), LabelPipeline(epsilon=1.0), rerelease=True)
    assert describe()["releases"] == 1
    assert main(["registry", "budget", "show"]) == 1


def test_the_model_record_and_key_verify_state_the_budget_in_force(tmp_path, capsys, tiny_model_factory):
    from squarechipo.privacy.ledger.debiasing import resolve_privacy
    from squarechipo.privacy.provenance.record import PrivacyRecord, write_privacy_record

    _budget(capsys, "set", "--epsilon", "4")
    released = release_dataset(distinct_pairs(6, offset=9950), LabelPipeline(epsilon=1.0), tmp_path / "released")
    settings = resolve_privacy(get_ledger(released), epsilon=None, flip_rate=None, override=False)
    model = tmp_path / "model"
    tiny_model_factory(0).save_pretrained(model)
    write_privacy_record(model, PrivacyRecord.build({"stage": "preference_optimization", **settings.record(False)}))
    for path in (model, tmp_path / "released"):
        capsys.readouterr()
        assert main(["key", "verify", str(path)]) == 0
        shown = json.loads(capsys.readouterr().out)
        budget = shown["budget"] if "budget" in shown else shown["splits"]["release"]["budget"]
        assert budget[0]["scope"] == "registry" and budget[0]["epsilon"] == 4 and budget[0]["remaining"] == 3
    assert os.environ[REGISTRY_ENV] and Path(os.environ[REGISTRY_ENV]).is_file()


_POOL = [distinct_pairs(4, offset=10_100 + 20 * k) for k in range(3)]


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(steps=st.lists(st.tuples(st.integers(0, 2), st.sampled_from([0.25, 0.5, 1.0])), min_size=1, max_size=6))
def test_no_sequence_of_releases_takes_a_row_past_its_budget(steps):
    """The budget's invariant over random sequences of (re-)releases of three disjoint row sets at random ε under a
    budget of 1.5: a release is refused exactly when it would take its rows past the budget, and the registry's
    composed ε of every row set never passes it (and equals the sum of its releases that were made)."""
    import hashlib
    import tempfile

    from squarechipo.data.fingerprint import canonical_rows
    from squarechipo.privacy.release.budget_admin import set_budget
    from squarechipo.privacy.release.registry import earlier_releases, init_registry

    with tempfile.TemporaryDirectory() as folder, pytest.MonkeyPatch.context() as patch:
        patch.setenv(REGISTRY_ENV, str(Path(folder) / "r.sqlite"))
        init_registry()
        set_budget(1.5)
        spent = [0.0, 0.0, 0.0]
        for k, epsilon in steps:
            over = spent[k] + epsilon > 1.5 + 1e-9
            try:
                release_dataset(_POOL[k], LabelPipeline(epsilon=epsilon), rerelease=True)
                made = True
            except RegistryError as error:
                assert "would be passed" in str(error)
                made = False
            assert made == (not over), (steps, spent, k, epsilon)
            spent[k] += epsilon if made else 0.0
            for j, rows in enumerate(_POOL):
                units = [hashlib.sha256(r.encode()).digest() for r in canonical_rows(rows.with_format("arrow")[:])]
                composed = earlier_releases(units).epsilon
                assert composed == pytest.approx(spent[j]) and composed <= 1.5 + 1e-9
