"""A privacy budget the custodian sets (squarechipo.privacy.release.budget): the registry refuses a release that
would spend more ε than it allows, before any noise is drawn and again in the transaction that enters it; the ledger,
the model's record and `key verify` state it; bad budgets, an analyst's budget and a budget edited by hand are
refused, nothing spent. The team's server (roles, a race, a migration) is tested in tests/test_team_registry.py."""

from __future__ import annotations

import json
import os
import re
import sqlite3
from contextlib import closing
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
    assert not (tmp_path / ".again.lock").exists()  # a refused release leaves no lock file beside its folder
    with pytest.raises(RegistryError, match="would be passed"):
        release_dataset(rows, LabelPipeline(epsilon=1.0), tmp_path / "run" / "out" / "released", rerelease=True)
    assert not (tmp_path / "run").exists()  # nor the folders made for it
    assert describe()["releases"] == 1
    rest = release_dataset(rows, LabelPipeline(epsilon=0.5), tmp_path / "rest", rerelease=True)
    assert get_ledger(rest).releases[0].budget["remaining"] == pytest.approx(0.0)
    near = rows.map(lambda row: {"chosen": row["chosen"] + " Then review it."})
    with pytest.raises(RegistryError, match=r"\d of 6 rows have spent up to ε 1.5, this release asks ε 0.1"):
        release_dataset(near, LabelPipeline(epsilon=0.1), rerelease=True)
    shown = _budget(capsys, "show")
    assert shown[0]["spent"] == pytest.approx(1.5) and shown[0]["remaining"] == pytest.approx(0.0)
    import datetime

    made = datetime.datetime.fromisoformat(shown[0]["set_at"])  # when it was set, in UTC, to the microsecond
    assert made.utcoffset() == datetime.timedelta(0) and len(shown[0]["set_at"]) == len(
        "2026-12-07T00:00:00.000000+00:00"
    )
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
    with pytest.raises(RegistryError, match=r"declares no privacy unit: declare privacy_unit='labeller'"):
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


def test_a_unit_budget_on_a_column_of_the_comparison_is_refused_in_one_line(capsys):
    """`budget set --unit prompt` would ask every release to declare a unit that releases refuse: refused first."""
    assert main(["registry", "budget", "set", "--epsilon", "1", "--unit", "prompt"]) == 1
    err = capsys.readouterr().err
    assert "--unit prompt: 'prompt' is a column of the comparison itself" in err and len(err.strip().splitlines()) == 1
    assert main(["registry", "budget", "show"]) == 0 and json.loads(capsys.readouterr().out) == []


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
    assert capsys.readouterr().err.strip() == (
        "squarechipo registry: error: setting a privacy budget needs the custodian's signing key "
        "(SQUARECHIPO_SIGNING_KEY, or this machine's own key): a budget is signed so that nobody else can raise it. "
        "Ask the custodian to set it. (--debug shows the traceback)"
    )
    started = tmp_path / "analysts.sqlite"
    assert main(["registry", "init", "--path", str(started), "--budget", "3"]) == 1
    assert "the custodian starts the registry" in capsys.readouterr().err and not started.exists()
    keys.custodian()
    target = tmp_path / "budgeted.sqlite"
    assert main(["registry", "init", "--path", str(target), "--budget", "1"]) == 0
    monkeypatch.setenv(REGISTRY_ENV, str(target))
    release_dataset(distinct_pairs(4, offset=9900), LabelPipeline(epsilon=1.0))
    with sqlite3.connect(target) as db:
        db.execute("UPDATE budget_entries SET entry = replace(entry, '\"epsilon\": 1.0', '\"epsilon\": 100.0')")
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
    from squarechipo.privacy.release.budget import set_budget
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


