"""The alignment-bandit experiment (Zhou et al. 2025 (Square-χPO)): its grid, one point's run (data, label
pipeline, fit or central selection, exact gaps) and its report (rates, privacy, order, robustness, central DP)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from squarechipo.data.label_roles import label_free
from squarechipo.losses import margin_clip
from squarechipo.privacy.mechanisms.calibration import debias_factor
from squarechipo.privacy.mechanisms.measurements import LabelPipeline
from squarechipo.sim import bandit as bd
from squarechipo.sim.experiments.grid import PIPELINE_COLUMNS, by_scale, data_key, epsilon_of, point_key, seed_rngs
from squarechipo.sim.experiments.tables import (
    bootstrap_slope,
    difference_ci,
    draw_errorbars,
    fmt_ci,
    group_metric,
    mean_ci,
    metric_by_seed,
    paired_values,
    plot_curves,
    save_plot,
    verdict_of,
)

__all__ = ["INSTANCE", "BANDIT_COLUMNS", "RATE_NS", "RATE_BETA0", "bandit_grid", "run_bandit_point", "bandit_report"]


#: The default instance: 8 contexts, 6 actions, rewards in [0, 4], β = 0.5, margins clipped to ±2R_max.
INSTANCE = {"num_contexts": 8, "num_actions": 6, "r_max": 4.0, "beta": 0.5, "instance_seed": 0, "num_candidates": 16}


BANDIT_COLUMNS = [
    *PIPELINE_COLUMNS,
    "coverage",
    "beta",
    "seed",
    "gap_best",
    "gap_target",
    "value",
    "concentrability",
    "grad_norm",
    "key",
]


def point_bandit(point: dict) -> bd.Bandit:
    """The fixed bandit instance (:data:`INSTANCE`) at the point's coverage, drawn from the instance seed."""
    inst = INSTANCE
    rng = np.random.default_rng(inst["instance_seed"])
    return bd.make_bandit(inst["num_contexts"], inst["num_actions"], inst["r_max"], point["coverage"], rng)


#: n of the rate studies: large enough that the fixed-β fit's 1/n bias is small next to its n^-1/2 error.
RATE_NS = {"smoke": [2000, 8000], "default": [2000, 4000, 8000, 16000, 32000, 64000]}


#: β of the β ∝ n^-1/2 rate study at the smallest n (Zhou et al. 2025 (Square-χPO), Thm 3.5 chooses β this way).
RATE_BETA0 = 0.5


def bandit_grid(scale: str = "default") -> list[dict]:
    """The bandit studies (Zhou et al. 2025 (Square-χPO)) at a scale of :data:`SCALES`."""
    inf = math.inf
    base = {"alpha": 0.0, "order": "ctl", "adversary": "flip", "coverage": 0.2, "n": 2000, "epsilon": inf}
    points = []

    def add(study, **kw):
        return points.append({**base, "study": study, **kw})

    ns = RATE_NS["smoke" if scale == "smoke" else "default"]
    for n in ns:
        add("rate", method="square_chipo", n=n)
        add("rate_beta", method="square_chipo", n=n, beta=RATE_BETA0 * math.sqrt(ns[0] / n))
    for eps in by_scale(scale, [0.5, inf], [0.1, 0.5, 1.0, 2.0, inf], [0.1, 0.25, 0.5, 1.0, 2.0, 5.0, inf]):
        add("privacy", method="square_chipo", epsilon=eps)
    for eps in by_scale(scale, [1.0], [0.5, 1.0, 2.0], [0.25, 0.5, 1.0, 2.0, 5.0]):
        for order in ("ctl", "ltc"):
            add("order", method="square_chipo", epsilon=eps, alpha=0.2, order=order)
    methods = ("square_chipo", "chipo", "dpo")
    for method in methods:  # the α = 0 reference each method's loss is measured against
        add("robust", method=method, adversary="none")
    for alpha in by_scale(scale, [0.2], [0.1, 0.2, 0.4], [0.1, 0.2, 0.3, 0.4]):
        for adversary in by_scale(scale, ["flip"], ["flip", "fixed"], ["flip", "fixed", "random"]):
            for method in methods:
                add("robust", method=method, alpha=alpha, adversary=adversary)
    for eps in by_scale(scale, [1.0], [0.5, 1.0], [0.25, 0.5, 1.0, 2.0]):
        for method in ("central", "square_chipo"):
            add("central", method=method, epsilon=eps, alpha=0.1)
    if scale == "full":
        for n in ns:
            for eps in (0.5, 1.0, inf):
                for alpha in (0.0, 0.2):
                    add("full_rate", method="square_chipo", n=n, epsilon=eps, alpha=alpha)
    return points


