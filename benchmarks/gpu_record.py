"""The GPU check's one JSON file, written after every step so that a run cut off still returns what it measured.

Standard library only (``python -I``: no site packages, nothing that could hang on import). Called by
``benchmarks/gpu_check.sh``:

    python -I benchmarks/gpu_record.py OUT.json start MODE             # a new file: the run's mode, machine, start
    python -I benchmarks/gpu_record.py OUT.json step NAME RC T0 T1 LIMIT [--pattern P] [--text FILE] [--attach FILE]

``--text``: the step's last line of output (an import probe's version and seconds), or its last line holding
``--pattern`` (a training job's summary); ``--attach``: a JSON file the step wrote (the trainer benchmark's figures),
embedded whole.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path


def _write(path: Path, record: dict) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(record, indent=2, sort_keys=True), encoding="utf-8")
    os.replace(partial, path)  # a reader never sees half a file


def _last_line(path: str, pattern: str | None = None) -> str | None:
    """The last line of a step's output (the last holding ``pattern``, where one is given and found)."""
    try:
        lines = [line for line in Path(path).read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return None
    matching = [line for line in lines if pattern and pattern in line]
    lines = matching or lines
    return lines[-1][-300:] if lines else None


def _attached(path: str):
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        return {"unreadable": f"{path}: {error}"}


def main(argv: list[str]) -> int:
    path, what = Path(argv[0]), argv[1]
    if what == "start":
        _write(
            path,
            {
                "mode": argv[2],
                "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "machine": {"host": platform.node(), "python": platform.python_version(), "cpus": os.cpu_count()},
                "steps": [],
            },
        )
        return 0
    name, rc, t0, t1, limit = argv[2], int(argv[3]), float(argv[4]), float(argv[5]), float(argv[6])
    step = {
        "name": name,
        "exit_code": rc,
        "seconds": round(t1 - t0, 2),
        "limit_s": limit,
        "outcome": "ok" if rc == 0 else ("timed out" if rc in (124, 137) else ("skipped" if rc == -1 else "failed")),
    }
    options = dict(zip(argv[7::2], argv[8::2]))
    for flag, value in options.items():
        if flag == "--text":
            step["output"] = _last_line(value, options.get("--pattern"))
        elif flag == "--attach":
            step["result"] = _attached(value)
    record = json.loads(path.read_text(encoding="utf-8"))
    record["steps"].append(step)
    record["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    _write(path, record)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