def test_a_dataset_budget_binds_its_rows_under_any_name_or_none_and_the_strictest_budget_wins(tmp_path, capsys):
    """A dataset's scope is its rows: the name is folded (case, width, spaces), and the same rows released again under
    another name, or none, still answer to it. Every budget that applies holds at once: rows within a lax dataset
    budget are refused by a stricter registry budget."""
    _budget(capsys, "set", "--epsilon", "1", "--dataset", "Finance")
    _budget(capsys, "set", "--epsilon", "10")
    rows = distinct_pairs(4, offset=11_000)
    first = release_dataset(rows, LabelPipeline(epsilon=1.0), tmp_path / "a", dataset_name="ｆｉｎａｎｃｅ ")
    assert get_ledger(first).releases[0].budget["scope"] == "dataset:finance"
    for name in ("other", None, "FINANCE"):
        with pytest.raises(RegistryError, match=r"budget \(dataset:finance, ε 1\) would be passed: 4 of 4 rows"):
            release_dataset(rows, LabelPipeline(epsilon=0.5), dataset_name=name, rerelease=True)
    near = rows.map(lambda row: {"chosen": row["chosen"] + " Then review it."})
    with pytest.raises(RegistryError, match=r"budget \(dataset:finance, ε 1\) would be passed"):
        release_dataset(near, LabelPipeline(epsilon=0.5), rerelease=True)  # near-copies are its rows too
    _budget(capsys, "set", "--epsilon", "2")  # the registry's, now stricter than a dataset's of 10
    _budget(capsys, "set", "--epsilon", "10", "--dataset", "loose")
    others = distinct_pairs(4, offset=11_100)
    release_dataset(others, LabelPipeline(epsilon=1.5), dataset_name="loose")
    with pytest.raises(RegistryError, match=r"budget \(registry, ε 2\) would be passed: 4 of 4 rows have spent up to"):
        release_dataset(others, LabelPipeline(epsilon=1.0), dataset_name="loose", rerelease=True)


def test_a_unit_budget_follows_its_units_through_renamed_copied_or_dropped_unit_columns(tmp_path, capsys):
    """A unit budget of ε 2 per labeller. Rows released with their labeller count against that labeller whatever a
    later release does with the column: renamed or dropped (refused: the release must declare the budget's unit),
    or declared with other values (the rows' earlier labellers still count)."""
    _budget(capsys, "set", "--epsilon", "2", "--unit", "labeller")
    rows = distinct_pairs(3, offset=11_200).add_column("labeller", ["a", "a", "b"])
    release_dataset(rows, LabelPipeline(epsilon=0.5), privacy_unit="labeller")  # labeller a: 2 rows, ε 1 spent
    renamed = rows.rename_column("labeller", "annotator")
    with pytest.raises(RegistryError, match=r"per unit of 'labeller' and this release declares privacy unit 'annota"):
        release_dataset(renamed, LabelPipeline(epsilon=0.1), privacy_unit="annotator", rerelease=True)
    with pytest.raises(RegistryError, match=r"per unit of 'labeller' and this release declares no privacy unit"):
        release_dataset(rows.remove_columns("labeller"), LabelPipeline(epsilon=0.1), rerelease=True)
    relabelled = rows.remove_columns("labeller").add_column("labeller", ["z", "z", "z"])
    with pytest.raises(RegistryError, match=r"budget \(unit:labeller, ε 2\) would be passed"):
        # z is new, but rows 0 and 1 were labeller a's: 1 + 2 × 0.6 passes a's budget
        release_dataset(relabelled, LabelPipeline(epsilon=0.6), privacy_unit="labeller", rerelease=True)
    release_dataset(relabelled, LabelPipeline(epsilon=0.5), privacy_unit="labeller", rerelease=True)  # a: 1 + 1
    with pytest.raises(RegistryError, match=r"budget \(unit:labeller, ε 2\) would be passed"):
        release_dataset(rows, LabelPipeline(epsilon=0.1), privacy_unit="labeller", rerelease=True)


def _entries(path) -> list[tuple]:
    with closing(sqlite3.connect(path)) as db:
        return db.execute("SELECT digest, replaces, entry FROM budget_entries ORDER BY no").fetchall()


def _without_signature(text: str) -> dict:
    """A budget entry with its digest and no signature (sealed as one made where no key signs)."""
    entry = json.loads(text)
    entry.pop("signature", None)
    return entry


