"""squarechipo.privacy.release.registry and the release store: the registry of releases is authoritative.

One transaction decides between two simultaneous releases; a release is registered before it becomes visible, and
one completed after an interruption is registered then; a missing, emptied, redirected or corrupt registry stops a
release (fail closed) and starting one is explicit; a declared privacy unit composes its rows.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import sqlite3
from pathlib import Path

import datasets
import pytest

from squarechipo.privacy import LabelPipeline, get_ledger, release_dataset
from squarechipo.privacy.release.registry import REGISTRY_ENV, RegistryError, init_registry, registry_path
from squarechipo.privacy.release.saved import load_release


def _rows(n: int = 30, start: int = 0) -> datasets.Dataset:
    return datasets.Dataset.from_dict(
        {
            "prompt": [f"Household {i} has ${1000 + 37 * i} spare; what now?" for i in range(start, start + n)],
            "chosen": [f"Household {i}: build the emergency fund first." for i in range(start, start + n)],
            "rejected": [f"Household {i}: buy lottery tickets." for i in range(start, start + n)],
        }
    )


def _release_at_a_barrier(folder: str, registry: str, barrier, queue) -> None:
    """Draw a release of the same rows as the other process, then register only once both have drawn: both passed
    the early check, so the registry's transaction alone decides."""
    import os

    import squarechipo.privacy.release.transaction as release_module

    os.environ[REGISTRY_ENV] = registry
    real = release_module.register_release

    def register_after_both_drew(*args, **kwargs):
        barrier.wait(timeout=120)
        return real(*args, **kwargs)

    release_module.register_release = register_after_both_drew
    try:
        release_dataset(_rows(), LabelPipeline(epsilon=0.5), folder)
        queue.put(("released", folder))
    except RegistryError as error:
        queue.put(("refused", str(error)))


@pytest.mark.integration
def test_of_two_simultaneous_releases_of_the_same_rows_exactly_one_wins(tmp_path):
    """Both processes released the same rows at the same moment and both ledgers said ε 0.5."""
    context = multiprocessing.get_context("fork")
    barrier, queue = context.Barrier(2), context.Queue()
    folders = [str(tmp_path / name) for name in ("one", "two")]
    workers = [
        context.Process(target=_release_at_a_barrier, args=(folder, str(registry_path()), barrier, queue))
        for folder in folders
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=300)
        assert worker.exitcode == 0
    outcomes = sorted(queue.get(timeout=10) for _ in workers)
    assert [kind for kind, _ in outcomes] == ["refused", "released"]
    assert "another release of these rows was registered while this one was being drawn" in outcomes[0][1]
    winner = outcomes[1][1]
    assert [f for f in folders if (tmp_path / f).exists()] == [winner]  # the loser's staged copy is gone too
    assert not any(p.name.endswith(".staging") for p in tmp_path.iterdir())
    with pytest.raises(ValueError, match=r"30 row\(s\) were released before"):
        release_dataset(_rows(), LabelPipeline(epsilon=0.5))


def test_a_release_cut_off_before_it_was_registered_is_registered_when_completed(tmp_path, monkeypatch):
    """Killed between writing its marker and writing the registry, a release was completed by the next run without
    being registered, so the same rows could be released again elsewhere."""
    import squarechipo.privacy.release.transaction as release_module

    def killed(*args, **kwargs):
        raise SystemExit("killed between the marker and the registry")

    folder = tmp_path / "release"
    with monkeypatch.context() as patch:  # (monkeypatch.undo() would undo this test's own registry too)
        patch.setattr(release_module, "register_release", killed)
        with pytest.raises(SystemExit):
            release_dataset(_rows(), LabelPipeline(epsilon=0.5), folder)
    staging = tmp_path / ".release.staging"
    assert staging.is_dir() and not folder.exists()  # nothing visible
    completed = release_dataset(_rows(), LabelPipeline(epsilon=0.5), folder)
    assert folder.is_dir() and not staging.exists()
    assert completed["chosen"] == load_release(folder)["chosen"]
    with pytest.raises(ValueError, match=r"30 row\(s\) were released before"):
        release_dataset(_rows(), LabelPipeline(epsilon=0.5), tmp_path / "elsewhere")


