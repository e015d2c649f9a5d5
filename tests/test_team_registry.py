"""One registry for a team: releases and model records in PostgreSQL, against a real server
(tests/helpers/postgres.py).

Two "machines" are processes with their own HOME, cache and machine folder, pointed at one URL. The same guarantees
hold as on one machine: one transaction decides between two releases of the same rows; near-copies count across
machines; a server that cannot be reached, or is stopped mid-release, fails closed naming the URL without its
password; a client killed mid-transaction leaves nothing; an analyst's role can neither enter nor delete a release;
a machine's registry moves to the server with everything it counted.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from squarechipo.privacy import LabelPipeline, get_ledger, release_dataset
from squarechipo.privacy.release.registry import REGISTRY_ENV, RegistryError, init_registry
from tests.helpers.rows import distinct_pairs

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[1]


def _machine_env(folder: Path, url: str) -> dict[str, str]:
    """A machine of its own: HOME, cache and machine folder (its own registry file and key), the team's URL."""
    env = {**os.environ, REGISTRY_ENV: url, "HOME": str(folder / "home"), "SQUARECHIPO_CACHE": str(folder / "cache")}
    env["SQUARECHIPO_TEST_MACHINE_DIR"] = str(folder / ".squarechipo")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    for own in ("SQUARECHIPO_SIGNING_KEY", "SQUARECHIPO_RECORD_STORE"):
        env.pop(own, None)
    return env


def _start(folder: Path, url: str, *task: str) -> subprocess.Popen:
    folder.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "tests.helpers.team_machine", *task]
    return subprocess.Popen(command, cwd=folder, env=_machine_env(folder, url), stdout=subprocess.PIPE, text=True)


def _answer(process: subprocess.Popen) -> dict:
    out, _ = process.communicate(timeout=300)
    return json.loads(out.strip().splitlines()[-1])


