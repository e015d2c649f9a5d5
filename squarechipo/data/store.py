"""A small on-disk key → value map (SQLite), safe across threads and processes.

Used by caches that must survive re-runs and be shared by concurrent runs: the judge's replies
(:class:`squarechipo.judge.openai_compatible.JudgeCache`) and reference log-probs
(:class:`squarechipo.models.reference_cache.ReferenceLogpCache`). SQLite's write-ahead log lets several
processes read and write one file; a busy timeout makes a writer wait for another instead of failing.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "FolderError",
    "RecordTable",
    "SqliteMap",
    "cache_root",
    "check_own",
    "machine_dir",
    "own_folder",
    "store_target",
]

_TYPES = {"text": "TEXT", "real": "REAL", "blob": "BLOB"}


def cache_root() -> Path:
    """``$SQUARECHIPO_CACHE`` or ``~/.cache/squarechipo``: what can be rebuilt (the converted embedded model, judge
    replies, reference log-probs). Nothing that counts privacy lives here (:func:`machine_dir`)."""
    return Path(os.environ.get("SQUARECHIPO_CACHE", Path.home() / ".cache" / "squarechipo")).expanduser()


class FolderError(PermissionError):
    """A folder or file that counts privacy or holds trust is not this account's own (another owner, a symbolic link,
    writable by others), or this account has no home of its own."""


#: Named in every refusal of the machine folder: what a user sets instead of relying on it.
_NAME_STORES = (
    "SQUARECHIPO_RELEASE_REGISTRY, SQUARECHIPO_RECORD_STORE and SQUARECHIPO_SIGNING_KEY (absolute paths, or a "
    "team's postgresql:// URL for the first two)"
)


def _account_home() -> Path:
    """This account's home as the password database gives it. A uid with no entry (a container's ``--user``) has no
    home that ``$HOME`` cannot move, so each ``HOME`` would start a fresh count: refused."""
    try:
        import pwd
    except ImportError:  # Windows: no password database, one home per account
        return Path.home()
    try:
        return Path(pwd.getpwuid(os.getuid()).pw_dir)
    except KeyError:
        raise FolderError(
            f"uid {os.getuid()} has no entry in the password database (a container's --user?), so this machine's "
            f"folder cannot be found: $HOME would move it, and each HOME would count releases from zero. Name the "
            f"stores instead: {_NAME_STORES}."
        ) from None


def own_folder(path: Path, what: str) -> Path:
    """``path`` as a folder this account alone may change: created mode 0700 whatever the umask; refused (one line)
    when it is a symbolic link, not a folder, owned by another uid, or writable by group or others (whoever may write
    it may delete what counts privacy there, or plant a key)."""
    try:
        os.mkdir(path, 0o700)
        os.chmod(path, 0o700)  # the umask may have removed bits, never added: this makes it exactly 0700
    except FileExistsError:
        pass
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        return own_folder(path, what)
    check_own(path, what, folder=True)
    return path


def check_own(path: Path, what: str, *, folder: bool = False) -> None:
    """Refuse ``path`` unless it is this account's own (or root's) and only its owner may write it: no symbolic link,
    no other owner, no write bit for group or others."""
    info = os.lstat(path)
    fix = f"chmod go-w {path}" if folder else f"chmod 644 {path} (or 600)"
    if stat.S_ISLNK(info.st_mode):
        problem, fix = (
            f"is a symbolic link (to {os.readlink(path)})",
            f"remove the link ({path}) and let squarechipo make the folder",
        )
    elif folder != stat.S_ISDIR(info.st_mode):
        problem, fix = ("is not a folder" if folder else "is not a file"), f"move {path} away"
    elif info.st_uid not in (os.getuid(), 0):
        problem, fix = f"is owned by uid {info.st_uid}, not this account (uid {os.getuid()})", f"move {path} away"
    elif info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        problem = f"may be written by other users (mode {stat.S_IMODE(info.st_mode):o})"
    else:
        return
    raise FolderError(
        f"{path} ({what}) {problem}: whoever may change it may reset or forge what it holds. Fix: {fix}."
    )


def machine_dir() -> Path:
    """``.squarechipo`` in this account's home as the password database gives it: the registry of releases, the store
    of model records and the machine's signing key. Neither ``$HOME`` nor ``$SQUARECHIPO_CACHE`` moves it, so pointing
    a variable elsewhere cannot start a second registry (a fresh count) without anyone asking for one. It is created
    0700 and refused when it is not this account's own (:func:`own_folder`)."""
    return own_folder(_account_home() / ".squarechipo", "this machine's squarechipo folder")


def store_target(variable: str, default: str, what: str, error: type[Exception] = ValueError) -> Path | str:
    """Where a store that counts privacy lives: ``$variable`` (a ``postgresql://`` URL, or an absolute path: a relative
    one would name another store in every folder a job runs from, each counting from zero) or ``default`` in
    :func:`machine_dir`."""
    import re

    from squarechipo.data.database import is_url, redact

    named = os.environ.get(variable)
    if not named:
        return machine_dir() / default
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
