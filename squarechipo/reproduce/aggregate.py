"""Zhou et al. 2025 (Square-χPO)'s Table 1 from the cell records: win rates with 95% t intervals over seeds, paired
verdicts, CSV and a plot.

The table's number is the win rate against the SFT policy with ties (and identical responses) counted ½, by the gold
reward-model judge; the local judge's is a second opinion. Two orderings are claimed by Zhou et al. 2025 (Square-χPO)
(App. E): Square-χPO ≥ χPO and CTL > LTC. Each is tested paired by seed (the methods of one seed train on the same
released labels): the mean paired difference with a Student's t interval, and a verdict: "holds" when the interval lies
above 0, "reversed" when it lies below, "not shown at this scale" otherwise.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

from squarechipo.data.label_roles import label_free
from squarechipo.losses import METHOD_NAMES
from squarechipo.stats import t_interval

__all__ = ["paired_difference", "verdict", "win_interval", "write_table1", "PAPER"]

#: Zhou et al. 2025 (Square-χPO), Table 1 (% win against SFT, GPT2-large, llama3:70b judge).
PAPER = {("CTL", "chipo"): 64.2, ("CTL", "square_chipo"): 67.0, ("LTC", "chipo"): 59.8, ("LTC", "square_chipo"): 60.0}


def _win(record: dict[str, Any], judge: str) -> float | None:
    win = record["win"].get(judge)
    return None if win is None else 100.0 * win["win_rate_half_ties"]


def _select(records, judge: str, **match) -> dict[int, float]:
    """seed → win rate (%) of the records whose fields equal ``match``."""
    return {
        r["seed"]: _win(r, judge)
        for r in records
        if all(r[k] == v for k, v in match.items()) and _win(r, judge) is not None
    }


def win_interval(values: list[float]) -> str:
    """``mean ± half-width (n)`` with a 95% t interval; one seed has no interval."""
    if not values:
        return "—"
    mean, low, high = t_interval(values)
    spread = "" if math.isnan(low) else f" ± {(high - low) / 2:.1f}"
    return f"{mean:.1f}{spread} (n={len(values)})"


def verdict(low: float, high: float) -> str:
    if math.isnan(low):
        return "not shown at this scale (fewer than 2 paired seeds)"
    if low > 0:
        return "holds"
    if high < 0:
        return "reversed"
    return "not shown at this scale"


def paired_difference(first: dict[int, float], second: dict[int, float]) -> dict[str, Any]:
    """mean(first − second) over the seeds both have, its 95% t interval and the verdict for first > second."""
    seeds = sorted(set(first) & set(second))
    mean, low, high = t_interval([first[s] - second[s] for s in seeds])
    return {"seeds": seeds, "mean": mean, "low": low, "high": high, "verdict": verdict(low, high)}


def _method_table(records, scale, judge: str) -> list[str]:
    methods = list(scale.methods)
    lines = [
        "| Setting | " + " | ".join(METHOD_NAMES.get(m, m) for m in methods) + " |",
        "|---" * (len(methods) + 1) + "|",
    ]
    for setting in scale.settings:
        cells = [
            win_interval(list(_select(records, judge, setting=setting, method=m, epsilon=scale.epsilon).values()))
            for m in methods
        ]
        lines.append(
            f"| {setting} (ε = {scale.epsilon:g}, α = {scale.corruption_rate:g}) | " + " | ".join(cells) + " |"
        )
    clean = _select(records, judge, setting="clean")
    if clean:
        row = [win_interval(list(clean.values())) if m == "square_chipo" else "" for m in methods]
        lines.append("| clean labels (ε = ∞, α = 0) | " + " | ".join(row) + " |")
    return lines


def _sweep_table(records, scale, judge: str) -> list[str]:
    epsilons = sorted({scale.epsilon, *scale.sweep_epsilons}, key=lambda e: math.inf if e is None else e)
    lines = [f"| ε (CTL, α = {scale.corruption_rate:g}) | Square-χPO win rate (%) |", "|---|---|"]
    for epsilon in epsilons:
        values = _select(records, judge, setting="CTL", method="square_chipo", epsilon=epsilon)
        lines.append(f"| {'∞' if epsilon is None else f'{epsilon:g}'} | {win_interval(list(values.values()))} |")
    return lines


def _claims(records, scale, judge: str) -> dict[str, dict[str, Any]]:
    claims = {}
    for setting in scale.settings:
        square = _select(records, judge, setting=setting, method="square_chipo", epsilon=scale.epsilon)
        chipo = _select(records, judge, setting=setting, method="chipo", epsilon=scale.epsilon)
        claims[f"Square-χPO ≥ χPO under {setting}"] = paired_difference(square, chipo)
    if {"CTL", "LTC"} <= set(scale.settings):
        for method in ("chipo", "square_chipo"):
            ctl = _select(records, judge, setting="CTL", method=method, epsilon=scale.epsilon)
            ltc = _select(records, judge, setting="LTC", method=method, epsilon=scale.epsilon)
            claims[f"CTL > LTC for {METHOD_NAMES[method]}"] = paired_difference(ctl, ltc)
    return claims


def _claim_lines(claims: dict[str, dict[str, Any]]) -> list[str]:
    lines = [
        "| claim (Zhou et al. 2025 (Square-χPO)) | mean paired difference (points) | 95% t interval | verdict |",
        "|---|---|---|---|",
    ]
    for name, c in claims.items():
        interval = "—" if math.isnan(c["low"]) else f"[{c['low']:+.1f}, {c['high']:+.1f}]"
        mean = "—" if math.isnan(c["mean"]) else f"{c['mean']:+.1f}"
        lines.append(f"| {name} | {mean} (seeds {c['seeds']}) | {interval} | **{c['verdict']}** |")
    return lines


def _calibration_line(calibration: dict[str, Any]) -> str:
    parts = []
    for name, cal in calibration.items():
        soft = cal.get("soft_accuracy")
        accuracy = soft if soft is not None else cal.get("accuracy")
        low, high = cal.get("soft_accuracy_ci") if soft is not None else cal.get("accuracy_ci")
        parts.append(
            f"{name} judge {100 * accuracy:.1f}% [{100 * low:.1f}, {100 * high:.1f}] on {cal['n_pairs']} pairs"
        )
    return "Judge gold accuracy on the test split's (chosen, rejected) pairs: " + "; ".join(parts) + "."


def _markdown(records, calibration, scale) -> str:
    judges = [j for j in ("gold", "local") if any(j in r["win"] for r in records)]
    claims = _claims(records, scale, "gold")
    text = [
        f"# Zhou et al. 2025 (Square-χPO), Table 1, reproduced at scale `{scale.name}`",
        "",
        "Win rate (%) against the SFT policy, ties and identical responses counted ½: mean ± 95% t half-width over "
        "seeds (n). Zhou et al. 2025 (Square-χPO) report (GPT2-large, llama3:70b judge): CTL χPO 64.2, "
        "Square-χPO 67.0; LTC χPO 59.8, Square-χPO 60.0.",
        "",
        _calibration_line(calibration),
    ]
    for judge in judges:
        title = "gold reward-model judge" if judge == "gold" else "debiased local judge (second opinion)"
        text += ["", f"## By the {title}", "", *_method_table(records, scale, judge)]
    text += ["", "## The cost of privacy (gold judge)", "", *_sweep_table(records, scale, "gold")]
    heading = "## The orderings Zhou et al. 2025 (Square-χPO) claims (gold judge, paired by seed)"
    text += ["", heading, "", *_claim_lines(claims)]
    minutes = sum(r["seconds"] for r in records) / 60
    text += ["", f"{len(records)} cells, {minutes:.0f} min of cell time. Scale: `{json.dumps(scale.to_dict())}`"]
    return "\n".join(text) + "\n"


def _write_csv(records, path: Path) -> None:
    fields = ["name", "seed", "setting", "method", "epsilon", "corruption_rate", "win_gold", "win_local"]
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=[*fields, "train_loss", "seconds"])
        writer.writeheader()
        for r in records:
            row = {k: r[k] for k in fields if k in r}
            writer.writerow({**row, "win_gold": _win(r, "gold"), "win_local": _win(r, "local"), **_tail(r)})


def _tail(record) -> dict[str, Any]:
    return {"train_loss": record.get("train_loss"), "seconds": record.get("seconds")}


def _plot(records, scale, path: Path) -> None:
    # The object-oriented Figure needs no pyplot backend, so the caller's backend is left alone.
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4))
    bars, sweep = fig.subplots(1, 2)
    width = 0.8 / max(len(scale.settings), 1)
    for k, setting in enumerate(scale.settings):
        stats = [
            t_interval(list(_select(records, "gold", setting=setting, method=m, epsilon=scale.epsilon).values()))
            for m in scale.methods
        ]
        errors = [0 if math.isnan(low) else (high - low) / 2 for _, low, high in stats]
        positions = [i + (k - (len(scale.settings) - 1) / 2) * width for i in range(len(scale.methods))]
        bars.bar(positions, [mean for mean, _, _ in stats], width, yerr=errors, capsize=3, label=setting)
    bars.axhline(50, color="grey", linestyle=":", linewidth=1)
    bars.set_xticks(range(len(scale.methods)), [METHOD_NAMES.get(m, m) for m in scale.methods])
    # With a handful of seeds a t interval can reach past 0 or 100; the axis stays on the possible win rates.
    bars.set(
        ylabel="win rate vs SFT (%), 95% t interval",
        title=f"ε = {scale.epsilon:g}, α = {scale.corruption_rate:g}",
        ylim=(0, 100),
    )
    bars.legend()
    # ε = ∞ (no RR) has no place on a numeric axis, so the sweep is drawn at evenly spaced, labelled positions.
    finite = sorted({e for e in (scale.epsilon, *scale.sweep_epsilons) if e is not None})
    epsilons = finite + ([None] if None in scale.sweep_epsilons else [])
    seeds = [_select(records, "gold", setting="CTL", method="square_chipo", epsilon=e) for e in epsilons]
    stats = [t_interval(list(by_seed.values())) for by_seed in seeds]
    errors = [0 if math.isnan(low) else (high - low) / 2 for _, low, high in stats]
    positions = range(len(epsilons))
    sweep.errorbar(positions, [m for m, _, _ in stats], yerr=errors, marker="o", capsize=3, label="Square-χPO, CTL")
    for x, by_seed in zip(positions, seeds):
        sweep.scatter([x] * len(by_seed), list(by_seed.values()), color="black", s=8, zorder=3)
    sweep.axhline(50, color="grey", linestyle=":", linewidth=1)
    sweep.set_xticks(positions, ["∞" if e is None else f"{e:g}" for e in epsilons])
    sweep.set(xlabel="ε (dots: seeds)", ylabel="win rate vs SFT (%)", title="The cost of privacy", ylim=(0, 100))
    sweep.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


@label_free("result records of released-label runs, no row of data")
def write_table1(records: list[dict[str, Any]], calibration: dict[str, Any], scale, out: str | Path) -> str:
    """Write ``table1.md``, ``table1.csv``, ``table1.json`` (claims) and ``table1.png`` into ``out``; return the
    Markdown."""
    out = Path(out)
    text = _markdown(records, calibration, scale)
    (out / "table1.md").write_text(text, encoding="utf-8")
    _write_csv(records, out / "table1.csv")
    claims = _claims(records, scale, "gold")
    (out / "table1.json").write_text(json.dumps({"claims": claims, "calibration": calibration}, indent=2))
    _plot(records, scale, out / "table1.png")
    return text
