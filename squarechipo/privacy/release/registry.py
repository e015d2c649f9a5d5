"""The registry of releases: composition across releases of the same rows, authoritative.

Randomized response protects a label once. Released again with fresh noise, into another folder or another file,
the same rows give an attacker several independent noisy copies, and their majority is the raw label. Each ledger
describes one dataset's own releases, so it cannot see the others; this registry can. For every release drawn from
OS entropy it keeps each released unit's key (the hash of a row's canonical content, :func:`squarechipo.data.
fingerprint.row_hashes`, label-free and equal for retyped copies; and, where a privacy unit is declared, the hash of
its value too: a unit groups rows, never splits one comparison's history), the rows' MinHash signatures and LSH band
keys (so near-copies, :mod:`squarechipo.data.near_duplicates`, are found too), the release's ε, its time and where it
was saved.

Where it lives: ``$SQUARECHIPO_RELEASE_REGISTRY`` (an absolute path of a SQLite file, or a ``postgresql://`` URL that
a team shares across machines) or this machine's ``releases.sqlite`` (:func:`default_registry_path`). One schema and
one code path serve both engines (:mod:`squarechipo.data.database`).

It is authoritative:

- **One transaction decides.** A release is entered by :func:`register_release`, which re-reads the earlier releases
  of its rows and inserts it in one serializable transaction, one writer at a time. Of two releases of the same rows
  at the same moment, from one machine or two, exactly one is entered as drawn; the other finds the first and is
  refused (or, with ``rerelease``, must be drawn again so its ledger states the composed ε).
- **Registered before it is sealed.** The release path enters a release before it signs its ledger
  (:mod:`squarechipo.privacy.release.transaction`); a release cut off before it was entered is entered when the next
  run completes it.
- **Fail closed.** A registry that is lost (a file missing where one was started: a marker beside it says so),
  emptied, dropped, redirected to a missing file, of another format, unreadable or on a server that cannot be reached
  stops a release with its path or URL (password removed) and the fix; it never silently starts from zero and never
  falls back to another registry. The one exception is a machine's first release: where this machine's registry was
  never started (no marker), that release starts it and logs so. Starting one by hand is :func:`init_registry`
  (``squarechipo registry init``).

A new release of raw rows that were released before is refused unless the caller opts in (``rerelease=True``,
``label_rerelease: true`` in a config). Then the ledger records ``earlier_epsilon``: basic composition, the largest
sum of the earlier releases' ε over any one unit, and the ledger's and the card's total ε include it.

What it does not cover: releases entered into another registry, paraphrased rows, and seeded releases (a fixed seed
is for simulation; their cards already say they are not private).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import logging
import os
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from squarechipo.data import store
from squarechipo.data.database import Database, DatabaseError, connect, create_writers_lock, is_url, redact
from squarechipo.data.near_duplicates import BANDS, LEGACY_SCHEME, SCHEME, Sketch
from squarechipo.privacy.release.lookup import datasets_of_rows, followed_units, matching_rows, near_copies
from squarechipo.privacy.release.machine_registry import (
    REGISTRY_ENV,
    default_registry_path,
    first_on_this_machine,
    missing,
    note_counted,
    started_marker,
)
from squarechipo.privacy.release.registry_schema import (
    FORMAT_2,
    REGISTRY_FORMAT,
    SCHEMA,
    TABLES,
    RegistryError,
    canonical_dataset,
    create_budget_tables,
    migrate_format_2,
)

__all__ = [
    "REGISTRY_ENV",
    "REGISTRY_FORMAT",
    "EarlierReleases",
    "RegistryError",
    "default_registry_path",
    "earlier_releases",
    "init_registry",
    "open_registry",
    "register_release",
    "minhash_scheme",
    "registry_path",
    "registry_scheme",
    "registry_target",
]

logger = logging.getLogger("squarechipo")


def registry_target() -> str | Path:
    """Where the registry of releases lives: ``$SQUARECHIPO_RELEASE_REGISTRY`` (a ``postgresql://`` URL, or an absolute
    path: a relative one would name another registry in every folder a job runs from) or this machine's
    (:func:`default_registry_path`)."""
    return store.store_target(REGISTRY_ENV, "releases.sqlite", "registry of releases", RegistryError)


def registry_path() -> Path:
    """The registry's file (:func:`registry_target`); a registry on a server has none."""
    target = registry_target()
    if isinstance(target, str):
        raise RegistryError(f"the registry of releases is on a server ({redact(target)}), not in a file.")
    return target


