"""The CPU memory allocator of a job's own process: glibc keeps the memory it frees.

A training step on a CPU allocates and frees buffers of hundreds of MB (activations, logits, gradients). glibc
serves each block over its mmap threshold (at most 32 MB) with a fresh ``mmap`` and hands it back to the kernel when
it is freed, so the next step faults the same pages in again and the kernel zeroes each one. Measured on the main
job's steps (2 CPU cores, docs/benchmarks.md): the 16-step alignment took 132.5 s of training with 23.6 M minor
page faults and 84 s of kernel time, and 85.8 s with 2.0 M and 19 s once glibc kept its memory; the SFT step took
167.6 s and 135.2 s, with bit-identical weights. Nothing a job computes changes, only where its memory comes from;
the process keeps its peak memory until it exits.

:func:`keep_freed_memory` tells glibc (``mallopt``) to serve every size from its heap and never to trim it. The
``squarechipo`` command and every script run as a program call it first; ``SQUARECHIPO_MALLOC=system`` keeps
glibc's defaults.

:func:`skip_exit_collection` is the other end of a job's process: the interpreter's shutdown collections would walk
every object the job made.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

__all__ = ["ENV", "keep_freed_memory", "skip_exit_collection"]

#: ``keep`` (the default) or ``system`` (glibc's own settings).
ENV = "SQUARECHIPO_MALLOC"
# glibc's malloc.h parameters.
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_MAX = -1, -2, -4
_SETTINGS = (
    (_M_MMAP_MAX, 0),  # no block from mmap: every size from the heap, which freeing does not give back
    (_M_TRIM_THRESHOLD, -1),  # -1: never trim the heap's top (mallopt(3))
    (_M_TOP_PAD, 512 << 20),  # grow the heap 512 MB at a time
)


def keep_freed_memory() -> bool:
    """Tell glibc to keep what this process frees (see the module's docstring). Whether it was applied: False under
    ``SQUARECHIPO_MALLOC=system`` or off glibc."""
    choice = os.environ.get(ENV, "keep")
    if choice not in ("keep", "system"):
        raise ValueError(f"{ENV}={choice!r}: use keep (the default: glibc keeps freed memory) or system.")
    if choice == "system" or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return False
    if not hasattr(libc, "gnu_get_libc_version"):  # glibc only: musl's mallopt takes other parameters
        return False
    return all(libc.mallopt(parameter, value) == 1 for parameter, value in _SETTINGS)


def skip_exit_collection() -> None:
    """Move every object the process holds into the collector's permanent generation (``gc.freeze``), so that the
    collections of the interpreter's shutdown do not walk them: a job that loaded torch, transformers and a model
    holds millions of tracked objects, and walking them took about 1.2 s of each command's exit here (0.2 s after).
    Objects are still released by reference counting and module teardown, and ``atexit`` handlers still run; only
    reference cycles made before the call are left to the operating system. Called once the job has written and
    closed its outputs."""
    import gc

    gc.freeze()
