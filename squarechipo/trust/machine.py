"""This account's machine folder, ``~/.squarechipo``: where the registry of releases, the store of model records and
the machine's signing key live unless a variable names them. It is found from the password database, not ``$HOME``,
and refused unless this account alone may change it: whoever may write it may reset what counts privacy, or plant a
key."""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["FolderError", "check_own", "check_path", "machine_dir", "own_folder"]


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


def check_path(path: Path, what: str) -> None:
    """Every folder on the way from ``/`` to ``path``, as OpenSSH's StrictModes checks a key's: owned by root or this
    account and not writable by group or others (a folder root owns with the sticky bit, as ``/tmp``, aside: others
    may add to it but not rename or remove what is not theirs). A symbolic link on the way must be root's or this
    account's, and the folders of what it points to are checked too. Whoever may write one of them may rename the
    folder below and put another in its place: a fresh registry, a planted key."""
    current = Path(path.absolute().anchor)
    _check_on_the_way(current, os.lstat(current), path, what)
    for part in path.absolute().parts[1:]:
        current = current / part
        try:
            info = os.lstat(current)
        except FileNotFoundError:
            return  # made below a checked folder, by this account
        if stat.S_ISLNK(info.st_mode):
            if info.st_uid not in (os.getuid(), 0):
                raise FolderError(
                    f"{current}, on the way to {path} ({what}), is a link owned by uid {info.st_uid}, who may point "
                    f"it elsewhere: whoever may change it may reset or forge what {path} holds. Fix: replace the link "
                    f"by the folder, or name the stores: {_NAME_STORES}."
                )
            current = Path(os.path.realpath(current))
            check_path(current, what)
            continue
        _check_on_the_way(current, info, path, what)


def _check_on_the_way(folder: Path, info: os.stat_result, below: Path, what: str) -> None:
    if not stat.S_ISDIR(info.st_mode):
        return
    if info.st_uid not in (os.getuid(), 0):
        problem = f"is owned by uid {info.st_uid}, not this account (uid {os.getuid()}) or root"
    elif info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not (info.st_mode & stat.S_ISVTX and info.st_uid == 0):
        problem = f"may be written by other users (mode {stat.S_IMODE(info.st_mode):o})"
    else:
        return
    raise FolderError(
        f"{folder}, on the way to {below} ({what}), {problem}: whoever may write it may rename what lies below and "
        f"put another folder in its place. Fix: chmod go-w {folder} (or its owner's), or name the stores: "
        f"{_NAME_STORES}."
    )


def machine_dir() -> Path:
    """``.squarechipo`` in this account's home as the password database gives it: the registry of releases, the store
    of model records and the machine's signing key. Neither ``$HOME`` nor ``$SQUARECHIPO_CACHE`` moves it, so pointing
    a variable elsewhere cannot start a second registry (a fresh count) without anyone asking for one. It is created
    0700 and refused when it is not this account's own (:func:`own_folder`), or when a folder on the way to it may be
    written by others (:func:`check_path`)."""
    home = _account_home()
    check_path(home, "this account's home, which holds its squarechipo folder")
    return own_folder(home / ".squarechipo", "this machine's squarechipo folder")
