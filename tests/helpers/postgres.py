"""A real PostgreSQL server for the tests: Debian's PostgreSQL 15 (``pg_config --bindir``), started in a temporary
folder with a Unix socket (no TCP port), as the ``postgres`` user when the tests run as root (the server refuses root).
It starts in about a second; each test takes a database of its own."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.sbin import sbin


def _as_server_user(argv: list[str]) -> list[str]:
    return [sbin("runuser"), "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


@dataclass
class Server:
    folder: Path
    bindir: Path

    def url(self, database: str = "postgres", user: str = "postgres", password: str | None = None) -> str:
        secret = f":{password}" if password else ""
        return f"postgresql://{user}{secret}@/{database}?host={self.folder}"

    def sql(self, statement: str, database: str = "postgres") -> None:
        """Run one statement as the server's superuser (autocommit: CREATE DATABASE, roles)."""
        import psycopg

        with psycopg.connect(self.url(database), autocommit=True) as connection:
            connection.execute(statement)

    def database(self) -> str:
        """A new, empty database; its URL."""
        return self.url(self.new_database())

    def new_database(self) -> str:
        """A new, empty database; its name."""
        name = f"t_{uuid.uuid4().hex[:12]}"
        self.sql(f"CREATE DATABASE {name}")
        return name

    def _ctl(self, *argv: str) -> None:
        subprocess.run(
            _as_server_user([str(self.bindir / "pg_ctl"), "-D", str(self.folder / "data"), *argv]),
            check=True, capture_output=True, text=True,
        )  # fmt: skip

    def start(self) -> None:
        options = f"-k {self.folder} -c listen_addresses='' -c fsync=off"  # the OS keeps what a crash loses
        self._ctl("-o", options, "-l", str(self.folder / "log"), "start", "-w")

    def stop(self, mode: str = "fast") -> None:
        self._ctl("stop", "-m", mode, "-w")

    def close(self, mode: str = "fast") -> None:
        """Stop the server and remove its folder (a benchmark's data folder holds gigabytes)."""
        try:
            self.stop(mode)
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)


def available() -> str | None:
    """Why no server can start here, or None."""
    if shutil.which("pg_config") is None:
        return "PostgreSQL is not installed (pg_config is not on PATH)"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install 'squarechipo[team]')"
    return None


def start_server() -> Server:
    bindir = Path(subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=True).stdout.strip())
    folder = Path(tempfile.mkdtemp(prefix="squarechipo-pg-"))
    folder.chmod(0o755)
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres")
    subprocess.run(
        _as_server_user([str(bindir / "initdb"), "-D", str(folder / "data"), "-A", "trust", "-U", "postgres", "-N"]),
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    server = Server(folder, bindir)
    server.start()
    return server
