"""The registry of releases on this machine: composition across releases of the same rows, authoritative.

Randomized response protects a label once. Released again with fresh noise, into another folder or another file,
the same rows give an attacker several independent noisy copies, and their majority is the raw label. Each ledger
describes one dataset's own releases, so it cannot see the others; this registry can. For every release drawn from
OS entropy it keeps each released unit's key (the hash of a row's canonical content, :func:`squarechipo.data.
fingerprint.row_hashes`, label-free and equal for retyped copies; and, where a privacy unit is declared, the hash of
its value too: a unit groups rows, never splits one comparison's history), the
rows' MinHash signatures and LSH band keys (so near-copies, :mod:`squarechipo.data.near_duplicates`, are found
too), the release's ε, its time and where it was saved.

It is authoritative:

- **One transaction decides.** A release is entered by :func:`register_release`, which re-reads the earlier
  releases of its rows and inserts it in one ``BEGIN IMMEDIATE`` transaction. Of two releases of the same rows at
  the same moment, exactly one is entered as drawn; the other finds the first and is refused (or, with
  ``rerelease``, must be drawn again so its ledger states the composed ε).
- **Registered before it is visible.** The release path enters a release after its staged copy is complete and
  before it is renamed into place (:mod:`squarechipo.privacy.release.store`); a release completed after an
  interruption is entered then, from its released rows.
- **Fail closed.** A registry that is lost (missing where one was started: a marker beside it says so), emptied,
  redirected to a missing file (``$SQUARECHIPO_RELEASE_REGISTRY``), not a registry or unreadable stops a release with
  its path and the fix; it never silently starts from zero. The one exception is a machine's first release: where the
  default registry was never started (no marker), that release starts it and logs so. Starting one by hand is
  :func:`init_registry` (``squarechipo registry init``).

A new release of raw rows that were released before is refused unless the caller opts in (``rerelease=True``,
``label_rerelease: true`` in a config). Then the ledger records ``earlier_epsilon``: basic composition, the largest
sum of the earlier releases' ε over any one unit, and the ledger's and the card's total ε include it.

What it does not cover: releases made on other machines or into another registry, paraphrased rows, and seeded
releases (a fixed seed is for simulation; their cards already say they are not private). The file is
``$SQUARECHIPO_RELEASE_REGISTRY`` or ``releases.sqlite`` in the record store (``~/.cache/squarechipo``).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import logging
import os
import sqlite3
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from squarechipo.data import store
from squarechipo.data.near_duplicates import NEAR_COPY_JACCARD, Sketch, band_key_table, estimated_jaccard

__all__ = [
    "REGISTRY_ENV",
    "REGISTRY_FORMAT",
    "EarlierReleases",
    "RegistryError",
    "earlier_releases",
    "init_registry",
    "register_release",
    "registry_path",
]

logger = logging.getLogger("squarechipo")

REGISTRY_ENV = "SQUARECHIPO_RELEASE_REGISTRY"
REGISTRY_FORMAT = "squarechipo.release_registry/3"
#: The format 0.3 wrote (release ids as text in every row, band keys as blobs): opened, it is migrated to this one.
_FORMAT_2 = "squarechipo.release_registry/2"
_TABLES = {"meta", "releases", "released_units", "released_bands", "released_signatures"}
#: Format 3: a release is referred to by its number; band keys are integers (squarechipo.data.near_duplicates).
_SCHEMA = (
    "CREATE TABLE releases (no INTEGER PRIMARY KEY, id TEXT UNIQUE NOT NULL, epsilon REAL NOT NULL, "
    "made TEXT NOT NULL, folder TEXT, rows INTEGER NOT NULL)",
    "CREATE TABLE released_units (unit BLOB NOT NULL, release INTEGER NOT NULL, count INTEGER)",
    "CREATE INDEX released_units_by_unit ON released_units (unit)",
    "CREATE TABLE released_bands (band INTEGER NOT NULL, release INTEGER NOT NULL, row INTEGER NOT NULL)",
    "CREATE INDEX released_bands_by_band ON released_bands (band)",
    "CREATE TABLE released_signatures (release INTEGER NOT NULL, row INTEGER NOT NULL, signature BLOB NOT NULL, "
    "PRIMARY KEY (release, row)) WITHOUT ROWID",
)


class RegistryError(RuntimeError):
    """The registry of releases cannot be trusted (missing, emptied, corrupt) or refuses a release."""


def default_registry_path() -> Path:
    """This machine's registry: ``releases.sqlite`` in :func:`squarechipo.data.store.machine_dir` (neither ``$HOME``
    nor ``$SQUARECHIPO_CACHE`` moves it)."""
    return store.machine_dir() / "releases.sqlite"


def registry_path() -> Path:
    """Where the registry of releases lives: ``$SQUARECHIPO_RELEASE_REGISTRY`` (an absolute path: a relative one
    would name another registry in every folder a job runs from) or this machine's (:func:`default_registry_path`)."""
    named = os.environ.get(REGISTRY_ENV)
    if not named:
        return default_registry_path()
    path = Path(named).expanduser()
    if not path.is_absolute():
        raise RegistryError(
            f"{REGISTRY_ENV}={named!r} is a relative path, which names another registry in every folder a job runs "
            f"from (each counting from zero). Give an absolute path, e.g. {REGISTRY_ENV}={Path(named).resolve()}, or "
            "unset it to use this machine's registry."
        )
    return path