def _meta(created: str) -> dict[str, str]:
    return {"format": REGISTRY_FORMAT, "registry_id": uuid.uuid4().hex, "created": created, "minhash": SCHEME}


def minhash_scheme(db: Database) -> str:
    """How the registry's MinHash signatures hash a shingle (:mod:`squarechipo.data.near_duplicates`): what it was
    started with (registries started before squarechipo 0.5 name none: the legacy scheme). A release's sketch must be
    made in it, or its near-copies of released rows would go unseen."""
    found = db.execute("SELECT value FROM meta WHERE key = 'minhash'").fetchone()
    return LEGACY_SCHEME if found is None else found[0]


def registry_scheme() -> str:
    """:func:`minhash_scheme` of the registry of releases in use (checked as :func:`open_registry` checks it)."""
    with open_registry() as db:
        return _refused(db, lambda: minhash_scheme(db))


def _create_schema(db: Database) -> dict[str, str]:
    created = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    meta = _meta(created)
    for statement in SCHEMA:
        db.execute(statement)
    db.executemany("INSERT INTO meta (key, value) VALUES (?, ?)", meta.items())
    create_budget_tables(db)
    if db.kind == "postgresql":
        create_writers_lock(db)
    return meta


def init_registry(target: str | os.PathLike | None = None) -> str | Path:
    """Start a new, empty registry of releases (an explicit step, logged): a file, or the tables of a registry in a
    PostgreSQL database (which must exist). Refuses a file or a database that already holds one."""
    target = registry_target() if target is None else target
    if is_url(target):
        return _start_on_server(str(target))
    path = Path(target).expanduser()
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


def _start_on_server(url: str) -> str:
    with _opened(url) as db:

        def create(db: Database) -> dict[str, str] | None:
            return None if set(TABLES) & db.tables() else _create_schema(db)

        try:
            meta = db.retried(create, write=True)
        except DatabaseError as error:
            raise RegistryError(
                f"the registry of releases at {db.where} could not be started ({error.detail}). Starting one creates "
                "its tables: connect as a role that may create tables in that database (the team's administrator)."
            ) from None
        if meta is None:
            raise RegistryError(
                f"{db.where} already holds a registry of releases (or tables of its names); a registry is started "
                "once. Use it as it is; to start over, drop its tables first (the releases it records are then no "
                "longer counted)."
            )
    logger.warning("started a new registry of releases at %s: releases made before it are not counted", redact(url))
    return url


def _start(path: Path) -> bool:
    """Create a registry file at ``path`` atomically: built whole in a file of its own, then linked into place, so two
    processes starting one at the same moment end with one registry (the loser's is discarded). False when one
    was there already (or won the race)."""
    if path.exists() and path.stat().st_size > 0:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    building = path.with_name(f".{path.name}.{uuid.uuid4().hex}.new")
    with connect(building, must_exist=False) as db:
        db.execute("PRAGMA journal_mode=WAL")
        with db.transaction(write=True):
            meta = _create_schema(db)
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
    started_marker(path).write_text(f"{meta['registry_id']} {meta['created']}\n")
    logger.warning("started a new registry of releases at %s: releases made before it are not counted", path)
    return True


def _opened(target: str | Path) -> Database:
    """A connection to ``target``, or :class:`RegistryError` naming it (a server that cannot be reached)."""
    try:
        return connect(target)
    except DatabaseError as error:
        raise RegistryError(
            f"the registry of releases at {redact(target)} cannot be reached or opened ({error.detail}), so no "
            "release can be checked against earlier releases of the same rows: squarechipo makes none, and never "
            f"falls back to a local registry. Start the server (or fix {REGISTRY_ENV}) and run again."
        ) from None


