"""What every experiment's report shares: reading the CSVs, means with 95% t intervals, paired differences,
bootstrap slopes, verdicts and plots.

Every figure is printed with its interval and a verdict against the claim; a claim that does not hold is reported
as such (``DOES NOT HOLD``), never hidden.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy import stats

from squarechipo.data.label_roles import label_free
from squarechipo.stats import t_interval

__all__ = ["load_rows"]


def load_rows(path: Path) -> list[dict]:
    with Path(path).open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        for name, value in row.items():
            if name in ("study", "method", "order", "adversary", "estimator", "key", "policy_class"):
                continue
            row[name] = float(value)
    return rows


def group_metric(rows, study, *fields, metric):
    out = defaultdict(list)
    for row in rows:
        if row["study"] == study:
            out[tuple(row[f] for f in fields)].append(row[metric])
    return {k: np.asarray(v) for k, v in out.items()}


def mean_ci(values: np.ndarray) -> tuple[float, float]:
    """Mean and 95% half-width over seeds: Student's t with n − 1 degrees of freedom (a handful of seeds)."""
    mean, low, high = t_interval(values)
    return mean, (high - low) / 2 if len(values) >= 2 else 0.0


def fmt_ci(values: np.ndarray) -> str:
    mean, half = mean_ci(values)
    return f"{mean:.4f} ± {half:.4f}"


def verdict_of(ok: bool) -> str:
    return "holds" if ok else "DOES NOT HOLD"


def bootstrap_slope(ns: np.ndarray, groups: list[np.ndarray], rng: np.random.Generator, boot: int = 2000):
    """Least-squares slope of log(mean gap) on log n, with a 95% percentile bootstrap interval that resamples
    the seeds of each n independently (``scipy.stats.bootstrap`` over the groups as separate samples)."""
    x = np.log(ns)

    def slope(*samples, axis=-1):
        means = np.stack([np.mean(sample, axis=axis) for sample in samples])
        return np.polyfit(x, np.log(means), 1)[0]

    result = stats.bootstrap(tuple(groups), slope, n_resamples=boot, vectorized=True, method="percentile", rng=rng)
    return float(slope(*groups)), float(result.confidence_interval.low), float(result.confidence_interval.high)


def difference_ci(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """mean(a) − mean(b) and its 95% half-width: Welch's t interval (independent samples, unequal variances)."""
    result = stats.ttest_ind(a, b, equal_var=False)
    low, high = result.confidence_interval(0.95)
    return float(a.mean() - b.mean()), float((high - low) / 2)


def plot_curves(
    path: Path, xs, curves: dict[str, list[np.ndarray]], xlabel: str, title: str, ylabel: str = "J(π_best) − J(π̂)"
) -> None:
    def draw(ax):
        for label, groups in curves.items():
            draw_errorbars(ax, xs, groups, label)
        ax.set(xscale="log", xlabel=xlabel, ylabel=ylabel, title=title)
        ax.legend()

    save_plot(path, draw)


def save_plot(path: Path, draw) -> None:
    # The object-oriented Figure needs no pyplot backend, so the caller's backend is left alone.
    from matplotlib.figure import Figure

    fig = Figure(figsize=(5.5, 4))
    ax = fig.subplots()
    draw(ax)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def draw_errorbars(ax, xs, groups, label, **kw):
    stats = [mean_ci(g) for g in groups]
    ax.errorbar(xs, [m for m, _ in stats], yerr=[h for _, h in stats], marker="o", capsize=3, label=label, **kw)


@label_free("simulation results, no row of data")
def metric_by_seed(rows: list[dict], study: str, *fields) -> dict[tuple, dict[float, float]]:
    out: dict[tuple, dict[float, float]] = defaultdict(dict)
    for row in rows:
        if row["study"] == study:
            out[tuple(row[f] for f in fields)][row["seed"]] = row["value"]
    return out


def paired_values(a: dict[float, float], b: dict[float, float]) -> np.ndarray:
    """a − b over the seeds both have (a seed's draws are shared, so the difference is paired)."""
    return np.array([a[s] - b[s] for s in sorted(set(a) & set(b))])