def test_a_missing_emptied_redirected_or_corrupt_registry_stops_the_release(tmp_path, monkeypatch):
    release_dataset(_rows(), LabelPipeline(epsilon=0.5))  # a release exists in this registry
    path = registry_path()
    for state, prepare in {
        "missing": lambda: path.unlink(),
        "emptied": lambda: path.write_bytes(b""),
        "redirected": lambda: monkeypatch.setenv(REGISTRY_ENV, str(tmp_path / "elsewhere.sqlite")),
    }.items():
        saved = path.read_bytes()
        prepare()
        refusal = "(no registry of releases at|at .* is empty|was started on this machine .* is now missing)"
        with pytest.raises(RegistryError, match=refusal) as refused:
            release_dataset(_rows(), LabelPipeline(epsilon=0.5))
        assert str(registry_path()) in str(refused.value) and "squarechipo registry init" in str(refused.value), state
        monkeypatch.setenv(REGISTRY_ENV, str(path))
        for leftover in path.parent.glob(path.name + "*"):
            leftover.unlink()
        path.write_bytes(saved)
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(RegistryError, match=f"the registry of releases at {path} cannot be read .*DatabaseError"):
        release_dataset(_rows(60, start=100), LabelPipeline(epsilon=0.5))
    # Starting a registry is explicit and refuses a path that holds one.
    fresh = tmp_path / "new.sqlite"
    assert init_registry(fresh) == fresh
    with pytest.raises(RegistryError, match="already exists"):
        init_registry(fresh)
    # Seeded releases (simulations) are not counted and need no registry.
    monkeypatch.setenv(REGISTRY_ENV, str(tmp_path / "none.sqlite"))
    assert len(release_dataset(_rows(), LabelPipeline(epsilon=0.5), seed=0)) == 30


def test_a_declared_privacy_unit_composes_its_rows_and_is_what_the_registry_counts(monkeypatch):
    """Rows of one labeller compose (ε × their number); the same comparison labelled by two labellers is two units,
    not a copy; a later release of a labeller's rows composes with the earlier one."""
    rows = _rows(6)
    same_pair = datasets.concatenate_datasets([rows, rows.select([0])])  # row 6 copies row 0's comparison
    labelled = same_pair.add_column("labeller", ["ann", "bob", "bob", "cy", "cy", "cy", "dee"])
    with pytest.raises(ValueError, match="row 6 copies row 0"):
        release_dataset(same_pair, LabelPipeline(epsilon=0.5))
    released = release_dataset(labelled, LabelPipeline(epsilon=0.5), privacy_unit="labeller")
    with pytest.raises(ValueError, match=r"7 row\(s\) were released before"):  # by content and unit: once each
        release_dataset(labelled, LabelPipeline(epsilon=0.5), privacy_unit="labeller")
    assert "labeller" not in released.column_names  # not declared public: used for accounting, then dropped
    (release,) = get_ledger(released).releases
    assert (release.privacy_unit, release.rows_per_unit) == ("labeller", 3)
    assert get_ledger(released).total_epsilon == pytest.approx(1.5)  # cy's three labels
    assert get_ledger(released).rr_flip_rate == pytest.approx(1 / (1 + 2.718281828459045**0.5))  # per-row noise
    more = _rows(2, start=50).add_column("labeller", ["cy", "eve"])
    with pytest.raises(ValueError, match=r"1 row\(s\) were released before"):
        release_dataset(more, LabelPipeline(epsilon=0.5), privacy_unit="labeller")
    again = release_dataset(more, LabelPipeline(epsilon=0.5), privacy_unit="labeller", rerelease=True)
    assert get_ledger(again).total_epsilon == pytest.approx(2.0)  # cy: 1.5 before, 0.5 now
    with pytest.raises(ValueError, match="privacy_unit 'annotator' is not a column"):
        release_dataset(_rows(2, start=80), LabelPipeline(epsilon=0.5), privacy_unit="annotator")


def test_the_registry_is_one_sqlite_file_with_its_format(tmp_path):
    path = init_registry(tmp_path / "r.sqlite")
    db = sqlite3.connect(str(path))
    meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
    assert meta["format"] == "squarechipo.release_registry/3" and len(meta["registry_id"]) == 32