def _edit(path, *statements) -> None:
    """Statements (SQL text, or callables taking the connection) run on the registry file by hand, then closed: the
    write-ahead log is folded back, so the file's bytes are the registry."""
    with closing(sqlite3.connect(path)) as db:
        for statement in statements:
            statement(db) if callable(statement) else db.execute(statement)
        db.commit()


def test_budget_entries_are_one_chain_and_a_replayed_forked_gapped_or_foreign_entry_fails_closed(
    tmp_path, capsys, monkeypatch
):
    """Each entry names the one it follows, signed. The table refuses an entry again or a second one following the
    same entry; written past that by hand (the index dropped), a replay, a fork, a deleted middle entry, an entry of
    another registry or budgets kept before chains stop every release, naming the fix; the chain's head is in force."""
    from squarechipo.privacy.release.registry import registry_path

    for epsilon in ("5", "3", "1"):
        _budget(capsys, "set", "--epsilon", epsilon)
    path = registry_path()
    first, second, third = _entries(path)
    assert first[1] == "" and second[1] == first[0] and third[1] == second[0]
    replay = ("INSERT INTO budget_entries (digest, replaces, entry) VALUES (?, ?, ?)", first)  # the ε 5 again
    with pytest.raises(sqlite3.IntegrityError, match="UNIQUE"):
        _edit(path, lambda db: db.execute(*replay))
    saved = path.read_bytes()
    rows = distinct_pairs(4, offset=11_300)
    unconstrained = (  # the table rebuilt without its UNIQUE constraints, as by hand
        "ALTER TABLE budget_entries RENAME TO chained",
        "CREATE TABLE budget_entries (no INTEGER PRIMARY KEY, digest TEXT, replaces TEXT, entry TEXT)",
        "INSERT INTO budget_entries SELECT * FROM chained",
        "DROP TABLE chained",
    )
    for tamper, (edits, refusal) in {
        "replay": ([lambda db: db.execute(*replay)], "appears twice"),
        "gap": ([lambda db: db.execute("DELETE FROM budget_entries WHERE digest = ?", (second[0],))], "off the chain"),
        "legacy": (["DELETE FROM budget_entries", "CREATE TABLE budgets (no INTEGER, scope TEXT, entry TEXT)",
                    "INSERT INTO budgets VALUES (1, 'registry', '{}')"], "set before budgets were chained"),
        "unsigned": ([lambda db: db.execute("UPDATE budget_entries SET entry = ? WHERE digest = ?",
                                            (json.dumps(_without_signature(third[2])), third[0]))],
                     r"entry 3\].*an unsigned"),
        "columns": ([lambda db: db.execute("UPDATE budget_entries SET replaces = 'elsewhere' WHERE digest = ?",
                                           (third[0],))], r"entry 3\]: its columns do not match the entry it signs"),
        "garbled": (["UPDATE budget_entries SET entry = 'not json' WHERE no = 1"], r"entry 1\]: not a budget entry"),
    }.items():  # fmt: skip
        path.write_bytes(saved)
        _edit(path, *unconstrained, *edits)
        with pytest.raises(RegistryError, match=refusal) as refused:
            release_dataset(rows, LabelPipeline(epsilon=0.5))
        assert "No release is made" in str(refused.value) and "\n" not in str(refused.value), tamper
    path.write_bytes(saved)
    _edit(path, *unconstrained, lambda db: db.execute("DELETE FROM budget_entries WHERE digest = ?", (second[0],)))
    capsys.readouterr()
    assert main(["registry", "budget", "set", "--epsilon", "9"]) == 1  # no entry follows a broken chain either
    assert f"{path}: 1 budget entr(ies) are off the chain" in capsys.readouterr().err
    path.write_bytes(saved)
    with pytest.raises(RegistryError, match=r"budget \(registry, ε 1\)"):  # the head, ε 1, is in force
        release_dataset(rows, LabelPipeline(epsilon=1.5))
    other = tmp_path / "other.sqlite"
    assert main(["registry", "init", "--path", str(other), "--budget", "9"]) == 0
    monkeypatch.setenv(REGISTRY_ENV, str(path))  # `registry init --budget` points this process at the new one
    foreign = _entries(other)[0]
    _edit(
        path,
        "DELETE FROM budget_entries",
        lambda db: db.execute("INSERT INTO budget_entries (digest, replaces, entry) VALUES (?, ?, ?)", foreign),
    )
    with pytest.raises(RegistryError, match="an entry of another registry"):
        release_dataset(rows, LabelPipeline(epsilon=0.5))


