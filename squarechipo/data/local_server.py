"""A throwaway PostgreSQL server in a folder: to try a team's registry on one machine (docs/team.md), and the server
the tests run against.

It is the system's PostgreSQL (``pg_config --bindir``), started in ``FOLDER/data`` with its Unix socket in ``FOLDER``
(run as root: in a folder of its own that ``FOLDER`` names, since PostgreSQL refuses root and runs as the
``postgres`` account, which cannot enter root's folders) and, given a port, listening on ``localhost`` only.
Authentication is ``trust``: every account of this machine may connect as any role, so it is for trying the setup,
never for a team's labels.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["LocalServer", "available", "start_local_server", "stop_local_server", "system_tool"]

#: What ``start`` writes in its folder: ``stop`` removes only a folder holding it.
ABOUT = "squarechipo_server.json"
#: The database and roles ``start --team`` makes: what docs/team.md's commands name.
TEAM_DATABASE, TEAM_ROLES = "squarechipo", ("custodian", "analyst")
_SBIN = ("/usr/sbin", "/sbin")  # where Debian keeps runuser: not on a user's PATH


def system_tool(name: str) -> str:
    """``name`` on PATH or in the sbin folders (a user's PATH holds neither); the bare name where it is nowhere."""
    return shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), *_SBIN])) or name


def _as_server_user(argv: list[str]) -> list[str]:
    return [system_tool("runuser"), "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


def available() -> str | None:
    """Why no server can start here, or None."""
    if shutil.which("pg_config") is None:
        return "PostgreSQL is not installed (pg_config is not on PATH): install it (Debian: apt install postgresql)"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed: pip install 'squarechipo[team]'"
    if os.geteuid() == 0:
        import pwd

        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "PostgreSQL refuses to run as root and this machine has no postgres account: run as another account"
    return None


@dataclass
class LocalServer:
    folder: Path
    bindir: Path
    port: int | None = None

    def url(self, database: str = "postgres", user: str = "postgres", password: str | None = None) -> str:
        """A role's URL: over TCP on localhost when the server has a port, else over its socket in ``folder``."""
        secret = f":{password}" if password else ""
        if self.port is not None:
            return f"postgresql://{user}{secret}@localhost:{self.port}/{database}"
        return f"postgresql://{user}{secret}@/{database}?host={self.folder}"

    def sql(self, statement: str, database: str = "postgres") -> None:
        """Run one statement as the server's superuser (autocommit: CREATE DATABASE, roles)."""
        import psycopg

        with psycopg.connect(self.url(database), autocommit=True) as connection:
            connection.execute(statement)

    def _ctl(self, *argv: str) -> None:
        _run([str(self.bindir / "pg_ctl"), "-D", str(self.folder / "data"), *argv], "pg_ctl")

    def start(self) -> None:
        listen = f"-c listen_addresses=localhost -p {self.port}" if self.port is not None else "-c listen_addresses=''"
        options = f"-k {self.folder} {listen} -c fsync=off"  # a throwaway: the OS keeps what a crash loses
        self._ctl("-o", options, "-l", str(self.folder / "log"), "start", "-w")

    def stop(self, mode: str = "fast") -> None:
        self._ctl("stop", "-m", mode, "-w")

    def close(self, mode: str = "fast") -> None:
        """Stop the server and remove its folder."""
        try:
            self.stop(mode)
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)


def _run(argv: list[str], what: str) -> None:
    done = subprocess.run(_as_server_user(argv), capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
        raise OSError(f"{what} failed: {last}")


def _bindir() -> Path:
    return Path(subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=True).stdout.strip())


def _server_folder(folder: Path) -> Path:
    """Where the server's data and socket live: ``folder`` itself, or, run as root, a folder of its own under the
    system's temporary folder (the ``postgres`` account cannot enter root's folders, /root or pytest's)."""
    if os.geteuid() != 0:
        return folder
    place = Path(tempfile.mkdtemp(prefix="squarechipo-pg-"))
    place.chmod(0o755)
    shutil.chown(place, "postgres")
    return place