def run_bandit_point(point: dict, seeds: list[int], base_seed: int = 0) -> list[dict]:
    """Every seed of one grid point: data, label pipeline, fit (or central selection), exact gaps."""
    key = point_key(point)
    inst = INSTANCE
    bandit = point_bandit(point)
    rngs = seed_rngs(base_seed, data_key(point), seeds)
    epsilon = epsilon_of(point["epsilon"])
    clip = margin_clip(inst["r_max"])
    beta = point.get("beta", inst["beta"])
    adversary = "flip" if point["adversary"] == "none" else point["adversary"]  # "none": α = 0, no adversary
    # The fixed adversary always writes the worse action as preferred: the worst case for the value.
    worst = bandit.reward[:, :, None] < bandit.reward[:, None, :] if adversary == "fixed" else None
    gradient = math.nan
    if point["method"] == "central":
        # The central curator sees the (possibly corrupted) raw labels: corruption only, no RR.
        corrupt = LabelPipeline(
            epsilon=None,
            corruption_rate=point["alpha"],
            adversary=adversary,
            fixed_preference="worse_action" if adversary == "fixed" else None,
        )
        data = bd.sample_preferences(bandit, point["n"], corrupt, rngs, adversary_prefers=worst)
        # The class is public: drawn from the instance seed, never from the private data.
        candidates = bd.candidate_class(
            bandit, beta, inst["num_candidates"], np.random.default_rng([inst["instance_seed"], 1])
        )
        policies = bd.central_select(
            bandit, candidates, data, beta=beta, clip=clip, epsilon=point["epsilon"], rngs=rngs
        )
        link = "chipo"
    else:
        pipeline = LabelPipeline(
            epsilon=epsilon,
            corruption_rate=point["alpha"],
            adversary=adversary,
            order=point["order"],
            fixed_preference="worse_action" if adversary == "fixed" else None,
        )
        data = bd.sample_preferences(bandit, point["n"], pipeline, rngs, adversary_prefers=worst)
        policies, gradient = bd.fit_policies(
            bandit, data, point["method"], beta=beta, clip=clip, epsilon=epsilon, return_gradient=True
        )
        link = "dpo" if point["method"] in ("dpo", "square_dpo", "rdpo") else "chipo"
    values = bd.value(bandit, policies)
    target = bd.value(bandit, bd.target_policy(bandit, beta, link))
    return [
        {
            **point,
            "beta": beta,
            "seed": s,
            "gap_best": bandit.best_value - v,
            "gap_target": abs(target - v),
            "value": v,
            "concentrability": bandit.concentrability,
            "grad_norm": gradient,
            "key": key,
        }
        for s, v in zip(seeds, values)
    ]


@label_free("simulation results, no row of data")
def bandit_report(rows: list[dict], out: Path) -> list[str]:
    """Print-ready lines for every bandit claim; writes the PNGs next to the CSV."""
    rng = np.random.default_rng(0)
    return [
        *_rate_lines(rows, out, rng),
        *_privacy_lines(rows, out),
        *_order_lines(rows, out),
        *_robust_lines(rows, out),
        *_central_lines(rows, out),
    ]


