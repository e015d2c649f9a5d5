"""Session settings and fixtures. Helpers live in tests/helpers/ (imported from there, never from here)."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import pytest

from tests.helpers import session_tmp as _session_tmp
from tests.helpers.models import make_tiny_model

# --------------------------------------------------------------------------- models and data
# Trainer tests use a tiny randomly initialised Llama with the real SmolLM2 tokenizer (the point
# is the trainer, not the model); a few integration tests use the embedded model itself.

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Tests never reach the Hub (nothing can be downloaded here): a lookup that would otherwise wait for a network timeout
# fails at once, in the tests' processes and in every process they start.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")  # as the launch tests set it: their commands then start warm
# Under pytest-xdist every worker, and every process a test starts, gets one thread: two workers then use the two
# cores without oversubscribing them (two threads each made compute-bound tests several times slower).
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["MKL_NUM_THREADS"] = "1"
# Everything a test session writes to temporary folders (its registries and keys below, pytest's tmp_path, the servers
# and processes tests start, which inherit TMPDIR) lies in one folder of the session's own, removed when the session
# ends: runs of the suite left gigabytes of PostgreSQL data folders and registries behind, until a later install ran
# out of disk. A folder left by a session that was killed is removed by the next (its process is gone).
_session_tmp.sweep(tempfile.gettempdir())
_SESSION_TMP = _session_tmp.make(tempfile.gettempdir())
os.environ["TMPDIR"] = tempfile.tempdir = _SESSION_TMP
atexit.register(shutil.rmtree, _SESSION_TMP, True)
# This machine's registry of releases (squarechipo.privacy.release.registry) refuses a second release of the same rows.
# The tests release the same finance rows in many tests, so each test, and each test session (module fixtures, the
# processes tests start), gets a registry of its own instead of the user's.
# A registry is started explicitly (squarechipo.privacy.release.registry.init_registry): a missing one stops a release.
os.environ["SQUARECHIPO_RELEASE_REGISTRY"] = os.path.join(tempfile.mkdtemp(prefix="squarechipo-registry-"), "r.sqlite")
# Likewise the store of privacy records and weight sketches (squarechipo.privacy.provenance.record), which the lineage
# guard matches models to: a session never sees the records of earlier sessions or of the user's own runs.
os.environ["SQUARECHIPO_RECORD_STORE"] = os.path.join(tempfile.mkdtemp(prefix="squarechipo-records-"), "r.sqlite")
# Likewise the key that signs releases and model records (squarechipo.trust.keys): one generated for the session,
# never the machine's own (~/.squarechipo), and no trusted-keys list (one person holds both roles, as on a laptop).
os.environ["SQUARECHIPO_SIGNING_KEY"] = os.path.join(tempfile.mkdtemp(prefix="squarechipo-key-"), "signing.pem")
os.environ.pop("SQUARECHIPO_TRUSTED_KEYS", None)
# Every process a test starts sees a machine folder of the session's own (tests/helpers/machine/sitecustomize.py), so
# a command run without the variables above never reads or writes the account's ~/.squarechipo.
os.environ["SQUARECHIPO_TEST_MACHINE_DIR"] = os.path.join(
    tempfile.mkdtemp(prefix="squarechipo-machine-"), ".squarechipo"
)
_SHIM = os.path.join(os.path.dirname(__file__), "helpers", "machine")
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (_SHIM, os.environ.get("PYTHONPATH")) if p)
os.environ.pop("SQUARECHIPO_LEDGER_KEY", None)


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
def _frozen_imports():
    """The heavy libraries are imported once per test process, then frozen out of the garbage collector.

    Every ``Trainer.train()`` runs a full collection (Accelerate's ``free_memory``), and a worker that has imported
    torch, transformers and TRL holds about 450,000 tracked objects: 0.3-0.9 s a collection here, 9 s a worker in
    tests/test_trainer.py alone. Module-level objects are never garbage, so ``gc.freeze`` moves them to the permanent
    generation and a collection scans only what tests create (the Python docs' recipe for long-lived objects)."""
    import gc

    import accelerate  # noqa: F401
    import datasets  # noqa: F401
    import peft  # noqa: F401
    import torch  # noqa: F401
    import transformers  # noqa: F401
    import trl  # noqa: F401

    gc.freeze()


@pytest.fixture(scope="session", autouse=True)
def _session_release_registry():
    from squarechipo.privacy.release.registry import init_registry
    from squarechipo.trust.keys import generate_key_pair

    generate_key_pair(os.environ["SQUARECHIPO_SIGNING_KEY"])
    init_registry(os.environ["SQUARECHIPO_RELEASE_REGISTRY"])


@pytest.fixture(autouse=True)
def _own_machine_folder(monkeypatch, tmp_path_factory):
    """squarechipo.trust.machine.machine_dir (the machine's registry, record store and key) is a folder of the test's
    own: a test that unsets a variable above never reads or writes the user's ~/.squarechipo."""
    folder = tmp_path_factory.mktemp("machine") / ".squarechipo"
    monkeypatch.setattr("squarechipo.trust.machine.machine_dir", lambda: folder)


@pytest.fixture(autouse=True)
def _own_release_registry(monkeypatch, tmp_path_factory):
    from squarechipo.privacy.release.registry import init_registry

    path = tmp_path_factory.mktemp("registry") / "releases.sqlite"
    monkeypatch.setenv("SQUARECHIPO_RELEASE_REGISTRY", str(path))
    init_registry(path)


@pytest.fixture(autouse=True)
def _warm_interpreter(request, monkeypatch):
    """A slow test's Python processes (its commands, the jobs and ranks they start) start from a warm interpreter
    (tests/helpers/warm.py): about 10-20 s of imports less for each here. The wheel test builds and runs the installed
    package with interpreters of its own."""
    if request.node.get_closest_marker("slow") is not None and request.node.module.__name__ != "tests.test_wheel":
        from tests.helpers import warm

        warm.use(monkeypatch)


@pytest.fixture(scope="session")
def embedded_path():
    from squarechipo.models import embedded_model_path

    return embedded_model_path()


@pytest.fixture(scope="session")
def tokenizer(embedded_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(embedded_path)


@pytest.fixture
def tiny_model_factory(tokenizer):
    return lambda seed=0, dtype=None: make_tiny_model(tokenizer, seed, dtype)


@pytest.fixture(scope="session")
def finance_splits():
    from squarechipo.data.finance import build_datasets

    return build_datasets(n_rows=280, seed=0, sft_rows=40, judge_rows=40)


@pytest.fixture(scope="session")
def postgres():
    """A real PostgreSQL server in a temporary folder (tests/helpers/postgres.py), one per test process."""
    from tests.helpers import postgres as helper

    why = helper.available()
    if why:
        pytest.skip(why)
    server = helper.start_server()
    yield server
    server.close("immediate")