def test_completing_a_cut_off_release_answers_to_the_budget_in_force_then(tmp_path, monkeypatch, capsys):
    """A release cut off after staging, before it was entered, is completed by the next run: under a budget lowered
    meanwhile it is refused, never entered."""
    import squarechipo.privacy.release.transaction as release_module

    _budget(capsys, "set", "--epsilon", "4")
    rows = distinct_pairs(4, offset=11_400)

    def killed(*args, **kwargs):
        raise SystemExit("cut off after staging")

    with monkeypatch.context() as patch:  # (monkeypatch.undo() would undo this test's own registry too)
        patch.setattr(release_module, "register_release", killed)
        with pytest.raises(SystemExit):
            release_dataset(rows, LabelPipeline(epsilon=2.0), tmp_path / "cut")
    _budget(capsys, "set", "--epsilon", "1")
    with pytest.raises(RegistryError, match=r"budget \(registry, ε 1\) would be passed: 4 of 4 rows"):
        release_dataset(rows, LabelPipeline(epsilon=2.0), tmp_path / "cut")
    assert describe()["releases"] == 0 and not (tmp_path / "cut").exists()


def test_a_seeded_release_is_refused_under_a_budget_and_key_verify_states_a_seed(tmp_path, capsys):
    """A seeded release is a simulation, never counted: under a budget it is refused in one line; without one it is
    made, and `key verify` of it says its noise came from a fixed seed."""
    rows = distinct_pairs(4, offset=11_500)
    seeded = release_dataset(rows, LabelPipeline(epsilon=1.0), tmp_path / "seeded", seed=3)
    assert get_ledger(seeded).releases[0].randomness == "fixed_seed"
    capsys.readouterr()
    assert main(["key", "verify", str(tmp_path / "seeded")]) == 0
    shown = json.loads(capsys.readouterr().out)["splits"]["release"]
    assert shown["randomness"] == ["fixed_seed"] and "not private" in shown["warning"]
    _budget(capsys, "set", "--epsilon", "4")
    with pytest.raises(RegistryError, match=r"seed=3: a seeded release is a simulation .* holds privacy budgets"):
        release_dataset(distinct_pairs(4, offset=11_600), LabelPipeline(epsilon=1.0), seed=3)


def test_a_budget_lowered_while_a_release_draws_is_held_by_the_transaction_that_enters_it(tmp_path, monkeypatch):
    """The check before the draw passes under ε 4; the custodian lowers the budget to ε 1 while the noise is drawn;
    the transaction that enters the release checks again and refuses it: nothing entered, nothing visible."""
    import squarechipo.privacy.release.transaction as transaction
    from squarechipo.privacy.release.budget import set_budget

    set_budget(4.0)
    draw = transaction.draw_rows

    def lowered_meanwhile(*args, **kwargs):
        set_budget(1.0)
        return draw(*args, **kwargs)

    monkeypatch.setattr(transaction, "draw_rows", lowered_meanwhile)
    with pytest.raises(RegistryError, match=r"budget \(registry, ε 1\) would be passed: 4 of 4 rows"):
        release_dataset(distinct_pairs(4, offset=11_700), LabelPipeline(epsilon=2.0), tmp_path / "late")
    assert describe()["releases"] == 0 and not (tmp_path / "late").exists()


def _b(scope: str, epsilon: float, digest: str = "d"):
    from squarechipo.privacy.release.budget import Budget

    return Budget(scope, epsilon, f"{digest}-{scope}", "2026-12-07T00:00:00+00:00")


