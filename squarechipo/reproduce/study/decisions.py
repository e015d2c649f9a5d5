"""What a study decides from its records: each claim's paired value, Holm-adjusted p and verdict, the secondary
readings on their raw p, and the pre-registered conclusions. The report (:mod:`.report`) tabulates them."""

from __future__ import annotations

import math
from typing import Any

from squarechipo.data.label_roles import label_free
from squarechipo.reproduce.study.claims import claim_values
from squarechipo.reproduce.study.design import StudyDesign, is_win_rate
from squarechipo.stats import holm, mde, paired_test, t_interval, verdict

__all__ = ["METRICS", "claims", "conclusions", "holm_levels", "secondary_readings", "verdict_of"]

#: Each summary metric's label in the report and the factor that puts it in the report's units.
METRICS = {
    "expected_win": ("expected win (%)", 100.0),
    "hard_win": ("hard win, ties ½ (%)", 100.0),
    "gold_gain": ("gold gain (r*)", 1.0),
    "gold_gain_clean": ("gold gain without degenerate samples (r*)", 1.0),
    "kl": ("KL(π‖π_ref) (nats)", 1.0),
    "pool_gain": ("pool-value gain (r*)", 1.0),
}


def claims(records, design: StudyDesign, planned: list[str] | None = None, reference=None) -> list[dict[str, Any]]:
    """Each claim's paired value (in its metric's units), Holm-adjusted p and verdict. ``planned``: the pre-registered
    arms (a claim on an arm cut from the plan says so); ``reference``: the pre-registered reference epochs of drop
    claims."""
    found, untested, paired = [], [], []
    for claim in design.all_claims:
        values = claim_values(records, claim, reference)
        if len(values) < 2:  # no t interval from fewer than 2 paired seeds: listed, not tested
            nan = math.nan
            row = {"claim": claim.name, "seeds": len(values), "mean": nan, "low": nan, "high": nan, "p_holm": nan}
            cut = planned is not None and not set(claim.arms) <= set(planned)
            why = "an arm was cut from the pre-registered plan" if cut else f"{len(values)} paired seed(s) done"
            unreferenced = [a for a in claim.arms if claim.measures_a_drop and a not in (reference or {})]
            if unreferenced and not cut:
                why = f"no reference epoch was pre-registered for {', '.join(unreferenced)}"
            untested.append({**row, "metric": claim.metric, "verdict": f"not tested: {why}"})
            continue
        test = paired_test(list(values.values()))
        found.append({"claim": claim.name, "seeds": len(values), "metric": claim.metric, **test.to_dict()})
        paired.append(list(values.values()))
    steps = holm_levels([c["p_value"] for c in found], design.alpha)
    for row, values, adjusted, level in zip(found, paired, holm([c["p_value"] for c in found]), steps):
        # The MDE at the level this claim is decided at (its Holm step, holm_levels).
        detectable = mde(row["n"], row["sd"], target=design.power, alpha=level)
        unit = " points" if is_win_rate(row["metric"]) else f" ({METRICS[row['metric']][0]})"
        verdict_text = verdict_of(row, adjusted, detectable, design.alpha, unit)
        if verdict_text.startswith("not decided"):
            verdict_text += f" (α = {level:.3g}, Holm)"
        # The interval at the same level (1 − α at its Holm step): the one that says whether zero is excluded there.
        _, low_holm, high_holm = t_interval(values, confidence=1 - level)
        row.update(p_holm=adjusted, mde=detectable, alpha_holm=level, low_holm=low_holm, high_holm=high_holm)
        row["verdict"] = verdict_text
    return found + untested


@label_free("readings from result records, no row of data")
def secondary_readings(records, design: StudyDesign, reference=None) -> list[dict[str, Any]]:
    """Each pre-registered secondary reading (``design.secondary``): its paired value, raw p and reading at α, with
    the MDE at α. Outside Holm: they share no correction with the claims, and no claim rests on them."""
    out = []
    for claim in design.secondary or ():
        values = claim_values(records, claim, reference)
        if len(values) < 2:
            nan = math.nan
            row = {"claim": claim.name, "metric": claim.metric, "seeds": len(values), "mean": nan, "low": nan}
            out.append({**row, "high": nan, "p_value": nan, "verdict": f"not read: {len(values)} paired seed(s)"})
            continue
        row = {"claim": claim.name, "seeds": len(values), "metric": claim.metric}
        row |= paired_test(list(values.values())).to_dict()
        detectable = mde(row["n"], row["sd"], target=design.power, alpha=design.alpha)
        unit = " points" if is_win_rate(claim.metric) else f" ({METRICS[claim.metric][0]})"
        out.append(
            {**row, "mde": detectable, "verdict": verdict_of(row, row["p_value"], detectable, design.alpha, unit)}
        )
    return out


@label_free("claims decided from result records, no row of data")
def conclusions(design: StudyDesign, claim_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each pre-registered conclusion (``design.conclusions``): shown only if its ``holds`` claims hold and none of
    its ``not_reversed`` claims is reversed, with the claims that stand in the way."""
    verdicts = {row["claim"]: row["verdict"] for row in claim_rows}
    out = []
    for reading in design.conclusions or ():
        against = [f"{name}: {verdicts[name]}" for name in reading.holds if verdicts[name] != "holds"]
        against += [f"{name}: reversed" for name in reading.not_reversed if verdicts[name] == "reversed"]
        out.append({"conclusion": reading.name, "shown": not against, "because": against})
    return out


def holm_levels(p_values: list[float], alpha: float) -> list[float]:
    """The level each claim is decided at in Holm's step-down: α/(m − k) for the k-th smallest p (k from 0) while
    they are rejected; the procedure stops at the first that is not, and every claim from there on is decided at
    that step's level, α/(m − r) with r the claims rejected before it (a larger p cannot pass where it stopped)."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    levels = [alpha] * m
    stopped = None
    for k, index in enumerate(order):
        if stopped is None and not p_values[index] < alpha / (m - k):
            stopped = alpha / (m - k)
        levels[index] = stopped if stopped is not None else alpha / (m - k)
    return levels


def verdict_of(row: dict, adjusted: float, detectable: float, alpha: float, unit: str = " points") -> str:
    from squarechipo.stats import PairedTest

    test = PairedTest(**{k: row[k] for k in ("mean", "low", "high", "p_value", "sd", "n")})
    return verdict(test, adjusted, detectable, alpha, unit=unit)