def test_the_first_release_on_a_machine_starts_its_registry_and_a_lost_or_redirected_one_still_stops(
    tmp_path, monkeypatch, caplog
):
    """The README's example stopped on a fresh machine (no registry). The first release where the machine's registry
    was never started now starts it, logged; pointing SQUARECHIPO_CACHE or HOME elsewhere starts no other (each
    released the same rows again before); a relative path is refused; a registry started and then lost, or one named
    by the environment and missing, still stops a release."""
    import logging

    monkeypatch.delenv(REGISTRY_ENV)
    with caplog.at_level(logging.WARNING, logger="squarechipo"):
        release_dataset(_rows(), LabelPipeline(epsilon=0.5))
    assert registry_path().is_file() and "started a new registry of releases" in caplog.text
    for variable, value in (("SQUARECHIPO_CACHE", tmp_path / "cache"), ("HOME", tmp_path / "home")):
        monkeypatch.setenv(variable, str(value))
        with pytest.raises(ValueError, match=r"30 row\(s\) were released before"):  # the same registry counts
            release_dataset(_rows(), LabelPipeline(epsilon=0.5))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(REGISTRY_ENV, "releases.sqlite")
    with pytest.raises(RegistryError, match=rf"{REGISTRY_ENV}='releases.sqlite' is a relative path"):
        release_dataset(_rows(), LabelPipeline(epsilon=0.5))
    monkeypatch.delenv(REGISTRY_ENV)
    for leftover in registry_path().parent.glob("releases.sqlite*"):  # every file of the registry, by pattern
        leftover.unlink()
    with pytest.raises(RegistryError, match="was started on this machine .* and is now missing"):
        release_dataset(_rows(), LabelPipeline(epsilon=0.5))
    monkeypatch.setenv(REGISTRY_ENV, str(tmp_path / "elsewhere.sqlite"))
    with pytest.raises(RegistryError, match="there is no registry of releases at .*elsewhere.sqlite"):
        release_dataset(_rows(5, start=300), LabelPipeline(epsilon=0.5))


@pytest.mark.integration
def test_the_machine_folder_is_the_accounts_whatever_home_or_the_cache_say(tmp_path):
    """Where the machine's registry, record store and key live, read in fresh processes with HOME and
    SQUARECHIPO_CACHE pointed elsewhere: the same folder (the account's home from the password database)."""
    import os
    import subprocess
    import sys

    code = "from squarechipo.trust.machine import machine_dir; print(machine_dir())"
    seen = set()
    for home, cache in ((None, None), (tmp_path / "h1", tmp_path / "c1"), ("relative-home", "relative-cache")):
        env = {**os.environ}
        env.pop("SQUARECHIPO_TEST_MACHINE_DIR")  # the real rule, read only (the test shim is off)
        for name, value in (("HOME", home), ("SQUARECHIPO_CACHE", cache)):
            if value is not None:
                env[name] = str(value)
        seen.add(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout)
    assert len(seen) == 1 and seen.pop().strip().endswith(".squarechipo")


def _first_release_in_a_fresh_process(machine: str, barrier, queue) -> None:
    from squarechipo.trust import machine as machine_folder

    machine_folder.machine_dir = lambda: __import__("pathlib").Path(
        machine
    )  # this test's machine folder, in this process
    os.environ.pop(REGISTRY_ENV, None)
    barrier.wait()
    try:
        release_dataset(_rows(12, start=600), LabelPipeline(epsilon=0.5))
        queue.put("released")
    except (ValueError, RegistryError) as refused:
        queue.put(str(refused))