def _convergence(rows: list[dict], study: str) -> str:
    gradients = [row["grad_norm"] for row in rows if row["study"] == study and not math.isnan(row["grad_norm"])]
    return f"every fit converged to max |∇| ≤ {max(gradients):.1e}" if gradients else "no fits"


def _rate_lines(rows: list[dict], out: Path, rng: np.random.Generator) -> list[str]:
    """[rate]: the two rate statements of Zhou et al. 2025 (Square-χPO), each in its own regime."""
    lines: list[str] = []
    rate = group_metric(rows, "rate", "n", metric="gap_target")
    if rate:
        ns = np.array(sorted(k[0] for k in rate))
        groups = [rate[(n,)] for n in ns]
        slope, low, high = bootstrap_slope(ns, groups, rng)
        lines.append(
            "[rate, fixed β] Zhou et al. 2025 (Square-χPO), Thm 3.5 / Thm C.1 at a fixed β: the error to the method's "
            "own target π*_β falls as n^-1/2 asymptotically. Conditions: Square-χPO, β = 0.5, α = 0, ε = ∞, "
            f"n = {int(ns[0])}–{int(ns[-1])} (below about 2000 the fixed-β fit's 1/n bias dominates), "
            f"{_convergence(rows, 'rate')}."
        )
        lines.append(
            f"       slope of log |J(π*_β) − J(π̂)| on log n = {slope:.3f} (95% CI [{low:.3f}, {high:.3f}]; "
            f"n^-1/2 is −0.5, accept [−0.6, −0.4]): {verdict_of(-0.6 <= slope <= -0.4)}"
        )
        for n, g in zip(ns, groups):
            lines.append(
                f"       n = {int(n):>6}: |J(π*_β) − J(π̂)| = {fmt_ci(g)}, √n·error = {fmt_ci(np.sqrt(n) * g)}"
            )
        lines += _rate_beta_lines(rows, rng)

        def draw(ax):
            draw_errorbars(ax, ns, groups, "square_chipo |J(π*_β) − J(π̂)|, β = 0.5")
            ax.plot(ns, groups[0].mean() * (ns / ns[0]) ** -0.5, "k--", label="n^-1/2")
            beta = group_metric(rows, "rate_beta", "n", metric="gap_best")
            if beta:
                draw_errorbars(ax, ns, [beta[(n,)] for n in ns], "J(π_best) − J(π̂), β ∝ n^-1/2")
            ax.set(xscale="log", yscale="log", xlabel="n", ylabel="gap", title="Rate in n (α = 0, ε = ∞)")
            ax.legend()

        save_plot(out / "bandit_rate.png", draw)
    return lines


def _rate_beta_lines(rows: list[dict], rng: np.random.Generator) -> list[str]:
    rate = group_metric(rows, "rate_beta", "n", metric="gap_best")
    if not rate:
        return []
    ns = np.array(sorted(k[0] for k in rate))
    groups = [rate[(n,)] for n in ns]
    slope, low, high = bootstrap_slope(ns, groups, rng)
    betas = sorted({row["beta"] for row in rows if row["study"] == "rate_beta"}, reverse=True)
    lines = [
        "[rate, β ∝ n^-1/2] Zhou et al. 2025 (Square-χPO), Thm 3.5 with β chosen for n: the gap to the comparator "
        "(here the best policy, C* = 5) is O(n^-1/2). Conditions: Square-χPO, α = 0, ε = ∞, "
        f"β = {betas[0]:g}·√({int(ns[0])}/n) ({betas[0]:g} to {betas[-1]:.3f}), {_convergence(rows, 'rate_beta')}.",
        f"       slope of log(J(π_best) − J(π̂)) on log n = {slope:.3f} (95% CI [{low:.3f}, {high:.3f}]; holds when "
        "the whole interval is at or below −0.4, a decay at least about as fast as n^-1/2): "
        f"{verdict_of(high <= -0.4)}",
    ]
    gaps = [f"       n = {int(n):>6}: J(π_best) − J(π̂) = {fmt_ci(g)}" for n, g in zip(ns, groups)]
    return lines + gaps


