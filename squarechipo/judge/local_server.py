"""A local OpenAI-compatible judge server for a model on disk (the embedded SmolLM2 by default), offline.

Two back-ends, both real ``/v1/chat/completions`` servers that :class:`OpenAICompatibleJudge` talks to:

- ``transformers``: ``transformers serve`` (transformers 5.x, ``pip install 'squarechipo[judge-server]'``: pure
  Python, installs in seconds, nothing compiles). It serves the safetensors folder and answers greedy
  verdicts; it does not return ``logprobs``.
- ``llama.cpp``: ``python -m llama_cpp.server`` from llama-cpp-python, serving the model's GGUF. It returns
  ``top_logprobs`` (for ``--judge-logprobs``), but installing it compiles llama.cpp, about 5–9 minutes on 2 CPU
  cores (``bash scripts/install_llama_cpp.sh`` builds the wheel once and caches it).

``auto`` picks llama.cpp where it is installed (it serves log-probabilities), else transformers.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx

from squarechipo.models.embedded import EMBEDDED_MODEL_ALIASES, embedded_gguf_path, resolve_model_path

__all__ = ["BACKENDS", "LocalServer", "available_backends", "local_judge_server"]

BACKENDS = ("transformers", "llama.cpp")
#: What each back-end needs, for the error that names the missing piece.
_INSTALL = {
    "transformers": "pip install 'squarechipo[judge-server]' (transformers serve: fastapi, uvicorn, openai)",
    "llama.cpp": "bash scripts/install_llama_cpp.sh (compiles llama.cpp once, about 5-9 minutes on 2 cores)",
}


@dataclass(frozen=True)
class LocalServer:
    """A running server: its base URL (ending in ``/v1``), the model name requests must carry, its back-end."""

    base_url: str
    model: str
    backend: str

    @property
    def serves_logprobs(self) -> bool:
        return self.backend == "llama.cpp"


def available_backends() -> list[str]:
    """The back-ends installed here, llama.cpp first (it also serves log-probabilities)."""
    found = []
    if importlib.util.find_spec("llama_cpp") is not None:
        found.append("llama.cpp")
    if all(importlib.util.find_spec(m) is not None for m in ("fastapi", "uvicorn", "openai")):
        found.append("transformers")
    return found


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _command(backend: str, model: str, port: int, threads: int) -> tuple[list[str], str]:
    """The server's command line and the model name its requests must carry."""
    if backend == "transformers":
        path = resolve_model_path(model)
        serve = [sys.executable, "-m", "transformers.cli.transformers", "serve", str(path)]
        return [*serve, "--host", "127.0.0.1", "--port", str(port), "--device", "cpu"], str(path)
    if model not in EMBEDDED_MODEL_ALIASES and not str(model).endswith(".gguf"):
        raise ValueError(f"the llama.cpp back-end serves a GGUF file: model={model!r} is neither 'embedded' nor one")
    gguf = embedded_gguf_path() if model in EMBEDDED_MODEL_ALIASES else model
    options = ["--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048", "--n_threads", str(threads)]
    return [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", "local", *options], (
        "local"
    )


def _wait_ready(process: subprocess.Popen, base_url: str, timeout: float, log) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log.seek(0)
            tail = log.read().decode(errors="replace")[-3000:]
            raise RuntimeError(f"the judge server exited with code {process.returncode} before it was ready:\n{tail}")
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{base_url}/models", timeout=2).status_code == 200:
                return
        time.sleep(0.3)
    raise RuntimeError(f"the judge server at {base_url} was not ready within {timeout:.0f} s")


@contextlib.contextmanager
def local_judge_server(
    backend: str = "auto", model: str = "embedded", threads: int = 2, timeout: float = 180.0
) -> Iterator[LocalServer]:
    """Start a local OpenAI-compatible server for ``model``, wait until it answers, and stop it on exit."""
    installed = available_backends()
    if backend == "auto":
        if not installed:
            raise RuntimeError(f"no judge server is installed: {_INSTALL['transformers']}, or {_INSTALL['llama.cpp']}")
        backend = installed[0]
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS} or 'auto', not {backend!r}")
    if backend not in installed:
        raise RuntimeError(f"the {backend} judge server is not installed: {_INSTALL[backend]}")
    port = _free_port()
    command, name = _command(backend, model, port, threads)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_UPDATE_CHECK": "1", "OMP_NUM_THREADS": str(threads)}
    log = tempfile.TemporaryFile()  # the server's own words, for an error if it stops before it is ready
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=log)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        _wait_ready(process, base_url, timeout, log)
        yield LocalServer(base_url, name, backend)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