def test_the_strictest_budget_passed_is_named_with_its_rows_spent_asked_and_remaining():
    """`enforce` on hand-made limits: the budget with the smallest ε among those passed is named, with how many of
    the release's rows pass it (never more than the release holds), the most any of them spent, the ε asked and what
    remains (never below 0); within every budget, the ledger records the one that leaves least, rounded to 12
    places; ε sums compare with a slack, so 0.1 + 0.2 spent against 0.3 passes."""
    from squarechipo.privacy.release.budget import enforce

    registry, dataset, unit = _b("registry", 3.0), _b("dataset:finance", 2.0), _b("unit:labeller", 5.0)
    assert enforce([], 4) is None
    assert enforce([(registry, 0.1, 0.2), (_b("registry", 0.3), 0.1, 0.2)], 1)["remaining"] == 0.0
    limits = [(registry, 1.0, 1.0), (dataset, 1.5, 1.0), (dataset, 0.5, 1.0), (unit, 4.5, 1.0), (dataset, 1.8, 1.0)]
    with pytest.raises(RegistryError) as refused:
        enforce(limits, 2)
    assert str(refused.value) == (
        "privacy budget (dataset:finance, ε 2) would be passed: 2 of 2 rows have spent up to ε 1.8, this release asks "
        "ε 1, and ε 0.2 remains for them. Release other rows or a smaller ε; only the custodian raises a budget "
        "(squarechipo registry budget set). Nothing was released."
    )
    with pytest.raises(RegistryError, match=r"\(registry, ε 3\) would be passed: 1 of 5 rows .* ε 3.5, .* asks ε 0.5, "
                                            r"and ε 0 remains"):  # fmt: skip
        enforce([(registry, 3.5, 0.5), (dataset, 0.5, 0.5)], 5)
    record = enforce([(registry, 1.2, 0.5), (dataset, 0.1, 0.5), (unit, 0.0, 1.25)], 3)
    assert record == {"scope": "registry", "epsilon": 3.0, "entry": "d-registry", "remaining": 1.3}
    assert enforce([(dataset, 1.0 / 3, 1.0 / 3)], 1)["remaining"] == round(2.0 - 2.0 / 3, 12)
    assert enforce([(_b("registry", 1.0), 0.0, 1.0 + 1e-9)], 1)["scope"] == "registry"  # at the slack's edge: within
    other = _b("dataset:other", 3.0)  # leaves 1.8 against the registry's 1.5 (3 − 0.5 − 1): the registry's is recorded
    assert enforce([(other, 1.0, 0.2), (registry, 0.5, 1.0)], 1)["scope"] == "registry"


def test_a_scope_is_a_folded_dataset_a_unit_or_the_registry_and_a_bad_one_is_one_line():
    from squarechipo.privacy.release.budget import scope_of
    from squarechipo.privacy.release.registry_schema import canonical_dataset

    assert scope_of() == "registry" and scope_of(unit="labeller") == "unit:labeller"
    assert scope_of(dataset=" Ｆinance  Q1 ") == "dataset:finance q1"
    assert canonical_dataset(None) is None and canonical_dataset(" \t ") is None and canonical_dataset("A  b") == "a b"
    for kwargs, said in (
        ({"dataset": "x", "unit": "y"}, "per dataset (--dataset) or per privacy unit (--unit), not both"),
        ({"dataset": " "}, "--dataset is empty: name the dataset or the unit column"),
        ({"unit": ""}, "--unit is empty: name the dataset or the unit column"),
        ({"unit": "chosen"}, "--unit chosen: 'chosen' is a column of the comparison itself"),
    ):
        with pytest.raises(ValueError, match=re.escape(said)):
            scope_of(**kwargs)


def test_the_chain_orders_its_entries_and_refuses_a_fork_a_replay_or_an_entry_off_it():
    """`_chain` on hand-made entries: in order from the first (following none) to the head whatever order they are
    stored in; two entries following one, one digest twice, or an entry following none in force fail closed."""
    from squarechipo.privacy.release.budget import _chain

    a, b, c = ({"digest": d, "replaces": r} for d, r in (("a", ""), ("b", "a"), ("c", "b")))
    assert _chain([c, a, b], "here") == [a, b, c] and _chain([], "here") == []
    for entries, said in (
        ([a, b, {"digest": "x", "replaces": "a"}], "two budget entries follow one entry (a): a fork or a replay"),
        ([a, {"digest": "y", "replaces": ""}], "two budget entries follow one entry (the start)"),
        ([a, b, b], "a budget entry appears twice"),
        ([a, c], "1 budget entr(ies) are off the chain"),
        ([b, c], "2 budget entr(ies) are off the chain"),
    ):
        with pytest.raises(RegistryError, match=re.escape(said)) as refused:
            _chain(entries, "here")
        assert str(refused.value).startswith("here: ") and str(refused.value).endswith(
            " No release is made against budgets that cannot be trusted: the custodian sets the budget again "
            "(squarechipo registry budget set)."
        )