def open_registry() -> Database:
    """The registry, checked: refuses a missing, emptied, dropped, foreign, unreadable or unreachable one with its
    path or URL and the fix."""
    target = registry_target()
    if isinstance(target, Path):
        if not target.is_file() and first_on_this_machine(target):
            _start(target)  # logged: the first release on this machine starts its registry (one, however many race)
        if not target.is_file():
            raise missing(target)
    db = _opened(target)
    try:
        tables = db.tables()
        meta = dict(db.execute("SELECT key, value FROM meta").fetchall()) if "meta" in tables else {}
    except DatabaseError as error:
        db.close()
        raise RegistryError(
            f"the registry of releases at {db.where} cannot be read ({error.detail}): it is corrupt, not a registry, "
            "or this role may not read it. Restore it from a backup (a backup older than the last release "
            "under-counts: "
            "releases made since it are not in it, so their rows could be released again; add them back or treat "
            "their rows as spent); squarechipo will not release rows it cannot check against it. Only if it is lost "
            "for good, move it away and start a new one (squarechipo registry init): releases it recorded are then "
            "no longer counted."
        ) from None
    if set(TABLES) <= tables and meta.get("format") == FORMAT_2 and db.kind == "sqlite":
        migrate_format_2(db)
        meta["format"] = REGISTRY_FORMAT
    if not set(TABLES) <= tables or meta.get("format") != REGISTRY_FORMAT:
        elsewhere = _schemas_holding_registry(db) if not tables & set(TABLES) else []
        db.close()
        if elsewhere:
            raise RegistryError(
                f"the registry of releases at {db.where} is in schema {elsewhere[0]!r}, which this role's search_path "
                "does not reach (its current schema holds no registry): reset the role's search_path (ALTER ROLE "
                "... RESET search_path, or SET search_path TO public) and run again. Nothing was read or released."
            )
        state = "empty" if not tables & set(TABLES) else f"not a squarechipo registry ({REGISTRY_FORMAT})"
        raise RegistryError(
            f"the registry of releases at {db.where} is {state}: it was emptied, dropped, replaced or written by "
            "another version, so it cannot say which rows were released. Restore it (a backup older than the last "
            "release under-counts the releases made since); only if it is lost for good, move it away and start a "
            "new one (squarechipo registry init)."
        )
    return db


def _schemas_holding_registry(db: Database) -> list[str]:
    """On PostgreSQL, the schemas other than the current one that hold a registry's ``releases`` and ``meta`` tables
    (a role whose search_path was changed sees none of them)."""
    if db.kind != "postgresql":
        return []
    rows = db.execute(
        "SELECT schemaname FROM pg_tables WHERE tablename IN ('releases', 'meta') "
        "AND schemaname IS DISTINCT FROM current_schema() GROUP BY schemaname HAVING COUNT(*) = 2"
    ).fetchall()
    return sorted(row[0] for row in rows)


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
    #: Release id → where it was saved (its folder; None for a release made in memory).
    folders: dict[str, str | None] = field(default_factory=dict, compare=False)
    #: Each matched row's (or unit's) composed ε so far, by its index among the keys asked about (what a budget
    #: bounds: :mod:`squarechipo.privacy.release.budget`).
    spent: dict[int, float] = field(default_factory=dict, compare=False)
    #: Row index → the datasets (canonical names) of the earlier releases holding it (a dataset budget's scope).
    datasets: dict[int, frozenset[str]] = field(default_factory=dict, compare=False)
    #: Unit key → how many of these rows were released before with that unit value, where this release does not
    #: declare it itself (a unit followed through its rows), and each such unit's composed ε so far.
    followed_units: dict[bytes, int] = field(default_factory=dict, compare=False)
    unit_spent: dict[bytes, float] = field(default_factory=dict, compare=False)

    def describe(self) -> str:
        made = ", ".join(
            f"ε {eps:g} at {when}" + (f" into {self.folders[id_]}" if self.folders.get(id_) else "")
            for id_, eps, when in self.releases
        )
        near = f", {self.near_copies} of them as near-copies" if self.near_copies else ""
        return f"{self.rows} row(s) were released before{near} ({made}; composed ε of those releases {self.epsilon:g})"


