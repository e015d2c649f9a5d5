"""What privacy costs, from a study's records: the share of the clean gold gain each private arm keeps (paired by
seed, Fieller's interval) beside what its labels were worth, and, where a method was trained on several numbers of
private rows, the rows at which it reaches the clean gain beside randomized response's variance price c(ε)².

Both are ratios of means of per-seed linear combinations of gold gains, so one interval serves both: Fieller's
(Student's t, seeds − 1 df; ``squarechipo.stats.ratio_interval``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from squarechipo.data.label_roles import label_free
from squarechipo.losses import METHOD_NAMES
from squarechipo.privacy.mechanisms.calibration import debias_factor
from squarechipo.privacy.mechanisms.measurements import LabelPipeline
from squarechipo.reproduce.study.design import Arm, StudyDesign
from squarechipo.stats import figure, ratio_interval

__all__ = ["headline", "headline_lines", "private_arms", "rows_to_clean_gain", "write_privacy_plot"]


def _gains(records, arm: str) -> dict[int, float]:
    return {r["seed"]: r["summary"]["gold_gain"]["mean"] for r in records if r["arm"] == arm}


def _own_clean(arm: Arm) -> str:
    """The clean arm of the same method at the design's rows (rDPO with flip rate 0 is DPO)."""
    return f"clean_epsinf_{'dpo' if arm.method == 'rdpo' else arm.method}"


def _clean_reference(arm: Arm, design: StudyDesign, records) -> str | None:
    """The clean arm a private arm's gain is a share of: its method's own, or, when the design has that arm but it
    has no records (cut for the budget), the design's first clean arm at its rows that has them, standing in."""
    clean = [a.key for a in design.main_arms if a.setting == "clean" and a.rows is None]
    if _own_clean(arm) not in clean:
        return None
    if len(_gains(records, _own_clean(arm))) >= 2:
        return _own_clean(arm)
    stand_ins = [key for key in clean if len(_gains(records, key)) >= 2]
    return stand_ins[0] if stand_ins else None


def private_arms(design: StudyDesign) -> list[Arm]:
    """The debiased CTL arms whose method has a clean arm in the design: the arms the headline reports a share for."""
    keys = {a.key for a in design.main_arms}
    return [a for a in design.main_arms if a.setting == "CTL" and a.debias and _own_clean(a) in keys]


def _rows(arm: Arm, design: StudyDesign) -> int:
    return arm.rows or design.train_rows


def headline(records, design: StudyDesign) -> list[dict[str, Any]]:
    """Share of the clean gold gain each private arm keeps, paired by seed, with Fieller's interval, beside what the
    labels were worth: n labels each wrong with probability ρ carry about n(1 − 2ρ)² clean labels' information (ρ
    the pipeline's expected wrong-label rate)."""
    arms = private_arms(design)
    methods = list(dict.fromkeys(a.method for a in arms))
    rows = []
    for arm in sorted(arms, key=lambda a: (methods.index(a.method), a.epsilon, _rows(a, design))):
        reference = _clean_reference(arm, design, records)
        clean, gains = _gains(records, reference or ""), _gains(records, arm.key)
        seeds = sorted(set(gains) & set(clean))
        if len(seeds) < 2:
            continue
        ratio = ratio_interval([gains[s] for s in seeds], [clean[s] for s in seeds])
        wrong = LabelPipeline(arm.epsilon, design.corruption_rate, "flip", "ctl").expected_flip_rate()
        rows.append({
            "method": METHOD_NAMES.get(arm.method, arm.method), "arm": arm.key, "epsilon": f"{arm.epsilon:g}",
            "rows": _rows(arm, design), "reference": reference, "stand_in": reference != _own_clean(arm), **ratio,
            "wrong_label_rate": wrong, "clean_equivalent_share": (1 - 2 * wrong) ** 2,
        })  # fmt: skip
    return rows


