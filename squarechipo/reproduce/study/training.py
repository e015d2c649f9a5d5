"""A study's results along training (designs with checkpoints): gold gain, expected win and KL at each epoch over
seeds, in a table, in words (where each arm's mean gain peaked and whether it turned down) and in a plot of gold gain
against KL."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from squarechipo.data.label_roles import label_free
from squarechipo.reproduce.study.claims import metric_at
from squarechipo.reproduce.study.design import StudyDesign
from squarechipo.stats import figure, paired_test

#: The plot of gold gain against KL along training.
TRAINING_PLOT = "along_training.png"


def along_training(records, design: StudyDesign) -> list[dict[str, Any]]:
    """Per arm and checkpoint epoch (designs measured along training): gold gain, expected win and KL over seeds."""
    rows = []
    for arm in design.main_arms if design.checkpoints else ():
        cells = [r for r in records if r["arm"] == arm.key and r.get("checkpoints")]
        for epoch in design.checkpoints if cells else ():
            row = {"arm": arm.key, "label": arm.label, "epoch": epoch, "n": len(cells)}
            for metric in ("gold_gain", "expected_win", "kl"):
                row[metric] = paired_test([metric_at(c, metric, epoch) for c in cells]).to_dict()
            rows.append(row)
    return rows


def along_training_table(summary: dict, design: StudyDesign) -> list[str]:
    if not summary.get("along_training"):
        return []
    epochs = list(design.checkpoints)
    lines = [
        "Gold gain over SFT (r*) and KL(π‖π_ref) (nats) at each epoch, mean over seeds [95% t interval of the gain]:",
        "",
        "| arm | seeds | " + " | ".join(f"epoch {e:g}" for e in epochs) + " |",
        "|---|---|" + "---|" * len(epochs),
    ]
    for label in dict.fromkeys(r["label"] for r in summary["along_training"]):
        rows = [r for r in summary["along_training"] if r["label"] == label]
        cells = [f"{fmt_interval(r['gold_gain'], digits=2)}, KL {figure(r['kl']['mean'], 1)}" for r in rows]
        lines.append(f"| {label} | {rows[0]['n']} | " + " | ".join(cells) + " |")
    return [*lines, "", *turn_down_lines(summary["along_training"]), ""]


@label_free("result records of released-label runs, no row of data")
def turn_down_lines(rows: list[dict]) -> list[str]:
    """Per arm, in words: the checkpoint with the highest mean gold gain and where the mean ended, with the largest
    mean KL. Observations on the means, not findings: whether an arm turns down is its claim's question, so no word
    here says it peaked, fell or did not."""
    lines = []
    for label in dict.fromkeys(r["label"] for r in rows):
        curve = [r for r in rows if r["label"] == label]
        gains = [r["gold_gain"]["mean"] for r in curve]
        top = int(np.argmax(gains))
        largest_kl = max(r["kl"]["mean"] for r in curve)
        if top < len(curve) - 1:
            lines.append(
                f"- {label}: highest mean gold gain at epoch {curve[top]['epoch']:g} of {len(curve)} checkpoints "
                f"({_signed(gains[top])} r*, KL {figure(curve[top]['kl']['mean'], 1)}); at the end "
                f"{_signed(gains[-1] - gains[top])} "
                f"r* from it (KL {figure(curve[-1]['kl']['mean'], 1)}); largest mean KL {figure(largest_kl, 1)} nats."
            )
        else:
            lines.append(
                f"- {label}: highest mean gold gain at the last of {len(curve)} checkpoints "
                f"({_signed(gains[-1])} r*); "
                f"largest mean KL {figure(largest_kl, 1)} nats."
            )
    return lines


def write_training_plot(records, design: StudyDesign, path: Path) -> None:
    """Gold gain against KL along training: one curve per cell (method and seed) from the SFT policy through its
    checkpoints, a panel per label setting."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = list(dict.fromkeys((a.setting, a.epsilon) for a in design.main_arms))
    figure, axes = plt.subplots(1, len(settings), figsize=(5.5 * len(settings), 4.5), squeeze=False, sharey=True)
    methods = list(dict.fromkeys(a.method for a in design.main_arms))
    for axis, (setting, epsilon) in zip(axes[0], settings):
        lowest = 0.0  # a sampled KL estimate can be below 0; otherwise the axis starts at the SFT policy
        for arm in (a for a in design.main_arms if (a.setting, a.epsilon) == (setting, epsilon)):
            colour = f"C{methods.index(arm.method)}"
            for index, cell in enumerate(r for r in records if r["arm"] == arm.key and r.get("checkpoints")):
                # Each curve starts at the SFT policy, (0, 0), as the matched-KL claim reads it.
                kl = [0.0, *(metric_at(cell, "kl", e) for e in design.checkpoints)]
                gain = [0.0, *(metric_at(cell, "gold_gain", e) for e in design.checkpoints)]
                lowest = min(lowest, *kl)
                label = arm.label.split(",")[0] if index == 0 else None
                axis.plot(kl, gain, marker="o", markersize=3, alpha=0.7, color=colour, label=label)
                axis.annotate(f"{design.checkpoints[-1]:g}", (kl[-1], gain[-1]), fontsize=6, color=colour)
        axis.axhline(0, color="grey", linewidth=0.5)
        axis.set_xscale("symlog", linthresh=1.0)
        axis.set_xlim(left=lowest)
        axis.set_xlabel("KL(π‖π_ref), nats (from the policy's samples)")
        axis.set_title(arm.label.split(", ")[-1] if design.main_arms else "")
        axis.legend(fontsize=8)
    axes[0][0].set_ylabel("gold reward gain over SFT, r*")
    figure.suptitle(f"Along training: epochs {', '.join(f'{e:g}' for e in design.checkpoints)}; one curve per seed")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def fmt_interval(test: dict, scale: float = 1.0, digits: int = 1) -> str:
    if math.isnan(test["low"]):
        return figure(test["mean"], digits, scale=scale, minus="-")
    low, high = (figure(test[k], digits, scale=scale, minus="-") for k in ("low", "high"))
    return f"{figure(test['mean'], digits, scale=scale, minus='-')} [{low}, {high}]"


def reference_lines(plan: dict, design: StudyDesign) -> list[str]:
    """Which epoch each over-optimisation claim measures its fall from (fixed in the pre-registration)."""
    reference = plan.get("reference_epochs") or {}
    arms = {a.key: a.label for a in design.main_arms}
    named = dict.fromkeys(arm for c in design.all_claims if c.measures_a_drop for arm in c.arms if arm in reference)
    if not named:
        return []
    epochs = "; ".join(f"{arms[arm]}: epoch {reference[arm]:g}" for arm in named)
    return [
        f"A fall is an arm's gold gain at its reference epoch minus its gain at epoch {design.epochs:g}, paired by "
        f"seed; each reference epoch was fixed in the pre-registration from the pilot ({epochs}).",
        "",
    ]


def _signed(value: float) -> str:
    return figure(value, 2, signed=True, minus="-")