@pytest.mark.integration
def test_two_first_releases_at_once_give_one_registry_and_one_release(tmp_path):
    """Two processes making a machine's first release at the same moment: the loser was told the sound registry "is
    not a squarechipo registry ... move it away". Now one registry is started, one release is made, and the other is
    refused because those rows were just released."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    barrier, queue = context.Barrier(2), context.Queue()
    machine = tmp_path / ".squarechipo"
    workers = [
        context.Process(target=_first_release_in_a_fresh_process, args=(str(machine), barrier, queue))
        for _ in range(2)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    answers = sorted(queue.get(timeout=5) for _ in workers)
    assert answers[1] == "released" and "12 row(s) were released before" in answers[0], answers
    left = {p.name for p in machine.iterdir()}
    assert {"releases.sqlite", ".releases.sqlite.started"} <= left and not any(n.endswith(".new") for n in left)


def _long_rows(n: int, start: int) -> datasets.Dataset:
    words = [f"w{start + i}x{j}" for i in range(n) for j in range(30)]
    text = [" ".join(words[30 * i : 30 * (i + 1)]) for i in range(n)]
    return datasets.Dataset.from_dict({"prompt": text, "chosen": [t + " save" for t in text], "rejected": text})


def test_both_plans_of_a_registry_lookup_find_the_same_earlier_rows_exactly_and_as_near_copies(monkeypatch):
    """The registry is read whole when it is smaller than the query, and joined with the query's keys when it is
    larger, the band keys asked a slice at a time: either way the same rows are found, by content and as
    near-copies. A sketch in another shingle-hash scheme than the registry's is refused (it would find none)."""
    from squarechipo.data.fingerprint import canonical_rows, row_hashes
    from squarechipo.data.near_duplicates import LEGACY_SCHEME, SCHEME, sketch
    from squarechipo.privacy.release import lookup
    from squarechipo.privacy.release.registry import earlier_releases, registry_scheme

    release_dataset(_long_rows(40, start=500), LabelPipeline(epsilon=0.5))
    edited = _long_rows(2, start=510).map(lambda r: {"chosen": r["chosen"] + " now"})
    for keys_per_query in (1 << 20, 7):
        monkeypatch.setattr(lookup, "_KEYS_PER_QUERY", keys_per_query)
        for probe in (_long_rows(3, 520), datasets.concatenate_datasets([_long_rows(60, 900), _long_rows(3, 520)])):
            probe = datasets.concatenate_datasets([probe, edited])
            rows = canonical_rows(probe.with_format("arrow")[:])
            found = earlier_releases(row_hashes(probe), sketch(rows))
            assert (found.rows, found.near_copies, len(found.releases)) == (5, 2, 1), len(probe)
    assert registry_scheme() == SCHEME
    with pytest.raises(RegistryError, match=r"signatures of scheme squarechipo\.words-fmix64/1, and these rows were "
                                            r"sketched in datasketch\.sha1-32/1"):  # fmt: skip
        earlier_releases(row_hashes(edited), sketch(canonical_rows(edited.with_format("arrow")[:]), LEGACY_SCHEME))


def _format_2_registry(path, rows: datasets.Dataset, release_id: str) -> None:
    """A registry as squarechipo 0.3 wrote it (format 2: text release ids in every row, blob band keys)."""
    import hashlib

    from squarechipo.data.fingerprint import canonical_rows, row_hashes
    from squarechipo.data.near_duplicates import LEGACY_SCHEME, signatures

    db = sqlite3.connect(path)
    with db:
        db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        db.execute("CREATE TABLE releases (id TEXT PRIMARY KEY, epsilon REAL NOT NULL, made TEXT NOT NULL, "
                   "folder TEXT, rows INTEGER NOT NULL)")  # fmt: skip
        db.execute("CREATE TABLE released_units (unit BLOB NOT NULL, release TEXT NOT NULL, count INTEGER)")
        db.execute("CREATE INDEX released_units_by_unit ON released_units (unit)")
        db.execute("CREATE TABLE released_bands (band BLOB NOT NULL, release TEXT NOT NULL, row INTEGER)")
        db.execute("CREATE INDEX released_bands_by_band ON released_bands (band)")
        db.execute("CREATE TABLE released_signatures (release TEXT NOT NULL, row INTEGER NOT NULL, "
                   "signature BLOB NOT NULL, PRIMARY KEY (release, row))")  # fmt: skip
        meta = {"format": "squarechipo.release_registry/2", "registry_id": "0" * 32, "created": "2026-11-20"}
        db.executemany("INSERT INTO meta VALUES (?, ?)", meta.items())
        db.execute(
            "INSERT INTO releases VALUES (?, 0.5, '2026-11-21T00:00:00+00:00', NULL, ?)", (release_id, len(rows))
        )
        db.executemany("INSERT INTO released_units VALUES (?, ?, 1)", [(u, release_id) for u in row_hashes(rows)])
        marks = signatures(canonical_rows(rows.with_format("arrow")[:]), LEGACY_SCHEME)  # 0.3 knew no other
        for i, mark in enumerate(marks):
            db.execute(
                "INSERT INTO released_signatures VALUES (?, ?, ?)", (release_id, i, mark.astype("<u4").tobytes())
            )
            for band in range(20):
                key = bytes([band]) + hashlib.blake2b(mark[band * 6 : band * 6 + 6].astype("<u4").tobytes(),
                                                      digest_size=8).digest()  # fmt: skip
                db.execute("INSERT INTO released_bands VALUES (?, ?, ?)", (key, release_id, i))
    db.close()