def _privacy_lines(rows: list[dict], out: Path) -> list[str]:
    """[privacy]: the gap grows with c(ε)."""
    lines: list[str] = []
    privacy = group_metric(rows, "privacy", "epsilon", metric="gap_target")
    if privacy:
        eps = sorted(k[0] for k in privacy)
        c = np.array([debias_factor(None if e == math.inf else e) for e in eps])
        groups = [privacy[(e,)] for e in eps]
        means = np.array([g.mean() for g in groups])
        order = np.argsort(c)
        monotone = bool(np.all(np.diff(means[order]) >= -np.array([mean_ci(groups[i])[1] for i in order[1:]])))
        lines.append(
            "[privacy] Zhou et al. 2025 (Square-χPO), Thm 3.5: the error grows with c(ε) (the privacy cost). "
            f"Conditions: Square-χPO, CTL, α = 0, β = 0.5, n = 2000: gap grows with c(ε): {verdict_of(monotone)} "
            f"(non-decreasing in c(ε) within the 95% half-widths; corr(log c, gap) = "
            f"{np.corrcoef(np.log(c), means)[0, 1]:.3f})"
        )
        for e, cc, g in zip(eps, c, groups):
            lines.append(f"       ε = {e:>5}: c(ε) = {cc:7.3f}, |J(π*_β) − J(π̂)| = {fmt_ci(g)}")

        def draw(ax):
            draw_errorbars(ax, c, groups, "square_chipo")
            ax.set(xscale="log", xlabel="c(ε)", ylabel="|J(π*_β) − J(π̂)|", title="Cost of local DP (n = 2000)")

        save_plot(out / "bandit_privacy.png", draw)
    return lines


def _order_lines(rows: list[dict], out: Path) -> list[str]:
    """[order]: LTC above CTL, more so as ε shrinks (Zhou et al. 2025 (Square-χPO), §3)."""
    lines: list[str] = []
    order = group_metric(rows, "order", "epsilon", "order", metric="gap_best")
    if order:
        eps = sorted({k[0] for k in order})
        diffs = []
        for e in eps:
            ctl, ltc = order[(e, "ctl")], order[(e, "ltc")]
            d, half = difference_ci(ltc, ctl)
            diffs.append(d)
            lines.append(
                f"[order] Zhou et al. 2025 (Square-χPO), Thm 3.5 (LTC's √(α·c(ε)) against CTL's √α), α = 0.2 flip, "
                f"ε = {e}: "
                f"CTL {fmt_ci(ctl)}, LTC {fmt_ci(ltc)}, LTC − CTL = {d:.4f} ± {half:.4f}: "
                f"LTC above CTL {verdict_of(d - half > 0)}"
            )
        shrinking = all(a >= b for a, b in zip(diffs, diffs[1:]))
        lines.append(
            f"        difference grows as ε shrinks: {verdict_of(shrinking)} ({', '.join(f'{d:.4f}' for d in diffs)} "
            f"for ε = {', '.join(str(e) for e in eps)})"
        )
        plot_curves(
            out / "bandit_ctl_vs_ltc.png",
            eps,
            {o.upper(): [order[(e, o)] for e in eps] for o in ("ctl", "ltc")},
            "ε",
            "CTL vs LTC (α = 0.2)",
        )
    return lines