def _crossing(clean: dict[int, float], gains: dict[int, dict[int, float]], seeds: list[int]) -> dict[str, float]:
    """log2 of the rows at which the least-squares line through the shares against log2 n reaches 1.

    With x_i = log2 n_i, the line through the shares G_i/C has slope b = Σ w_i G_i / C (w_i = (x_i − x̄)/Σ(x − x̄)²)
    and meets 1 at x* = x̄ + (C − mean_i G_i)/Σ w_i G_i: a ratio of means of per-seed linear combinations (C and G
    each seed's clean and private gains), so Fieller's interval applies to x* − x̄ directly."""
    x = np.log2(np.array(sorted(gains), dtype=np.float64))
    weights = (x - x.mean()) / ((x - x.mean()) ** 2).sum()
    per_seed = np.array([[gains[n][s] for n in sorted(gains)] for s in seeds])
    slope = per_seed @ weights
    shortfall = np.array([clean[s] for s in seeds]) - per_seed.mean(axis=1)
    ratio = ratio_interval(shortfall, slope)
    return {k: ratio[k] + x.mean() for k in ("ratio", "low", "high")} | {"slope_positive": bool(slope.mean() > 0)}


#: Seed resamples for the crossing's sensitivity (a fixed stream: the report is a function of the records).
BOOTSTRAP_RESAMPLES = 2000


def _sensitivity(clean: dict[int, float], gains: dict[int, dict[int, float]], seeds: list[int]) -> dict[str, Any]:
    """How much the crossing depends on the model: the same least-squares line against n instead of log2 n, and the
    share of seed resamples in which the log2 line does not cross by the largest n (slope ≤ 0 or beyond it)."""
    ns = sorted(gains)
    x = np.array(ns, dtype=np.float64)
    means = np.array([np.mean([gains[n][s] for s in seeds]) for n in ns]) / np.mean([clean[s] for s in seeds])
    slope, intercept = np.polyfit(x, means, 1)
    linear = (1 - intercept) / slope if slope > 0 else math.inf
    rng = np.random.default_rng(0)
    none = 0
    for _ in range(BOOTSTRAP_RESAMPLES):
        picked = [seeds[i] for i in rng.integers(0, len(seeds), len(seeds))]
        cross = _crossing(
            {i: clean[s] for i, s in enumerate(picked)},
            {n: {i: gains[n][s] for i, s in enumerate(picked)} for n in ns},
            list(range(len(picked))),
        )
        none += not (cross["slope_positive"] and 2 ** cross["ratio"] <= ns[-1])  # fmt: skip
    return {"rows_line_in_n": float(linear), "bootstrap_no_crossing": none / BOOTSTRAP_RESAMPLES}


def rows_to_clean_gain(records, design: StudyDesign) -> list[dict[str, Any]]:
    """For each method and ε trained on several numbers of private rows: the rows at which its share of the clean
    gain reaches 1, read off the line through the shares against log2 n, with Fieller's interval, beside the
    rows the theory prices it at: the clean arm's rows × c(ε)² (randomized response's variance price) and
    × 1/(1 − 2ρ)² (the labels' wrong-label rate ρ)."""
    out = []
    by_method: dict[tuple[str, float], list[Arm]] = {}
    for arm in private_arms(design):
        by_method.setdefault((arm.method, arm.epsilon), []).append(arm)
    for (method, epsilon), arms in by_method.items():
        reference = _clean_reference(arms[0], design, records)
        clean = _gains(records, reference or "")
        gains = {_rows(a, design): _gains(records, a.key) for a in arms}
        seeds = sorted(set(clean).intersection(*gains.values()))
        if len(gains) < 2 or len(seeds) < 2:
            continue
        crossing = _crossing(clean, gains, seeds)
        wrong = LabelPipeline(epsilon, design.corruption_rate, "flip", "ctl").expected_flip_rate()
        out.append({
            "method": METHOD_NAMES.get(method, method), "epsilon": f"{epsilon:g}", "reference": reference,
            "clean_rows": design.train_rows, "largest_rows": max(gains), "seeds": len(seeds),
            "rows": 2 ** crossing["ratio"] if crossing["slope_positive"] else math.inf,
            "low": 2 ** crossing["low"], "high": 2 ** crossing["high"],
            "c_squared_rows": design.train_rows * debias_factor(epsilon) ** 2,
            "flip_rate_rows": design.train_rows / (1 - 2 * wrong) ** 2, **_sensitivity(clean, gains, seeds),
        })  # fmt: skip
    return out