def test_a_format_2_registry_is_migrated_once_and_still_refuses_its_rows_and_their_near_copies(tmp_path, monkeypatch):
    """0.3's registries hold release ids as text in every row (about 3 KB a released row); opened by this version
    they are migrated in one transaction, and what they recorded still counts, exactly and as near-copies."""
    path = tmp_path / "old.sqlite"
    _format_2_registry(path, _long_rows(20, start=700), "sha256:" + "1" * 64)
    monkeypatch.setenv(REGISTRY_ENV, str(path))
    for attempt in (
        _long_rows(3, start=705),
        _long_rows(2, start=710).map(lambda r: {"chosen": r["chosen"] + " now"}),
    ):
        with pytest.raises(ValueError, match=r"row\(s\) were released before.* \(ε 0.5 at 2026-11-21"):
            release_dataset(attempt, LabelPipeline(epsilon=1.0))
    db = sqlite3.connect(path)
    meta = dict(db.execute("SELECT key, value FROM meta"))
    counts = [db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in ("released_units", "released_bands")]
    tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    db.close()
    assert meta["format"] == "squarechipo.release_registry/3" and meta["migrated_from"].endswith("/2")
    assert "minhash" not in meta  # its signatures keep 0.3's shingle hash, and releases sketch in it (above)
    assert counts == [20, 400] and not any(t.endswith("_v2") for t in tables)
    released = release_dataset(_long_rows(3, start=800), LabelPipeline(epsilon=1.0))
    assert len(released) == 3


def test_a_release_entered_while_another_was_drawn_is_found_by_the_transaction_that_enters_the_second():
    """In one process, step by step: two releases of the same rows both look before either is entered; the first is
    entered, the second's transaction reads the registry again (its state changed) and refuses, naming the first.
    A release whose look is still current is entered without that second read."""
    from squarechipo.privacy.release.registry import RegistryError, earlier_releases
    from squarechipo.privacy.release.transaction import _Release

    first, second = (_Release(_rows(40, start=300), LabelPipeline(epsilon=0.5)) for _ in range(2))
    for transaction in (first, second):
        transaction._admit()
        transaction._draw()
    assert first._earlier.state == second._earlier.state and not first._earlier.rows
    first._register()
    concurrent = (
        r"^another release of these rows was registered while this one was being drawn \(1 release\(s\): 40 row.*\); "
        r"this release was not made visible and its noise is discarded \(nothing read it\)\. Reuse that release, or "
        r"run again with rerelease=True to compose with it\.$"
    )
    with pytest.raises(RegistryError, match=concurrent):
        second._register()
    assert earlier_releases(first._units).ids == {first._release.release_id}  # the second was not entered


def test_the_registry_sums_every_earlier_release_of_a_row_exactly_and_as_a_near_copy():
    """Basic composition: a row released at ε 0.5 and again at ε 1 (rerelease) has spent 1.5, and so has a near-copy
    of it (it counted only the first release it matched before); the earlier releases are listed in the order they
    were made."""
    from squarechipo.data.fingerprint import canonical_rows, row_hashes
    from squarechipo.data.near_duplicates import sketch
    from squarechipo.privacy.release.registry import earlier_releases

    rows = _long_rows(3, start=400)
    first = get_ledger(release_dataset(rows, LabelPipeline(epsilon=0.5))).releases[0].release_id
    second = get_ledger(release_dataset(rows, LabelPipeline(epsilon=1.0), rerelease=True)).releases[0].release_id
    edited = rows.map(lambda r: {"chosen": r["chosen"] + " now"})  # near-copies of both releases' rows
    for probe, near in ((rows, 0), (edited, 3)):
        found = earlier_releases(row_hashes(probe), sketch(canonical_rows(probe.with_format("arrow")[:])))
        assert (found.rows, found.near_copies) == (3, near)
        assert found.epsilon == pytest.approx(1.5) and [r[0] for r in found.releases] == [first, second]


