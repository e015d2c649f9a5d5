"""Root's tools (runuser, useradd, userdel) by their full path: a user's PATH (`env -i PATH=/usr/local/bin:/usr/bin:
/bin`, as the README's commands are tried) holds no sbin folder, where Debian keeps them."""

from __future__ import annotations

import os
import shutil


def sbin(name: str) -> str:
    """The path of ``name`` on PATH or in the sbin folders; the bare name where it is nowhere (the call says so)."""
    return shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])) or name
