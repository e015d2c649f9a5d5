"""A real PostgreSQL server for the tests: the package's throwaway server (:mod:`squarechipo.data.local_server`,
Debian's PostgreSQL 15) in a temporary folder with a Unix socket (no TCP port), as the ``postgres`` user when the
tests run as root. It starts in about a second; each test takes a database of its own."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from pathlib import Path

from squarechipo.data.local_server import LocalServer, available, start_local_server

__all__ = ["Server", "available", "start_server"]


class Server(LocalServer):
    given: Path | None = None  # the folder start was given (as root, apart from the server's own)

    def database(self) -> str:
        """A new, empty database; its URL."""
        return self.url(self.new_database())

    def new_database(self) -> str:
        """A new, empty database; its name."""
        name = f"t_{uuid.uuid4().hex[:12]}"
        self.sql(f"CREATE DATABASE {name}")
        return name

    def close(self, mode: str = "fast") -> None:
        try:
            super().close(mode)
        finally:
            if self.given is not None:
                shutil.rmtree(self.given, ignore_errors=True)


def start_server() -> Server:
    given = Path(tempfile.mkdtemp(prefix="squarechipo-pg-"))
    started = start_local_server(given)
    server = Server(started.folder, started.bindir, started.port)
    server.given = given
    return server
