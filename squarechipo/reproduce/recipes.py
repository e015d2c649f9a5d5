"""Run a recipe of a squarechipo checkout (``recipes/*.py``) on a YAML config, in its own process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

__all__ = ["run_recipe"]


def run_recipe(root: Path, script: str, config: dict[str, Any], folder: Path, python: str = sys.executable) -> None:
    """Write ``config`` to ``folder/<script>.yaml`` and run the script on it from ``root``; its output goes to
    ``folder/<script>.log``, whose end is raised on failure."""
    path = folder / f"{Path(script).stem}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    log = folder / f"{Path(script).stem}.log"
    with open(log, "w") as handle:
        done = subprocess.run(
            [python, script, "--config", str(path)], cwd=root, stdout=handle, stderr=subprocess.STDOUT
        )
    if done.returncode != 0:
        tail = "".join(log.read_text(errors="replace").splitlines(keepends=True)[-30:])
        raise RuntimeError(f"{script} failed (exit {done.returncode}); the end of {log}:\n{tail}")
