"""Markdown and PNG reports of win rates, and the multi-seed aggregate in the form of 003's Table 1."""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

__all__ = ["write_report", "write_chart", "aggregate_runs", "format_line"]


def _pct(x: float) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}%"


def _ci(ci) -> str:
    return f"[{_pct(ci[0])}, {_pct(ci[1])}]"


def format_line(summary: dict[str, Any]) -> str:
    """One line: the win rate with its interval, and the judge's calibration beside it."""
    o = summary["overall"]
    line = (
        f"win {_pct(o['win_rate'])} {_ci(o['win_ci'])}, tie {_pct(o['tie_rate'])}, loss {_pct(o['loss_rate'])} "
        f"over {o['n_valid']} pairs ({o['n_invalid']} invalid)"
    )
    cal = summary.get("calibration")
    if cal:
        line += (
            f"; judge calibration accuracy {_pct(cal['accuracy'])} {_ci(cal['accuracy_ci'])}, "
            f"position bias {_pct(cal['position_bias_rate'])} on {cal['n_valid']} gold pairs"
        )
    else:
        line += "; judge not calibrated"
    return line


def write_report(summary: dict[str, Any], path: Path) -> None:
    o = summary["overall"]
    lines = [
        f"# Win rate: `{summary['policy']}` vs `{summary['baseline']}`",
        "",
        f"Judge: `{summary['judge']}` (template `{summary['template']}`). Each pair is judged in both orders; "
        "a win needs both orders to agree, disagreements are ties. Intervals are 95% Wilson intervals.",
        "",
        "| | rate | 95% CI | count |",
        "|---|---|---|---|",
        f"| win | {_pct(o['win_rate'])} | {_ci(o['win_ci'])} | {o['wins']} |",
        f"| tie | {_pct(o['tie_rate'])} | {_ci(o['tie_ci'])} | {o['ties']} |",
        f"| loss | {_pct(o['loss_rate'])} | {_ci(o['loss_ci'])} | {o['losses']} |",
        f"| invalid (unparsable or failed replies, excluded) | | | {o['n_invalid']} |",
        "",
    ]
    cal = summary.get("calibration")
    if cal:
        lines += [
            "## Judge calibration (gold pairs: the test split's chosen vs rejected)",
            "",
            f"Accuracy {_pct(cal['accuracy'])} {_ci(cal['accuracy_ci'])} per judgment, "
            f"{_pct(cal['consistent_accuracy'])} consistent in both orders, position bias "
            f"{_pct(cal['position_bias_rate'])}, on {cal['n_valid']} pairs ({cal['n_invalid']} invalid).",
            "",
        ]
        if cal["accuracy"] is not None and not math.isnan(cal["accuracy"]) and cal["accuracy"] < 0.75:
            lines += ["**Warning:** the judge is weak on gold pairs; read the win rate with care.", ""]
    else:
        lines += ["The judge was not calibrated on gold pairs for this run.", ""]
    lines += ["## Per category", "", "| category | win | tie | loss | pairs | invalid |", "|---|---|---|---|---|---|"]
    for category, c in summary["per_category"].items():
        lines.append(
            f"| {category} | {_pct(c['win_rate'])} | {_pct(c['tie_rate'])} | {_pct(c['loss_rate'])} | "
            f"{c['n_valid']} | {c['n_invalid']} |"
        )
    g = summary["generation"]
    lines += ["", f"Generation: max_new_tokens {g['max_new_tokens']}, do_sample {g['do_sample']}, seed {g['seed']}.", ""]
    path.write_text("\n".join(lines), encoding="utf-8")


def write_chart(summary: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = [("overall", summary["overall"])] + list(summary["per_category"].items())
    labels = [name for name, _ in groups]
    fig, ax = plt.subplots(figsize=(8, 0.5 * len(groups) + 1.5))
    left = [0.0] * len(groups)
    for key, colour in (("win_rate", "#2a9d8f"), ("tie_rate", "#e9c46a"), ("loss_rate", "#e76f51")):
        values = [0.0 if math.isnan(g[key]) else g[key] for _, g in groups]
        ax.barh(labels, values, left=left, color=colour, label=key.split("_")[0])
        left = [a + b for a, b in zip(left, values)]
    o = summary["overall"]
    if not math.isnan(o["win_rate"]):
        ax.errorbar([o["win_rate"]], [0], xerr=[[max(0.0, o["win_rate"] - o["win_ci"][0])], [max(0.0, o["win_ci"][1] - o["win_rate"])]],
                    fmt="none", ecolor="black", capsize=4)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of judged pairs (both orders)")
    cal = summary.get("calibration")
    title = f"{Path(str(summary['policy'])).name} vs {Path(str(summary['baseline'])).name}"
    if cal:
        title += f" — judge accuracy {_pct(cal['accuracy'])}"
    ax.set_title(title)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def aggregate_runs(run_dirs: list[str | Path], out: str | Path) -> str:
    """Mean ± std of the win rate over seeds, as 003's Table 1 (rows: setting, columns: method).

    Each run's ``summary.json`` carries ``label.setting`` and ``label.method`` (``eval/judge.py
    --setting CTL --method square_chipo``). Writes ``table.md`` and ``table.json``; returns the Markdown.
    """
    groups: dict[tuple[str, str], list[float]] = defaultdict(list)
    calibration: dict[tuple[str, str], list[float]] = defaultdict(list)
    for run in run_dirs:
        summary = json.loads((Path(run) / "summary.json").read_text(encoding="utf-8"))
        key = (summary["label"].get("setting", "all"), summary["label"].get("method", Path(str(summary["policy"])).name))
        groups[key].append(summary["overall"]["win_rate"])
        if summary.get("calibration"):
            calibration[key].append(summary["calibration"]["accuracy"])
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
    judge_line = "Judge calibration accuracy (mean over runs): " + ", ".join(
        f"{s}/{m} {100 * statistics.fmean(v):.1f}%" for (s, m), v in sorted(calibration.items())
    ) if calibration else "Judge not calibrated in these runs."
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    text = f"Win rate (%) against the baseline, mean ± std over seeds.\n\n{table}\n\n{judge_line}\n"
    (out / "table.md").write_text(text, encoding="utf-8")
    (out / "table.json").write_text(json.dumps(
        {f"{s}/{m}": v for (s, m), v in groups.items()}, indent=2), encoding="utf-8")
    return text
