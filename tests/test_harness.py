"""The test command's own machinery: what `bash scripts/test.sh` relies on from pytest and pytest-xdist holds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

GROUPED = textwrap.dedent(
    """
    import json, os, pathlib
    import pytest

    pytestmark = pytest.mark.xdist_group("pool")

    @pytest.mark.parametrize("i", range(6))
    def test_grouped(i, request):
        out = pathlib.Path(os.environ["HARNESS_OUT"]) / f"{request.node.name}-{__name__}.json"
        out.write_text(json.dumps({"worker": os.environ["PYTEST_XDIST_WORKER"], "nodeid": request.node.nodeid}))
    """
)
UNGROUPED = textwrap.dedent(
    """
    import pytest

    @pytest.mark.parametrize("i", range(6))
    def test_free(i):
        pass
    """
)


def test_xdist_groups_run_on_one_worker_under_the_test_commands_options(tmp_path):
    """The suite's `--dist loadgroup` keeps an `xdist_group` on one worker, so its module fixtures (the selector's
    trained candidate pool, the judge servers) are built once. pytest 9.2 with pytest-xdist 3.8 silently spread a
    group over both workers (pytest-dev/pytest-xdist#1386): the project pins pytest below 9.2 for that."""
    for name, text in {"test_a.py": GROUPED, "test_b.py": GROUPED, "test_c.py": UNGROUPED}.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "out").mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider", "-q"],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "HARNESS_OUT": str(tmp_path / "out")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    ran = [json.loads(p.read_text()) for p in (tmp_path / "out").iterdir()]
    assert len(ran) == 12
    assert {r["worker"] for r in ran} in ({"gw0"}, {"gw1"}), ran
    assert all(r["nodeid"].endswith("@pool") for r in ran), ran


def test_the_installer_refuses_an_extra_the_package_does_not_declare_before_it_installs(tmp_path):
    """pip only warns about an undeclared extra and installs without it; the installer names the variable, the
    misspelt extra and every declared one in one line, before it creates a venv. Its list is pyproject.toml's."""
    import os
    from pathlib import Path

    import tomllib

    root = Path(__file__).resolve().parents[1]
    declared = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    venv = tmp_path / "venv"
    env = {**os.environ, "SQUARECHIPO_VENV": str(venv), "SQUARECHIPO_EXTRAS": "dev,tem*"}
    done = subprocess.run(["bash", "scripts/install.sh"], cwd=root, env=env, capture_output=True, text=True)
    assert done.returncode == 2 and not done.stdout and not venv.exists()
    [line] = done.stderr.splitlines()
    assert line.startswith("SQUARECHIPO_EXTRAS: no extra 'tem*' in pyproject.toml")
    assert f"a comma-separated list of {','.join(declared)}, or empty for none" in line
    assert tuple(declared) == _DECLARED  # the property test below draws from these


def test_the_installer_refuses_an_unknown_compile_setting_before_it_installs(tmp_path):
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    venv = tmp_path / "venv"
    env = {**os.environ, "SQUARECHIPO_VENV": str(venv), "SQUARECHIPO_COMPILE": "import"}
    done = subprocess.run(["bash", "scripts/install.sh"], cwd=root, env=env, capture_output=True, text=True)
    assert done.returncode == 2 and not done.stdout and not venv.exists()
    assert done.stderr.splitlines() == [
        "SQUARECHIPO_COMPILE=import: use all (the default: the whole venv) or imports (what the main job imports)"
    ]


_DECLARED = ("judge-server", "scale", "team", "tensorboard", "wandb", "dev")


@settings(max_examples=25, deadline=None)
@given(st.lists(st.sampled_from(_DECLARED) | st.text("dev-*?[].\\ $'\"", max_size=6), min_size=1, max_size=4))
def test_any_list_with_an_undeclared_extra_is_refused_naming_the_first(items):
    """Whatever the text (glob and regex characters, quotes, spaces, empty items), an extra the package does not
    declare stops the installer before anything is installed, and the message names the first such extra."""
    from pathlib import Path

    assume(any(item not in _DECLARED for item in items[:-1]) or items[-1] not in (*_DECLARED, ""))
    bad = next(item for item in items if item not in _DECLARED)  # bash's read drops only a trailing empty item
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "SQUARECHIPO_VENV": "/nonexistent/venv", "SQUARECHIPO_EXTRAS": ",".join(items)}
    done = subprocess.run(["bash", "scripts/install.sh"], cwd=root, env=env, capture_output=True, text=True)
    assert done.returncode == 2 and not done.stdout, done.stdout
    assert done.stderr.startswith(f"SQUARECHIPO_EXTRAS: no extra '{bad}' in pyproject.toml")


