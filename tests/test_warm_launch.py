"""The warm fork server of the tests (tests/helpers/warm.py) runs a command as a fresh interpreter would: the same
arguments, working folder, environment, import path, output, exit code and traceback; and what that command starts
with ``sys.executable`` runs warm too, with its own environment."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap

import pytest

from tests.helpers import warm

PROBE = textwrap.dedent(
    """
    import json, os, subprocess, sys
    state = {
        "argv": sys.argv, "cwd": os.getcwd(), "path0": sys.path[0], "name": __name__,
        "variable": os.environ.get("SQUARECHIPO_WARM_PROBE"), "rank": os.environ.get("RANK"),
        "squarechipo_loaded": "squarechipo" in sys.modules,
        "faulthandler": __import__("faulthandler").is_enabled(),
        "unbuffered": [s.write_through and s.buffer.__class__.__name__ for s in (sys.stdout, sys.stderr)],
    }
    if sys.argv[1:2] == ["nested"]:
        env = {**os.environ, "RANK": "1"}  # a launcher's rank: the server's environment otherwise
        done = subprocess.run([sys.executable, __file__, "leaf"], env=env, capture_output=True, text=True)
        state["nested"] = json.loads(done.stdout)
    if sys.argv[1:2] == ["leaf"]:
        state["torch_preloaded"] = "torch" in sys.modules
    print(json.dumps(state))
    if sys.argv[1:2] == ["fail"]:
        raise RuntimeError("the probe fails on purpose")
    sys.exit(3 if sys.argv[1:2] == ["exit"] else 0)
    """
)


@pytest.fixture
def probe(tmp_path):
    path = tmp_path / "probe.py"
    path.write_text(PROBE)
    return path


def _cold(command, cwd, env):
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_a_warm_command_sees_what_a_fresh_interpreter_sees_and_its_children_start_warm(probe, tmp_path):
    env = {**os.environ, "SQUARECHIPO_WARM_PROBE": "outer"}
    flags = {**env, "PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1"}  # read at start-up: the child applies them
    for command, variables in (
        ([warm.PYTHON, str(probe), "plain", "x y"], env),
        ([warm.PYTHON, str(probe), "exit"], env),
        ([warm.PYTHON, "-c", PROBE, "exit"], env),  # python -c: argv[0] "-c", sys.path[0] "", a fresh __main__
        ([warm.PYTHON, str(probe), "plain"], flags),
    ):
        hot, cold = warm.run(command, cwd=tmp_path, env=variables, timeout=300), _cold(command, tmp_path, variables)
        assert hot is not None, "the command did not run warm"
        assert (hot.returncode, json.loads(hot.stdout)) == (cold.returncode, json.loads(cold.stdout))
    assert json.loads(hot.stdout)["faulthandler"] and json.loads(hot.stdout)["unbuffered"] == ["FileIO", "FileIO"]
    failed = warm.run([warm.PYTHON, str(probe), "fail"], cwd=tmp_path, env=env, timeout=300)
    assert failed.returncode == 1 and failed.stderr.rstrip().endswith("RuntimeError: the probe fails on purpose")
    nested = warm.run([warm.PYTHON, str(probe), "nested"], cwd=tmp_path, env=env, timeout=300)
    leaf = json.loads(nested.stdout)["nested"]
    assert leaf["torch_preloaded"] and (leaf["variable"], leaf["rank"]) == ("outer", "1")
    assert not leaf["squarechipo_loaded"]  # the package is imported by each command, never by the server


@pytest.mark.slow
def test_a_command_whose_environment_differs_runs_cold(probe, tmp_path):
    env = {**os.environ, "HF_HOME": str(tmp_path / "elsewhere")}  # read by the libraries when they are imported
    warm.run([warm.PYTHON, str(probe), "plain"], cwd=tmp_path, env={**os.environ}, timeout=300)  # a server is up
    address = warm._server(dict(os.environ))
    how = warm.plan([str(probe), "plain"])
    with open(os.devnull) as null:
        connection, pid = warm.request(address, how, str(tmp_path), env, [null.fileno()] * 3, None)
    assert (connection, pid) == (None, None)  # not served: the caller starts a fresh interpreter
