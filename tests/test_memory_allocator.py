"""glibc keeps the memory a job frees (squarechipo.models.memory): read back from glibc's own counters (mallinfo2) in
a fresh process, through the function and through the two ways a job's process starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from squarechipo.models.memory import ENV, keep_freed_memory

# A fresh process runs SETUP, then mallocs 256 MB and frees it, reading glibc's counters while the block is live and
# after: hblkhd is the memory held in mmap blocks (counted from just before the block), arena the heap's size.
PROBE = """
import ctypes, json
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                               "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
applied = None
{setup}
before = libc.mallinfo2()
block = libc.malloc(256 << 20)
live = libc.mallinfo2()
libc.free(block)
freed = libc.mallinfo2()
print(json.dumps({{"applied": applied, "mmapped_live": live.hblkhd - before.hblkhd, "heap_after_free": freed.arena}}))
"""
MB256 = 256 << 20


def probe(setup: str, **env: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(setup=setup)],
        capture_output=True, text=True, timeout=120, env={**os.environ, **env},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")


def test_kept_memory_serves_a_large_block_from_the_heap_and_keeps_it_after_free():
    default = probe("", **{ENV: "system"})
    assert default["mmapped_live"] >= MB256  # glibc's default: a block this large is an mmap, unmapped when freed
    keep = "from squarechipo.models.memory import keep_freed_memory\napplied = keep_freed_memory()"
    kept = probe(keep)
    assert kept["applied"] is True
    assert kept["mmapped_live"] == 0 and kept["heap_after_free"] >= MB256
    off = probe(keep, **{ENV: "system"})
    assert off["applied"] is False and off["mmapped_live"] >= MB256


@pytest.mark.parametrize(
    "setup",
    [
        # the `squarechipo` program (pyproject's console script)
        "import sys\nsys.argv = ['squarechipo', '--version']\nfrom squarechipo.cli import run\n"
        "try:\n    run()\nexcept SystemExit:\n    pass",
        # a script run as a program (python -m squarechipo.scripts.sft, accelerate launch, torchrun): script_main
        # keeps freed memory before it reads the command line (here a parser that stops there)
        "from squarechipo.scripts._common import script_main\n"
        "def make_parser(prog):\n    raise SystemExit(0)\n"
        "try:\n    script_main(print, make_parser, 'sft')\nexcept SystemExit:\n    pass",
    ],
    ids=["squarechipo", "script"],
)
def test_a_jobs_own_process_keeps_freed_memory_from_its_start(setup):
    assert probe(setup)["mmapped_live"] == 0


def test_an_unknown_setting_is_refused_naming_the_variable(monkeypatch):
    monkeypatch.setenv(ENV, "kept")
    with pytest.raises(ValueError, match=f"{ENV}='kept': use keep .* or system"):
        keep_freed_memory()


def test_a_misspelt_setting_stops_the_command_with_one_line():
    code = "import sys\nsys.argv = ['squarechipo', '--version']\nfrom squarechipo.cli import run\nrun()"
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True, text=True, timeout=120, env={**os.environ, ENV: "off"},
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"squarechipo: error: {ENV}='off': use keep (the default: glibc keeps freed memory) or system."
    ]


def test_the_program_exits_without_walking_its_objects_and_its_outputs_whole(tmp_path):
    """After the job, ``run()`` freezes the collector (the shutdown collections skip the job's objects); what the job
    wrote is whole, and atexit handlers still run."""
    import sqlite3

    registry = tmp_path / "releases.sqlite"
    code = (
        "import atexit, gc, sys\n"
        "atexit.register(lambda: print('frozen', gc.get_freeze_count() > 0))\n"
        "sys.argv = ['squarechipo', 'registry', 'init']\nfrom squarechipo.cli import run\nrun()"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
        env={**os.environ, "SQUARECHIPO_RELEASE_REGISTRY": str(registry)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "frozen True"
    with sqlite3.connect(registry) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert db.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'").fetchone()[0] > 0
