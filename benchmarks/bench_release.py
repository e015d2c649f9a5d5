"""Benchmark (not a test): seconds per stage of a counted release of N distinct preference rows.

A release drawn from OS entropy runs the copy checks before it draws: the canonical form of every text, the rows'
content hashes, near-copies within the release (MinHash and LSH), the registry's earlier releases of the same rows
(exact and near-copies); then the noise, the ledger bound to the released rows, the staged folder and the registry
entry. Target (issue 64): 100,000 distinct rows in at most 30 s on the 2-core machine. It also prints the ledger's
size and the seconds to seal and sign it and to check it (its signature, and every row against its row set).

The rows are synthetic and distinct: each text draws its words at random from 5,000 made-up words, so no two rows
share more than chance shingles (a public preference set shares more: its prompts repeat). A prompt has 20 words and
each response 50, about the size of the finance rows. Targets (issue 89): 1,000,000 rows in 120 s and 4 GB of peak
resident memory, 100,000 in 20 s. First it compares MinHash implementations on rows with planted near-copies.

    .venv/bin/python benchmarks/bench_release.py [--rows 10000 50000 100000] [--compare-minhash 20000]
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


def planted_rows(n: int, copies: int = 200, seed: int = 0) -> tuple[list[str], set[tuple[int, int]]]:
    """``n`` distinct canonical rows with ``copies`` near-copies planted at the end (a word added, a word changed, a
    sentence repeated: each keeps Jaccard ≥ 0.8 of its source's 3-word shingles); (rows, the planted pairs)."""
    from squarechipo.data.fingerprint import canonical_rows

    data = synthetic_rows(n, seed=seed)
    rows = canonical_rows(data.with_format("arrow")[:])
    rng = np.random.default_rng(seed + 1)
    planted = set()
    for k, source in enumerate(rng.choice(n, copies, replace=False).tolist()):
        words = rows[source].split()
        edit = [[*words, "extra"], [*words[:40], "changed", *words[41:]], [*words, *words[:20]]][k % 3]
        planted.add((source, len(rows)))
        rows.append(" ".join(edit))
    return rows, planted


def compare_minhash(n: int) -> list[str]:
    """Signatures per second and the planted near-copies found, for the release's MinHash (its current and legacy
    shingle hash) and for the libraries made for the job: ``datasketch`` 2 (``MinHash.bulk``, Python) and ``rensa``
    (Rust; its own hash, so its signatures are compared through the same LSH bands and exact confirmation)."""
    from squarechipo.data.near_duplicates import LEGACY_SCHEME, SCHEME, Sketch, band_key_table, copies, shingles
    from squarechipo.data.near_duplicates import signatures as ours

    rows, planted = planted_rows(n)

    def found(marks: np.ndarray) -> str:
        marks = np.asarray(marks, dtype=np.uint32)
        pairs = {(c[0], c[1]) for c in copies(rows, Sketch(marks, band_key_table(marks)))}
        return f"{len(pairs & planted)} of {len(planted)} planted near-copies found, {len(pairs - planted)} others"

    def datasketch_marks() -> np.ndarray:
        from datasketch import MinHash

        return np.stack([m.hashvalues for m in MinHash.bulk([shingles(r) for r in rows], num_perm=128, seed=1)])

    def rensa_marks() -> np.ndarray:
        from rensa import RMinHash

        out = []
        for row in rows:
            sketch = RMinHash(num_perm=128, seed=1)
            sketch.update([s.decode("utf-8") for s in shingles(row)])
            out.append(sketch.digest())
        return np.array(out, dtype=np.uint64).astype(np.uint32)

    contenders = [
        (f"squarechipo, {SCHEME} (numpy over Arrow)", lambda: ours(rows, SCHEME)),
        (f"squarechipo, {LEGACY_SCHEME} (SHA-1 per shingle, datasketch's values)", lambda: ours(rows, LEGACY_SCHEME)),
        ("datasketch 2, MinHash.bulk", datasketch_marks),
        ("rensa, RMinHash (Rust)", rensa_marks),
    ]
    lines = [f"MinHash signatures of {len(rows):,} rows (120 words each), one core:"]
    for name, make in contenders:
        try:
            started = time.process_time()
            marks = make()
            seconds = time.process_time() - started
        except ImportError as error:
            lines.append(f"  {name}: not installed ({error.name})")
            continue
        lines.append(f"  {name}: {seconds:.2f} s CPU ({len(rows) / seconds:,.0f} rows/s); {found(marks)}")
    return lines


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
    from squarechipo.privacy.release.release_dataset import release_dataset

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
    from squarechipo.privacy.ledger.binding import check_rows
    from squarechipo.privacy.ledger.ledger import PrivacyLedger, _sealed_view
    from squarechipo.trust.seals import seal

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


def _make(n: int, folder: Path) -> None:
    """The worker that writes ``n`` synthetic rows to ``folder`` (``save_to_disk``), in a process of its own: the
    release's peak memory is measured without the generator's."""
    synthetic_rows(n, seed=n).save_to_disk(str(folder))


def _release_worker(rows: Path, out: Path, with_stages: bool) -> dict:
    """The release of the rows saved at ``rows`` (read from their Arrow files, as a user's saved dataset is), in a
    process of its own: wall and CPU seconds, the peak resident memory (``getrusage``), the ledger's figures."""
    import json
    import resource

    from squarechipo.privacy.release.saved import load_release

    data = datasets.load_from_disk(str(rows))
    timings = stages(data) if with_stages else {}
    wall, cpu = release_seconds(data, out)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    figures = ledger_figures(load_release(out))
    return json.loads(json.dumps({"wall": wall, "cpu": cpu, "peak": peak, "stages": timings, **figures}))


def _worker(argv: list[str]) -> None:
    import json

    datasets.disable_progress_bars()
    if argv[0] == "make":
        _make(int(argv[1]), Path(argv[2]))
        return
    print("BENCH " + json.dumps(_release_worker(Path(argv[1]), Path(argv[2]), argv[3] == "stages")))


def _run(args: list[str], env: dict) -> dict | None:
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, __file__, "--worker", *args], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-3:])
        raise SystemExit(f"the {args[0]} worker failed (exit {done.returncode}; killed for memory if -9):\n{tail}")
    lines = [line for line in done.stdout.splitlines() if line.startswith("BENCH ")]
    return json.loads(lines[-1][6:]) if lines else None


