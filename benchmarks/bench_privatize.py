"""Benchmark (not a test): time to privatize 10^7 labels and a 10^6-row preference Dataset.

Targets (issue 2): < 1 s for 10^7 labels; < 60 s for a 10^6-row Dataset of short strings.

    .venv/bin/python benchmarks/bench_privatize.py [--labels 10000000] [--rows 1000000]
"""

from __future__ import annotations

import argparse
import time
import timeit

import datasets
import numpy as np

from squarechipo.privacy import LabelPipeline, randomized_response, release_dataset


def _best_of(repeats: int, fn) -> float:
    return min(timeit.repeat(fn, number=1, repeat=repeats))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--labels", type=int, default=10_000_000)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    datasets.disable_progress_bars()

    labels = np.zeros(args.labels, dtype=bool)
    rng = np.random.default_rng()
    rr = _best_of(args.repeats, lambda: randomized_response(labels, 0.5, rng))
    pipeline = LabelPipeline(epsilon=0.5, corruption_rate=0.1, order="ctl")
    ctl = _best_of(args.repeats, lambda: pipeline.apply(labels, rng))
    print(f"randomized_response, {args.labels:,} labels: {rr:.3f} s (target < 1 s)")
    print(f"CTL pipeline (eps=0.5, alpha=0.1), {args.labels:,} labels: {ctl:.3f} s (target < 1 s)")

    n = args.rows
    data = datasets.Dataset.from_dict(
        {
            "prompt": [f"How should I spend ${i}?" for i in range(n)],
            "chosen": [f"Save {i} in a fund." for i in range(n)],
            "rejected": [f"Gamble {i} on a coin." for i in range(n)],
        }
    )
    start = time.perf_counter()
    out = release_dataset(data, pipeline)
    elapsed = time.perf_counter() - start
    assert len(out) == n
    print(f"release_dataset (validate + CTL + swap + ledger), {n:,} rows: {elapsed:.2f} s (target < 60 s)")


if __name__ == "__main__":
    main()