def test_a_format_2_registry_that_cannot_be_migrated_is_refused_unchanged(tmp_path, monkeypatch):
    """A format-2 file edited by hand (a signature cut short) stops the release with one message naming the file
    and the fix; the file is left as it was, still format 2."""
    path = tmp_path / "old.sqlite"
    _format_2_registry(path, _long_rows(3, start=900), "sha256:" + "2" * 64)
    db = sqlite3.connect(path)
    with db:
        db.execute("UPDATE released_signatures SET signature = x'00' WHERE row = 1")
    db.close()
    before = path.read_bytes()
    monkeypatch.setenv(REGISTRY_ENV, str(path))
    refusal = (
        rf"^the registry of releases at {re.escape(str(path))} is format 2 and could not be migrated to format 3 "
        r"\((ValueError|DatabaseError): .*\); nothing was changed\. Restore it from a backup, or keep using it with "
        r"squarechipo 0\.3; only if it is lost for good, move it away and start a new one \(squarechipo registry "
        r"init\)\.$"
    )
    with pytest.raises(RegistryError, match=refusal):
        release_dataset(_long_rows(2, start=950), LabelPipeline(epsilon=1.0))
    db = sqlite3.connect(path)
    assert dict(db.execute("SELECT key, value FROM meta"))["format"].endswith("/2")
    db.close()
    assert len(path.read_bytes()) >= len(before) // 2  # the rows are all still there


def _variant(row: datasets.Dataset, word: str) -> datasets.Dataset:
    """A near-copy of ``row`` (one word added to its prompt: Jaccard about 0.97)."""
    return row.map(lambda r: {"prompt": r["prompt"] + " " + word})


def _keys(rows: datasets.Dataset):
    from squarechipo.data.fingerprint import canonical_rows, row_hashes
    from squarechipo.data.near_duplicates import sketch

    return row_hashes(rows), sketch(canonical_rows(rows.with_format("arrow")[:]))


def _enter(release_id: str, rows: datasets.Dataset, epsilon: float, made: str) -> None:
    from squarechipo.privacy.release.registry import earlier_releases, register_release

    units, marks = _keys(rows)
    register_release(release_id, units, marks, epsilon, made, expected=earlier_releases(units, marks))


def test_a_row_nearly_copying_two_rows_of_one_release_counts_it_once_and_every_other_release_too():
    """A release holding two near-copies of a new row is one earlier release of it (ε once); a second release that
    holds a third counts as well; the releases are listed in the order they were made, not by id."""
    from squarechipo.privacy.release.registry import earlier_releases

    row = _long_rows(1, start=700)
    _enter("a-release", datasets.concatenate_datasets([row, _variant(row, "alpha")]), 0.5, "2026-01-02T00:00:00+00:00")
    _enter("z-release", _variant(row, "beta"), 1.0, "2026-01-01T00:00:00+00:00")
    found = earlier_releases(*_keys(_variant(row, "gamma")))
    assert (found.rows, found.near_copies) == (1, 1)
    assert found.epsilon == pytest.approx(1.5)
    assert [r[0] for r in found.releases] == ["z-release", "a-release"]


def test_a_unit_whose_release_is_not_entered_is_skipped_and_the_read_goes_on():
    """A unit row whose release row is absent (entered by a writer between the two reads, or edited by hand) adds
    nothing, and the units read after it still count."""
    from squarechipo.privacy.release.registry import earlier_releases

    db = sqlite3.connect(registry_path())
    with db:
        db.execute("INSERT INTO released_units VALUES (?, 99, 1)", (b"orphan",))  # read first: the lowest rowid
    db.close()
    rows = _long_rows(2, start=720)
    _enter("a-release", rows, 0.5, "2026-01-02T00:00:00+00:00")
    units, _ = _keys(rows)
    found = earlier_releases([b"orphan", *units])
    assert (found.rows, found.epsilon, found.ids) == (2, 0.5, frozenset({"a-release"}))


def test_a_unit_entered_without_a_count_counts_its_release_once(tmp_path, monkeypatch):
    """Format 2 allowed a unit without a count (NULL): it is one release of the unit, ε once."""
    from squarechipo.data.fingerprint import row_hashes
    from squarechipo.privacy.release.registry import earlier_releases

    path, rows = tmp_path / "old.sqlite", _long_rows(2, start=740)
    _format_2_registry(path, rows, "sha256:" + "3" * 64)
    db = sqlite3.connect(path)
    with db:
        db.execute("UPDATE released_units SET count = NULL")
    db.close()
    monkeypatch.setenv(REGISTRY_ENV, str(path))
    found = earlier_releases(row_hashes(rows))
    assert (found.rows, found.epsilon) == (2, pytest.approx(0.5))


