"""Run one of the package's scripts (:mod:`squarechipo.scripts`) on a YAML config, in its own process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

__all__ = ["run_script"]


def run_script(script: str, config: dict[str, Any], folder: Path, python: str | None = None) -> None:
    """Write ``config`` to ``folder/<script>.yaml`` and run ``python -m squarechipo.scripts.<script>`` on it; its
    output goes to ``folder/<script>.log``, whose end is raised on failure. The installed package runs, so no
    checkout is needed."""
    python = python or sys.executable  # read now: whatever interpreter this process runs as
    path = folder / f"{script}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    log = folder / f"{script}.log"
    with open(log, "w") as handle:
        done = subprocess.run(
            [python, "-m", f"squarechipo.scripts.{script}", "--config", str(path)],
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
    if done.returncode != 0:
        tail = "".join(log.read_text(errors="replace").splitlines(keepends=True)[-30:])
        raise RuntimeError(f"squarechipo.scripts.{script} failed (exit {done.returncode}); the end of {log}:\n{tail}")
