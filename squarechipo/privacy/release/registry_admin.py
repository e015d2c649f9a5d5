"""Looking after a registry of releases: its format, its move to a team's server, who may read and write it.

- :func:`migrate_to`: a SQLite registry (and the machine's store of model records) copied into a PostgreSQL
  database, then checked: every release, unit, band key and signature is there, and every row the file counted is
  still counted there (each release's rows are looked up in the copy and found, with the same releases).
- :func:`grant_roles`: the custodian's role may read and enter releases (never change or delete one); the analysts'
  role may only read the registry, and may write model records.
- :func:`describe`: where the registry is, its id and format, how many releases and rows it holds.
- :func:`audit_releases`: whether saved releases are entered in this registry, and whether it counts for their rows
  at least the ε their signed ledgers state. After a registry is restored from a backup, releases made since the
  backup are missing from it (it under-counts: their rows could be released again, past a budget too); their ledgers
  still name them, so auditing the saved releases finds them.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from pathlib import Path

from squarechipo.data.database import Database, connect, is_url, redact
from squarechipo.data.near_duplicates import LEGACY_SCHEME
from squarechipo.privacy.release.registry import _query, init_registry, open_registry
from squarechipo.privacy.release.registry_schema import FORMAT_2, TABLES, RegistryError, migrate_format_2

__all__ = ["audit_releases", "describe", "grant_roles", "migrate_to"]

logger = logging.getLogger("squarechipo")


def describe() -> dict:
    """Where the registry of releases is, what its meta says, and how many releases and rows it holds."""
    with open_registry() as db:
        meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
        releases, rows = db.execute("SELECT COUNT(*), COALESCE(SUM(rows), 0) FROM releases").fetchone()
        return {"registry": db.where, **meta, "releases": int(releases), "rows": int(rows)}


#: What each role may do: the registry is append-only for the custodian and read-only for analysts; the record store
#: takes model records from whoever trains.
_REGISTRY_TABLES = ", ".join(TABLES)


#: The store of model records, when it shares the registry's database: whoever trains writes its model's record.
_RECORD_TABLES = ("records", "weight_sketches_by_name")


def grant_roles(url: str, *, custodian: str | None, analyst: str | None) -> list[str]:
    """Least privilege on a team's server. The custodian's role: SELECT and INSERT on the registry's tables (never
    UPDATE or DELETE: a release, once entered, stays) and the writers' lock (SELECT, UPDATE on its one row: only it can
    queue writers). The analysts' role: SELECT on the registry, never the lock, so it can neither enter a release nor
    stop the custodian's. Both: SELECT and INSERT on the store of model records (insert-only: a record, once entered,
    is never replaced, so no role can launder a model's weights under another run's record). Role names are quoted
    as identifiers. Returns the statements run (as the connecting role, which must own the tables)."""
    from psycopg import sql

    from squarechipo.data.database import WRITERS_TABLE, create_writers_lock
    from squarechipo.data.store import RecordTable
    from squarechipo.privacy.release.registry_schema import BUDGET_TABLES, create_budget_tables

    for table, kind in zip(_RECORD_TABLES, ("text", "blob")):
        RecordTable(url, table, kind).close()

    def grant(privileges: str, tables: tuple[str, ...], role: str):
        names = sql.SQL(", ").join(sql.Identifier(t) for t in tables)
        return sql.SQL("GRANT {} ON {} TO {}").format(sql.SQL(privileges), names, sql.Identifier(role))

    everything = (*TABLES, *BUDGET_TABLES, *_RECORD_TABLES, WRITERS_TABLE)
    statements = []
    for role in (custodian, analyst):
        if role:  # what an earlier, wider grant gave goes first
            statements.append(
                sql.SQL("REVOKE ALL ON {} FROM {}").format(
                    sql.SQL(", ").join(sql.Identifier(t) for t in everything), sql.Identifier(role)
                )
            )
            statements.append(grant("SELECT, INSERT", _RECORD_TABLES, role))
    if custodian:
        statements += [
            grant("SELECT, INSERT", (*TABLES, *BUDGET_TABLES), custodian),
            grant("SELECT, UPDATE", (WRITERS_TABLE,), custodian),
            sql.SQL("GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {}").format(sql.Identifier(custodian)),
        ]
    if analyst:
        statements += [grant("SELECT", (*TABLES, *BUDGET_TABLES), analyst)]
    with connect(url) as db:
        with db.transaction():
            create_writers_lock(db)
            create_budget_tables(db)
            for statement in statements:
                db.execute_composed(statement)
            texts = [statement.as_string(db.connection) for statement in statements]
    return texts


def migrate_to(url: str, *, source: Path, records: Path | None = None) -> dict:
    """Copy the SQLite registry at ``source`` into the PostgreSQL database at ``url`` (started there now; refused if
    one is there already), then check the copy: the same releases, units, band keys and signatures, and every row
    the file counted found again in the copy with the same earlier releases. With ``records`` (a SQLite store of
    model records), its records and weight sketches are copied too, and counted. Returns the counts and the check."""
    if not is_url(url):
        raise RegistryError(f"migrate --to takes a postgresql:// URL (got {url!r}).")
    with connect(source) as old:
        if old.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()[0] == FORMAT_2:
            migrate_format_2(old)
        init_registry(url)
        with connect(url) as new:
            counts = new.retried(lambda new: _copy(old, new), write=True)
            counts["check"] = _check_copy(old, new)
    if records is not None and Path(records).is_file():
        counts["model_records"] = _copy_records(Path(records), url)
    counts["registry"] = redact(url)
    return counts


def _copy_records(source: Path, url: str) -> int:
    """The store of model records (its records and weight sketches) into ``url``; refused if a count differs."""
    from squarechipo.data.store import RecordTable

    copied = 0
    for table, kind in zip(_RECORD_TABLES, ("text", "blob")):
        with RecordTable(source, table, kind) as old, RecordTable(url, table, kind) as new:
            for key, value in old.items():
                new.put(key, value)
            if len(new) < len(old):
                raise RegistryError(f"the copy of {table} holds {len(new)} entries, the file {len(old)}.")
            copied += len(old)
    return copied


def _copy(old: Database, new: Database) -> dict:
    numbers = {}
    meta = dict(old.execute("SELECT key, value FROM meta").fetchall())
    new.execute("UPDATE meta SET value = ? WHERE key = 'registry_id'", (meta["registry_id"],))
    # The signatures copied keep the scheme they were made in (none named: the legacy scheme).
    new.execute("UPDATE meta SET value = ? WHERE key = 'minhash'", (meta.get("minhash", LEGACY_SCHEME),))
    new.execute("INSERT INTO meta (key, value) VALUES ('migrated_from', ?)", (f"sqlite {old.where}",))
    for no, id_, epsilon, made, folder, rows in old.execute(
        "SELECT no, id, epsilon, made, folder, rows FROM releases ORDER BY no"
    ).fetchall():
        numbers[no] = new.execute(
            "INSERT INTO releases (id, epsilon, made, folder, rows) VALUES (?, ?, ?, ?, ?) RETURNING no",
            (id_, epsilon, made, folder, rows),
        ).fetchone()[0]
    counts = {"releases": len(numbers)}
    tables = old.tables()
    copied = [
        ("released_units", ("unit", "release", "count")),
        ("released_bands", ("band", "release", "row")),
        ("released_signatures", ("release", "row", "signature")),
    ]
    if "release_scopes" in tables:
        copied.append(("release_scopes", ("release", "dataset", "unit")))
    if "released_row_units" in tables:
        copied.append(("released_row_units", ("release", "row_key", "unit")))
    if "budgets" in tables and "budget_entries" not in tables and old.execute("SELECT 1 FROM budgets").fetchone():
        raise RegistryError(
            f"{old.where} holds privacy budgets set before budgets were chained: set each again on it first "
            "(squarechipo registry budget set), then migrate."
        )
    if "budget_entries" in tables:  # signed entries naming the registry id the copy keeps, so they verify there
        for row in old.execute("SELECT digest, replaces, entry FROM budget_entries ORDER BY no").fetchall():
            new.execute("INSERT INTO budget_entries (digest, replaces, entry) VALUES (?, ?, ?)", row)
            counts["budgets"] = counts.get("budgets", 0) + 1
    for table, columns in copied:
        rows = old.execute(f"SELECT {', '.join(columns)} FROM {table}").fetchall()
        at = columns.index("release")
        new.bulk_insert(table, columns, (tuple(numbers[v] if i == at else v for i, v in enumerate(r)) for r in rows))
        counts[table] = len(rows)
    return counts


def _check_copy(old: Database, new: Database) -> str:
    """Every count equal, and every release's units found again in the copy, with the same earlier releases."""
    for table in TABLES[1:]:
        before, after = (db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] for db in (old, new))
        if before != after:
            raise RegistryError(f"the copy of {table} holds {after} rows, the file {before}: the migration failed.")
    units = defaultdict(list)
    for unit, release in old.execute("SELECT u.unit, r.id FROM released_units u JOIN releases r ON r.no = u.release"):
        units[release].append(bytes(unit))
    for release, keys in units.items():
        found_old = _query(old, keys, None)
        found_new = new.retried(lambda db, keys=keys: _query(db, keys, None))
        if found_new.ids != found_old.ids or found_new.rows != len(set(keys)) or release not in found_new.ids:
            raise RegistryError(
                f"release {release}: the copy counts {found_new.rows} of its {len(set(keys))} units (releases "
                f"{sorted(found_new.ids)}), the file {sorted(found_old.ids)}: the migration failed."
            )
    return f"every release's rows found again in the copy, with the same earlier releases ({len(units)} releases)"


