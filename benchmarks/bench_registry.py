"""Benchmark (not a test): the registry of releases at team scale, in SQLite and in PostgreSQL, side by side.

For each engine: enter ``--earlier`` releases of ``--rows`` rows each, then time entering one more release of that
size (its units, MinHash signatures and band keys, in the deciding transaction) and checking ``--rows`` new rows
against everything entered (by unit and as near-copies: the look-up a release makes before it draws). The rows are
random keys and signatures (their band keys computed as a release computes them), so the figures are the registry's
own, without the text processing of a release (benchmarks/bench_release.py times that).

PostgreSQL runs in a temporary folder with a Unix socket (as the ``postgres`` user when run as root), as the tests'
server does; ``--url`` names a server of your own instead.

    .venv/bin/python benchmarks/bench_registry.py [--rows 100000] [--earlier 10] [--engines sqlite postgresql]
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def _release(n: int, seed: int):
    """(units, sketch) of ``n`` random distinct rows."""
    from squarechipo.data.near_duplicates import NUM_PERM, Sketch, band_key_table

    rng = np.random.default_rng(seed)
    units = [hashlib.sha256(b"%d:%d" % (seed, i)).digest() for i in range(n)]
    signatures = rng.integers(0, 2**32, size=(n, NUM_PERM), dtype=np.uint64).astype(np.uint32)
    return units, Sketch(signatures, band_key_table(signatures))


def _postgres():
    """The tests' temporary PostgreSQL server (tests/helpers/postgres.py of this checkout), loaded from its file."""
    path = Path(__file__).resolve().parents[1] / "tests" / "helpers" / "postgres.py"
    spec = importlib.util.spec_from_file_location("squarechipo_test_postgres", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks itself up there
    spec.loader.exec_module(module)
    return module


def run(target: str, rows: int, earlier: int) -> dict[str, float]:
    """Seconds to enter the earlier releases (in all), to enter one more, and to check new rows against them all."""
    from squarechipo.privacy.release.registry import EarlierReleases, earlier_releases, init_registry, register_release

    os.environ["SQUARECHIPO_RELEASE_REGISTRY"] = target
    init_registry(target)
    started = time.perf_counter()
    for k in range(earlier):
        units, marks = _release(rows, seed=k)
        register_release(f"earlier-{k}", units, marks, 1.0, "2026-11-29", expected=EarlierReleases(0, 0.0, ()))
    filled = time.perf_counter() - started
    units, marks = _release(rows, seed=10_000)
    started = time.perf_counter()
    found = earlier_releases(units, marks)
    checked = time.perf_counter() - started
    assert found.rows == 0, "random rows matched a release"
    started = time.perf_counter()
    register_release("one-more", units, marks, 1.0, "2026-11-29", expected=found)
    entered = time.perf_counter() - started
    return {"fill": filled, "enter": entered, "check": checked, **_budget_check(units, marks, rows)}


def _budget_check(units, marks, rows: int) -> dict[str, float]:
    """Seconds of the budget check for a re-release of the rows just entered (each has spent ε 1): without a budget
    (the budgets read, none set) and with one, beside the look-up the release makes anyway."""
    from squarechipo.privacy.release.budget import BudgetAsk, check_budget, set_budget
    from squarechipo.privacy.release.registry import earlier_releases

    started = time.perf_counter()
    again = earlier_releases(units, marks)
    lookup = time.perf_counter() - started
    ask = BudgetAsk(None, None, ("prompt", "chosen", "rejected"), rows, 1.0)
    started = time.perf_counter()
    assert check_budget(ask, again) is None
    without = time.perf_counter() - started
    set_budget(1000.0)
    started = time.perf_counter()
    assert check_budget(ask, again)["remaining"] == 998.0
    return {"lookup": lookup, "budget_none": without, "budget": time.perf_counter() - started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--earlier", type=int, default=10)
    parser.add_argument("--engines", nargs="+", default=["sqlite", "postgresql"], choices=["sqlite", "postgresql"])
    parser.add_argument("--url", default=None, help="a PostgreSQL database of your own (default: a temporary server)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        from squarechipo.trust.keys import generate_key_pair

        os.environ["SQUARECHIPO_SIGNING_KEY"] = str(Path(tmp) / "custodian.pem")  # signs the budget
        os.environ.pop("SQUARECHIPO_TRUSTED_KEYS", None)
        generate_key_pair(Path(tmp) / "custodian.pem")
        for engine in args.engines:
            server = None
            if engine == "sqlite":
                target = str(Path(tmp) / "releases.sqlite")
            elif args.url:
                target = args.url
            else:
                server = _postgres().start_server()
                target = server.database()
            try:
                figures = run(target, args.rows, args.earlier)
            finally:
                if server is not None:
                    server.close()
            print(
                f"{engine}: {args.earlier} earlier releases of {args.rows:,} rows entered in {figures['fill']:.1f} s; "
                f"one more entered in {figures['enter']:.1f} s; {args.rows:,} new rows checked against all "
                f"{args.earlier * args.rows:,} in {figures['check']:.1f} s"
            )
            print(
                f"{engine}: the budget check of a re-release of {args.rows:,} rows: {figures['budget']:.3f} s with a "
                f"budget, {figures['budget_none']:.3f} s with none set, beside the look-up of their earlier releases "
                f"({figures['lookup']:.1f} s)"
            )


if __name__ == "__main__":
    main()
