"""Python commands of the tests started from a warm interpreter: a fork server that has imported the heavy libraries.

A test that runs ``python script.py``, ``python -m module``, ``python -c code`` or a console script of this venv
(``squarechipo``, ``accelerate``, ``torchrun``) pays 10-20 s of imports (torch, transformers, TRL, datasets, PEFT)
on this kind of machine before the command does anything, and the launchers it calls pay them again for each process
they start. Here a server per test worker and environment imports those libraries once (never ``squarechipo``
itself, so each command imports the package as a fresh interpreter would, through the test machine shim), then forks
a child for each command: a real process with its own working folder, standard streams, environment and exit code,
that runs the script as ``__main__`` through ``runpy``, as the interpreter would. In a child, ``sys.executable`` is
a shim (``warm_shim.py``) that asks the same server for its own children: a launcher's ranks (``accelerate launch``,
``torchrun``), a study's training jobs and a benchmark's workers start warm too.

A server serves a command only if its environment is the server's, apart from the variables launchers set for the
processes they start (:data:`PER_PROCESS`), which the child applies. Any other command, environment or command line
form starts a fresh interpreter. Tests only: the commands users run start their own interpreters, and the wheel test
runs the installed commands that way.
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: What the server imports before it serves (what the training, evaluation and data commands import).
WARM_IMPORTS = (
    "numpy",
    "scipy.stats",
    "yaml",
    "torch",
    "pyarrow",
    "datasets",
    "safetensors.torch",
    "transformers",
    "transformers.trainer",
    "accelerate",
    "accelerate.commands.launch",
    "torch.distributed.run",
    "peft",
    "trl",
)
#: Names the server also takes from trl (its lazy module loads the trainers on first access).
_TRL_NAMES = ("DPOTrainer", "SFTTrainer", "TrlParser", "ModelConfig", "ScriptArguments")
#: Variables that launchers set for each process they start (Accelerate's simple launcher, torchrun's ranks, a
#: benchmark's workers) and that the libraries read when they run, not when they are imported: a request may differ
#: from the server in these alone, and its child takes them (PYTHONUNBUFFERED and PYTHONFAULTHANDLER, which the
#: interpreter reads at start-up, the child applies as it would: see _take_start_up_flags).
PER_PROCESS = (
    "SQUARECHIPO_TEST_LAUNCH", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
    "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_NAME", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS",
    "MKL_NUM_THREADS", "PYTHONWARNINGS", "PYTHONUNBUFFERED", "PYTHONFAULTHANDLER", "TQDM_DISABLE",
    "CUDA_VISIBLE_DEVICES", "PWD", "OLDPWD", "SHLVL", "_",
    "PYTEST_CURRENT_TEST", "COLUMNS", "LINES",
)  # fmt: skip
# The package's own variables are read by the child, which imports the package itself; all but the machine folder
# of tests/helpers/machine/sitecustomize.py, which the server's interpreter read when it started.
_PER_PROCESS_PREFIXES = ("ACCELERATE_", "FSDP_", "TORCHELASTIC_", "TORCH_NCCL_", "NCCL_", "KMP_", "SQUARECHIPO_")
_READ_AT_START = ("SQUARECHIPO_TEST_MACHINE_DIR",)
_SERVERS: dict[tuple, tuple[subprocess.Popen, str]] = {}
_SET_BY_IMPORTS: dict[str, str] = {}
_MAX_SERVERS = 3
ROOT = Path(__file__).resolve().parents[2]
#: This interpreter (``sys.executable`` may be a warm shim while :func:`use` holds).
PYTHON = sys.executable


def _shared(env: dict) -> tuple:
    """The part of an environment a server and its requests must share."""
    per_process = lambda k: k in PER_PROCESS or k.startswith(_PER_PROCESS_PREFIXES)  # noqa: E731
    return tuple(sorted((k, v) for k, v in env.items() if k in _READ_AT_START or not per_process(k)))


def _console_script(path: str, python: str) -> bool:
    """A console script of this venv (its first line runs this interpreter)."""
    with contextlib.suppress(OSError), open(path, "rb") as handle:
        return handle.readline().strip() == f"#!{python}".encode()
    return False


def plan(args: list[str]) -> tuple[str, str, list[str]] | None:
    """How ``python *args`` runs warm, as (``path``, ``module`` or ``code``, its target, its ``sys.argv``), or None."""
    if args[:1] == ["-m"] and len(args) > 1:
        return "module", args[1], [args[1], *args[2:]]
    if args[:1] == ["-c"] and len(args) > 1:
        return "code", args[1], ["-c", *args[2:]]
    if args and not args[0].startswith("-"):
        return "path", args[0], list(args)
    return None


def _command_plan(command: list[str]) -> tuple[str, str, list[str]] | None:
    if not command:
        return None
    if command[0] in (PYTHON, sys.executable):
        return plan(command[1:])
    if os.path.isabs(command[0]) and _console_script(command[0], PYTHON):
        return "path", command[0], list(command)
    return None


# ------------------------------------------------------------------------------------------------ the client


def _server(env: dict) -> str | None:
    """The address of a ready server for this environment, started if there is none (None if it cannot start)."""
    key = _shared(env)
    running = _SERVERS.get(key)
    if running is not None and running[0].poll() is None:
        return running[1]
    if len(_SERVERS) >= _MAX_SERVERS:  # each holds the libraries in memory: the oldest goes
        _stop(_SERVERS.pop(next(iter(_SERVERS)))[0])
    folder = tempfile.mkdtemp(prefix="squarechipo-warm-")
    address = os.path.join(folder, "server")
    process = subprocess.Popen(
        [PYTHON, "-m", "tests.helpers.warm", address, str(os.getpid())],
        cwd=ROOT,
        env=dict(key),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=open(os.path.join(folder, "server.log"), "w"),  # noqa: SIM115 - read if it fails to start
        start_new_session=True,
    )
    deadline = time.monotonic() + 300
    while not os.path.exists(address + ".ready"):
        if process.poll() is not None or time.monotonic() > deadline:
            _stop(process)
            return None
        time.sleep(0.1)
    _SERVERS[key] = (process, address)
    return address


def _stop(process: subprocess.Popen) -> None:
    with contextlib.suppress(Exception):
        process.kill()
        process.wait(timeout=10)


def use(monkeypatch) -> None:
    """Processes this test starts with ``sys.executable`` (the library's study, table and audit jobs) start warm."""
    address = _server(dict(os.environ))
    if address is not None:
        monkeypatch.setenv("SQUARECHIPO_TEST_WARM", address)
        monkeypatch.setattr(sys, "executable", os.path.join(os.path.dirname(address), "python"))


def request(address: str, how: tuple, cwd: str, env: dict, fds: list[int], group: int | None):
    """Send one command to the server with the three standard streams; the connection and the child's pid, or
    (None, None) when the server does not serve this environment."""
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    connection.connect(address)
    message = pickle.dumps({"plan": how, "cwd": cwd, "env": env, "group": group})
    socket.send_fds(connection, [message], fds)
    reply = connection.recv(64)
    if not reply:
        connection.close()
        return None, None
    return connection, struct.unpack("q", reply)[0]


def exit_code(connection: socket.socket, timeout: float | None) -> int | None:
    """The child's exit code (negative: the signal that ended it), or None past ``timeout``."""
    connection.settimeout(timeout)
    try:
        reply = connection.recv(64)
    except TimeoutError:
        return None
    if not reply:  # the server ended (killed) before it could report the child's exit
        raise RuntimeError("the warm test server ended before the command did; its server.log says why")
    return struct.unpack("q", reply)[0]


def run(command: list[str], *, cwd, env: dict, timeout: float) -> subprocess.CompletedProcess | None:
    """Run ``command`` in a child of a warm server; None when it cannot run warm (the caller starts it fresh).

    Past ``timeout`` the child's process group (with every warm process it started) gets SIGABRT, so faulthandler
    prints its stacks into its stderr, then SIGKILL; the outcome's ``returncode`` is then None."""
    how = _command_plan(command)
    address = _server(env) if how is not None else None
    if address is None:
        return None
    with tempfile.TemporaryDirectory(prefix="squarechipo-warm-run-") as out:
        paths = [os.path.join(out, name) for name in ("stdout", "stderr")]
        streams = [open(os.devnull), *(open(p, "w") for p in paths)]  # noqa: SIM115 - closed below
        try:
            connection, pid = request(address, how, str(cwd), env, [s.fileno() for s in streams], None)
        except OSError:  # the server is gone: the caller starts a fresh interpreter
            connection = None
        finally:
            for stream in streams:
                stream.close()
        if connection is None:
            return None
        with connection:
            code = exit_code(connection, timeout)
            if code is None:
                for sig, wait in ((signal.SIGABRT, 5), (signal.SIGKILL, 0)):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(pid, sig)
                    time.sleep(wait)
                exit_code(connection, 60)
        stdout, stderr = (Path(p).read_text(errors="replace") for p in paths)
    return subprocess.CompletedProcess(command, code, stdout, stderr)


# ------------------------------------------------------------------------------------------------ the server


def _child(message: dict, fds: list[int]) -> None:
    """In the forked child: become the command, run it, and exit with its code (never returns)."""
    code = 1
    try:
        group = message["group"]
        with contextlib.suppress(OSError):  # with the process that asked (a launcher), or a group of its own
            os.setpgid(0, group if group else 0)
        for fd, received in enumerate(fds):
            os.dup2(received, fd)
            os.close(received)
        os.chdir(message["cwd"])
        _take_environment(message["env"])
        code = _run_as_main(*message["plan"])
    except BaseException:  # noqa: BLE001 - a failure to start is the command's failure, with its traceback
        import traceback

        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _take_environment(env: dict) -> None:
    """The request's environment, and what the libraries already read from the server's: threads and warnings."""
    import warnings

    import torch

    before = os.environ.get("PYTHONWARNINGS")
    os.environ.clear()
    os.environ.update({**env, **_SET_BY_IMPORTS})
    torch.set_num_threads(int(env.get("OMP_NUM_THREADS") or os.cpu_count() or 1))
    if env.get("PYTHONWARNINGS") and env["PYTHONWARNINGS"] != before:
        for option in env["PYTHONWARNINGS"].split(","):
            warnings._setoption(option)  # noqa: SLF001 - as the interpreter reads -W at start-up
    _take_start_up_flags(env)


def _take_start_up_flags(env: dict) -> None:
    """What the interpreter reads from PYTHONUNBUFFERED and PYTHONFAULTHANDLER at start-up: unbuffered standard
    streams (as with -u) and fault tracebacks on stderr (as with -X faulthandler)."""
    import faulthandler
    import io

    if env.get("PYTHONUNBUFFERED"):
        for fd, name in ((1, "stdout"), (2, "stderr")):
            old = getattr(sys, name)
            raw = io.FileIO(fd, "w", closefd=False)
            new = io.TextIOWrapper(raw, encoding=old.encoding, errors=old.errors, write_through=True)
            setattr(sys, name, new)
            setattr(sys, f"__{name}__", new)
    if env.get("PYTHONFAULTHANDLER") and not faulthandler.is_enabled():
        faulthandler.enable()


def _run_as_main(kind: str, target: str, argv: list[str]) -> int:
    """Run the script or module as ``__main__`` as the interpreter would, with its exit handlers; its exit code."""
    import atexit
    import random
    import runpy
    import threading
    import types

    random.seed()  # fresh entropy, as in a fresh interpreter (a fork shares its parent's state)
    sys.modules["numpy"].random.seed()
    sys.argv = list(argv)
    sys.path[0] = {"path": os.path.dirname(os.path.abspath(target)), "module": os.getcwd(), "code": ""}[kind]
    sys.executable = os.environ["SQUARECHIPO_TEST_WARM_SHIM"]  # what it starts with sys.executable starts warm
    code: int = 0
    try:
        if kind == "path":
            runpy.run_path(target, run_name="__main__")
        elif kind == "module":
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:  # python -c: the code runs in a fresh __main__, named "<string>"
            main = types.ModuleType("__main__")
            sys.modules["__main__"] = main
            exec(compile(target, "<string>", "exec"), main.__dict__)  # noqa: S102 - what python -c does
    except SystemExit as ended:
        if ended.code is None or isinstance(ended.code, int):
            code = ended.code or 0
        else:
            print(ended.code, file=sys.stderr)
            code = 1
    except BaseException:  # noqa: BLE001 - printed as the interpreter prints an uncaught exception
        sys.excepthook(*sys.exc_info())
        code = 1
    threading._shutdown()  # noqa: SLF001 - the interpreter waits for the script's threads before its exit handlers
    atexit._run_exitfuncs()  # noqa: SLF001
    return code


def _write_shim(folder: str, address: str) -> str:
    """The ``python`` a warm child sees as ``sys.executable``: it runs tests/helpers/warm_shim.py, no site."""
    shim = os.path.join(folder, "python")
    script = ROOT / "tests" / "helpers" / "warm_shim.py"
    Path(shim).write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "{script}" "$@"\n')
    os.chmod(shim, 0o755)
    os.environ.update(
        SQUARECHIPO_TEST_WARM=address, SQUARECHIPO_TEST_WARM_SHIM=shim, SQUARECHIPO_TEST_WARM_PYTHON=sys.executable
    )
    return shim


def serve(address: str, owner: int) -> None:
    """Import the libraries, then fork one child per request until the test process that started it is gone."""
    import importlib

    before = dict(os.environ)
    own = _shared(before)
    for name in WARM_IMPORTS:
        importlib.import_module(name)
    for name in _TRL_NAMES:
        getattr(sys.modules["trl"], name)
    # The imports' objects go to the permanent generation before any fork: a child's collections (one per
    # Trainer.train()) then skip them and leave their pages shared (the recipe of the gc module's docs for fork).
    gc.freeze()
    _write_shim(os.path.dirname(address), address)
    # What the imports set (e.g. TorchInductor's cache folder; a fresh interpreter's imports set it too) and the shim.
    global _SET_BY_IMPORTS
    _SET_BY_IMPORTS = {k: v for k, v in os.environ.items() if before.get(k) != v}
    sys.stdout.flush()
    sys.stderr.flush()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(address)
    listener.listen(64)
    Path(address + ".ready").touch()
    children: dict[int, socket.socket] = {}
    wake, woken = os.pipe()  # a child's exit wakes the loop (SIGCHLD writes to the pipe): no polling
    os.set_blocking(woken, False)
    signal.set_wakeup_fd(woken)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    while True:
        ready, _, _ = select.select([listener, wake], [], [], 2.0)
        if wake in ready:
            os.read(wake, 4096)
        if listener in ready:
            with contextlib.suppress(OSError, EOFError, pickle.UnpicklingError):  # a caller that went away
                _accept(listener, own, children, (wake, woken))
        _reap(children)
        if not children and os.getppid() != owner:  # the test process is gone
            shutil.rmtree(os.path.dirname(address), ignore_errors=True)
            return


def _accept(listener: socket.socket, own: tuple, children: dict[int, socket.socket], pipe: tuple[int, int]) -> None:
    connection, _ = listener.accept()
    data, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
    message = pickle.loads(data)
    env = {k: v for k, v in message["env"].items() if k not in _SET_BY_IMPORTS}  # a warm child's children have them
    if _shared(env) != own or len(fds) != 3:
        print(
            "not served; the environment differs in",
            sorted({k for k, _ in set(_shared(env)) ^ set(own)}),
            file=sys.stderr,
        )
        for fd in fds:
            os.close(fd)
        connection.close()  # not served: the caller starts a fresh interpreter
        return
    pid = os.fork()
    if pid == 0:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in pipe:
            os.close(fd)
        listener.close()
        connection.close()
        for other in children.values():
            other.close()
        _child(message, fds)
    for fd in fds:
        os.close(fd)
    connection.send(struct.pack("q", pid))
    children[pid] = connection


def _reap(children: dict[int, socket.socket]) -> None:
    while children:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        connection = children.pop(pid, None)
        if connection is not None:
            with contextlib.suppress(OSError):
                connection.send(struct.pack("q", os.waitstatus_to_exitcode(status)))
            connection.close()


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]))
