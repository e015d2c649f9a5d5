"""Benchmark (not a test): seconds per stage of a counted release of N distinct preference rows.

A release drawn from OS entropy runs the copy checks before it draws: the canonical form of every text, the rows'
content hashes, near-copies within the release (MinHash and LSH), the registry's earlier releases of the same rows
(exact and near-copies); then the noise, the ledger bound to the released rows, the staged folder and the registry
entry. Target (issue 64): 100,000 distinct rows in at most 30 s on the 2-core machine. It also prints the ledger's
size and the seconds to seal and sign it and to check it (its signature, and every row against its row set).

The rows are synthetic and distinct: each text draws its words at random from 5,000 made-up words, so no two rows
share more than chance shingles (a public preference set shares more: its prompts repeat). A prompt has 20 words and
each response 50, about the size of the finance rows.

    .venv/bin/python benchmarks/bench_release.py [--rows 10000 50000 100000]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import tempfile
import time
from pathlib import Path

import datasets
import numpy as np


def synthetic_rows(n: int, seed: int = 0) -> datasets.Dataset:
    """``n`` distinct rows of random words (prompt 20 words, responses 50 each)."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    vocabulary = np.array(["".join(rng.choice(letters, rng.integers(3, 9))) for _ in range(5000)])

    def texts(words: int) -> list[str]:
        drawn = vocabulary[rng.integers(0, len(vocabulary), (n, words))]
        return [" ".join(row) + "." for row in drawn]

    return datasets.Dataset.from_dict({"prompt": texts(20), "chosen": texts(50), "rejected": texts(50)})


def _clock() -> tuple[float, float]:
    """(wall, this process's CPU) seconds: on a shared machine the CPU seconds are what the work costs alone."""
    return time.perf_counter(), time.process_time()


def _stage(name: str, started: tuple[float, float], timings: dict[str, tuple[float, float]]) -> tuple[float, float]:
    now = _clock()
    timings[name] = (now[0] - started[0], now[1] - started[1])
    return now


def stages(data: datasets.Dataset) -> dict[str, tuple[float, float]]:
    """The admission steps of a counted release, each timed on its own (the same functions the release calls)."""
    from squarechipo.data.fingerprint import canonical_rows
    from squarechipo.data.near_duplicates import copies, sketch
    from squarechipo.privacy.release.registry import earlier_releases

    timings: dict[str, tuple[float, float]] = {}
    start = _clock()
    rows = canonical_rows(data.with_format("arrow")[:])
    start = _stage("canonical form", start, timings)
    hashes = [hashlib.sha256(row.encode("utf-8")).digest() for row in rows]
    start = _stage("content hashes", start, timings)
    sketched = sketch(rows)
    start = _stage("MinHash signatures and LSH keys", start, timings)
    found = copies(rows, sketched)
    start = _stage("copies within the release", start, timings)
    earlier_releases(hashes, sketched)
    _stage("earlier releases in the registry", start, timings)
    assert not found, f"the synthetic rows hold {len(found)} copies"
    return timings


def release_seconds(data: datasets.Dataset, folder: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of the whole counted release into ``folder``: admit, draw, ledger, stage, register,
    rename."""
    from squarechipo.privacy import LabelPipeline
    from squarechipo.privacy.release.store import release_dataset

    start = _clock()
    release_dataset(data, LabelPipeline(epsilon=1.0), folder)
    timings: dict[str, tuple[float, float]] = {}
    _stage("release", start, timings)
    return timings["release"]


def ledger_figures(released: datasets.Dataset) -> dict[str, float]:
    """The ledger's size, and the seconds to seal (digest + Ed25519 signature) and to check it: its seal alone, and
    every row against its row set (what each reader does)."""
    import json

    from squarechipo.data import metadata
    from squarechipo.data.integrity import seal
    from squarechipo.privacy.ledger.binding import check_rows
    from squarechipo.privacy.ledger.records import PrivacyLedger, _sealed_view

    block = metadata.read_block(released)
    record = json.loads(block)
    started = time.perf_counter()
    seal(record, view=_sealed_view)
    signed = time.perf_counter() - started
    started = time.perf_counter()
    ledger = PrivacyLedger.from_json(block)
    verified = time.perf_counter() - started
    started = time.perf_counter()
    check_rows(ledger, released, "benchmark")
    rows = time.perf_counter() - started
    row_set = sum(len(r["row_set"]) for r in record["releases"])
    return {"ledger_bytes": len(block.encode()), "row_set_bytes": row_set, "sign_s": signed, "check_seal_s": verified,
            "check_rows_s": rows}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[10_000, 50_000, 100_000])
    args = parser.parse_args()
    datasets.disable_progress_bars()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["SQUARECHIPO_RELEASE_REGISTRY"] = str(Path(tmp) / "releases.sqlite")
        os.environ["SQUARECHIPO_SIGNING_KEY"] = str(Path(tmp) / "custodian.pem")
        from squarechipo.data.signing import generate_key_pair
        from squarechipo.privacy.release.registry import init_registry
        from squarechipo.privacy.release.store import load_release

        generate_key_pair(Path(tmp) / "custodian.pem")
        init_registry()
        for n in args.rows:
            data = synthetic_rows(n, seed=n)
            timings = stages(data)
            wall, cpu = release_seconds(data, Path(tmp) / f"release_{n}")
            print(f"{n:,} distinct rows: release {wall:.1f} s wall, {cpu:.1f} s CPU (target: 100,000 in 30 s)")
            for name, (wall, cpu) in timings.items():
                print(f"  {name}: {wall:.2f} s wall, {cpu:.2f} s CPU")
            figures = ledger_figures(load_release(Path(tmp) / f"release_{n}"))
            size, row_set = figures["ledger_bytes"] / 1e6, figures["row_set_bytes"] / 1e6
            print(f"  ledger: {size:.2f} MB ({row_set:.2f} MB of it the row set, 16 bytes a row in base64)")
            print(
                f"  sealing and signing {1e3 * figures['sign_s']:.1f} ms; checking the signature "
                f"{1e3 * figures['check_seal_s']:.1f} ms, every row against the set {figures['check_rows_s']:.2f} s"
            )


if __name__ == "__main__":
    main()