def audit_releases(paths: list[str]) -> list[dict]:
    """For each saved release (a folder or file), whether every counted release its ledger names (by release id and
    registry id) is entered in this registry. A release missing here was made into another registry, or after the
    backup this registry was restored from."""
    from squarechipo.privacy.ledger.binding import get_ledger
    from squarechipo.privacy.release.saved import load_privatized

    found = []
    with open_registry() as db:
        registry_id = db.execute("SELECT value FROM meta WHERE key = 'registry_id'").fetchone()[0]
        for path in paths:
            data = load_privatized(path)
            splits = data.values() if hasattr(data, "values") else [data]
            for split in splits:
                ledger = get_ledger(split, str(path))
                counted = [r for r in (ledger.releases if ledger else ()) if r.registry_id is not None]
                spent = _spent_here(db, split) if counted else 0.0
                for release in counted:  # a seeded or composed release is not counted
                    entered = db.execute("SELECT 1 FROM releases WHERE id = ?", (release.release_id,)).fetchone()
                    stated = ledger.total_epsilon or 0.0
                    found.append(
                        {
                            "release": str(path),
                            "release_id": release.release_id,
                            "made": release.created_at,
                            "registry_id": release.registry_id,
                            "entered_here": bool(entered) and release.registry_id == registry_id,
                            # What the signed ledger states these rows spent, against what this registry counts for
                            # them now: a restored registry that counts less under-counts.
                            "ledger_epsilon": stated,
                            "registry_epsilon": spent,
                            "under_counts": spent + 1e-9 < stated,
                        }
                    )
    return found


def _spent_here(db: Database, rows) -> float:
    """The largest composed ε this registry counts for any of ``rows`` (their content keys, exact copies)."""
    import hashlib

    from squarechipo.data.fingerprint import canonical_rows

    keys = [hashlib.sha256(row.encode("utf-8")).digest() for row in canonical_rows(rows.with_format("arrow")[:])]
    return db.retried(lambda db: _query(db, keys, None)).epsilon
