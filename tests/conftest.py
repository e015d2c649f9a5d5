"""Shared helpers. Statistical tests use seeded generators and tolerances of a few standard errors."""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import tempfile
import uuid

import pytest

#: Number of standard errors a Monte Carlo estimate may deviate (two-sided p ≈ 6e-5 under normality).
Z_TOLERANCE = 4.0


def binomial_se(p: float, n: int) -> float:
    """Standard error of a proportion estimated from n Bernoulli(p) draws."""
    return math.sqrt(p * (1.0 - p) / n)


# --------------------------------------------------------------------------- models and data
# Trainer tests use a tiny randomly initialised Llama with the real SmolLM2 tokenizer (the point
# is the trainer, not the model); a few integration tests use the embedded model itself.

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Tests never reach the Hub (nothing can be downloaded here): a lookup that would otherwise wait for a network timeout
# fails at once, in the tests' processes and in every process they start.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Under pytest-xdist every worker, and every process a test starts, gets one thread: two workers then use the two
# cores without oversubscribing them (two threads each made compute-bound tests several times slower).
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["MKL_NUM_THREADS"] = "1"
# This machine's registry of releases (squarechipo.privacy.registry) refuses a second release of the same rows. The
# tests release the same finance rows in many tests, so each test, and each test session (module fixtures, the
# processes tests start), gets a registry of its own instead of the user's.
# A registry is started explicitly (squarechipo.privacy.registry.init_registry): a missing one stops a release.
os.environ["SQUARECHIPO_RELEASE_REGISTRY"] = os.path.join(tempfile.mkdtemp(prefix="squarechipo-registry-"), "r.sqlite")
# Likewise the store of privacy records and weight sketches (squarechipo.privacy.record), which the lineage guard
# matches models to: a session never sees the records of earlier sessions or of the user's own runs.
os.environ["SQUARECHIPO_RECORD_STORE"] = os.path.join(tempfile.mkdtemp(prefix="squarechipo-records-"), "r.sqlite")


def launch(command: list[str], *, cwd, env: dict | None = None, timeout: float = 300.0) -> subprocess.CompletedProcess:
    """Run a command (e.g. a launcher and its ranks) and capture its output.

    Past ``timeout`` the test fails with the thread stacks of each process the command started (SIGABRT with
    PYTHONFAULTHANDLER set), so a hang says where it hung, and none of them is left running."""
    tag = uuid.uuid4().hex  # finds every process of this launch, even one in a session of its own or orphaned
    env = {**(os.environ if env is None else env), "PYTHONFAULTHANDLER": "1", "SQUARECHIPO_TEST_LAUNCH": tag}
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


def _stacks_then_kill(process: subprocess.Popen, tag: str) -> tuple[str, str]:
    import psutil

    for sig in (signal.SIGABRT, signal.SIGKILL):  # faulthandler prints the stacks on SIGABRT, then the process ends
        family = _launched(tag)
        for member in family:
            with contextlib.suppress(psutil.Error):
                member.send_signal(sig)
        psutil.wait_procs(family, timeout=30)
    try:
        return process.communicate(timeout=30)
    except subprocess.TimeoutExpired as error:  # something outside the launch holds its pipes: give what came
        process.kill()
        return _text(error.stdout), _text(error.stderr)


def _text(output) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


def pytest_collection_modifyitems(config, items):
    """Every ``integration`` test (it starts a process or server, or loads the embedded 135M model) is ``slow``: the
    quick tier, ``-m "not slow"``, runs neither. The slow tests run first: xdist hands out tests in this order, so
    the short ones fill both workers at the end instead of one long test running on after the other worker is done.
    """
    for item in items:
        if item.get_closest_marker("integration") is not None and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: file order otherwise


@pytest.fixture(scope="session", autouse=True)
def _session_release_registry():
    from squarechipo.privacy.registry import init_registry

    init_registry(os.environ["SQUARECHIPO_RELEASE_REGISTRY"])


@pytest.fixture(autouse=True)
def _own_release_registry(monkeypatch, tmp_path_factory):
    from squarechipo.privacy.registry import init_registry

    path = tmp_path_factory.mktemp("registry") / "releases.sqlite"
    monkeypatch.setenv("SQUARECHIPO_RELEASE_REGISTRY", str(path))
    init_registry(path)


@pytest.fixture(scope="session")
def embedded_path():
    from squarechipo.models import embedded_model_path

    return embedded_model_path()


@pytest.fixture(scope="session")
def tokenizer(embedded_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(embedded_path)


def tiny_llama_config(tokenizer, **overrides):
    """The config of the tiny test models: 2 layers, 64 wide, the real 49,152-token vocabulary."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        **overrides,
    )


def make_tiny_model(tokenizer, seed: int = 0, dtype=None):
    """A 2-layer, 64-wide Llama over the real 49,152-token vocabulary."""
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    model = LlamaForCausalLM(tiny_llama_config(tokenizer))
    return model.to(dtype) if dtype is not None else model


def make_tiny_classifier(tokenizer, seed: int = 0):
    """The tiny Llama with a one-output sequence-classification head (reward / preference models)."""
    import torch
    from transformers import LlamaForSequenceClassification

    torch.manual_seed(seed)
    return LlamaForSequenceClassification(tiny_llama_config(tokenizer, num_labels=1))


@pytest.fixture
def tiny_model_factory(tokenizer):
    return lambda seed=0, dtype=None: make_tiny_model(tokenizer, seed, dtype)


@pytest.fixture(scope="session")
def finance_splits():
    from squarechipo.data.finance import build_datasets

    return build_datasets(n_rows=280, seed=0, sft_rows=40, judge_rows=40)


#: Label-free metadata of the test data (the finance generator's id and category); declared public in releases.
PUBLIC_METADATA = ("id", "category", "row_id")


def release_rows(dataset, mechanism, **kwargs):
    """``release_dataset`` with the data's label-free metadata declared public (the generator's id and category)."""
    from squarechipo.privacy import release_dataset

    public = [c for c in PUBLIC_METADATA if c in dataset.column_names]
    return release_dataset(dataset, mechanism, public_columns=public, **kwargs)