def _share_table(summary: dict, design: StudyDesign) -> list[str]:
    several = len({h.get("rows") for h in summary["headline"]}) > 1
    rows_head, rows_rule = (" private rows |", "---|") if several else ("", "")
    lines = [
        f"| method | ε (CTL, α = {design.corruption_rate:g}) |{rows_head} share of the clean gold gain kept "
        "| 95% Fieller interval | labels wrong (ρ) | clean-label equivalent (1 − 2ρ)² |",
        f"|---|---|{rows_rule}---|---|---|---|",
    ]
    for h in summary["headline"]:
        interval = "unbounded" if math.isinf(h["high"]) else f"[{_pct(h['low'])}%, {_pct(h['high'])}%]"
        rows = f" {h['rows']} |" if several else ""
        lines.append(
            f"| {h['method']} | {h['epsilon']} |{rows} {_pct(h['ratio'])}% | {interval} | "
            f"{figure(h['wrong_label_rate'], 3)} | {_pct(h['clean_equivalent_share'])}% |"
        )
    return lines


def _rows_cell(row: dict) -> str:
    if not math.isfinite(row["rows"]):
        return f"not reached: the share does not grow with the rows up to {row['largest_rows']}"
    interval = (
        "unbounded" if not math.isfinite(row["high"]) else f"[{figure(row['low'], 0)}, {figure(row['high'], 0)}]"
    )
    if row["rows"] > row["largest_rows"]:
        reached = figure(row["rows"], 0)
        return f"beyond {row['largest_rows']} (the line reaches it at {reached}, an extrapolation) {interval}"
    return f"{figure(row['rows'], 0)} {interval}"


def _rows_table(summary: dict) -> list[str]:
    lines = [
        "Where the line through the shares (against log2 n) crosses the clean gain, with its 95% Fieller interval: "
        "one model's estimate, not a decided claim (read it beside the shares above). Beside it, the rows the theory "
        "prices the clean rows at:",
        "",
        "| method | ε | clean rows | private rows to the clean gain [95%] | × c(ε)² | × 1/(1 − 2ρ)² |",
        "|---|---|---|---|---|---|",
    ]
    for r in summary["rows_needed"]:
        lines.append(
            f"| {r['method']} | {r['epsilon']} | {r['clean_rows']} | {_rows_cell(r)} | "
            f"{figure(r['c_squared_rows'], 0)} | "
            f"{figure(r['flip_rate_rows'], 0)} |"
        )
    lines += [
        "",
        "The crossing's sensitivity to the model, and the rows whose share cannot be told from the clean gain:",
    ]
    for r in summary["rows_needed"]:
        if "bootstrap_no_crossing" not in r:
            continue
        linear = f"{figure(r['rows_line_in_n'], 0)} rows" if math.isfinite(r["rows_line_in_n"]) else "no crossing"
        within = [
            str(h["rows"]) for h in summary["headline"] if h["method"] == r["method"] and h["low"] <= 1 <= h["high"]
        ]
        contains = f"{', '.join(within)} private rows" if within else "no row count"
        lines.append(
            f"- {r['method']}, ε = {r['epsilon']}: a line against n (not log2 n) gives {linear}; in "
            f"{_pct(r['bootstrap_no_crossing'])}% of {BOOTSTRAP_RESAMPLES} resamples of the seeds the log2 line "
            f"does not cross by {r['largest_rows']} rows; the share's interval contains 100% at {contains}."
        )
    return [*lines, ""]


def headline_lines(summary: dict, design: StudyDesign) -> list[str]:
    """The report's lines for both tables (none when the design has no private arm with a clean reference)."""
    if not private_arms(design):
        return []
    if not summary["headline"]:
        return [
            "Share of the clean gain kept: not yet estimable (no private arm has two seeds paired with a clean arm).",
            "",
        ]
    stand_ins = dict.fromkeys((h["method"], h["reference"]) for h in summary["headline"] if h.get("stand_in"))
    note = "".join(
        f" {method}'s clean reference is {ref} (its own clean arm has no records: cut for the budget)."
        for method, ref in stand_ins
    )
    return [
        "Share of the clean gain kept (gold gain on private labels ÷ gold gain on clean labels, paired by seed):"
        + note,
        "",
        *_share_table(summary, design),
        "",
        *(_rows_table(summary) if summary.get("rows_needed") else []),
    ]