def _state(db: Database) -> str:
    """The releases entered so far, as one digest: the answer to a query can change only when this does (a release's
    units, bands and signatures are entered in the transaction that enters it)."""
    ids = sorted(row[0] for row in db.execute("SELECT id FROM releases").fetchall())
    return hashlib.sha256("\n".join(ids).encode()).hexdigest()


def _query(db: Database, units: list[bytes], marks: Sketch | None) -> EarlierReleases:
    if marks is not None and marks.scheme != minhash_scheme(db):
        raise RegistryError(
            f"the registry of releases at {db.where} holds MinHash signatures of scheme {minhash_scheme(db)}, and "
            f"these rows were sketched in {marks.scheme}: their near-copies could not be found. Sketch them in the "
            "registry's scheme (squarechipo.privacy.release.registry.registry_scheme())."
        )
    per_row: dict[int, float] = defaultdict(float)
    holding: dict[int, set[int]] = defaultdict(set)  # key index → the releases (numbers) holding it
    involved: dict[str, tuple[float, str]] = {}
    index: dict[bytes, list[int]] = defaultdict(list)
    for i, unit in enumerate(units):
        index[unit].append(i)
    listed = db.execute("SELECT no, id, epsilon, made, folder FROM releases").fetchall()
    entered = {no: (id_, eps, made) for no, id_, eps, made, _ in listed}
    number = {id_: no for no, id_, *_ in listed}
    for unit, release, count in matching_rows(db, list(index), "released_units", "unit", "release, count"):
        if release not in entered:  # a unit of no entered release (as the join that read them before skipped)
            continue
        release_id, epsilon, made = entered[release]
        for i in index[unit]:
            per_row[i] += epsilon * (count or 1)
            holding[i].add(release)
        involved[release_id] = (epsilon, made)
    near = near_copies(db, marks, set(per_row), entered) if marks is not None else {}
    for i, releases_of_row in near.items():
        for release_id, epsilon, made in releases_of_row:
            per_row[i] += epsilon
            holding[i].add(number[release_id])
            involved[release_id] = (epsilon, made)
    releases = tuple(sorted(((k, *v) for k, v in involved.items()), key=lambda r: r[2]))
    # A row can hold several keys (its content, its declared unit), laid out in blocks of one key per row.
    n_rows = len(marks) if marks is not None and len(marks) else len(units)
    rows = len({i % n_rows for i in per_row}) if n_rows else len(per_row)
    folders = {id_: folder for _, id_, _, _, folder in listed if id_ in involved}
    followed, unit_spent = followed_units(db, units[:n_rows], set(units[n_rows:]), entered)
    return EarlierReleases(
        rows, max([*per_row.values(), *unit_spent.values()], default=0.0), releases, len(near), frozenset(involved),
        _state(db), folders, dict(per_row), datasets_of_rows(db, holding, n_rows), followed, unit_spent,
    )  # fmt: skip


def earlier_releases(units: list[bytes], marks: Sketch | None = None) -> EarlierReleases:
    """The earlier releases of any of these rows recorded here: by unit key, and by near-copy when ``marks`` (the
    rows' :class:`~squarechipo.data.near_duplicates.Sketch`) is given. ``units`` holds one content key per row, then
    (for a declared privacy unit) one unit key per row."""
    with open_registry() as db:
        return _refused(db, lambda: db.retried(lambda db: _query(db, units, marks)))


def _refused(db: Database, work):
    """``work()``, with the server's refusals (a role that may not read or write the registry, a server stopped
    mid-transaction) as :class:`RegistryError` naming the registry: nothing half-entered stays."""
    try:
        return work()
    except DatabaseError as error:
        why = {
            "42501": "this role may not do that: releases are entered by the custodian's role (docs/team.md)",
            "55P03": "the lock was not taken, so nothing was entered",
        }.get(
            error.sqlstate,
            "the registry could not finish; the transaction was rolled back, so nothing of it was entered",
        )
        raise RegistryError(f"the registry of releases at {db.where} refused ({error.detail}): {why}.") from None


