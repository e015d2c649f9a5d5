"""The registry of releases on this machine: composition across releases of the same rows.

Randomized response protects a label once. Released again with fresh noise, into another folder or another file,
the same rows give an attacker several independent noisy copies, and their majority is the raw label. Each ledger
describes one dataset's own releases, so it cannot see the others; this registry can. It keeps, for every release
drawn from OS entropy, the hash of each released row's canonical content (:func:`squarechipo.data.fingerprint.
row_hashes`: label-free, equal for retyped copies), the release's ε and when it was made.

A new release of raw rows that were released before is refused unless the caller opts in (``rerelease=True``,
``label_rerelease: true`` in a config). Then the ledger records ``earlier_epsilon``: basic composition, the largest
sum of the earlier releases' ε over any one of its rows, and the ledger's and the card's total ε include it. The
release's own flip rate, which the loss debiases, is its own ε's.

What it does not cover: releases made on other machines or before this registry existed, rows edited beyond
retyping, and seeded releases (a fixed seed is for simulation; their cards already say they are not private).
The file is ``$SQUARECHIPO_RELEASE_REGISTRY`` or ``releases.sqlite`` in the record store (``~/.cache/squarechipo``).
"""

from __future__ import annotations

import os
import sqlite3
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from squarechipo.data.store import cache_root

__all__ = ["REGISTRY_ENV", "EarlierReleases", "earlier_releases", "record_release", "registry_path"]

REGISTRY_ENV = "SQUARECHIPO_RELEASE_REGISTRY"


def registry_path() -> Path:
    """Where this machine's registry of releases lives."""
    return Path(os.environ.get(REGISTRY_ENV) or cache_root() / "releases.sqlite").expanduser()


@dataclass(frozen=True)
class EarlierReleases:
    """What the registry knows of earlier releases of some rows."""

    rows: int  # how many of the rows were released before
    epsilon: float  # basic composition: the largest sum of earlier releases' ε over one row
    releases: tuple[tuple[str, float, str], ...]  # (release id, ε, made at) of each earlier release involved

    def describe(self) -> str:
        made = ", ".join(f"ε {eps:g} at {when}" for _, eps, when in self.releases)
        return f"{self.rows} row(s) were released before ({made}; composed ε of those releases {self.epsilon:g})"


def _connect() -> sqlite3.Connection:
    path = registry_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(str(path), timeout=60.0)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE IF NOT EXISTS releases (id TEXT PRIMARY KEY, epsilon REAL NOT NULL, made TEXT NOT NULL)")
    db.execute("CREATE TABLE IF NOT EXISTS released_rows (row BLOB NOT NULL, release TEXT NOT NULL)")
    db.execute("CREATE INDEX IF NOT EXISTS released_rows_by_row ON released_rows (row)")
    return db


def earlier_releases(row_hashes: list[bytes]) -> EarlierReleases:
    """The earlier releases of any of these rows (by canonical content) recorded on this machine."""
    per_row: dict[bytes, float] = defaultdict(float)
    involved: dict[str, tuple[float, str]] = {}
    db = _connect()
    try:
        for start in range(0, len(row_hashes), 500):  # SQLite's limit on bound parameters
            chunk = row_hashes[start : start + 500]
            query = (
                "SELECT r.row, s.id, s.epsilon, s.made FROM released_rows r JOIN releases s ON r.release = s.id "
                f"WHERE r.row IN ({','.join('?' * len(chunk))})"
            )
            for row, release, epsilon, made in db.execute(query, chunk):
                per_row[row] += epsilon
                involved[release] = (epsilon, made)
    finally:
        db.close()
    releases = tuple(sorted(((k, *v) for k, v in involved.items()), key=lambda r: r[2]))
    return EarlierReleases(len(per_row), max(per_row.values(), default=0.0), releases)


def record_release(release_id: str, row_hashes: list[bytes], epsilon: float, made: str) -> None:
    """Enter a release (its rows' canonical hashes, its own ε) into this machine's registry."""
    db = _connect()
    try:
        with db:
            db.execute("INSERT OR IGNORE INTO releases VALUES (?, ?, ?)", (release_id, float(epsilon), made))
            db.executemany("INSERT INTO released_rows VALUES (?, ?)", [(row, release_id) for row in set(row_hashes)])
    finally:
        db.close()