def main() -> None:
    import sys

    if sys.argv[1:2] == ["--worker"]:
        _worker(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[10_000, 50_000, 100_000])
    parser.add_argument(
        "--stages-up-to", type=int, default=100_000,
        help="time each admission step on its own (again, before the release) for sizes up to this",
    )  # fmt: skip
    parser.add_argument(
        "--compare-minhash", type=int, default=20_000, metavar="N",
        help="first compare MinHash implementations on N rows with planted near-copies (0: skip)",
    )  # fmt: skip
    args = parser.parse_args()
    datasets.disable_progress_bars()
    if args.compare_minhash:
        print("\n".join(compare_minhash(args.compare_minhash)), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "SQUARECHIPO_SIGNING_KEY": str(Path(tmp) / "custodian.pem")}
        from squarechipo.privacy.release.registry import init_registry
        from squarechipo.trust.keys import generate_key_pair

        generate_key_pair(Path(tmp) / "custodian.pem")
        peaks = []
        for n in args.rows:
            env["SQUARECHIPO_RELEASE_REGISTRY"] = str(Path(tmp) / f"releases_{n}.sqlite")  # each size its own
            init_registry(env["SQUARECHIPO_RELEASE_REGISTRY"])
            _run(["make", str(n), str(Path(tmp) / f"rows_{n}")], env)
            with_stages = n <= args.stages_up_to
            found = _run(["release", str(Path(tmp) / f"rows_{n}"), str(Path(tmp) / f"release_{n}"),
                          "stages" if with_stages else "whole"], env)  # fmt: skip
            peaks.append((n, found["peak"], found["wall"]))
            print(
                f"{n:,} distinct rows: release {found['wall']:.1f} s wall, {found['cpu']:.1f} s CPU, peak resident "
                f"memory {found['peak'] / 1e9:.2f} GB (targets: 100,000 in 20 s; 1,000,000 in 120 s and 4 GB)"
            )
            for name, (wall, cpu) in found["stages"].items():
                print(f"  {name}: {wall:.2f} s wall, {cpu:.2f} s CPU")
            if found.get("ledger_bytes"):
                size, row_set = found["ledger_bytes"] / 1e6, found["row_set_bytes"] / 1e6
                print(f"  ledger: {size:.2f} MB ({row_set:.2f} MB of it the row set, 16 bytes a row in base64)")
                print(
                    f"  sealing and signing {1e3 * found['sign_s']:.1f} ms; checking the signature "
                    f"{1e3 * found['check_seal_s']:.1f} ms, every row against the set {found['check_rows_s']:.2f} s"
                )
        if len(peaks) > 1:
            slope, base = np.polyfit([n for n, _, _ in peaks], [p for _, p, _ in peaks], 1)
            print(f"peak resident memory ≈ {base / 1e9:.2f} GB + {slope / 1e3:.2f} kB a row (least squares over "
                  f"{len(peaks)} sizes)")  # fmt: skip
            slope, base = np.polyfit([n for n, _, _ in peaks], [w for _, _, w in peaks], 1)
            print(f"release wall time ≈ {base:.1f} s + {1e5 * slope:.1f} s per 100,000 rows (least squares)")


if __name__ == "__main__":
    main()