def register_release(
    release_id: str,
    units: list[bytes],
    marks: Sketch | None,
    epsilon: float,
    made: str,
    *,
    expected: EarlierReleases,
    folder: str | None = None,
    ask: Any = None,
) -> tuple[str, dict | None]:
    """Enter a release, in one transaction with the checks that decide it: the earlier releases of its rows must be
    those its ledger composed (``expected``), and the budget that applies (``ask``) must hold them. A release entered
    before (the same id) is left as it is. Returns the registry's id, which the release's ledger then names, and the
    budget record (None: no budget applies)."""

    def enter(db: Database) -> tuple[str, dict | None]:
        registry_id = db.execute("SELECT value FROM meta WHERE key = 'registry_id'").fetchone()[0]
        if db.execute("SELECT 1 FROM releases WHERE id = ?", (release_id,)).fetchone():
            return registry_id, None
        # Nothing entered since the release looked: the answer stands (a full query again costs as much as the first).
        now = expected if expected.state and _state(db) == expected.state else _query(db, units, marks)
        if now.ids != expected.ids:
            new = sorted(now.ids - expected.ids)
            raise RegistryError(
                f"another release of these rows was registered while this one was being drawn ({len(new)} release(s): "
                f"{now.describe()}); this release was not made visible and its noise is discarded (nothing read it). "
                "Reuse that release, or run again with rerelease=True to compose with it."
            )
        budget = ask.check(db, registry_id, now) if ask is not None else None
        # The units its rows were released with before are spent by this release too (a unit follows its rows).
        followed = [unit for unit, rows in now.followed_units.items() for _ in range(rows)]
        number = _enter(db, release_id, [*units, *followed], marks, epsilon, made, folder)
        tables = db.tables()
        dataset = canonical_dataset(ask.dataset) if ask is not None else None
        if ask is not None and (dataset or ask.unit) and "release_scopes" in tables:
            db.execute("INSERT INTO release_scopes VALUES (?, ?, ?)", (number, dataset, ask.unit))
        n_rows = len(marks) if marks is not None else len(units)
        if len(units) == 2 * n_rows and "released_row_units" in tables:  # a declared unit: each row's value, kept
            pairs = sorted(set(zip(units[:n_rows], units[n_rows:])))
            db.bulk_insert("released_row_units", ("release", "row_key", "unit"), [(number, c, u) for c, u in pairs])
        return registry_id, budget

    with open_registry() as db:
        registry_id, budget = _refused(db, lambda: db.retried(enter, write=True))
    note_counted(registry_target(), registry_id)
    return registry_id, budget


def _enter(db: Database, release_id, units, marks, epsilon, made, folder) -> int:
    """The release's row, its units, signatures and band keys (inside the deciding transaction); its number."""
    entry = (release_id, float(epsilon), made, folder, len(units))
    number = db.execute(
        "INSERT INTO releases (id, epsilon, made, folder, rows) VALUES (?, ?, ?, ?, ?) RETURNING no", entry
    ).fetchone()[0]
    _enter_keys(db, number, units, marks)
    return number


def _enter_keys(db: Database, number: int, units, marks) -> None:
    """A release's units, signatures and band keys."""
    counts: dict[bytes, int] = defaultdict(int)
    for unit in units:
        counts[unit] += 1
    # Keys inserted in index order: neighbouring inserts touch neighbouring pages of the index.
    db.bulk_insert("released_units", ("unit", "release", "count"), [(u, number, c) for u, c in sorted(counts.items())])
    if marks is None:
        return
    db.bulk_insert(
        "released_signatures",
        ("release", "row", "signature"),
        ((number, i, m.astype("<u4").tobytes()) for i, m in enumerate(marks.signatures)),
    )
    flat = marks.keys.ravel()
    order = np.argsort(flat, kind="stable")
    db.bulk_insert("released_bands", ("band", "release", "row"), _band_rows(flat, order, number))


def _band_rows(flat: np.ndarray, order: np.ndarray, number: int, chunk: int = 1 << 16):
    """(band key, release, row) in key order, made a chunk at a time: 20 keys a row would otherwise be two Python
    lists of 20 ints a row (about 1.4 GB at a million rows)."""
    for start in range(0, len(order), chunk):
        part = order[start : start + chunk]
        yield from zip(flat[part].tolist(), [number] * len(part), (part // BANDS).tolist())