def _started_marker(path: Path) -> Path:
    """The file that says a registry was started at ``path``: with it, a missing registry is a lost one. A hidden
    name that ``releases.sqlite*`` does not match, so clearing the registry's files by pattern does not clear it."""
    return path.with_name(f".{path.name}.started")


def _first_on_this_machine(path: Path) -> bool:
    """This machine's registry, never started here (no marker beside it): the first release starts it. Any other
    registry (named by ``$SQUARECHIPO_RELEASE_REGISTRY``), or this one started before and now missing, is never started
    silently."""
    return path == default_registry_path() and not _started_marker(path).exists()


def _missing(path: Path) -> RegistryError:
    marker = _started_marker(path)
    if marker.exists():
        started = marker.read_text().split()
        return RegistryError(
            f"the registry of releases at {path} was started on this machine ({' '.join(started[1:2])}) and is now "
            "missing, so the releases it recorded cannot be counted. Restore it (a backup older than the last "
            "release under-counts the releases made since); only if it is lost for good, start a new one by hand "
            "(squarechipo registry init): the rows it recorded could then be released again."
        )
    return RegistryError(
        f"there is no registry of releases at {path} ({REGISTRY_ENV} or the cache root), so no release can be "
        "checked against earlier releases of the same rows, and squarechipo does not start one silently (a lost or "
        "redirected registry would count from zero). If no release was ever made with this registry's setting, "
        "start one: `squarechipo registry init` (or squarechipo.privacy.release.registry.init_registry()). If it was "
        f"moved, point {REGISTRY_ENV} at it."
    )


def init_registry(path: str | os.PathLike | None = None) -> Path:
    """Start a new, empty registry of releases (an explicit step, logged). Refuses a path that already holds one."""
    path = Path(path).expanduser() if path is not None else registry_path()
    if not path.is_absolute():
        raise RegistryError(
            f"{path}: start a registry at an absolute path (a relative one names a new one per folder)."
        )
    if not _start(path):
        raise RegistryError(
            f"{path} already exists; a registry is started once. Use it as it is (point {REGISTRY_ENV} at it), or, to "
            "start over, move it away first (the releases it records are then no longer counted)."
        )
    return path


