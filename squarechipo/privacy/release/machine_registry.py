"""This machine's registry of releases: where it is, the marker that says it was started, and what the machine's
files show when it is missing (:mod:`squarechipo.privacy.release.registry` opens it)."""

from __future__ import annotations

import contextlib
from pathlib import Path

from squarechipo.privacy.release.registry_schema import RegistryError
from squarechipo.trust import machine

__all__ = [
    "REGISTRY_ENV",
    "default_registry_path",
    "first_on_this_machine",
    "missing",
    "note_counted",
    "started_marker",
]

REGISTRY_ENV = "SQUARECHIPO_RELEASE_REGISTRY"


def default_registry_path() -> Path:
    """This machine's registry: ``releases.sqlite`` in :func:`squarechipo.trust.machine.machine_dir` (neither ``$HOME``
    nor ``$SQUARECHIPO_CACHE`` moves it)."""
    return machine.machine_dir() / "releases.sqlite"


def started_marker(path: Path) -> Path:
    """The file that says a registry was started at ``path``: with it, a missing registry is a lost one. A hidden
    name that ``releases.sqlite*`` does not match, so clearing the registry's files by pattern does not clear it."""
    return path.with_name(f".{path.name}.started")


def first_on_this_machine(path: Path) -> bool:
    """This machine's registry, never started here (no marker beside it, and no record on this machine of a model
    trained on a release it counted): the first release starts it. Any other registry (named by
    ``$SQUARECHIPO_RELEASE_REGISTRY``), or this one started before and now missing, is never started silently."""
    if path != default_registry_path() or started_marker(path).exists():
        return False
    counted = _registries_named_by_records() | _registries_noted()
    if counted:
        raise RegistryError(
            f"this machine's registry of releases ({path}) is missing with the marker that said it was started, but "
            f"this machine has entered releases into it (registry {', '.join(sorted(counted))}, as its folder's "
            f"{_NOTED} and its store of model records show): it was lost, not never started, and a new one would "
            "count from zero. "
            "Restore it from a backup; only if it is lost for good, start a new one by hand (squarechipo registry "
            "init): the rows it recorded could then be released again."
        )
    return True


#: In this machine's folder: the ids of the machine's registries this machine has entered a release into, one a line.
_NOTED = "registries_entered"


def note_counted(target, registry_id: str) -> None:
    """Remember that a release was entered into ``registry_id`` at ``target``, when that is this machine's registry:
    should it and its marker go, the next release is refused, not counted from zero (:func:`first_on_this_machine`)."""
    if target != default_registry_path():
        return
    journal = machine.machine_dir() / _NOTED
    if registry_id not in _registries_noted():
        with open(journal, "a", encoding="utf-8") as handle:
            handle.write(f"{registry_id}\n")


def _registries_noted() -> set[str]:
    journal = machine.machine_dir() / _NOTED
    return set(journal.read_text(encoding="utf-8").split()) if journal.is_file() else set()


def _registries_named_by_records() -> set[str]:
    """The registry ids that releases recorded in this machine's store of model records name (what the machine's
    records show was counted here, should the registry and its marker go)."""
    import re
    import sqlite3

    records = machine.machine_dir() / "records.sqlite"
    if not records.is_file():
        return set()
    try:
        with contextlib.closing(sqlite3.connect(f"file:{records}?mode=ro", uri=True)) as db:
            rows = db.execute("SELECT value FROM records WHERE value LIKE '%registry_id%'").fetchall()
    except sqlite3.DatabaseError:
        return set()
    return {found for (value,) in rows for found in re.findall(r'"registry_id": "([0-9a-f]+)"', value)}


def missing(path: Path) -> RegistryError:
    marker = started_marker(path)
    if marker.exists():
        started = marker.read_text().split()
        return RegistryError(
            f"the registry of releases at {path} was started on this machine ({' '.join(started[1:2])}) and is now "
            "missing, so the releases it recorded cannot be counted. Restore it (a backup older than the last "
            "release under-counts the releases made since); only if it is lost for good, start a new one by hand "
            "(squarechipo registry init): the rows it recorded could then be released again."
        )
    return RegistryError(
        f"there is no registry of releases at {path} ({REGISTRY_ENV} or this machine's), so no release can be "
        "checked against earlier releases of the same rows, and squarechipo does not start one silently (a lost or "
        "redirected registry would count from zero). If no release was ever made with this registry's setting, "
        "start one: `squarechipo registry init` (or squarechipo.privacy.release.registry.init_registry()). If it was "
        f"moved, point {REGISTRY_ENV} at it."
    )
