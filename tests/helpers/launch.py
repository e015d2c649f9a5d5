"""Run a command (a launcher and its ranks) and fail with every process's stacks if it hangs."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import uuid

from tests.helpers import warm


def launch(command: list[str], *, cwd, env: dict | None = None, timeout: float = 300.0) -> subprocess.CompletedProcess:
    """Run a command (e.g. a launcher and its ranks) and capture its output.

    Past ``timeout`` the test fails with the thread stacks of each process the command started (SIGABRT with
    PYTHONFAULTHANDLER set), so a hang says where it hung, and none of them is left running."""
    tag = uuid.uuid4().hex  # finds every process of this launch, even one in a session of its own or orphaned
    env = {**(os.environ if env is None else env), "PYTHONFAULTHANDLER": "1", "SQUARECHIPO_TEST_LAUNCH": tag}
    done = warm.run(command, cwd=cwd, env=env, timeout=timeout)  # a Python command: forked from warm imports
    if done is not None:
        if done.returncode is None:
            _kill(tag)
            raise AssertionError(
                f"{command} ran past {timeout:.0f} s: it was still running. The stderr tail ends with its "
                f"stacks.\nstdout tail:\n{done.stdout[-1500:]}\nstderr tail:\n{done.stderr[-8000:]}"
            )
        return done
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        ended = process.poll()  # None: the command itself hung; a code: a process it left holds the output open
        state = "was still running" if ended is None else f"had ended (code {ended}) but left a process behind"
        stdout, stderr = _stacks_then_kill(process, tag)
        raise AssertionError(
            f"{command} ran past {timeout:.0f} s: it {state}. The stderr tail ends with every process's "
            f"stacks.\nstdout tail:\n{stdout[-1500:]}\nstderr tail:\n{stderr[-8000:]}"
        ) from None
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def _launched(tag: str) -> list:
    import psutil

    found = []
    for candidate in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if candidate.environ().get("SQUARECHIPO_TEST_LAUNCH") == tag:
                found.append(candidate)
    return found


def _kill(tag: str) -> None:
    import psutil

    for sig in (signal.SIGABRT, signal.SIGKILL):  # faulthandler prints the stacks on SIGABRT, then the process ends
        family = _launched(tag)
        for member in family:
            with contextlib.suppress(psutil.Error):
                member.send_signal(sig)
        psutil.wait_procs(family, timeout=30)


def _stacks_then_kill(process: subprocess.Popen, tag: str) -> tuple[str, str]:
    _kill(tag)
    try:
        return process.communicate(timeout=30)
    except subprocess.TimeoutExpired as error:  # something outside the launch holds its pipes: give what came
        process.kill()
        return _text(error.stdout), _text(error.stderr)


def _text(output) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""
