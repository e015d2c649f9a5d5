"""Label-DP mechanisms: the multi-stage LP-1ST / LP-2ST experiment (Ghazi et al. 2021 (label DP)) and the K-ary
mechanisms' report."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from squarechipo.data.label_roles import label_free
from squarechipo.losses import margin_clip
from squarechipo.sim import bandit as bd
from squarechipo.sim import multistage as ms
from squarechipo.sim.experiments.bandit import INSTANCE, point_bandit
from squarechipo.sim.experiments.grid import by_scale, point_key, seed_rngs
from squarechipo.sim.experiments.tables import fmt_ci, group_metric, mean_ci, plot_curves, save_plot

__all__ = [
    "MULTISTAGE_COLUMNS",
    "MULTISTAGE_METHODS",
    "multistage_grid",
    "run_multistage_point",
    "multistage_report",
    "kary_report",
]


MULTISTAGE_COLUMNS = [
    "study",
    "method",
    "n",
    "epsilon",
    "split",
    "seed",
    "gap_best",
    "gap_target",
    "prior_share",
    "key",
]


MULTISTAGE_METHODS = ("lp1st", "lp2st", "lp2st_drop")


def multistage_grid(scale: str = "default") -> list[dict]:
    """LP-2ST vs LP-1ST (Ghazi et al. 2021 (label DP)) on the bandit of :data:`INSTANCE` (coverage 0.2, n = 2000)
    across ε."""
    eps = by_scale(scale, [0.5, 2.0], [0.1, 0.5, 1.0, 2.0], [0.1, 0.25, 0.5, 1.0, 2.0, 4.0])
    splits = by_scale(scale, [0.5], [0.5], [0.3, 0.5, 0.7])
    return [
        {"study": "multistage", "n": 2000, "epsilon": e, "split": sp, "coverage": 0.2, "temperature": 1.0}
        for e in eps
        for sp in splits
    ]


def run_multistage_point(point: dict, seeds: list[int], base_seed: int = 0) -> list[dict]:
    """LP-1ST, LP-2ST (prior rows weighted 1) and LP-2ST (prior rows dropped) on the same clean rows per seed."""
    key = point_key(point)
    inst = INSTANCE
    bandit = point_bandit(point)
    beta, clip = inst["beta"], margin_clip(inst["r_max"])
    target = bd.value(bandit, bd.target_policy(bandit, beta, "chipo"))
    rows = []
    for method in MULTISTAGE_METHODS:
        rngs = seed_rngs(base_seed, key, seeds)  # the same clean rows and noise stream for every method
        clean = bd.sample_preferences(bandit, point["n"], None, rngs)
        share = 0.0
        if method == "lp1st":
            policies = ms.lp1st(bandit, clean, point["epsilon"], rngs, beta=beta, clip=clip)
        else:
            policies, share = ms.lp2st(
                bandit,
                clean,
                point["epsilon"],
                rngs,
                beta=beta,
                clip=clip,
                split=point["split"],
                temperature=point["temperature"],
                prior_rows="drop" if method == "lp2st_drop" else "weight",
            )
        values = bd.value(bandit, policies)
        rows += [
            {
                **point,
                "method": method,
                "seed": s,
                "gap_best": bandit.best_value - v,
                "gap_target": abs(target - v),
                "prior_share": share,
                "key": key,
            }
            for s, v in zip(seeds, values)
        ]
    return rows


@label_free("simulation results, no row of data")
def multistage_report(rows: list[dict], out: Path) -> list[str]:
    """LP-2ST vs LP-1ST (Ghazi et al. 2021 (label DP)) on the bandit, paired by seed (same clean rows)."""
    lines = []
    gaps = group_metric(rows, "multistage", "epsilon", "split", "method", metric="gap_best")
    shares = group_metric(rows, "multistage", "epsilon", "split", "method", metric="prior_share")
    points = sorted({(k[0], k[1]) for k in gaps})
    for eps, split in points:
        one = gaps[(eps, split, "lp1st")]
        parts = []
        for method in ("lp2st", "lp2st_drop"):
            diff = one - gaps[(eps, split, method)]  # paired: > 0 means LP-2ST better
            mean, half = mean_ci(diff)
            verdict = (
                "LP-2ST better"
                if mean - half > 0
                else "LP-1ST better"
                if mean + half < 0
                else "no significant difference"
            )
            parts.append(
                f"{method} {fmt_ci(gaps[(eps, split, method)])} (LP-1ST − it = {mean:+.4f} ± {half:.4f}: {verdict})"
            )
        lines.append(
            f"[multistage] Ghazi et al. 2021 (label DP), LP-2ST vs LP-1ST, ε = {eps}, split {split}, n = 2000: "
            f"LP-1ST {fmt_ci(one)}; "
            + "; ".join(parts)
            + f"; part-2 rows released from the prior: {shares[(eps, split, 'lp2st')].mean():.1%}"
        )
    if points:
        split0 = points[0][1]
        eps = [p[0] for p in points if p[1] == split0]
        plot_curves(
            out / "multistage_lp2st.png",
            eps,
            {m: [gaps[(e, split0, m)] for e in eps] for m in ("lp1st", "lp2st", "lp2st_drop")},
            "ε",
            f"LP-2ST vs LP-1ST (Ghazi et al. 2021 (label DP)), split {split0}",
        )
    return lines


def kary_report(out: Path, ks=(2, 4, 8, 16, 32, 64), epsilons=(0.5, 1.0, 2.0, 4.0)) -> list[str]:
    """Chua et al. 2024 (local label DP): exact per-sample variance Σ_k Var(a_k) of the unbiased analyzers, K-RR vs the
    subset mechanism."""
    from squarechipo.privacy.mechanisms.label_dp import analyzer_variance

    lines = []
    curves = {}
    for eps in epsilons:
        krr = np.array([analyzer_variance("k_rr", k, eps) for k in ks])
        sub = np.array([analyzer_variance("subset", k, eps) for k in ks])
        slope_krr = np.polyfit(np.log(ks[1:]), np.log(krr[1:]), 1)[0]
        slope_sub = np.polyfit(np.log(ks[1:]), np.log(sub[1:]), 1)[0]
        ratio = ", ".join(f"K={k}: {a / b:.2f}" for k, a, b in zip(ks, krr, sub))
        lines.append(
            f"[kary] ε = {eps}: Var(K-RR)/Var(subset) {ratio}; variance ∝ K^{slope_krr:.2f} (K-RR) vs "
            f"K^{slope_sub:.2f} (subset), i.e. ℓ2 error ∝ K^{slope_krr / 2:.2f} vs K^{slope_sub / 2:.2f} "
            f"(Chua et al. 2024 (local label DP): K vs √K for ε = O(1)); subset beats K-RR from K = "
            + str(next((k for k, a, b in zip(ks, krr, sub) if b < a), "never"))
        )
        curves[f"K-RR ε={eps}"] = krr
        curves[f"subset ε={eps}"] = sub

    def draw(ax):
        for label, values in curves.items():
            ax.plot(ks, values, marker="o", ls="--" if label.startswith("K-RR") else "-", label=label)
        ax.set(
            xscale="log",
            yscale="log",
            xlabel="K",
            ylabel="Σ_k Var(a_k) per sample",
            title="Unbiased K-ary analyzers (Chua et al. 2024 (local label DP))",
        )
        ax.legend(fontsize=6)

    save_plot(out / "kary_variance.png", draw)
    return lines