def test_two_machines_on_one_url_release_rows_once_and_count_near_copies(postgres, tmp_path, capsys, monkeypatch):
    """The second release of the same rows, from a machine with another HOME and cache, is refused naming the first
    (where it was saved); so are near-copies of them; of two machines releasing the same rows at once, exactly one
    does. `registry init` and `registry show` work on a URL."""
    from squarechipo.cli import main

    url = postgres.database()
    assert main(["registry", "init", "--url", url]) == 0
    first = _answer(_start(tmp_path / "a", url, "0", "24"))
    assert first["released"] == 24
    again, near = (_answer(_start(tmp_path / "b", url, "0", "24", *more)) for more in ((), ("--near",)))
    assert "24 row(s) were released before" in again["refused"] and first["folder"] in again["refused"]
    assert re.search(r"\b2[0-4] of them as near-copies", near["refused"])  # a few rows are too short to stay near
    racing = [_start(tmp_path / name, url, "100", "24") for name in ("c", "d")]
    answers = sorted(json.dumps(_answer(p)) for p in racing)
    assert sum('"released"' in a for a in answers) == 1 and "released before" in "".join(answers), answers
    capsys.readouterr()
    monkeypatch.setenv(REGISTRY_ENV, url)
    assert main(["registry", "show"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["releases"] == 2 and shown["rows"] == 48 and shown["registry"] == url
    assert not (tmp_path / "b" / ".squarechipo" / "releases.sqlite").exists()  # no machine's own registry was used


def test_a_server_that_cannot_be_reached_or_stops_mid_release_fails_closed_naming_the_url_without_its_password(
    postgres, tmp_path, monkeypatch, caplog
):
    """Unreachable: one line naming the URL (password removed), no local registry started. Stopped between the
    release's rows and its commit: refused, and nothing of it entered. The password appears in no ledger, log or
    message."""
    import squarechipo.privacy.release.registry as registry
    from squarechipo.cli import main

    secret = "hunter2-team-secret"
    url = postgres.url(postgres.new_database(), password=secret)
    init_registry(url)
    monkeypatch.setenv(REGISTRY_ENV, url)
    released = release_dataset(distinct_pairs(8, offset=300), LabelPipeline(epsilon=0.5))
    assert secret not in json.dumps(get_ledger(released).to_dict()) and secret not in caplog.text
    enter = registry._enter

    def stop_then_enter(db, *args):
        enter(db, *args)
        postgres.stop("immediate")  # the server goes away before the commit

    monkeypatch.setattr(registry, "_enter", stop_then_enter)
    with pytest.raises(RegistryError) as stopped:
        release_dataset(distinct_pairs(8, offset=320), LabelPipeline(epsilon=0.5))
    monkeypatch.setattr(registry, "_enter", enter)
    assert secret not in str(stopped.value)
    with pytest.raises(RegistryError, match="cannot be reached or opened .* never falls back to a local") as refused:
        release_dataset(distinct_pairs(8, offset=340), LabelPipeline(epsilon=0.5))
    assert secret not in str(refused.value) and ":***@" in str(refused.value)
    assert main(["registry", "show"]) == 1
    assert not (Path(str(registry.default_registry_path())).exists())  # no local registry was started
    postgres.start()
    from squarechipo.privacy.release.registry_admin import describe

    assert describe()["releases"] == 1  # the release cut off by the stop left nothing
    release_dataset(distinct_pairs(8, offset=320), LabelPipeline(epsilon=0.5))  # so its rows were never spent
    database = url.split("@/")[1].split("?")[0]
    for damage, state in (("DROP TABLE released_bands", "not a squarechipo registry"), ("DROP TABLE meta", "")):
        postgres.sql(damage, database)  # dropped by hand: the registry can no longer say what was released
        with pytest.raises(RegistryError, match=rf"registry of releases at .*:\*\*\*@.* is {state}") as broken:
            release_dataset(distinct_pairs(8, offset=360), LabelPipeline(epsilon=0.5))
        assert secret not in str(broken.value)


def test_a_client_killed_mid_transaction_leaves_nothing_half_entered(postgres, tmp_path, monkeypatch):
    """A machine killed with SIGKILL while its release's rows sit inside the open transaction: the server rolls the
    transaction back; the registry holds nothing of it, and the rows can be released."""
    from squarechipo.privacy.release.registry_admin import describe

    url = postgres.database()
    init_registry(url)
    signal_file = tmp_path / "inside"
    process = _start(tmp_path / "a", url, "500", "16", "--pause-inside", str(signal_file))
    for _ in range(600):
        if signal_file.exists() or process.poll() is not None:
            break
        time.sleep(0.1)
    assert signal_file.exists(), "the machine never reached the registry's transaction"
    os.kill(process.pid, signal.SIGKILL)
    process.wait(30)
    monkeypatch.setenv(REGISTRY_ENV, url)
    assert describe()["releases"] == 0
    assert get_ledger(release_dataset(distinct_pairs(16, offset=500), LabelPipeline(epsilon=0.5))).total_epsilon


def test_an_analysts_role_cannot_enter_or_delete_a_release_and_the_custodians_cannot_delete_one(
    postgres, monkeypatch, capsys
):
    """Who may read the team's registry and who may write it: the custodian's role enters releases (SELECT, INSERT),
    the analysts' role only reads. Neither may change or delete a release once entered."""
    import psycopg

    from squarechipo.cli import main

    database = postgres.new_database()
    url = postgres.url(database)
    for role in ("custodian_r", "analyst_r"):
        postgres.sql(f"DO $$ BEGIN CREATE ROLE {role} LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$")
    init_registry(url)
    assert main(["registry", "grant", "--url", url, "--custodian", "custodian_r", "--analyst", "analyst_r"]) == 0
    capsys.readouterr()
    monkeypatch.setenv(REGISTRY_ENV, postgres.url(database, user="custodian_r"))
    release_dataset(distinct_pairs(8, offset=700), LabelPipeline(epsilon=0.5))
    monkeypatch.setenv(REGISTRY_ENV, postgres.url(database, user="analyst_r"))
    with pytest.raises(ValueError, match="8 row\\(s\\) were released before"):  # it reads the registry
        release_dataset(distinct_pairs(8, offset=700), LabelPipeline(epsilon=0.5))
    with pytest.raises(RegistryError, match="this role may not do that: releases are entered by the custodian"):
        release_dataset(distinct_pairs(8, offset=720), LabelPipeline(epsilon=0.5))
    for role in ("analyst_r", "custodian_r"):
        with psycopg.connect(postgres.url(database, user=role), autocommit=True) as connection:
            for statement in ("DELETE FROM releases", "UPDATE releases SET epsilon = 0", "DELETE FROM released_units"):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    connection.execute(statement)
    with psycopg.connect(url) as connection:
        assert connection.execute("SELECT COUNT(*) FROM releases").fetchone()[0] == 1


def test_a_machines_registry_moves_to_the_server_and_everything_it_counted_still_counts(
    postgres, tmp_path, monkeypatch, capsys
):
    """`squarechipo registry migrate --to URL`: the file's releases, units, band keys and signatures, checked by
    the command; afterwards the same rows, and near-copies of them, are refused by the server's registry."""
    from squarechipo.cli import main

    rows = distinct_pairs(20, offset=900)
    from squarechipo.privacy.release.budget import budget_report, set_budget

    set_budget(3.0)  # a budget moves with the registry, and its signed entry verifies on the server
    release_dataset(rows, LabelPipeline(epsilon=0.5))  # into this test's own SQLite registry
    release_dataset(distinct_pairs(10, offset=950), LabelPipeline(epsilon=1.0))
    from squarechipo.data.store import RecordTable

    with RecordTable(os.environ["SQUARECHIPO_RECORD_STORE"], "records") as records:  # a model record of this machine
        records.put("sha256:a-model", json.dumps({"stage": "preference_optimization", "epsilon": 0.5}))
    source = os.environ[REGISTRY_ENV]
    url = postgres.database()
    assert main(["registry", "migrate", "--to", url, "--from", source]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["releases"] == 2 and report["released_units"] == 30 and report["released_bands"] == 30 * 20
    assert report["model_records"] >= 1 and report["budgets"] == 1
    with RecordTable(url, "records") as records:
        assert json.loads(records.get("sha256:a-model"))["epsilon"] == 0.5
    assert report["check"].startswith("every release's rows found again in the copy")
    monkeypatch.setenv(REGISTRY_ENV, url)
    from squarechipo.privacy.release.registry import registry_scheme

    assert registry_scheme() == "squarechipo.words-fmix64/1"  # the copied signatures keep the file's scheme
    assert [(b["scope"], b["epsilon"], b["spent"]) for b in budget_report()] == [("registry", 3.0, 1.0)]
    with pytest.raises(ValueError, match="20 row\\(s\\) were released before"):
        release_dataset(rows, LabelPipeline(epsilon=0.5))
    near = rows.map(lambda row: {"chosen": row["chosen"] + " Then review it."})
    with pytest.raises(ValueError, match=r"\d+ of them as near-copies"):
        release_dataset(near, LabelPipeline(epsilon=0.5))
    assert main(["registry", "migrate", "--to", url, "--from", source]) == 1  # a second copy is refused


def test_model_records_on_the_server_are_known_to_every_machine(postgres, tmp_path, monkeypatch, tiny_model_factory):
    """A model trained privately on one machine was unknown to the lineage guard on another: with the record store
    on the team's server, a record entered by one process is found by another."""
    from squarechipo.privacy.provenance.sketch import RECORD_STORE_ENV, remember_record

    url = postgres.database()
    monkeypatch.setenv(RECORD_STORE_ENV, url)
    model = tiny_model_factory(3)
    identity = remember_record({"stage": "preference_optimization", "epsilon": 0.5}, model, None)
    model.save_pretrained(tmp_path / "copy")
    code = (
        "from transformers import AutoModelForCausalLM\n"
        "from squarechipo.privacy.provenance.sketch import recorded_by_weights\n"
        f"print(recorded_by_weights(AutoModelForCausalLM.from_pretrained({str(tmp_path / 'copy')!r}))['epsilon'])"
    )
    env = {**_machine_env(tmp_path / "b", url), RECORD_STORE_ENV: url}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.stdout.strip() == "0.5", done.stderr[-2000:]
    assert identity


def _roles(postgres, *names: str) -> None:
    for role in names:
        postgres.sql(f"DO $$ BEGIN CREATE ROLE {role} LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$")


def test_least_privilege_the_analysts_role_only_reads_and_no_reader_can_stop_a_release(postgres, monkeypatch):
    """`registry grant`: the analysts' role may SELECT the registry and add (never replace) model records; it can
    neither take the writers' lock nor hold it through an advisory lock. An earlier, wider grant is revoked."""
    import psycopg

    from squarechipo.data.store import RecordTable
    from squarechipo.privacy.release.registry_admin import grant_roles

    database = postgres.new_database()
    url = postgres.url(database)
    _roles(postgres, "custodian_l", "analyst_l")
    init_registry(url)
    RecordTable(url, "records").close()
    postgres.sql("GRANT UPDATE ON records TO analyst_l", database)  # what an earlier version granted
    grant_roles(url, custodian="custodian_l", analyst="analyst_l")
    analyst = psycopg.connect(postgres.url(database, user="analyst_l"), autocommit=True)
    analyst.execute("INSERT INTO records (key, value) VALUES ('sha256:w', '{\"epsilon\": null}')")
    for statement in (
        "UPDATE records SET value = '{\"epsilon\": 0.5}'",
        "INSERT INTO records VALUES ('sha256:w', 'x') ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        "SELECT id FROM squarechipo_writers FOR UPDATE",
        "LOCK TABLE squarechipo_writers IN EXCLUSIVE MODE",
        "INSERT INTO releases (id, epsilon, made, rows) VALUES ('x', 0, 'now', 0)",
        # The budget tables: an analyst may neither set a budget nor say which rows or units a release spent.
        "INSERT INTO budget_entries (digest, replaces, entry) VALUES ('d', '', '{}')",
        "INSERT INTO release_scopes VALUES (1, 'x', NULL)",
        "INSERT INTO released_row_units VALUES (1, '\\x00', '\\x00')",
    ):
        with pytest.raises(psycopg.errors.InsufficientPrivilege), analyst.transaction():
            analyst.execute(statement)
    for table in ("budget_entries", "release_scopes", "released_row_units"):  # it reads them
        analyst.execute(f"SELECT COUNT(*) FROM {table}").fetchone()
    analyst.execute("BEGIN")
    analyst.execute("SELECT pg_advisory_lock(126879297332837)")  # the key writers queued on before
    analyst.execute("LOCK TABLE releases IN ACCESS SHARE MODE")  # all SELECT may take
    monkeypatch.setenv(REGISTRY_ENV, postgres.url(database, user="custodian_l"))
    monkeypatch.setenv("SQUARECHIPO_LOCK_TIMEOUT", "5")
    released = release_dataset(distinct_pairs(8, offset=1100), LabelPipeline(epsilon=0.5))  # not stopped
    assert get_ledger(released).total_epsilon == 0.5
    analyst.close()


def test_a_crafted_role_name_is_a_name_not_sql(postgres):
    """A role name that closes the quote and appends WITH GRANT OPTION is quoted as one identifier: the grant goes to
    no such role (refused by the server) and no privilege with grant option exists afterwards."""
    from squarechipo.data.database import DatabaseError
    from squarechipo.privacy.release.registry_admin import grant_roles

    database = postgres.new_database()
    url = postgres.url(database)
    _roles(postgres, "analyst_c")
    init_registry(url)
    crafted = 'analyst_c" WITH GRANT OPTION; --'
    with pytest.raises(DatabaseError, match="does not exist"):
        grant_roles(url, custodian=None, analyst=crafted)
    import psycopg

    with psycopg.connect(url) as connection:
        grantable = connection.execute(
            "SELECT COUNT(*) FROM information_schema.role_table_grants WHERE grantee = 'analyst_c'"
        ).fetchone()[0]
    assert grantable == 0


def test_a_writer_waits_for_the_lock_at_most_its_timeout_and_is_told_who_holds_it(postgres, monkeypatch):
    """Another custodian process holds the writers' lock inside an open transaction: a release waits
    SQUARECHIPO_LOCK_TIMEOUT seconds, then stops in one line naming the holder's pid and role; nothing entered."""
    import psycopg

    from squarechipo.privacy.release.registry_admin import describe, grant_roles

    database = postgres.new_database()
    url = postgres.url(database)
    _roles(postgres, "custodian_w")
    init_registry(url)
    grant_roles(url, custodian="custodian_w", analyst=None)
    holder = psycopg.connect(postgres.url(database, user="custodian_w"), autocommit=True)
    holder.execute("BEGIN")
    holder.execute("SELECT id FROM squarechipo_writers FOR UPDATE")
    pid = holder.info.backend_pid
    monkeypatch.setenv(REGISTRY_ENV, postgres.url(database, user="custodian_w"))
    monkeypatch.setenv("SQUARECHIPO_LOCK_TIMEOUT", "1")
    started = time.monotonic()
    with pytest.raises(RegistryError, match=rf"held the writers' lock for over 1 s \(pid {pid}, role custodian_w"):
        release_dataset(distinct_pairs(8, offset=1200), LabelPipeline(epsilon=0.5))
    assert time.monotonic() - started < 60
    holder.close()
    monkeypatch.setenv(REGISTRY_ENV, url)
    assert describe()["releases"] == 0
    release_dataset(distinct_pairs(8, offset=1200), LabelPipeline(epsilon=0.5))  # the rows were never spent


def test_a_serialization_failure_on_the_server_is_retried(postgres):
    """A real 40001: two serializable transactions that each read what the other writes (write skew). The one
    `Database.retried` runs fails on the server and is run again, which then succeeds."""
    import psycopg

    from squarechipo.data.database import connect

    url = postgres.database()
    with psycopg.connect(url, autocommit=True) as setup:
        setup.execute("CREATE TABLE a (v INT)")
        setup.execute("CREATE TABLE b (v INT)")
    other = psycopg.connect(url, autocommit=True)
    attempts = []

    def work(db):
        attempts.append(1)
        db.execute("SELECT COUNT(*) FROM a").fetchone()
        if len(attempts) == 1:  # meanwhile another transaction reads b and writes a, and commits
            other.execute("BEGIN ISOLATION LEVEL SERIALIZABLE")
            other.execute("SELECT COUNT(*) FROM b").fetchone()
            other.execute("INSERT INTO a VALUES (1)")
            other.execute("COMMIT")
        db.execute("INSERT INTO b VALUES (1)")
        return len(attempts)

    with connect(url) as db:
        assert db.retried(work) == 2
    other.close()
    assert len(attempts) == 2


@pytest.mark.parametrize(
    "typed",
    [
        " postgresql://postgres:{secret}@/{db}?host={host}",
        "POSTGRESQL://postgres:{secret}@/{db}?host={host}",
        "postgresql://postgres:{secret}@/{db}?host={host}&password={secret}",
    ],
    ids=["leading-space", "capitals", "query-password"],
)
def test_every_url_form_connects_and_never_shows_its_password(postgres, monkeypatch, typed, capsys):
    """A URL typed with a leading space, in capitals, or with the password in its query (and one holding '@'):
    it reaches the server, and no message shows the password."""
    from squarechipo.cli import main
    from squarechipo.data.database import redact

    secret = "s3cr@t-pass"
    database = postgres.new_database()
    url = typed.format(secret=secret, db=database, host=postgres.folder)
    assert secret not in redact(url) and "***" in redact(url)
    assert not any(part in redact(url) for part in secret.split("@")), redact(url)  # not half of it either
    assert main(["registry", "init", "--url", url]) == 0
    wrong = url.replace(database, "no_such_database")
    assert main(["registry", "init", "--url", wrong]) == 1
    shown = capsys.readouterr()
    assert not any(part in shown.out + shown.err for part in secret.split("@")) and "no_such_database" in shown.err


def test_a_libpq_key_value_string_is_refused_without_its_password(monkeypatch):
    """`host=... password=...` (libpq's other form) is not a URL: refused in one line, the password masked."""
    from squarechipo.privacy.release.registry import registry_target

    monkeypatch.setenv(REGISTRY_ENV, "host=/tmp dbname=team password=hunter2")
    with pytest.raises(RegistryError) as refused:
        registry_target()
    assert "hunter2" not in str(refused.value) and "password=***" in str(refused.value)


def test_a_budget_on_the_server_is_the_custodians_and_two_machines_at_once_cannot_both_pass_it(
    postgres, tmp_path, monkeypatch, capsys
):
    """Only the custodian's role sets a budget (the analysts' role reads it); of two machines re-releasing the same
    rows at once under a budget that allows one more release, exactly one does; a third is refused by the budget;
    a migrated registry keeps its budgets, which still verify there."""
    from squarechipo.privacy.release.budget import budget_report, set_budget
    from squarechipo.privacy.release.registry_admin import grant_roles

    database = postgres.new_database()
    url = postgres.url(database)
    _roles(postgres, "custodian_b", "analyst_b")
    init_registry(url)
    grant_roles(url, custodian="custodian_b", analyst="analyst_b")
    monkeypatch.setenv(REGISTRY_ENV, postgres.url(database, user="analyst_b"))
    with pytest.raises(RegistryError, match="only the custodian's role sets or raises a budget"):
        set_budget(5.0)
    monkeypatch.setenv(REGISTRY_ENV, postgres.url(database, user="custodian_b"))
    assert set_budget(1.0)["epsilon"] == 1.0
    monkeypatch.setenv(REGISTRY_ENV, postgres.url(database, user="analyst_b"))
    assert [b["scope"] for b in budget_report()] == ["registry"]  # the analysts' role reads it

    def machine(name: str, *task: str) -> subprocess.Popen:
        folder = tmp_path / name
        folder.mkdir()
        env = {**_machine_env(folder, postgres.url(database, user="custodian_b"))}
        env["SQUARECHIPO_SIGNING_KEY"] = os.environ["SQUARECHIPO_SIGNING_KEY"]  # the custodian's key, shared
        command = [sys.executable, "-m", "tests.helpers.team_machine", *task]
        return subprocess.Popen(command, cwd=folder, env=env, stdout=subprocess.PIPE, text=True)

    assert "released" in _answer(machine("a", "1300", "8"))
    racing = [machine(name, "1300", "8", "--rerelease") for name in ("c", "d")]
    answers = [_answer(p) for p in racing]
    assert sum("released" in a for a in answers) == 1, answers
    third = _answer(machine("e", "1300", "8", "--rerelease"))
    assert "privacy budget (registry, ε 1) would be passed: 8 of 8 rows have spent up to ε 1" in third["refused"]
    # The custodian's INSERT-only role cannot bring an older, higher entry back: the server refuses it.
    monkeypatch.setenv(REGISTRY_ENV, postgres.url(database, user="custodian_b"))
    set_budget(0.5)
    from squarechipo.data.database import DatabaseError, connect

    with connect(postgres.url(database, user="custodian_b")) as db:
        older = db.execute("SELECT digest, replaces, entry FROM budget_entries ORDER BY no").fetchall()[0]
        with pytest.raises(DatabaseError, match="duplicate key|unique"):
            with db.transaction(write=True):
                db.execute("INSERT INTO budget_entries (digest, replaces, entry) VALUES (?, ?, ?)", older)
    assert [(b["scope"], b["epsilon"]) for b in budget_report()] == [("registry", 0.5)]


def test_an_analyst_whose_search_path_misses_the_registry_is_told_so_not_that_it_was_emptied(postgres, monkeypatch):
    """A role that changed its own search_path sees no registry tables in its current schema: the message names the
    schema the registry is in and the fix, not an emptied registry."""
    from squarechipo.privacy.release.registry import open_registry
    from squarechipo.privacy.release.registry_admin import grant_roles

    database = postgres.new_database()
    url = postgres.url(database)
    _roles(postgres, "analyst_p")
    init_registry(url)
    grant_roles(url, custodian=None, analyst="analyst_p")
    postgres.sql("ALTER ROLE analyst_p SET search_path = nowhere", database)
    monkeypatch.setenv(REGISTRY_ENV, postgres.url(database, user="analyst_p"))
    with pytest.raises(RegistryError) as refused:
        open_registry()
    assert "is in schema 'public', which this role's search_path does not reach" in str(refused.value)
    assert "emptied" not in str(refused.value)
    postgres.sql("ALTER ROLE analyst_p RESET search_path", database)
    open_registry().close()


def test_the_throwaway_server_refuses_a_taken_port_a_full_folder_and_a_stranger(postgres, tmp_path, capsys):
    """docs/team.md's one-machine server (the documented day runs its start, init, grant, show and stop): a port
    another server holds, a folder that is not empty, and a folder it never started are each one line naming the
    fix; a start that failed leaves no folder. `postgres` only makes sure a server can start here."""
    import socket

    import squarechipo.cli

    with socket.socket() as probe:  # a port free now
        probe.bind(("localhost", 0))
        port = probe.getsockname()[1]
    first, second = tmp_path / "first", tmp_path / "second"
    assert squarechipo.cli.main(["registry", "server", "start", "--folder", str(first), "--port", str(port)]) == 0
    try:
        assert f"custodian: postgresql://custodian@localhost:{port}/squarechipo" in capsys.readouterr().out
        cases = [
            (["start", "--folder", str(second), "--port", str(port)], r"did not start in .*try another port"),
            (["start", "--folder", str(first), "--port", str(port + 1)], r"the folder is not empty; give a new"),
            (["stop", "--folder", str(tmp_path)], r"no server started by .* is in this folder"),
            (["start", "--folder", str(first / "squarechipo_server.json")], r"is a file: give a new folder"),
            (["start", "--folder", str(second), "--port", "70000"], r"--port 70000: give a TCP port from 1 to 65535"),
        ]
        for argv, fix in cases:
            assert squarechipo.cli.main(["registry", "server", *argv]) != 0
            err = capsys.readouterr().err.strip()
            assert len(err.splitlines()) == 1 and re.search(fix, err), (argv, err)
        assert not second.exists()  # the failed start tidied its folder
        # The record in the folder is a file anyone who can write the folder can edit: it names neither what is
        # removed nor what runs. Pointed at another folder, or not JSON, stop refuses and removes nothing.
        about = first / "squarechipo_server.json"
        recorded = about.read_text()
        victim = tmp_path / "victim"
        (victim / "data").mkdir(parents=True)
        (victim / "data" / "PG_VERSION").write_text("15\n")
        for edited in (json.dumps({"server": str(victim), "port": port}), "not json", json.dumps(["a list"])):
            about.write_text(edited)
            assert squarechipo.cli.main(["registry", "server", "stop", "--folder", str(first)]) != 0
            err = capsys.readouterr().err.strip()
            assert len(err.splitlines()) == 1 and "did not make" in err, err
        assert (victim / "data" / "PG_VERSION").is_file()
        about.write_text(json.dumps({**json.loads(recorded), "bindir": str(tmp_path / "evil")}))  # never run
        (first / "notes.txt").write_text("mine")  # put there after start: kept
    finally:
        assert squarechipo.cli.main(["registry", "server", "stop", "--folder", str(first)]) == 0
    assert "kept the folder" in capsys.readouterr().out
    assert sorted(p.name for p in first.iterdir()) == ["notes.txt"]


@given(
    recorded=st.one_of(st.text(max_size=60), st.sampled_from(["", ".", "..", "/", "/tmp", "/tmp/squarechipo-pg-x"]))
)
@settings(max_examples=60, deadline=None)
def test_stop_trusts_no_folder_the_record_names_but_its_own(recorded, tmp_path_factory):
    """Whatever the record's ``server`` says, stop acts only on the folder itself or a ``squarechipo-pg-*`` folder in
    the temporary folder holding a PostgreSQL data folder; anything else is refused before anything runs."""
    from squarechipo.data.local_server import _server_place

    folder = tmp_path_factory.mktemp("given").resolve()
    try:
        place = _server_place(folder, {"server": recorded})
    except ValueError as error:
        assert "did not make" in str(error)
        return
    assert place == folder or (place.parent == Path(tempfile.gettempdir()).resolve() and place.name.startswith(
        "squarechipo-pg-"))  # fmt: skip
    assert (place / "data" / "PG_VERSION").is_file()
