"""Private Bradley–Terry reward estimation (Chowdhury et al. 2024 (private reward estimation), §6): its grid, run
and report."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from squarechipo.data.label_roles import label_free
from squarechipo.privacy.mechanisms.calibration import debias_factor
from squarechipo.sim import bt
from squarechipo.sim.experiments.grid import by_scale, point_key, seed_rngs
from squarechipo.sim.experiments.tables import draw_errorbars, fmt_ci, group_metric, save_plot, verdict_of

__all__ = ["BT_COLUMNS", "bt_grid", "BT_NS", "BT_DELTA", "run_bt_point", "bt_report"]


BT_COLUMNS = ["study", "estimator", "n", "epsilon", "d", "seed", "error", "key"]


def bt_grid(scale: str = "default") -> list[dict]:
    """Chowdhury et al. 2024 (private reward estimation), Figure 1: d = 5 (default), plus d = 3 and 10 in the full
    grid; every estimator and ε."""
    points = []
    for d in by_scale(scale, [5], [5], [3, 5, 10]):
        points.append({"study": "bt", "estimator": "mle", "epsilon": math.inf, "d": d})
        for eps in by_scale(scale, (1.0,), (0.1, 0.5, 1.0), (0.1, 0.5, 1.0)):
            for estimator in ("objective_perturbation", "rr_mle", "sgd_rr", "sgd_rr_averaged"):
                points.append({"study": "bt", "estimator": estimator, "epsilon": eps, "d": d})
    return points


BT_NS = [1000, 2000, 4000, 7000, 10000]


BT_DELTA = 1e-3


def run_bt_point(point: dict, seeds: list[int], base_seed: int = 0) -> list[dict]:
    """All trials (seeds) of one estimator at every n of :data:`BT_NS`, on shared θ* and data per trial."""
    key = point_key(point)
    d = point["d"]
    # θ*, features and true labels depend on (d, trial) only, so every estimator sees the same data.
    data_rng = np.random.default_rng([base_seed, d, 7])
    theta_star = data_rng.standard_normal((max(seeds) + 1, d))[seeds]
    feature_bound = math.sqrt(d) + 2.0
    x, y = bt.sample_bt(theta_star, max(BT_NS), feature_bound, data_rng)
    rng = seed_rngs(base_seed, key, [0])[0]
    radius = 3.0 * math.sqrt(d)  # Θ_B; ‖θ*‖ ≤ B except with negligible probability
    estimates = {}
    if point["estimator"] == "sgd_rr":
        estimates = bt.sgd_rr(x, y, point["epsilon"], radius, feature_bound, rng, BT_NS)
    elif point["estimator"] == "sgd_rr_averaged":
        estimates = bt.sgd_rr_averaged(x, y, point["epsilon"], radius=radius, rng=rng, checkpoints=BT_NS)
    else:
        for n in BT_NS:
            if point["estimator"] == "mle":
                estimates[n] = bt.mle(x[:, :n], y[:, :n], radius)
            elif point["estimator"] == "rr_mle":
                estimates[n] = bt.rr_mle(x[:, :n], y[:, :n], point["epsilon"], radius, rng)
            else:
                estimates[n] = bt.objective_perturbation(
                    x[:, :n], y[:, :n], point["epsilon"], BT_DELTA, feature_bound, radius, rng
                )
    rows = []
    for n in BT_NS:
        errors = np.linalg.norm(estimates[n] - theta_star, axis=1)
        rows += [{**point, "n": n, "seed": s, "error": e, "key": key} for s, e in zip(seeds, errors)]
    return rows


@label_free("simulation results, no row of data")
def bt_report(rows: list[dict], out: Path) -> list[str]:
    lines = []
    errors = group_metric(rows, "bt", "d", "estimator", "epsilon", "n", metric="error")
    for d in sorted({k[0] for k in errors}):
        ns = sorted({k[3] for k in errors if k[0] == d})
        eps = sorted({k[2] for k in errors if k[0] == d and k[1] != "mle"})
        mle = {n: errors[(d, "mle", math.inf, n)] for n in ns}
        all_ok = True
        for e in eps:
            c = debias_factor(e)
            for n in ns:
                central, local = errors[(d, "objective_perturbation", e, n)], errors[(d, "rr_mle", e, n)]
                ok = mle[n].mean() < central.mean() < local.mean()
                all_ok &= ok
                sgd = {
                    name: errors[(d, name, e, n)].mean() / mle[n].mean()
                    for name in ("sgd_rr", "sgd_rr_averaged")
                    if (d, name, e, n) in errors
                }
                sgd_text = ", ".join(f"{name}/MLE = {ratio:.2f}" for name, ratio in sgd.items())
                lines.append(
                    f"[bt d={int(d)}] ε = {e}, n = {int(n):>5}: MLE {fmt_ci(mle[n])} < central {fmt_ci(central)} "
                    f"< local θ̂_RR {fmt_ci(local)}: {verdict_of(ok)}; θ̂_RR/MLE = {local.mean() / mle[n].mean():6.2f} "
                    f"beside c(ε) = (e^ε+1)/(e^ε−1) = {c:.2f}" + (f"; {sgd_text}" if sgd_text else "")
                )
        lines.append(
            f"[bt d={int(d)}] ordering non-private < central < local (θ̂_RR) at every n and ε: {verdict_of(all_ok)}"
        )

        def draw(ax, d=d, ns=ns, eps=eps, mle=mle):
            draw_errorbars(ax, ns, [mle[n] for n in ns], "MLE (non-private)", color="k")
            for e, colour in zip(eps, ("C0", "C1", "C2", "C3")):
                draw_errorbars(
                    ax, ns, [errors[(d, "objective_perturbation", e, n)] for n in ns], f"central ε={e}", color=colour
                )
                draw_errorbars(
                    ax, ns, [errors[(d, "rr_mle", e, n)] for n in ns], f"local θ̂_RR ε={e}", color=colour, ls="--"
                )
                if (d, "sgd_rr_averaged", e, ns[0]) in errors:
                    draw_errorbars(
                        ax,
                        ns,
                        [errors[(d, "sgd_rr_averaged", e, n)] for n in ns],
                        f"local SGD-RR (averaged) ε={e}",
                        color=colour,
                        ls=":",
                    )
            ax.set(
                yscale="log",
                xlabel="n",
                ylabel="‖θ̂ − θ*‖₂",
                title=f"Private BT estimation (d = {int(d)}; Chowdhury et al. 2024 (private reward estimation), "
                "Fig. 1)",
            )
            ax.legend(fontsize=6)

        save_plot(out / f"bt_error_d{int(d)}.png", draw)
    return lines