def test_a_release_answers_to_the_unit_budget_it_declares_and_each_row_and_unit_to_every_budget():
    """`BudgetAsk.limits` on hand-made earlier releases: each row answers to the registry's budget and to the budget of
    every dataset it was entered under (or this release names), at the ε one row spends; each declared unit (keys
    n .. 2n − 1) and each unit its rows were released with before, at ε × its rows. Under two unit budgets, a release
    declaring neither is told the one its columns hold."""
    from types import SimpleNamespace

    from squarechipo.privacy.release.budget import BudgetAsk

    budgets = {s: _b(s, 4.0) for s in ("registry", "dataset:finance", "dataset:other", "unit:labeller")}
    earlier = SimpleNamespace(
        spent={0: 1.0, 2: 0.5, 3: 2.0},  # rows 0 and 1, then the declared units 2 and 3
        datasets={0: ["finance"], 1: [None]},
        followed_units={b"old": 3, b"unspent": 1},
        unit_spent={b"old": 1.5},
    )
    ask = BudgetAsk(dataset="Other ", unit="labeller", columns=("labeller",), n_rows=2, epsilon=0.6, row_epsilon=0.2)
    got = [(b.scope, spent, asked) for b, spent, asked in ask.limits(budgets, earlier)]
    assert got == [
        ("registry", 1.0, 0.2), ("dataset:finance", 1.0, 0.2), ("dataset:other", 1.0, 0.2),
        ("registry", 0.0, 0.2), ("dataset:other", 0.0, 0.2),
        ("unit:labeller", 0.5, 0.6), ("unit:labeller", 2.0, 0.6), ("unit:labeller", 1.5, 0.2 * 3),
        ("unit:labeller", 0.0, 0.2),
    ]  # fmt: skip
    plain = BudgetAsk(dataset=None, unit=None, columns=(), n_rows=1, epsilon=0.7)
    assert [(b.scope, a) for b, _, a in plain.limits({"registry": budgets["registry"]}, earlier)] == [
        ("registry", 0.7)
    ]
    two = {"unit:annotator": _b("unit:annotator", 1.0), "unit:labeller": _b("unit:labeller", 1.0)}
    with pytest.raises(RegistryError, match=r"per unit of 'labeller' and this release declares no privacy unit"):
        BudgetAsk(None, None, ("prompt", "labeller"), 1, 1.0).limits(two, earlier)
    with pytest.raises(RegistryError, match=r"per unit of 'annotator' and this release declares privacy unit 'x'"):
        BudgetAsk(None, "x", ("prompt",), 1, 1.0).limits(two, earlier)
    declared = BudgetAsk(None, "annotator", ("annotator",), 1, 1.0).limits(two, earlier)
    assert {b.scope for b, _, _ in declared} == {"unit:annotator"}
    colon = {"unit:team:labeller": _b("unit:team:labeller", 1.0)}  # a unit column whose name holds a colon
    assert {b.scope for b, _, _ in BudgetAsk(None, "team:labeller", (), 1, 1.0).limits(colon, earlier)} == set(colon)
    with pytest.raises(RegistryError) as refused:
        BudgetAsk(None, None, ("labeller",), 1, 1.0).limits({"unit:labeller": two["unit:labeller"]}, earlier)
    assert str(refused.value) == (
        "the registry's privacy budget is per unit of 'labeller' and this release declares no privacy unit: declare "
        "privacy_unit='labeller' (label_privacy_unit in a config), on a column holding each row's labeller, so that "
        "each unit's ε is counted."
    )