@label_free("result records of released-label runs, no row of data")
def write_privacy_plot(rows: list[dict[str, Any]], path) -> None:
    """Share of the clean gold gain kept against ε, per method with Fieller intervals, beside the clean-label
    equivalent (1 − 2ρ)² of the labels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6.5, 4.5))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    for index, method in enumerate(methods):
        mine = sorted((r for r in rows if r["method"] == method), key=lambda r: float(r["epsilon"]))
        eps = [float(r["epsilon"]) * (1 + 0.03 * (index - 1)) for r in mine]  # side by side
        _share_errorbars(axis, eps, mine, method)
    theory = sorted({(float(r["epsilon"]), 100 * r["clean_equivalent_share"]) for r in rows})
    axis.plot(*zip(*theory), linestyle="--", color="grey", label="clean-label equivalent (1 − 2ρ)²")
    _finish_share_plot(figure, axis, "ε (randomized response, CTL with α corruption)", path)


@label_free("result records of released-label runs, no row of data")
def write_rows_plot(shares: list[dict[str, Any]], needed: list[dict[str, Any]], path) -> None:
    """Share of the clean gold gain kept against the private rows, per method with Fieller intervals; each method's
    rows to the clean gain (a cross on the 100% line, with its interval) beside the theory's prices of the clean
    rows: × c(ε)² and × 1/(1 − 2ρ)² (dashed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6.5, 4.5))
    largest = max(int(r["rows"]) for r in shares)
    for index, method in enumerate(dict.fromkeys(r["method"] for r in shares)):
        mine = sorted((r for r in shares if r["method"] == method), key=lambda r: int(r["rows"]))
        rows = [int(r["rows"]) * (1 + 0.03 * (index - 0.5)) for r in mine]  # side by side
        line = _share_errorbars(axis, rows, mine, method)
        crossing = next((n for n in needed if n["method"] == method and math.isfinite(n["rows"])), None)
        if crossing is not None:
            high_rows = crossing["high"] if math.isfinite(crossing["high"]) else 8 * largest
            spread = [[crossing["rows"] - crossing["low"]], [high_rows - crossing["rows"]]]
            axis.errorbar(
                [crossing["rows"]],
                [100],
                xerr=spread,
                marker="x",
                capsize=3,
                color=line[0].get_color(),
                linestyle="none",
                label=f"{method}: rows to the clean gain",
            )
    for key, text, style in (("c_squared_rows", "clean rows × c(ε)²", "--"), ("flip_rate_rows", "× 1/(1 − 2ρ)²", ":")):
        for n in {round(row[key]) for row in needed}:
            axis.axvline(n, linestyle=style, color="grey", label=f"{text} = {n}")
    xlabel = "private rows (ε = " + ", ".join(sorted({r["epsilon"] for r in shares})) + ")"
    _finish_share_plot(figure, axis, xlabel, path, right=8 * largest)


def _share_errorbars(axis, x: list[float], rows: list[dict[str, Any]], label: str):
    """One method's shares of the clean gain (%) at ``x`` with their Fieller intervals (an open side left out)."""
    ratio = np.array([100 * r["ratio"] for r in rows])
    low = np.array([100 * r["low"] if math.isfinite(r["low"]) else np.nan for r in rows])
    high = np.array([100 * r["high"] if math.isfinite(r["high"]) else np.nan for r in rows])
    return axis.errorbar(x, ratio, yerr=[ratio - low, high - ratio], marker="o", capsize=3, label=label)


def _finish_share_plot(figure, axis, xlabel: str, path, right: float | None = None) -> None:
    """A share plot's log2 x axis (up to ``right``), the 0% and 100% lines, the legend, saved and closed."""
    import matplotlib.pyplot as plt

    axis.set_xscale("log", base=2)
    if right is not None:  # after the scale: a limit set on the linear scale does not carry over
        axis.set_xlim(right=right)
    axis.set_xlabel(xlabel)
    axis.set_ylabel("share of the clean gold gain kept (%)")
    axis.axhline(100, color="grey", linewidth=0.5)
    axis.axhline(0, color="grey", linewidth=0.5)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def _pct(value: float) -> str:
    return figure(value, 0, scale=100, minus="-")