def _start(path: Path) -> bool:
    """Create a registry at ``path`` atomically: built whole in a file of its own, then linked into place, so two
    processes starting one at the same moment end with one registry (the loser's is discarded). False when one
    was there already (or won the race)."""
    if path.exists() and path.stat().st_size > 0:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    building = path.with_name(f".{path.name}.{uuid.uuid4().hex}.new")
    db = sqlite3.connect(str(building), timeout=60.0)
    try:
        with db:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            for statement in _SCHEMA:
                db.execute(statement)
            created = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
            meta = {"format": REGISTRY_FORMAT, "registry_id": uuid.uuid4().hex, "created": created}
            db.executemany("INSERT INTO meta VALUES (?, ?)", meta.items())
    finally:
        db.close()
    try:
        if path.exists():  # an empty file left where a registry should be: replaced only if it is still empty
            if path.stat().st_size > 0:
                return False
            os.replace(building, path)
        else:
            os.link(building, path)  # fails if another process linked its registry first
    except FileExistsError:
        return False
    finally:
        building.unlink(missing_ok=True)
        for suffix in ("-wal", "-shm"):
            Path(f"{building}{suffix}").unlink(missing_ok=True)
    _started_marker(path).write_text(f"{meta['registry_id']} {created}\n")
    logger.warning("started a new registry of releases at %s: releases made before it are not counted", path)
    return True


def _connect() -> sqlite3.Connection:
    """The registry, checked: refuses a missing, emptied, foreign or unreadable file with its path and the fix."""
    path = registry_path()
    if not path.is_file() and _first_on_this_machine(path):
        _start(path)  # logged: the first release on this machine starts its registry (one, however many race)
    if not path.is_file():
        raise _missing(path)
    try:
        db = sqlite3.connect(f"file:{path}?mode=rw", uri=True, timeout=60.0)
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        meta = dict(db.execute("SELECT key, value FROM meta").fetchall()) if "meta" in tables else {}
    except sqlite3.DatabaseError as error:
        raise RegistryError(
            f"the registry of releases at {path} cannot be read ({type(error).__name__}: {error}): it is corrupt or "
            "not a registry. Restore it from a backup (a backup older than the last release under-counts: releases "
            "made since it are not in it, so their rows could be released again; add them back or treat their rows as "
            "spent); squarechipo will not release rows it cannot check against it. Only if it is lost for good, move "
            "it away and start a new one (squarechipo registry init): releases it recorded are then no longer counted."
        ) from None
    if _TABLES <= tables and meta.get("format") == _FORMAT_2:
        try:
            _migrate(db, path)
        except (sqlite3.DatabaseError, ValueError) as error:
            db.close()
            raise RegistryError(
                f"the registry of releases at {path} is format 2 and could not be migrated to format 3 "
                f"({type(error).__name__}: {error}); nothing was changed. Restore it from a backup, or keep using it "
                "with squarechipo 0.3; only if it is lost for good, move it away and start a new one "
                "(squarechipo registry init)."
            ) from None
        meta["format"] = REGISTRY_FORMAT
    if not _TABLES <= tables or meta.get("format") != REGISTRY_FORMAT:
        db.close()
        state = "empty" if not tables else f"not a squarechipo registry ({REGISTRY_FORMAT})"
        raise RegistryError(
            f"the registry of releases at {path} is {state}: it was emptied, replaced or written by another version, "
            "so it cannot say which rows were released. Restore it (a backup older than the last release "
            "under-counts the releases made since); only if it is lost for good, move it away and start a new one "
            "(squarechipo registry init)."
        )
    return db


