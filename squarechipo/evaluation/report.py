"""Markdown and PNG reports of win rates, and the multi-seed aggregate in the form of Zhou et al. 2025 (Square-χPO)'s
Table 1."""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

__all__ = [
    "aggregate_runs",
    "format_interval",
    "format_line",
    "format_lines",
    "win_reading",
    "format_percent",
    "write_chart",
    "write_report",
]


def format_percent(x: float) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}%"


def format_interval(ci) -> str:
    return f"[{format_percent(ci[0])}, {format_percent(ci[1])}]"


def _row(*cells: Any) -> str:
    """One Markdown table row."""
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _pct_ci(rate: float, ci) -> str:
    return f"{format_percent(rate)} {format_interval(ci)}"


def _judge_accuracy(cal: dict[str, Any] | None) -> str:
    if not cal:
        return "judge not calibrated"
    accuracy = _pct_ci(cal["rule_accuracy"], cal["rule_accuracy_ci"])
    return f"judge gold accuracy {accuracy} ({cal['rule']} rule) on {cal['n_pairs']} gold pairs"


def format_lines(summary: dict[str, Any]) -> list[str]:
    """The result in a few lines: the ties-as-½ win rate with its bootstrap interval, the strict shares,
    identical responses and lengths, and the judge's gold accuracy."""
    o = summary["overall"]
    rule = summary.get("decision_rule", "hard")
    lines = [
        f"win rate {_pct_ci(o['win_rate_half_ties'], o['win_rate_half_ties_ci'])} "
        f"(ties as ½, 95% bootstrap over {o['n_valid']} prompts)",
        f"reading: {win_reading(o['win_rate_half_ties_ci'], o['n_valid'])}",
        f"strict: win {_pct_ci(o['win_rate'], o['win_ci'])}, tie {format_percent(o['tie_rate'])}, "
        f"loss {format_percent(o['loss_rate'])} ({rule} rule, {o['n_invalid']} invalid)",
        f"identical responses {o['identical']}/{o['n_valid']} ({format_percent(o['identical_rate'])})",
    ]
    lengths = summary.get("lengths")
    if lengths:
        lines[-1] += (
            f"; mean length {lengths['policy_mean_words']:.1f} vs {lengths['baseline_mean_words']:.1f} "
            "words (policy vs baseline)"
        )
    lines.append(_judge_accuracy(summary.get("calibration")))
    return lines


def win_reading(interval, prompts: int) -> str:
    """The plain-words reading of a judged win rate's 95% interval (as the gold report reads its gain's)."""
    low, high = interval
    if low > 0.5:
        return "the judge prefers the policy"
    if high < 0.5:
        return "the judge prefers the baseline"
    return f"not distinguishable from an even split over {prompts} prompts (the interval covers 50%)"


def format_line(summary: dict[str, Any]) -> str:
    """:func:`format_lines` joined into one line."""
    return "; ".join(format_lines(summary))


def _calibration_lines(cal: dict[str, Any] | None) -> list[str]:
    if not cal:
        return ["The judge was not calibrated on gold pairs for this run.", ""]
    has_soft = cal.get("soft_accuracy") is not None
    soft_accuracy = format_percent(cal["soft_accuracy"]) if has_soft else "n/a (the judge reports no log-odds)"
    soft_ci = format_interval(cal["soft_accuracy_ci"]) if has_soft else ""
    lines = [
        "## Judge calibration (gold pairs: the test split's chosen vs rejected)",
        "",
        "| rule | accuracy | 95% CI (Wilson) |",
        "|---|---|---|",
        _row(
            "hard (both orders agree)", format_percent(cal["hard_accuracy"]), format_interval(cal["hard_accuracy_ci"])
        ),
        _row(f"soft (mean log-odds over both orders, tie band {cal['tie_band']:g})", soft_accuracy, soft_ci),
        _row("single judgment", format_percent(cal["accuracy"]), format_interval(cal["accuracy_ci"])),
        "",
        f"On {cal['n_valid']} pairs ({cal['n_invalid']} invalid); position bias "
        f"{format_percent(cal['position_bias_rate'])} (the same position picked in both orders). "
        f"The win rate uses the **{cal['rule']}** rule.",
        "",
    ]
    if not cal["rule_accuracy"] >= 0.75:
        lines += ["**Warning:** the judge is weak on gold pairs; read the win rate with care.", ""]
    return lines


