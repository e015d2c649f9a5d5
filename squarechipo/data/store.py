"""A small on-disk key → value map (SQLite), safe across threads and processes.

Used by caches that must survive re-runs and be shared by concurrent runs: the judge's replies
(:class:`squarechipo.judge.openai_compatible.JudgeCache`) and reference log-probs
(:class:`squarechipo.models.reference_cache.ReferenceLogpCache`). SQLite's write-ahead log lets several
processes read and write one file; a busy timeout makes a writer wait for another instead of failing.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from squarechipo.trust import machine

__all__ = [
    "RecordTable",
    "SqliteMap",
    "cache_root",
    "store_target",
]

_TYPES = {"text": "TEXT", "real": "REAL", "blob": "BLOB"}


def cache_root() -> Path:
    """``$SQUARECHIPO_CACHE`` or ``~/.cache/squarechipo``: what can be rebuilt (the converted embedded model, judge
    replies, reference log-probs). Nothing that counts privacy lives here
    (:func:`squarechipo.trust.machine.machine_dir`)."""
    return Path(os.environ.get("SQUARECHIPO_CACHE", Path.home() / ".cache" / "squarechipo")).expanduser()


def store_target(variable: str, default: str, what: str, error: type[Exception] = ValueError) -> Path | str:
    """Where a store that counts privacy lives: ``$variable`` (a ``postgresql://`` URL, or an absolute path: a relative
    one would name another store in every folder a job runs from, each counting from zero) or ``default`` in
    :func:`squarechipo.trust.machine.machine_dir`."""
    import re

    from squarechipo.data.database import is_url, redact

    named = os.environ.get(variable)
    if not named:
        return machine.machine_dir() / default
    if is_url(named):
        return named
    if re.search(r"(?i)\b(host|dbname|user|password|port)\s*=", named):
        raise error(
            f"{variable}={redact(named)!r} is a libpq key=value string; give the server as a URL instead: "
            "postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE (or ?host=/socket/folder for a Unix socket)."
        )
    path = Path(named).expanduser()
    if not path.is_absolute():
        raise error(
            f"{variable}={redact(named)!r} is a relative path, which names another {what} in every folder a job runs "
            f"from (each counting from zero). Give an absolute path, e.g. {variable}={redact(str(path.resolve()))}, "
            "or unset it to use this machine's."
        )
    return path


class SqliteMap:
    """``table`` in the SQLite file ``path``: string keys to ``kind`` values (``text``, ``real`` or ``blob``) in
    ``column``."""

    def __init__(
        self,
        path: str | os.PathLike,
        table: str,
        kind: str = "text",
        *,
        column: str = "value",
        timeout: float = 60.0,
    ) -> None:
        if kind not in _TYPES or not table.isidentifier() or not column.isidentifier():
            raise ValueError(
                f"kind must be one of {sorted(_TYPES)} and table an identifier (got {kind!r}, {table!r})."
            )
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.path, self.table, self.column = Path(path), table, column
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path), check_same_thread=False, timeout=timeout)
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(
                f"CREATE TABLE IF NOT EXISTS {table} (key TEXT PRIMARY KEY, {column} {_TYPES[kind]} NOT NULL)"
            )
            self._db.commit()

    def get(self, key: str) -> Any | None:
        return self.get_many([key])[0]

    def get_many(self, keys: Sequence[str]) -> list[Any | None]:
        """The values of ``keys`` in order (None where absent)."""
        found: dict[str, Any] = {}
        with self._lock:
            for start in range(0, len(keys), 500):  # SQLite's limit on bound parameters
                chunk = list(keys[start : start + 500])
                marks = ",".join("?" * len(chunk))
                query = f"SELECT key, {self.column} FROM {self.table} WHERE key IN ({marks})"
                found.update(self._db.execute(query, chunk).fetchall())
        return [found.get(k) for k in keys]

    def put(self, key: str, value: Any) -> None:
        self.put_many([(key, value)])

    def put_many(self, items: Iterable[tuple[str, Any]]) -> None:
        with self._lock:
            self._db.executemany(f"INSERT OR REPLACE INTO {self.table} VALUES (?, ?)", list(items))
            self._db.commit()

    def items(self, prefix: str = "") -> list[tuple[str, Any]]:
        """Every (key, value), in key order; only keys starting with ``prefix`` when one is given."""
        query = f"SELECT key, {self.column} FROM {self.table} WHERE substr(key, 1, ?) = ? ORDER BY key"
        with self._lock:
            return self._db.execute(query, (len(prefix), prefix)).fetchall()

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute(f"SELECT COUNT(*) FROM {self.table}").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()


class RecordTable:
    """``table`` of string keys to ``kind`` values (``text`` or ``blob``) in a SQLite file or a PostgreSQL database
    (:mod:`squarechipo.data.database`): the store of model records a team may share across machines. The table is
    created at first use (on a server, by a role that may create tables; an administrator may create it first)."""

    def __init__(self, target: str | os.PathLike, table: str, kind: str = "text") -> None:
        from squarechipo.data.database import connect, is_url

        if kind not in ("text", "blob") or not table.isidentifier():
            raise ValueError(f"kind must be text or blob and table an identifier (got {kind!r}, {table!r}).")
        if not is_url(target):
            Path(target).parent.mkdir(parents=True, exist_ok=True)
        self.table, self.db = table, connect(target, must_exist=False)
        if self.db.kind == "sqlite":
            self.db.execute("PRAGMA journal_mode=WAL")  # several processes read and write one file
        value = "TEXT" if kind == "text" else "{blob}"
        if table not in self.db.tables():
            self.db.execute(f"CREATE TABLE IF NOT EXISTS {table} (key TEXT PRIMARY KEY, value {value} NOT NULL)")

    def get(self, key: str) -> Any | None:
        found = self.db.execute(f"SELECT value FROM {self.table} WHERE key = ?", (key,)).fetchone()
        return None if found is None else (bytes(found[0]) if isinstance(found[0], memoryview) else found[0])

    def put(self, key: str, value: Any) -> bool:
        """Enter ``value`` under ``key`` unless an entry is there: the first entry stands (whoever may write the store
        may add, never replace, so a later run cannot re-describe weights another run recorded). Whether it was
        entered."""
        cursor = self.db.execute(
            f"INSERT INTO {self.table} (key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING", (key, value)
        )
        return cursor.rowcount == 1

    def items(self, prefix: str = "") -> list[tuple[str, Any]]:
        """Every (key, value), in key order; only keys starting with ``prefix`` when one is given."""
        rows = self.db.execute(
            f"SELECT key, value FROM {self.table} WHERE substr(key, 1, ?) = ? ORDER BY key", (len(prefix), prefix)
        ).fetchall()
        return [(k, bytes(v) if isinstance(v, memoryview) else v) for k, v in rows]

    def __len__(self) -> int:
        return self.db.execute(f"SELECT COUNT(*) FROM {self.table}").fetchone()[0]

    def delete(self, keys: list[str]) -> int:
        """Remove ``keys``; how many were there."""
        found = 0
        for key in keys:
            found += (
                self.db.execute(f"DELETE FROM {self.table} WHERE key = ? RETURNING key", (key,)).fetchone() is not None
            )
        return found

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> RecordTable:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