def test_a_release_nearly_copying_one_entered_while_it_was_drawn_is_refused_by_its_transaction():
    """The entering transaction's second read looks for near-copies too, not only for the same rows."""
    from squarechipo.privacy.release.transaction import _Release

    rows = _long_rows(40, start=760)
    first = _Release(rows, LabelPipeline(epsilon=0.5))
    second = _Release(_variant(rows, "again"), LabelPipeline(epsilon=0.5))
    for transaction in (first, second):
        transaction._admit()
        transaction._draw()
    first._register()
    refusal = r"another release of these rows .*40 row\(s\) .*40 of them as near-copies"
    with pytest.raises(RegistryError, match=refusal):
        second._register()


def test_a_registry_of_another_format_or_missing_a_table_is_refused(tmp_path, monkeypatch):
    for name, edit in {
        "another format": "UPDATE meta SET value = 'squarechipo.release_registry/99' WHERE key = 'format'",
        "a table dropped": "DROP TABLE released_bands",
    }.items():
        path = init_registry(tmp_path / f"{name}.sqlite")
        db = sqlite3.connect(path)
        with db:
            db.execute(edit)
        db.close()
        monkeypatch.setenv(REGISTRY_ENV, str(path))
        with pytest.raises(RegistryError, match=f"at {path} is not a squarechipo registry .*registry init"):
            release_dataset(_rows(3, start=780), LabelPipeline(epsilon=0.5))


def test_init_registry_starts_where_it_is_told_in_utc_and_a_lost_one_names_when_it_was_started(tmp_path, monkeypatch):
    """A path in folders not yet made; the environment's path when none is given; an empty file (touched) is started,
    a file with anything in it is refused; the start time is UTC, and the refusal of a lost registry gives it."""
    import datetime as dt

    nested = tmp_path / "a" / "b" / "r.sqlite"
    assert init_registry(nested) == nested
    monkeypatch.setenv(REGISTRY_ENV, str(tmp_path / "env.sqlite"))
    assert init_registry() == tmp_path / "env.sqlite"
    touched = tmp_path / "touched.sqlite"
    touched.touch()
    assert init_registry(touched) == touched
    one_byte = tmp_path / "one.sqlite"
    one_byte.write_bytes(b"x")
    with pytest.raises(RegistryError, match="one.sqlite already exists"):
        init_registry(one_byte)
    db = sqlite3.connect(nested)
    created = dict(db.execute("SELECT key, value FROM meta"))["created"]
    db.close()
    assert dt.datetime.fromisoformat(created).utcoffset() == dt.timedelta(0)
    monkeypatch.setenv(REGISTRY_ENV, str(nested))
    nested.unlink()
    lost = f"was started on this machine \\({re.escape(created)}\\) and is now missing"
    with pytest.raises(RegistryError, match=lost):
        release_dataset(_rows(3, start=790), LabelPipeline(epsilon=0.5))


def test_earlier_releases_say_how_many_rows_were_near_copies_only_when_some_were():
    from squarechipo.privacy.release.registry import EarlierReleases

    releases = (("r", 0.5, "2026-01-01"),)
    assert (
        "2 row(s) were released before, 1 of them as near-copies (ε 0.5 at 2026-01-01;"
        in EarlierReleases(2, 0.5, releases, near_copies=1).describe()
    )
    assert "near-copies" not in EarlierReleases(2, 0.5, releases).describe()


def _refusal(call) -> str:
    with pytest.raises(RegistryError) as refused:
        call()
    return str(refused.value)