def _rule_text(summary: dict[str, Any]) -> str:
    if summary.get("decision_rule", "hard") == "soft":
        return f"mean log-odds over the two orders, tie band {summary.get('tie_band', 0):g}"
    return "a win needs both orders to agree; disagreements are ties"


def _outcome_lines(summary: dict[str, Any]) -> list[str]:
    o, hard = summary["overall"], summary.get("overall_hard") or summary["overall"]
    rule = summary.get("decision_rule", "hard")
    template = f" (template `{summary['template']}`)" if summary.get("template") else ""
    return [
        f"# Win rate: `{summary['policy']}` vs `{summary['baseline']}`",
        "",
        f"Judge: `{summary['judge']}`{template}. Each pair is judged in both orders. "
        f"Decision rule: **{rule}** ({_rule_text(summary)}). Identical responses are not judged and count as ties.",
        "",
        f"**Win rate (ties as ½): {_pct_ci(o['win_rate_half_ties'], o['win_rate_half_ties_ci'])}** "
        f"(95% BCa bootstrap over {o['n_valid']} prompts).",
        "",
        f"| outcome | {rule} rule | 95% CI (Wilson) | count | hard rule |",
        "|---|---|---|---|---|",
        _row("win", format_percent(o["win_rate"]), format_interval(o["win_ci"]), o["wins"], hard["wins"]),
        _row("tie", format_percent(o["tie_rate"]), format_interval(o["tie_ci"]), o["ties"], hard["ties"]),
        _row("loss", format_percent(o["loss_rate"]), format_interval(o["loss_ci"]), o["losses"], hard["losses"]),
        _row(
            "identical responses (not judged)",
            format_percent(o["identical_rate"]),
            "",
            o["identical"],
            hard["identical"],
        ),
        _row("invalid (unparsable or failed replies, excluded)", "", "", o["n_invalid"], hard["n_invalid"]),
        "",
    ]


def _length_lines(lengths: dict[str, Any] | None) -> list[str]:
    if not lengths:
        return []
    longer, not_longer = lengths["policy_longer"], lengths["policy_not_longer"]
    return [
        "## Length",
        "",
        f"Mean length: policy {lengths['policy_mean_words']:.1f} words, "
        f"baseline {lengths['baseline_mean_words']:.1f}.",
        "",
        "| pairs where the policy's response is | pairs | win rate (ties as ½) |",
        "|---|---|---|",
        _row("longer", longer["n"], format_percent(longer["win_rate_half_ties"])),
        _row("not longer", not_longer["n"], format_percent(not_longer["win_rate_half_ties"])),
        "",
    ]