def _robust_lines(rows: list[dict], out: Path) -> list[str]:
    """[robust]: the loss of value under Huber corruption, against each method's own α = 0 fit."""
    values = metric_by_seed(rows, "robust", "alpha", "adversary", "method")
    if not values:
        return []
    methods = sorted({k[2] for k in values})
    lines = [
        "[robust] Zhou et al. 2025 (Square-χPO), Thm 3.5 (CTL, ε = ∞): under α-Huber corruption the suboptimality "
        "grows at most like √α (graceful); the paper does not claim that Square-χPO beats χPO or DPO. Conditions: "
        "n = 2000, β = 0.5, clip 2R_max; adversaries flip (writes the wrong label) and fixed (always writes the "
        "worse action); loss = J(π̂ at α = 0) − J(π̂ at α), paired by seed (the same clean pairs, then corruption); "
        f"{_convergence(rows, 'robust')}."
    ]
    curves, grow_ok = {}, True
    for adversary in sorted({k[1] for k in values if k[0] > 0}):
        alphas = sorted({k[0] for k in values if k[0] > 0 and k[1] == adversary})
        for method in methods:
            losses = [paired_values(values[(0.0, "none", method)], values[(a, adversary, method)]) for a in alphas]
            curves[f"{method} ({adversary})"] = losses
            means = np.array([loss.mean() for loss in losses])
            # Graceful: the loss shrinks at least as fast as √α as α → 0, i.e. the slope of log loss on log α is
            # at least 0.5 (up to its least-squares standard error); needs a positive loss at every α.
            slope = np.polyfit(np.log(alphas), np.log(np.maximum(means, 1e-12)), 1)[0] if len(alphas) > 1 else None
            ok = slope is not None and bool((means > 0).all()) and slope >= 0.5 - 0.1
            grow_ok &= ok
            shape = f"slope of log loss on log α {slope:.2f}" if slope is not None else "one α"
            lines.append(
                f"         {adversary:5} {method:13}: "
                + ", ".join(f"α = {a:g}: {fmt_ci(loss)}" for a, loss in zip(alphas, losses))
                + f" ({shape}): {verdict_of(ok)}"
            )
        for a in alphas:
            d = paired_values(values[(a, adversary, "square_chipo")], values[(a, adversary, "chipo")])
            if len(d) >= 2:
                mean, half = mean_ci(d)
                result = "no advantage either way" if abs(mean) <= half else ("Square-χPO better" if mean > 0 else
                                                                                "χPO better")  # fmt: skip
                lines.append(
                    f"         {adversary:5} α = {a:g}: J(Square-χPO) − J(χPO) = {mean:+.4f} ± {half:.4f} (paired): "
                    f"{result} (a result, not a claim of the paper)"
                )
    lines.insert(1, f"         the loss grows no faster than √α for every method and adversary: {verdict_of(grow_ok)}")

    def draw(ax):
        for label, losses in curves.items():
            alphas = sorted({k[0] for k in values if k[0] > 0 and k[1] == label.split("(")[1][:-1]})
            draw_errorbars(ax, alphas, losses, label)
        ax.set(xscale="log", yscale="log", xlabel="α", ylabel="J(π̂, α = 0) − J(π̂, α)", title="Huber corruption")
        ax.legend(fontsize="small")

    save_plot(out / "bandit_robust.png", draw)
    return lines


def _central_lines(rows: list[dict], out: Path) -> list[str]:
    """[central]: the central selector against local Square-χPO."""
    lines: list[str] = []
    central = group_metric(rows, "central", "epsilon", "method", metric="gap_best")
    if central:
        eps = sorted({k[0] for k in central})
        for e in eps:
            cen, loc = central[(e, "central")], central[(e, "square_chipo")]
            d, half = difference_ci(loc, cen)
            lines.append(
                f"[central] Zhou et al. 2025 (Square-χPO), Thm 3.7 (central (1 + 1/√ε) against local c(ε)), "
                f"ε = {e}, α = 0.1, "
                f"n = 2000, |Π| = 16: central selection {fmt_ci(cen)} vs local square_chipo "
                f"{fmt_ci(loc)}; local − central = {d:.4f} ± {half:.4f}: central better {verdict_of(d - half > 0)}"
            )
        labels = {"central": "central (exp. mechanism, |Π| = 16)", "square_chipo": "local (square_chipo, CTL)"}
        plot_curves(
            out / "bandit_central_vs_local.png",
            eps,
            {label: [central[(e, m)] for e in eps] for m, label in labels.items()},
            "ε",
            "Central vs local DP",
        )
    return lines
