"""The lab's grid machinery: point keys, per-seed generators and the resumable CSV run.

A grid point is a dict of parameters; its key (``point_key``) names it in the CSV, and a re-run skips every point whose
rows are all there (resumable). Each seed's randomness comes from ``numpy.random.default_rng([base_seed, crc32(key),
seed])``, so a point reproduces bit for bit whatever else ran before it.
"""

from __future__ import annotations

import csv
import json
import math
import zlib
from collections.abc import Iterable
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from squarechipo.data.label_roles import label_free

__all__ = ["point_key", "SCALES", "run_grid"]


#: The label-pipeline columns every alignment study shares (the bandit and the general-preference lab).
PIPELINE_COLUMNS = ["study", "method", "n", "epsilon", "alpha", "order", "adversary"]


def point_key(point: dict) -> str:
    return json.dumps(point, sort_keys=True)


def seed_rngs(base_seed: int, key: str, seeds: Iterable[int]) -> list[np.random.Generator]:
    return [np.random.default_rng([base_seed, zlib.crc32(key.encode()), s]) for s in seeds]


#: Parameters that do not change a study's data, only what is done with it: every value of them sees the same draws
#: for a seed, so comparisons across them are paired by seed (the robust study: methods, α and adversaries share the
#: clean pairs and labels, the corruption's own draws come after; the over-optimisation study: methods share data).
_PAIRED = {"robust": ("method", "alpha", "adversary"), "overopt": ("method",)}


def data_key(point: dict) -> str:
    shared = _PAIRED.get(point["study"], ())
    return point_key({k: v for k, v in point.items() if k not in shared})


def epsilon_of(value) -> float | None:
    return None if value is None or math.isinf(value) else float(value)


#: Grid sizes: ``smoke`` (seconds: every study at its smallest, to check an install), ``default`` (minutes) and
#: ``full`` (hours).
SCALES = ("smoke", "default", "full")


def by_scale(scale: str, smoke, default, full):
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES} (got {scale!r}).")
    return {"smoke": smoke, "default": default, "full": full}[scale]


def _done_keys(path: Path, columns: list[str], expected_rows: dict[str, int]) -> set[str]:
    """Keys with all their rows in ``path``; rows of a point cut off mid-write are removed."""
    if not path.exists():
        return set()
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["key"]] = counts.get(row["key"], 0) + 1
    complete = {key for key, count in counts.items() if count >= expected_rows.get(key, 0)}
    if len(complete) < len(counts):
        with path.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=columns, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(row for row in rows if row["key"] in complete)
    return complete


@label_free("grid points of a simulation, no row of data")
def run_grid(
    points: list[dict],
    runner,
    columns: list[str],
    path: Path,
    seeds: list[int],
    rows_per_seed=1,
    base_seed: int = 0,
    desc: str = "grid",
) -> int:
    """Run the points not yet in ``path`` (CSV), appending each point's rows as soon as it finishes.

    ``rows_per_seed``: the rows one seed of a point writes (a number, or a function of the point)."""
    per_seed = rows_per_seed if callable(rows_per_seed) else (lambda point: rows_per_seed)
    expected = {point_key(p): len(seeds) * per_seed(p) for p in points}
    done = _done_keys(path, columns, expected)
    todo = [p for p in points if point_key(p) not in done]
    path.parent.mkdir(parents=True, exist_ok=True)
    new_file = not path.exists()
    with path.open("a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, extrasaction="ignore")
        if new_file:
            writer.writeheader()
        for point in tqdm(todo, desc=desc, unit="point"):
            writer.writerows(runner(point, seeds, base_seed))
            handle.flush()
    return len(todo)