def start_local_server(folder: str | os.PathLike, port: int | None = None, *, team: bool = False) -> LocalServer:
    """Make ``folder`` (new or empty), start a server there and, with ``team``, the database and the two roles of
    docs/team.md (``custodian``, ``analyst``)."""
    why = available()
    if why:
        raise OSError(f"no PostgreSQL server can start here: {why}.")
    folder = Path(folder).expanduser().resolve()
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{folder} is a file: give a new folder for the server's data and socket.")
    if port is not None and not 1 <= port <= 65535:
        raise ValueError(f"--port {port}: give a TCP port from 1 to 65535 (or none: the socket only).")
    if folder.exists() and any(folder.iterdir()):
        raise ValueError(f"{folder}: the folder is not empty; give a new folder (or stop the server in it first).")
    folder.mkdir(parents=True, exist_ok=True)
    place = _server_folder(folder)
    bindir = _bindir()
    server = LocalServer(place, bindir, port)
    try:
        _run([str(bindir / "initdb"), "-D", str(place / "data"), "-A", "trust", "-U", "postgres", "-N"], "initdb")
        server.start()
    except OSError as error:
        lines = (place / "log").read_text().splitlines() if (place / "log").exists() else []
        said = [line.split(":  ", 1)[-1] for line in lines if "FATAL" in line or "ERROR" in line] or [str(error)]
        for made in {place, folder}:
            shutil.rmtree(made, ignore_errors=True)
        raise OSError(f"PostgreSQL did not start in {folder} ({said[-1]}); with --port, try another port.") from None
    if team:
        server.sql(f"CREATE DATABASE {TEAM_DATABASE}")
        for role in TEAM_ROLES:
            server.sql(f"CREATE ROLE {role} LOGIN")
    (folder / ABOUT).write_text(json.dumps({"port": port, "server": str(place)}) + "\n")
    return server


def _server_place(folder: Path, about: dict) -> Path:
    """The server's own folder as the record in ``folder`` names it, trusted only if it is what start makes: the
    folder itself, or (run as root) a ``squarechipo-pg-*`` folder directly in the temporary folder, holding a
    PostgreSQL data folder. The record is a file anyone who can write the folder can edit: it never chooses what is
    removed or which program runs."""
    try:
        place = Path(str(about.get("server", ""))).resolve()
    except (ValueError, OSError):  # a NUL byte, a loop of links: not a folder start made
        place = Path("/nonexistent")
    ours = place == folder or (place.parent == Path(tempfile.gettempdir()).resolve() and place.name.startswith(
        "squarechipo-pg-"
    ))  # fmt: skip
    if not ours or not (place / "data" / "PG_VERSION").is_file():
        raise ValueError(
            f"{folder / ABOUT}: it names {about.get('server')!r} as the server's folder, which `registry server "
            "start` did not make; stop that server with pg_ctl yourself and remove the folders by hand."
        )
    return place


def _remove_made(folder: Path) -> None:
    """Remove what start made in ``folder`` (the data, the log, the socket files, the record), then the folder if
    nothing else is in it: files put there afterwards stay."""
    for name in ("data", "log", ABOUT):
        path = folder / name
        shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
    for socket in folder.glob(".s.PGSQL.*"):
        socket.unlink(missing_ok=True)
    if folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()


def stop_local_server(folder: str | os.PathLike) -> Path:
    """Stop the server ``start_local_server`` started in ``folder`` and remove what it made; the folder's path."""
    folder = Path(folder).expanduser().resolve()
    about = folder / ABOUT
    if not about.is_file():
        raise ValueError(
            f"{folder}: no server started by `squarechipo registry server start` is in this folder; name the folder "
            "it was started in."
        )
    try:
        found = json.loads(about.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        found = {}
    place = _server_place(folder, found if isinstance(found, dict) else {})
    if (place / "data" / "postmaster.pid").is_file():  # running (a reboot stops it without a word)
        LocalServer(place, _bindir(), None).stop()  # the system's pg_ctl, never a path the record names
    _remove_made(place)
    _remove_made(folder)
    return folder