def _small_disk(folder):
    """A 16 MB tmpfs at ``folder`` (needs the right to mount, as root has on these machines)."""
    folder.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(folder)], capture_output=True)
    if done.returncode:
        pytest.skip(f"no tmpfs can be mounted here: {done.stderr.decode().strip()}")


@pytest.mark.parametrize("variable", ["SQUARECHIPO_VENV", "TMPDIR"])
def test_the_installer_refuses_a_disk_too_small_for_a_new_venv_before_it_installs(tmp_path, variable):
    """pip stops part-way with "No space left on device" and leaves half a venv; the installer measures the free
    space where the venv and pip's temporary files go first, and names the folder, what it has and the variable."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    small = tmp_path / "small"
    _small_disk(small)
    try:
        on_small = variable == "SQUARECHIPO_VENV"
        venv = (small if on_small else tmp_path) / "venv"
        env = {**os.environ, "SQUARECHIPO_VENV": str(venv), "TMPDIR": str(tmp_path if on_small else small)}
        done = subprocess.run(["bash", "scripts/install.sh"], cwd=root, env=env, capture_output=True, text=True)
        assert done.returncode == 1 and not done.stdout and not venv.exists(), done
        assert done.stderr.splitlines() == [
            f"install.sh: {small} has 16 MB free and a new venv needs about "
            f"{3000 if on_small else 1000} MB there; free some space or set {variable} to a "
            "folder on a disk with more"
        ]
    finally:
        subprocess.run(["umount", str(small)], check=True)


def test_a_test_session_sweeps_the_temporary_folders_of_sessions_that_were_killed(tmp_path):
    """tests/helpers/session_tmp.py: a folder whose session's process has ended is removed, a live one is kept."""
    from tests.helpers import session_tmp

    ended = subprocess.Popen(["true"])
    ended.wait()
    dead = tmp_path / f"sqct-{ended.pid}-abc"
    (dead / "pg").mkdir(parents=True)
    live = session_tmp.make(str(tmp_path))
    other = tmp_path / "sqct-notapid"
    other.mkdir()
    link = tmp_path / f"sqct-{ended.pid}-link"
    link.symlink_to(live)
    foreign = tmp_path / f"sqct-{ended.pid}-foreign"
    foreign.mkdir()
    if os.geteuid() == 0:
        os.chown(foreign, 65534, 65534)  # another account's session, whose pid this one cannot judge
    expected = [str(dead)] + ([] if os.geteuid() == 0 else [str(foreign)])
    assert sorted(session_tmp.sweep(str(tmp_path))) == sorted(expected)
    assert not dead.exists() and os.path.isdir(live) and other.exists() and link.is_symlink()


def test_a_test_session_leaves_nothing_in_the_temporary_folder(tmp_path):
    """Every session's temporary files (registries, keys, tmp_path, servers' folders) lie in one folder of its own,
    removed when it ends: runs of the suite once filled the disk."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    node = "tests/test_harness.py::test_a_test_session_sweeps_the_temporary_folders_of_sessions_that_were_killed"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", node],
        cwd=root, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:]
    assert list(tmp_path.iterdir()) == []


def _wheel(folder, name: str, requires: list[str]) -> None:
    """A pure-Python wheel built here (no index): ``name`` 1.0, requiring ``requires``."""
    import zipfile

    info = f"{name}-1.0.dist-info"
    metadata = "".join(f"Requires-Dist: {r}\n" for r in requires)
    files = {
        f"{name}/__init__.py": "",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n{metadata}",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{info}/RECORD"] = "".join(f"{path},,\n" for path in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(folder / f"{name}-1.0-py3-none-any.whl", "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)


def test_the_installer_shows_pips_progress_in_a_line_per_step_and_keeps_its_failure(tmp_path):
    """scripts/pip_steps.awk on a real pip run (local wheels, no index): pip found 26 packages and installs them; the
    installer prints one line at the 25th found and one for the install, nothing else of pip's; a pip that fails
    still fails the pipeline the installer runs it in (pipefail), with pip's error on stderr."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    names = [f"leaf{i:02d}" for i in range(25)]
    for name in names:
        _wheel(wheels, name, [])
    _wheel(wheels, "top", names)
    pip = f"{sys.executable} -m pip install --no-index --find-links {wheels} --target {tmp_path / 'site'}"
    script = f"set -euo pipefail; {pip} top | awk -f scripts/pip_steps.awk"
    done = subprocess.run(["bash", "-c", script], cwd=root, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[install]   25 packages found so far", "[install]   installing 26 packages"]
    failed = subprocess.run(["bash", "-c", script.replace(" top |", " nothere |")], cwd=root, capture_output=True,
                            text=True)  # fmt: skip
    assert failed.returncode != 0 and not failed.stdout and "nothere" in failed.stderr
