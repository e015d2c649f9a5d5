"""What ``pip install 'squarechipo[judge-server]'`` adds to an installed squarechipo: seconds and megabytes, with pip's
cache warm (the README's "about N s and M MB here"). A new virtual environment gets the package first, then the extra.

    python benchmarks/bench_judge_server_install.py --json FILE    # also write the record to FILE
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _megabytes(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 1e6


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None, help="also write the record to this file")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        venv = Path(folder) / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
        subprocess.run([*pip, "-e", str(ROOT)], check=True)
        site = next((venv / "lib").glob("python*/site-packages"))
        before, started = _megabytes(site), time.perf_counter()
        subprocess.run([*pip, "-e", f"{ROOT}[judge-server]"], check=True)
        seconds, added = time.perf_counter() - started, _megabytes(site) - before
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    record = {
        "what": "pip install -e .[judge-server] over an installed squarechipo, with the pip cache warm",
        "date": datetime.date.today().isoformat(),
        "commit": commit.stdout.strip(),
        "seconds": round(seconds, 1),
        "added_mb": round(added),
    }
    print(f"the judge-server extra: {record['seconds']} s, {record['added_mb']} MB added")
    if args.json:
        Path(args.json).write_text(json.dumps(record, indent=2) + "\n")
    return record


if __name__ == "__main__":
    main()