def test_each_refusal_of_the_registry_says_in_full_what_happened_and_the_fix(tmp_path, monkeypatch):
    """The whole text of every refusal a user meets (a reworded fix is a changed fix: the test pins each)."""
    import datetime as dt

    from squarechipo.privacy.release.registry import EarlierReleases

    release = lambda: release_dataset(_rows(3, start=900), LabelPipeline(epsilon=0.5))  # noqa: E731
    never = tmp_path / "never.sqlite"
    monkeypatch.setenv(REGISTRY_ENV, str(never))
    # A registry named by the environment is never started silently.
    assert _refusal(release) == (
        f"there is no registry of releases at {never} ({REGISTRY_ENV} or this machine's), so no release can be "
        "checked against earlier releases of the same rows, and squarechipo does not start one silently (a lost or "
        "redirected registry would count from zero). If no release was ever made with this registry's setting, start "
        "one: "
        "`squarechipo registry init` (or squarechipo.privacy.release.registry.init_registry()). If it was moved, "
        f"point {REGISTRY_ENV} at it."
    )
    path = init_registry(tmp_path / "r.sqlite")
    assert _refusal(lambda: init_registry(path)) == (
        f"{path} already exists; a registry is started once. Use it as it is (point {REGISTRY_ENV} at it), or, to "
        "start over, move it away first (the releases it records are then no longer counted)."
    )
    monkeypatch.setenv(REGISTRY_ENV, str(path))
    started = (path.parent / f".{path.name}.started").read_text().split()[1]
    assert dt.datetime.fromisoformat(started).utcoffset() == dt.timedelta(0)
    saved = path.read_bytes()
    path.unlink()
    assert _refusal(release) == (
        f"the registry of releases at {path} was started on this machine ({started}) and is now missing, so the "
        "releases it recorded cannot be counted. Restore it (a backup older than the last release under-counts the "
        "releases made since); only if it is lost for good, start a new one by hand (squarechipo registry init): the "
        "rows it recorded could then be released again."
    )
    path.write_bytes(b"")
    assert _refusal(release) == (
        f"the registry of releases at {path} is empty: it was emptied, dropped, replaced or written by another "
        "version, so it cannot say which rows were released. Restore it (a backup older than the last release "
        "under-counts the releases made since); only if it is lost for good, move it away and start a new one "
        "(squarechipo registry init)."
    )
    path.write_bytes(b"this is not a database" * 100)
    assert _refusal(release) == (
        f"the registry of releases at {path} cannot be read (DatabaseError: file is not a database): it is corrupt, "
        "not a registry, or this role may not read it. Restore it from a backup (a backup older than the last release "
        "under-counts: releases made since it are not in it, so their rows could be released again; add them back or "
        "treat their rows as spent); "
        "squarechipo will not release rows it cannot check against it. Only if it is lost for good, move it away and "
        "start a new one (squarechipo registry init): releases it recorded are then no longer counted."
    )
    path.write_bytes(saved)
    two = EarlierReleases(3, 1.5, (("a", 0.5, "2026-01-01"), ("b", 1.0, "2026-01-02")))
    assert two.describe() == (
        "3 row(s) were released before (ε 0.5 at 2026-01-01, ε 1 at 2026-01-02; composed ε of those releases 1.5)"
    )


def test_a_registry_restored_from_an_older_backup_is_found_to_under_count(tmp_path, monkeypatch, capsys):
    """A backup older than the last release under-counts: `squarechipo registry audit` names the saved releases the
    restored registry does not hold (their ledgers name them), and says what to do."""
    import shutil

    from squarechipo.cli import main

    path = Path(os.environ[REGISTRY_ENV])
    release_dataset(_rows(6, start=1000), LabelPipeline(epsilon=0.5), tmp_path / "first")
    shutil.copy(path, tmp_path / "backup.sqlite")  # the nightly backup
    release_dataset(_rows(6, start=1100), LabelPipeline(epsilon=0.5), tmp_path / "second")
    assert main(["registry", "audit", str(tmp_path / "first"), str(tmp_path / "second")]) == 0
    shutil.copy(tmp_path / "backup.sqlite", path)  # the registry restored from it
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    capsys.readouterr()
    assert main(["registry", "audit", str(tmp_path / "first"), str(tmp_path / "second")]) == 1
    out, err = capsys.readouterr()
    found = json.loads(out)
    assert [entry["entered_here"] for entry in found] == [True, False]
    # What the signed ledger states the rows spent, against what the restored registry counts for them.
    assert [(e["ledger_epsilon"], e["registry_epsilon"], e["under_counts"]) for e in found] == [
        (0.5, 0.5, False),
        (0.5, 0.0, True),
    ]
    assert "1 saved release(s) are not entered in this registry, or it counts less ε for their rows" in err
    assert f"signed ledgers state ({tmp_path / 'second'})" in err
    with pytest.raises(ValueError, match="released before"):  # what the backup still counts, it refuses
        release_dataset(_rows(6, start=1000), LabelPipeline(epsilon=0.5))