def write_report(summary: dict[str, Any], path: Path) -> None:
    lines = _outcome_lines(summary) + _length_lines(summary.get("lengths"))
    lines += _calibration_lines(summary.get("calibration"))
    lines += [
        "## Per category",
        "",
        "| category | win rate (ties ½) | win | tie | loss | identical | pairs | invalid |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for category, c in summary["per_category"].items():
        lines.append(
            _row(
                category,
                *(format_percent(c[k]) for k in ("win_rate_half_ties", "win_rate", "tie_rate", "loss_rate")),
                c["identical"],
                c["n_valid"],
                c["n_invalid"],
            )
        )
    g = summary["generation"]
    lines += [
        "",
        f"Generation: max_new_tokens {g['max_new_tokens']}, do_sample {g['do_sample']}, seed {g['seed']}.",
        "",
    ]
    path.write_text("\n".join(lines), encoding="utf-8")


def write_chart(summary: dict[str, Any], path: Path) -> None:
    # The object-oriented Figure needs no pyplot backend, so the caller's backend is left alone.
    from matplotlib.figure import Figure

    groups = [("overall", summary["overall"])] + list(summary["per_category"].items())
    labels = [name for name, _ in groups]
    fig = Figure(figsize=(8, 0.5 * len(groups) + 1.5))
    ax = fig.subplots()
    left = [0.0] * len(groups)
    for key, colour in (
        ("win_rate", "#2a9d8f"),
        ("tie_rate", "#e9c46a"),
        ("identical_rate", "#bbbbbb"),
        ("loss_rate", "#e76f51"),
    ):
        values = [0.0 if math.isnan(g[key]) else g[key] for _, g in groups]
        ax.barh(labels, values, left=left, color=colour, label=key.removesuffix("_rate"))
        left = [a + b for a, b in zip(left, values)]
    o = summary["overall"]
    rate, (low, high) = o["win_rate_half_ties"], o["win_rate_half_ties_ci"]
    if not math.isnan(rate):
        ax.errorbar(
            [rate],
            [0],
            xerr=[[max(0.0, rate - low)], [max(0.0, high - rate)]],
            fmt="D",
            color="black",
            capsize=4,
            label="win rate, ties ½ (95% CI)",
        )
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel(f"share of judged pairs ({summary.get('decision_rule', 'hard')} rule, both orders)")
    cal = summary.get("calibration")
    title = f"{Path(str(summary['policy'])).name} vs {Path(str(summary['baseline'])).name}"
    if cal:
        title += f" — judge gold accuracy {format_percent(cal['rule_accuracy'])}"
    ax.set_title(title)
    ax.legend(loc="lower right", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def aggregate_runs(run_dirs: list[str | Path], out: str | Path) -> str:
    """Mean ± std over seeds of each run's headline win rate (ties as ½), as Zhou et al. 2025 (Square-χPO)'s Table 1
    (rows: setting, columns: method).

    Each run's ``summary.json`` carries ``label.setting`` and ``label.method`` (``eval/judge.py
    --setting CTL --method square_chipo``). Writes ``table.md`` and ``table.json``; returns the Markdown.
    """
    groups: dict[tuple[str, str], list[float]] = defaultdict(list)
    calibration: dict[tuple[str, str], list[float]] = defaultdict(list)
    for run in run_dirs:
        summary = json.loads((Path(run) / "summary.json").read_text(encoding="utf-8"))
        key = (
            summary["label"].get("setting", "all"),
            summary["label"].get("method", Path(str(summary["policy"])).name),
        )
        # The headline win rate (ties and identical responses as ½) and the accuracy of the rule it was decided by,
        # as each run printed them.
        groups[key].append(summary["overall"]["win_rate_half_ties"])
        if summary.get("calibration"):
            calibration[key].append(summary["calibration"]["rule_accuracy"])
    settings = sorted({s for s, _ in groups})
    methods = sorted({m for _, m in groups})

    def cell(values: list[float]) -> str:
        if not values:
            return "—"
        mean = 100 * statistics.fmean(values)
        std = 100 * statistics.stdev(values) if len(values) > 1 else 0.0
        return f"{mean:.1f} ± {std:.1f} (n={len(values)})"

    lines = ["| Setting | " + " | ".join(methods) + " |", "|---" * (len(methods) + 1) + "|"]
    for setting in settings:
        lines.append(f"| {setting} | " + " | ".join(cell(groups.get((setting, m), [])) for m in methods) + " |")
    table = "\n".join(lines)
    judge_line = (
        "Judge calibration accuracy (mean over runs): "
        + ", ".join(f"{s}/{m} {100 * statistics.fmean(v):.1f}%" for (s, m), v in sorted(calibration.items()))
        if calibration
        else "Judge not calibrated in these runs."
    )
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    text = f"Win rate (%, ties as ½) against the baseline, mean ± std over seeds.\n\n{table}\n\n{judge_line}\n"
    (out / "table.md").write_text(text, encoding="utf-8")
    (out / "table.json").write_text(
        json.dumps({f"{s}/{m}": v for (s, m), v in groups.items()}, indent=2), encoding="utf-8"
    )
    return text
