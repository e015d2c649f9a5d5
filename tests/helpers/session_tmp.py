"""A test session's own temporary folder, named by its process id, and the sweep of those whose process is gone."""

from __future__ import annotations

import os
import re
import shutil
import tempfile

_NAME = re.compile(r"sqct-(\d+)-")


def make(parent: str) -> str:
    """A new folder for this process's session. Readable by other accounts: the PostgreSQL server, run as the
    ``postgres`` user, keeps its data folder inside it. The name is short: an xdist worker's folder lies in its
    controller's, and the server's socket path inside both must stay under the 107 bytes a Unix socket allows."""
    folder = tempfile.mkdtemp(prefix=f"sqct-{os.getpid()}-", dir=parent)
    os.chmod(folder, 0o755)
    return folder


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another account's process
    return True


def sweep(parent: str) -> list[str]:
    """Remove this account's session folders in ``parent`` whose process has ended (a session that was killed);
    returns them. A link, or another account's folder (whose pid may be of another container), is left alone."""
    gone = []
    for entry in os.scandir(parent):
        match = _NAME.match(entry.name)
        own = entry.is_dir(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_uid == os.getuid()
        if match and own and not _alive(int(match.group(1))):
            shutil.rmtree(entry.path, ignore_errors=True)
            gone.append(entry.path)
    return gone
