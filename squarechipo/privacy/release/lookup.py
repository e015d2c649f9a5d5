"""The registry of releases' look-ups: rows of a table whose key is among many (by the cheaper plan for the engine),
and the near-copies of new rows among the released ones (:mod:`squarechipo.privacy.release.registry` asks them
inside its transactions)."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from squarechipo.data.database import Database
from squarechipo.data.near_duplicates import NEAR_COPY_JACCARD, Sketch, estimated_jaccard

__all__ = ["datasets_of_rows", "followed_units", "matching_rows", "near_copies"]


def matching_rows(db: Database, keys: list, table: str, key: str, columns: str) -> list[tuple]:
    """``columns`` of the rows of ``table`` whose ``key`` is one of ``keys``, by the cheaper plan: on SQLite a registry
    smaller than the query is read whole and filtered here, a larger one joined with a temporary table of the keys; on
    PostgreSQL the keys go as one array, sent as one text (psycopg builds an array parameter in Python: 40% of a
    million-key look-up, profiled)."""
    wanted = set(keys)
    if not wanted:
        return []
    if db.kind == "postgresql":
        if all(isinstance(k, int) for k in wanted):
            text, array = ",".join(map(str, wanted)), "string_to_array(?, ',')::bigint[]"
        else:
            text = ",".join(bytes(k).hex() for k in wanted)
            array = "ARRAY(SELECT decode(h, 'hex') FROM unnest(string_to_array(?, ',')) AS h)"
        return db.execute(f"SELECT {key}, {columns} FROM {table} WHERE {key} = ANY({array})", (text,)).fetchall()
    held = db.execute(f"SELECT MAX(rowid) FROM {table}").fetchone()[0] or 0  # rows ever entered: an upper bound
    if held <= len(wanted):
        return [row for row in db.execute(f"SELECT {key}, {columns} FROM {table}").fetchall() if row[0] in wanted]
    db.execute("CREATE TEMP TABLE IF NOT EXISTS wanted (key)")
    db.execute("DELETE FROM wanted")
    db.executemany("INSERT INTO wanted VALUES (?)", ((k,) for k in sorted(wanted)))
    try:
        return db.execute(f"SELECT t.{key}, {columns} FROM wanted w JOIN {table} t ON t.{key} = w.key").fetchall()
    finally:
        db.execute("DELETE FROM wanted")


#: Band keys asked about in one query (a million rows hold twenty million: as one Python list, about 1.5 GB).
_KEYS_PER_QUERY = 1 << 22


def near_copies(
    db: Database, marks: Sketch, exact: set[int], entered: dict[int, tuple[str, float, str]]
) -> dict[int, list[tuple[str, float, str]]]:
    """Rows (not already matched exactly) whose MinHash signature is a near-copy of a registered row's: for each,
    every release holding such a row (a row nearly copying rows of two releases has spent both releases' ε)."""
    open_rows = np.setdiff1d(np.arange(len(marks)), np.fromiter(exact, dtype=np.int64, count=len(exact)))
    keys = marks.keys[open_rows]
    hits = []
    for start in range(0, keys.size, _KEYS_PER_QUERY):  # 20 keys a row: asked a slice at a time, not as one list
        hits += matching_rows(db, keys.ravel()[start : start + _KEYS_PER_QUERY].tolist(), "released_bands", "band",
                          "release, row")  # fmt: skip
    if not hits:
        return {}
    by_band: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for band, release, row in hits:
        by_band[band].append((release, row))
    candidates: dict[int, set[tuple[int, int]]] = defaultdict(set)
    at = np.flatnonzero(np.isin(keys.ravel(), np.fromiter(by_band, dtype=np.int64, count=len(by_band))))
    for position in at.tolist():
        candidates[int(open_rows[position // keys.shape[1]])].update(by_band[int(keys.ravel()[position])])
    # Every candidate's stored signature in one query (one a candidate cost a query each).
    stored = _signatures_of(db, {pair for pairs in candidates.values() for pair in pairs if pair[0] in entered})
    found: dict[int, list[tuple[str, float, str]]] = {}
    for i, pairs in sorted(candidates.items()):
        matched: set[int] = set()  # each release a row nearly copies counts once, every such release counts
        for release, row in sorted(pairs):
            if release in matched or (release, row) not in stored:
                continue
            if estimated_jaccard(marks.signatures[i], np.frombuffer(stored[release, row], "<u4")) >= NEAR_COPY_JACCARD:
                matched.add(release)
                found.setdefault(i, []).append(entered[release])
    return found


def _signatures_of(db: Database, pairs: set[tuple[int, int]]) -> dict[tuple[int, int], bytes]:
    """The stored MinHash signatures of (release, row) pairs, in one query: a temporary table joined on SQLite, two
    arrays unnested on PostgreSQL."""
    if not pairs:
        return {}
    ordered = sorted(pairs)
    if db.kind == "postgresql":
        releases, rows = (list(column) for column in zip(*ordered))
        found = db.execute(
            "SELECT s.release, s.row, s.signature FROM released_signatures s "
            "JOIN unnest(?::bigint[], ?::bigint[]) AS w(release, row) ON s.release = w.release AND s.row = w.row",
            (releases, rows),
        ).fetchall()
    else:
        db.execute("CREATE TEMP TABLE IF NOT EXISTS wanted_pairs (release, row)")
        db.execute("DELETE FROM wanted_pairs")
        db.executemany("INSERT INTO wanted_pairs VALUES (?, ?)", ordered)
        try:
            found = db.execute(
                "SELECT s.release, s.row, s.signature FROM wanted_pairs w "
                "JOIN released_signatures s ON s.release = w.release AND s.row = w.row"
            ).fetchall()
        finally:
            db.execute("DELETE FROM wanted_pairs")
    return {(release, row): bytes(signature) for release, row, signature in found}


def datasets_of_rows(db: Database, holding: dict[int, set[int]], n_rows: int) -> dict[int, frozenset[str]]:
    """Row index → the datasets named by the earlier releases holding the row (its content, a near-copy, its unit)."""
    if "release_scopes" not in db.tables():
        return {}
    named: dict[int, set[str]] = defaultdict(set)
    for release, dataset in db.execute("SELECT release, dataset FROM release_scopes").fetchall():
        if dataset:
            named[release].add(dataset)
    found: dict[int, set[str]] = defaultdict(set)
    for i, releases in holding.items():
        for release in releases:
            found[i % max(n_rows, 1)] |= named.get(release, set())
    return {i: frozenset(d) for i, d in found.items() if d}


def followed_units(db: Database, contents: list[bytes], declared: set[bytes], entered) -> tuple[dict, dict]:
    """The units these rows were released with before (by their content) and this release does not declare: unit key →
    how many of these rows hold it; and each such unit's composed ε so far (over every release holding it)."""
    if "released_row_units" not in db.tables() or not contents:
        return {}, {}
    rows_of: dict[bytes, int] = defaultdict(int)
    count: dict[bytes, int] = defaultdict(int)
    for content in contents:
        rows_of[content] += 1
    for content, unit in {
        (c, u) for c, u in matching_rows(db, list(rows_of), "released_row_units", "row_key", "unit")
    }:  # fmt: skip
        if unit not in declared:
            count[unit] += rows_of[content]
    spent: dict[bytes, float] = defaultdict(float)
    for unit, release, times in matching_rows(db, list(count), "released_units", "unit", "release, count"):
        if release in entered:
            spent[unit] += entered[release][1] * (times or 1)
    return dict(count), dict(spent)