def _migrate(db: sqlite3.Connection, path: Path) -> None:
    """Format 2 → 3, in one transaction: the same releases, units and signatures, releases referred to by number and
    band keys recomputed from the stored signatures (format 2's blob keys are not kept)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        if db.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()[0] != _FORMAT_2:
            db.rollback()  # another process migrated it meanwhile
            return
        for name in ("released_units_by_unit", "released_bands_by_band"):
            db.execute(f"DROP INDEX IF EXISTS {name}")
        for table in ("releases", "released_units", "released_bands", "released_signatures"):
            db.execute(f"ALTER TABLE {table} RENAME TO {table}_v2")
        for statement in _SCHEMA:
            db.execute(statement)
        db.execute(
            "INSERT INTO releases (id, epsilon, made, folder, rows) "
            "SELECT id, epsilon, made, folder, rows FROM releases_v2 ORDER BY made, id"
        )
        db.execute(
            "INSERT INTO released_units SELECT u.unit, r.no, u.count FROM released_units_v2 u "
            "JOIN releases r ON r.id = u.release"
        )
        db.execute(
            "INSERT INTO released_signatures SELECT r.no, g.row, g.signature FROM released_signatures_v2 g "
            "JOIN releases r ON r.id = g.release"
        )
        stored = db.execute("SELECT release, row, signature FROM released_signatures").fetchall()
        if stored:
            marks = np.stack([np.frombuffer(blob, dtype="<u4") for _, _, blob in stored])
            keys = band_key_table(marks).tolist()
            db.executemany(
                "INSERT INTO released_bands VALUES (?, ?, ?)",
                [(key, release, row) for (release, row, _), row_keys in zip(stored, keys) for key in row_keys],
            )
        for table in ("releases", "released_units", "released_bands", "released_signatures"):
            db.execute(f"DROP TABLE {table}_v2")
        db.execute("UPDATE meta SET value = ? WHERE key = 'format'", (REGISTRY_FORMAT,))
        db.execute("INSERT OR REPLACE INTO meta VALUES ('migrated_from', ?)", (_FORMAT_2,))
        db.commit()
    except BaseException:
        db.rollback()
        raise
    logger.warning("migrated the registry of releases at %s to %s (the same releases, a smaller file)", path,
                   REGISTRY_FORMAT)  # fmt: skip


@dataclass(frozen=True)
class EarlierReleases:
    """What the registry knows of earlier releases of some rows."""

    rows: int  # how many of the rows were released before (exactly, as near-copies, or by their privacy unit)
    epsilon: float  # basic composition: the largest sum of earlier releases' ε over one unit
    releases: tuple[tuple[str, float, str], ...]  # (release id, ε, made at) of each earlier release involved
    near_copies: int = 0  # of ``rows``, those matched as near-copies of a released row
    ids: frozenset[str] = field(default_factory=frozenset)
    #: The registry's releases when this was read (:func:`_state`); empty: unknown.
    state: str = ""

    def describe(self) -> str:
        made = ", ".join(f"ε {eps:g} at {when}" for _, eps, when in self.releases)
        near = f", {self.near_copies} of them as near-copies" if self.near_copies else ""
        return f"{self.rows} row(s) were released before{near} ({made}; composed ε of those releases {self.epsilon:g})"


def _matching(db: sqlite3.Connection, keys: list, table: str, key: str, columns: str) -> list[tuple]:
    """``columns`` of the rows of ``table`` whose ``key`` is one of ``keys``, by the cheaper plan: a registry smaller
    than the query is read whole and filtered here; a larger one is joined with a temporary table of the keys."""
    wanted = set(keys)
    if not wanted:
        return []
    held = db.execute(f"SELECT MAX(rowid) FROM {table}").fetchone()[0] or 0  # rows ever entered: an upper bound
    if held <= len(wanted):
        return [row for row in db.execute(f"SELECT {key}, {columns} FROM {table}") if row[0] in wanted]
    db.execute("CREATE TEMP TABLE IF NOT EXISTS wanted (key)")
    db.execute("DELETE FROM wanted")
    db.executemany("INSERT INTO wanted VALUES (?)", ((k,) for k in sorted(wanted)))
    try:
        return db.execute(f"SELECT t.{key}, {columns} FROM wanted w JOIN {table} t ON t.{key} = w.key").fetchall()
    finally:
        db.execute("DELETE FROM wanted")


def _state(db: sqlite3.Connection) -> str:
    """The releases entered so far, as one digest: the answer to a query can change only when this does (a release's
    units, bands and signatures are entered in the transaction that enters it)."""
    ids = sorted(row[0] for row in db.execute("SELECT id FROM releases"))
    return hashlib.sha256("\n".join(ids).encode()).hexdigest()


def _query(db: sqlite3.Connection, units: list[bytes], marks: Sketch | None) -> EarlierReleases:
    per_row: dict[int, float] = defaultdict(float)
    involved: dict[str, tuple[float, str]] = {}
    index: dict[bytes, list[int]] = defaultdict(list)
    for i, unit in enumerate(units):
        index[unit].append(i)
    entered = {no: (id_, eps, made) for no, id_, eps, made in db.execute("SELECT no, id, epsilon, made FROM releases")}
    for unit, release, count in _matching(db, list(index), "released_units", "unit", "release, count"):
        if release not in entered:  # a unit of no entered release (as the join that read them before skipped)
            continue
        release_id, epsilon, made = entered[release]
        for i in index[unit]:
            per_row[i] += epsilon * (count or 1)
        involved[release_id] = (epsilon, made)
    near = _near_copies(db, marks, set(per_row), entered) if marks is not None else {}
    for i, releases_of_row in near.items():
        for release_id, epsilon, made in releases_of_row:
            per_row[i] += epsilon
            involved[release_id] = (epsilon, made)
    releases = tuple(sorted(((k, *v) for k, v in involved.items()), key=lambda r: r[2]))
    # A row can hold several keys (its content, its declared unit), laid out in blocks of one key per row.
    rows = len({i % len(marks) for i in per_row}) if marks is not None and len(marks) else len(per_row)
    return EarlierReleases(
        rows, max(per_row.values(), default=0.0), releases, len(near), frozenset(involved), _state(db)
    )


def _near_copies(
    db: sqlite3.Connection, marks: Sketch, exact: set[int], entered: dict[int, tuple[str, float, str]]
) -> dict[int, list[tuple[str, float, str]]]:
    """Rows (not already matched exactly) whose MinHash signature is a near-copy of a registered row's: for each,
    every release holding such a row (a row nearly copying rows of two releases has spent both releases' ε)."""
    open_rows = np.setdiff1d(np.arange(len(marks)), np.fromiter(exact, dtype=np.int64, count=len(exact)))
    keys = marks.keys[open_rows]
    hits = _matching(db, keys.ravel().tolist(), "released_bands", "band", "release, row")
    if not hits:
        return {}
    by_band: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for band, release, row in hits:
        by_band[band].append((release, row))
    candidates: dict[int, set[tuple[int, int]]] = defaultdict(set)
    at = np.flatnonzero(np.isin(keys.ravel(), np.fromiter(by_band, dtype=np.int64, count=len(by_band))))
    for position in at.tolist():
        candidates[int(open_rows[position // keys.shape[1]])].update(by_band[int(keys.ravel()[position])])
    found: dict[int, list[tuple[str, float, str]]] = {}
    for i, pairs in sorted(candidates.items()):
        matched: set[int] = set()  # each release a row nearly copies counts once, every such release counts
        for release, row in sorted(pairs):
            if release in matched or release not in entered:
                continue
            stored = db.execute(
                "SELECT signature FROM released_signatures WHERE release = ? AND row = ?", (release, row)
            ).fetchone()
            if stored is not None and estimated_jaccard(marks.signatures[i], np.frombuffer(stored[0], "<u4")) >= (
                NEAR_COPY_JACCARD
            ):
                matched.add(release)
                found.setdefault(i, []).append(entered[release])
    return found


def earlier_releases(units: list[bytes], marks: Sketch | None = None) -> EarlierReleases:
    """The earlier releases of any of these rows recorded here: by unit key, and by near-copy when ``marks`` (the
    rows' :class:`~squarechipo.data.near_duplicates.Sketch`) is given. ``units`` holds one content key per row, then
    (for a declared privacy unit) one unit key per row."""
    db = _connect()
    try:
        return _query(db, units, marks)
    finally:
        db.close()


def register_release(
    release_id: str,
    units: list[bytes],
    marks: Sketch | None,
    epsilon: float,
    made: str,
    *,
    expected: EarlierReleases,
    folder: str | None = None,
) -> str:
    """Enter a release, in one transaction with the check that decides it: the earlier releases of its rows must be
    those its ledger composed (``expected``). A release entered before (the same id) is left as it is. Returns the
    registry's id, which the release's ledger then names."""
    db = _connect()
    try:
        registry_id = db.execute("SELECT value FROM meta WHERE key = 'registry_id'").fetchone()[0]
        db.execute("BEGIN IMMEDIATE")  # one writer decides at a time; readers of the old state see no half-entry
        if db.execute("SELECT 1 FROM releases WHERE id = ?", (release_id,)).fetchone():
            db.rollback()
            return registry_id
        # Nothing entered since the release looked: the answer stands (a full query again costs as much as the first).
        now = expected if expected.state and _state(db) == expected.state else _query(db, units, marks)
        if now.ids != expected.ids:
            db.rollback()
            new = sorted(now.ids - expected.ids)
            raise RegistryError(
                f"another release of these rows was registered while this one was being drawn ({len(new)} release(s): "
                f"{now.describe()}); this release was not made visible and its noise is discarded (nothing read it). "
                "Reuse that release, or run again with rerelease=True to compose with it."
            )
        counts: dict[bytes, int] = defaultdict(int)
        for unit in units:
            counts[unit] += 1
        entry = (release_id, float(epsilon), made, folder, len(units))
        number = db.execute("INSERT INTO releases (id, epsilon, made, folder, rows) VALUES (?, ?, ?, ?, ?)", entry)
        number = number.lastrowid
        # Keys inserted in index order: neighbouring inserts touch neighbouring pages of the index.
        db.executemany(
            "INSERT INTO released_units VALUES (?, ?, ?)", [(u, number, c) for u, c in sorted(counts.items())]
        )
        if marks is not None:
            db.executemany(
                "INSERT INTO released_signatures VALUES (?, ?, ?)",
                [(number, i, m.astype("<u4").tobytes()) for i, m in enumerate(marks.signatures)],
            )
            flat = marks.keys.ravel()
            order = np.argsort(flat, kind="stable")
            bands = zip(flat[order].tolist(), (order // marks.keys.shape[1]).tolist())
            db.executemany("INSERT INTO released_bands VALUES (?, ?, ?)", [(k, number, i) for k, i in bands])
        db.commit()
        return registry_id
    except BaseException:
        if db.in_transaction:
            db.rollback()
        raise
    finally:
        db.close()


def main(argv: list[str] | None = None) -> int:
    """``squarechipo registry init [--path P]`` (start one, explicitly) | ``squarechipo registry show``."""
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="squarechipo registry", description="the registry of releases")
    commands = parser.add_subparsers(dest="command", required=True)
    start = commands.add_parser("init", help="start a new registry (refuses a path that holds one)")
    start.add_argument("--path", default=None, help=f"default: ${REGISTRY_ENV} or the cache root's releases.sqlite")
    commands.add_parser("show", help="where the registry is, its id, and how many releases and units it holds")
    args = parser.parse_args(argv)
    if args.command == "init":
        print(init_registry(args.path))
        return 0
    db = _connect()
    try:
        meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
        releases = db.execute("SELECT COUNT(*), COALESCE(SUM(rows), 0) FROM releases").fetchone()
    finally:
        db.close()
    print(json.dumps({"path": str(registry_path()), **meta, "releases": releases[0], "rows": releases[1]}, indent=2))
    return 0
