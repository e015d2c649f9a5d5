"""The registry of releases' schema, in the portable spelling of :mod:`squarechipo.data.database`, and the migration of
the format squarechipo 0.3 wrote (format 2: release ids as text in every row, band keys as blobs) to this one."""

from __future__ import annotations

import logging
import unicodedata

import numpy as np

from squarechipo.data.database import Database, DatabaseError
from squarechipo.data.near_duplicates import band_key_table

__all__ = [
    "BUDGET_TABLES",
    "FORMAT_2",
    "REGISTRY_FORMAT",
    "SCHEMA",
    "TABLES",
    "RegistryError",
    "canonical_dataset",
    "create_budget_tables",
    "migrate_format_2",
]

logger = logging.getLogger("squarechipo")

REGISTRY_FORMAT = "squarechipo.release_registry/3"
#: The format 0.3 wrote (release ids as text in every row, band keys as blobs): opened, it is migrated to this one.
FORMAT_2 = "squarechipo.release_registry/2"
TABLES = ("meta", "releases", "released_units", "released_bands", "released_signatures")
#: Format 3, in the portable spelling of squarechipo.data.database: a release is referred to by its number; band keys
#: are integers (squarechipo.data.near_duplicates).
SCHEMA = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE releases (no {serial}, id TEXT UNIQUE NOT NULL, epsilon DOUBLE PRECISION NOT NULL, "
    "made TEXT NOT NULL, folder TEXT, rows BIGINT NOT NULL)",
    "CREATE TABLE released_units (unit {blob} NOT NULL, release BIGINT NOT NULL, count BIGINT)",
    "CREATE INDEX released_units_by_unit ON released_units (unit)",
    "CREATE TABLE released_bands (band BIGINT NOT NULL, release BIGINT NOT NULL, row BIGINT NOT NULL)",
    "CREATE INDEX released_bands_by_band ON released_bands (band)",
    "CREATE TABLE released_signatures (release BIGINT NOT NULL, row BIGINT NOT NULL, signature {blob} NOT NULL, "
    "PRIMARY KEY (release, row)) {without_rowid}",
)


#: Budget entries (appended, never changed, one chain), the dataset and unit each release named, and each released
#: row's unit values (what a unit budget follows through the rows).
BUDGET_TABLES = ("budget_entries", "release_scopes", "released_row_units")
_BUDGET_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS budget_entries (no {serial}, digest TEXT UNIQUE NOT NULL, "
    "replaces TEXT UNIQUE NOT NULL, entry TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS release_scopes (release BIGINT NOT NULL, dataset TEXT, unit TEXT)",
    "CREATE TABLE IF NOT EXISTS released_row_units (release BIGINT NOT NULL, row_key {blob} NOT NULL, "
    "unit {blob} NOT NULL)",
    "CREATE INDEX IF NOT EXISTS released_row_units_by_row ON released_row_units (row_key)",
)


def create_budget_tables(db: Database) -> None:
    """The budgets' tables, where missing (a registry started before budgets has none: it has no budget)."""
    for statement in _BUDGET_SCHEMA:
        db.execute(statement)


def canonical_dataset(name: str | None) -> str | None:
    """A dataset's name as scopes compare it: Unicode-normalized (NFKC), case-folded, spaces collapsed and trimmed, so
    "Finance", "finance " and "ｆｉｎａｎｃｅ" are one dataset. None or blank: none named."""
    if name is None:
        return None
    folded = " ".join(unicodedata.normalize("NFKC", str(name)).casefold().split())
    return folded or None


class RegistryError(RuntimeError):
    """The registry of releases cannot be trusted (missing, emptied, corrupt, unreachable) or refuses a release."""


def migrate_format_2(db: Database) -> None:
    """Format 2 → 3, in one transaction: the same releases, units and signatures, releases referred to by number and
    band keys recomputed from the stored signatures (format 2's blob keys are not kept). Refused, unchanged, when the
    file cannot be migrated."""
    try:
        with db.transaction(write=True):
            if db.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()[0] != FORMAT_2:
                return  # another process migrated it meanwhile
            _format_2_to_3(db)
    except (DatabaseError, ValueError) as error:
        db.close()
        raise RegistryError(
            f"the registry of releases at {db.where} is format 2 and could not be migrated to format 3 "
            f"({type(error).__name__}: {error}); nothing was changed. Restore it from a backup, or keep using it "
            "with squarechipo 0.3; only if it is lost for good, move it away and start a new one "
            "(squarechipo registry init)."
        ) from None
    logger.warning(
        "migrated the registry of releases at %s to %s (the same releases, a smaller file)", db.where, REGISTRY_FORMAT
    )


def _format_2_to_3(db: Database) -> None:
    for name in ("released_units_by_unit", "released_bands_by_band"):
        db.execute(f"DROP INDEX IF EXISTS {name}")
    for table in TABLES[1:]:
        db.execute(f"ALTER TABLE {table} RENAME TO {table}_v2")
    for statement in SCHEMA[1:]:
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
    for table in TABLES[1:]:
        db.execute(f"DROP TABLE {table}_v2")
    db.execute("UPDATE meta SET value = ? WHERE key = 'format'", (REGISTRY_FORMAT,))
    db.execute("INSERT OR REPLACE INTO meta VALUES ('migrated_from', ?)", (FORMAT_2,))
