"""A claim's value per seed, from the cell records: the one definition the power step and the report share.

A cell's metric is its summary's mean (expected and hard win in points, the rest in their units), at the end of
training or at a checkpoint epoch. A ``drop`` claim compares an arm's metric at its reference epoch, fixed in the
pre-registration from the pilot (:func:`reference_epochs`), with its metric at the end. A ``matched_kl`` claim
compares two arms' gold gain at the same KL, as Huang et al. 2024 (χPO) (*Correcting the mythos of KL-regularization*)
compare methods along their reward–KL curves: at the largest KL both reached in the seed, each gain linearly
interpolated between its checkpoints (and the SFT policy, KL 0 and gain 0).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from squarechipo.reproduce.study.design import METRIC_SCALE, Claim

__all__ = ["METRIC_SCALE", "claim_values", "gain_at_kl", "metric_at", "reference_epochs"]


def metric_at(record: dict[str, Any], metric: str, epoch: float | None = None) -> float:
    """A cell's ``metric`` at the end of training (``epoch`` None) or at a checkpoint epoch."""
    summary = record["summary"]
    if epoch is not None:
        summary = next(c["summary"] for c in record["checkpoints"] if c["epoch"] == epoch)
    if summary.get(metric) is None:
        where = "at the end" if epoch is None else f"at epoch {epoch:g}"
        raise ValueError(
            f"cell {record.get('cell')!r} has no {metric} {where}: its evaluation did not measure it (gold_gain_clean "
            "needs the degenerate-text flags and at least two prompts with a clean sample pair). Read another metric "
            "or evaluate the cell again."
        )
    return METRIC_SCALE[metric] * summary[metric]["mean"]


def _by_seed(records, arm: str, metric: str, epoch: float | None = None) -> dict[int, float]:
    return {r["seed"]: metric_at(r, metric, epoch) for r in records if r["arm"] == arm}


def _curve(record: dict[str, Any], metric: str) -> tuple[list[float], list[float]]:
    """(KL, metric) through the SFT policy's (0, 0) and the cell's checkpoints, in increasing KL."""
    points = sorted((c["summary"]["kl"]["mean"], metric_at(record, metric, c["epoch"])) for c in record["checkpoints"])
    kls, values = zip(*[(0.0, 0.0), *points])
    return list(kls), list(values)


def gain_at_kl(record: dict[str, Any], kl: float, metric: str = "gold_gain") -> float:
    """A cell's ``metric`` at KL = ``kl``, linear between its checkpoints (beyond the last: the last)."""
    return float(np.interp(kl, *_curve(record, metric)))


def _matched_kl(records, claim: Claim) -> dict[int, float]:
    curves = {
        arm: {r["seed"]: _curve(r, claim.metric) for r in records if r["arm"] == arm}
        for arm in (claim.first, claim.second)
    }
    first, second = curves[claim.first], curves[claim.second]
    out = {}
    for seed in sorted(set(first) & set(second)):
        kl = min(first[seed][0][-1], second[seed][0][-1])  # each curve's KLs are sorted: the last is its largest
        out[seed] = float(np.interp(kl, *first[seed]) - np.interp(kl, *second[seed]))
    return out


def reference_epochs(records, claims: tuple[Claim, ...], checkpoints: tuple[float, ...]) -> dict[str, float]:
    """For each arm whose drop a claim measures: the checkpoint before the last whose mean metric over the pilot's
    seeds is largest. Arms without pilot cells take the reference epoch of the pilot arm with the same method (the
    pilot runs one label setting)."""
    out: dict[str, float] = {}
    for claim in claims:
        for arm in claim.arms if claim.measures_a_drop else ():
            method = arm.split("_", 2)[2]
            source = arm if any(r["arm"] == arm for r in records) else next(
                (r["arm"] for r in records if r["arm"].split("_", 2)[2] == method), None
            )  # fmt: skip
            if source is None:
                continue
            means = {e: np.mean(list(_by_seed(records, source, claim.metric, e).values())) for e in checkpoints[:-1]}
            out[arm] = float(max(means, key=means.get))
    return out


def claim_values(records, claim: Claim, reference: dict[str, float] | None = None) -> dict[int, float]:
    """The claim's paired value per seed (seeds where every cell it needs has a record)."""

    def drop(arm: str) -> dict[int, float]:
        if arm not in (reference or {}):  # no reference epoch was pre-registered for it: nothing to compare
            return {}
        before = _by_seed(records, arm, claim.metric, reference[arm])
        after = _by_seed(records, arm, claim.metric)
        return {s: before[s] - after[s] for s in set(before) & set(after)}

    if claim.kind == "matched_kl":
        return _matched_kl(records, claim)
    if claim.kind == "arms":
        first, second = _by_seed(records, claim.first, claim.metric), _by_seed(records, claim.second, claim.metric)
    elif claim.kind == "drop":
        return dict(sorted(drop(claim.first).items()))
    else:  # drop_difference: the second arm falls more than the first
        first, second = drop(claim.second), drop(claim.first)
    return {s: first[s] - second[s] for s in sorted(set(first) & set(second))}
