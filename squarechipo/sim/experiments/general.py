"""General preferences: iterative Square-χPO (Zhou et al. 2025 (Square-χPO), Alg. 3) on the lab's instance, its
grid, run and report."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from squarechipo.data.label_roles import label_free
from squarechipo.privacy.mechanisms.calibration import debias_factor
from squarechipo.privacy.mechanisms.measurements import LabelPipeline
from squarechipo.sim import bandit as bd
from squarechipo.sim import general as gp
from squarechipo.sim.experiments.grid import PIPELINE_COLUMNS, by_scale, epsilon_of, point_key, seed_rngs
from squarechipo.sim.experiments.tables import difference_ci, fmt_ci, group_metric, plot_curves, verdict_of

__all__ = [
    "GENERAL_COLUMNS",
    "GENERAL_INSTANCE",
    "GENERAL_ITERATIONS",
    "general_grid",
    "run_general_point",
    "general_rows_per_seed",
    "general_report",
]


GENERAL_COLUMNS = [*PIPELINE_COLUMNS, "seed", "iterations", "dg_mixture", "dg_last", "model_error", "key"]


#: The non-transitive instance of Zhou et al. 2025 (Square-χPO), §4 (fixed before the first run): 4 contexts, 5 actions
#: in a
#: cyclic tournament of strength γ = 1 plus a transitive part r ~ U[0, 1]; β = 0.05, η = 0.3,
#: m = 4000 unlabelled pairs, |𝓛| = 16 for the central model. The ``fixed`` adversary prefers the
#: lower-indexed action of a pair.
GENERAL_INSTANCE = {
    "num_contexts": 4,
    "num_actions": 5,
    "cycle_strength": 1.0,
    "reward_scale": 1.0,
    "beta": 0.05,
    "eta": 0.3,
    "num_unlabelled": 4000,
    "instance_seed": 0,
    "class_size": 16,
}


#: T at which the mixture of π¹..π^T is scored; one run of T_max iterations gives every prefix.
GENERAL_ITERATIONS = [1, 2, 4, 8, 16, 32]


def general_grid(scale: str = "default") -> list[dict]:
    """Zhou et al. 2025 (Square-χPO), §4 / Thm 4.4: the duality gap in T and n (ε = ∞, α = 0), and CTL / LTC / central
    at ε, α."""
    inf = math.inf
    base = {
        "study": "general_rate",
        "method": "local",
        "epsilon": inf,
        "alpha": 0.0,
        "order": "ctl",
        "adversary": "fixed",
        "n": 4000,
    }
    ns = by_scale(scale, [250, 2000], [250, 2000, 16000], [250, 1000, 4000, 16000, 64000])
    if scale == "smoke":
        base["max_iterations"] = 4  # the plumbing only
    points = [{**base, "n": n} for n in ns]
    for eps in by_scale(scale, [1.0], [1.0], [0.5, 1.0, 2.0]):
        for adversary in by_scale(scale, ["fixed"], ["fixed"], ["fixed", "flip"]):
            for method, order in (("local", "ctl"), ("local", "ltc"), ("central", "ctl")):
                points.append(
                    {
                        **base,
                        "study": "general_order",
                        "method": method,
                        "order": order,
                        "epsilon": eps,
                        "alpha": 0.1,
                        "adversary": adversary,
                    }
                )
    return points


def run_general_point(point: dict, seeds: list[int], base_seed: int = 0) -> list[dict]:
    """Every seed of one point of :func:`general_grid`: labels, preference model, T_max self-play iterations."""
    key = point_key(point)
    inst = GENERAL_INSTANCE
    shape = (inst["num_contexts"], inst["num_actions"], inst["cycle_strength"], inst["reward_scale"])
    instance = gp.make_general_instance(*shape, np.random.default_rng(inst["instance_seed"]))
    rngs = seed_rngs(base_seed, key, seeds)
    epsilon = epsilon_of(point["epsilon"])
    actions = np.arange(inst["num_actions"])
    lower_first = np.broadcast_to(actions[:, None] < actions[None, :], instance.preference.shape)
    if point["method"] == "central":
        corrupt = LabelPipeline(
            epsilon=None, corruption_rate=point["alpha"], adversary=point["adversary"], fixed_preference="lower_index"
        )
        data = bd.sample_pairs(instance.prefer, instance.ref_policy, point["n"], corrupt, rngs, lower_first)
        candidates = gp.preference_class(
            instance, inst["class_size"], np.random.default_rng([inst["instance_seed"], 1])
        )
        model = gp.central_preference_model(candidates, data, point["epsilon"], rngs)
    else:
        pipeline = LabelPipeline(
            epsilon=epsilon,
            corruption_rate=point["alpha"],
            adversary=point["adversary"],
            order=point["order"],
            fixed_preference="lower_index",
        )
        data = bd.sample_pairs(instance.prefer, instance.ref_policy, point["n"], pipeline, rngs, lower_first)
        model = gp.local_preference_model(data, inst["num_contexts"], inst["num_actions"], epsilon)
    result = gp.self_play(
        model,
        instance.ref_policy,
        inst["num_unlabelled"],
        max(_general_iterations(point)),
        beta=inst["beta"],
        eta=inst["eta"],
        rngs=rngs,
    )
    model_error = np.abs(model - instance.preference).mean(axis=(1, 2, 3))
    rows = []
    for t in _general_iterations(point):
        mixture = gp.duality_gap(instance.preference, result.iterates[:t].mean(axis=0))
        last = gp.duality_gap(instance.preference, result.iterates[t])
        rows += [
            {**point, "seed": s, "iterations": t, "dg_mixture": dm, "dg_last": dl, "model_error": e, "key": key}
            for s, dm, dl, e in zip(seeds, mixture, last, model_error)
        ]
    return rows


def _general_iterations(point: dict) -> list[int]:
    return [t for t in GENERAL_ITERATIONS if t <= point.get("max_iterations", GENERAL_ITERATIONS[-1])]


def general_rows_per_seed(point: dict) -> int:
    """How many T one seed of a general-preference point is scored at."""
    return len(_general_iterations(point))


@label_free("simulation results, no row of data")
def general_report(rows: list[dict], out: Path) -> list[str]:
    """Iterative Square-χPO on the non-transitive instance (Zhou et al. 2025 (Square-χPO), §4, Thm 4.4): duality gaps
    in T, n and setting."""
    return [*_general_rate_lines(rows, out), *_general_order_lines(rows, out)]


_DG_LABEL = "DG(π̂), ±1 form"


def _general_rate_lines(rows: list[dict], out: Path) -> list[str]:
    """[general T], [general n]: the mixture's duality gap falls with T and with n."""
    lines: list[str] = []
    dg_label = _DG_LABEL
    rate = group_metric(rows, "general_rate", "n", "iterations", metric="dg_mixture")
    if rate:
        ns = sorted({k[0] for k in rate})
        ts = sorted({k[1] for k in rate})
        t_max = ts[-1]
        for n in ns:
            curve = ", ".join(f"T={int(t)}: {fmt_ci(rate[(n, t)])}" for t in ts)
            first, last = rate[(n, ts[0])], rate[(n, t_max)]
            d, half = difference_ci(first, last)
            lines.append(f"[general T] n = {int(n):>6}, ε = ∞, α = 0: mixture of π¹..π^T: {curve}")
            lines.append(
                f"            DG(T={int(ts[0])}) − DG(T={int(t_max)}) = {d:.4f} ± {half:.4f}: falls with T "
                f"{verdict_of(d - half > 0)}"
            )
        last_iterate = group_metric(rows, "general_rate", "n", "iterations", metric="dg_last")
        lines.append(
            "            last iterate π^{T+1} at T = "
            + f"{int(t_max)}: "
            + ", ".join(f"n={int(n)} {fmt_ci(last_iterate[(n, t_max)])}" for n in ns)
            + " (self-play cycles on a non-transitive game; the mixture is what Alg. 3 returns)"
        )
        ends = [rate[(n, t_max)] for n in ns]
        d, half = difference_ci(ends[0], ends[-1])
        steps = all(a.mean() > b.mean() for a, b in zip(ends, ends[1:]))
        lines.append(
            f"[general n] DG at T = {int(t_max)}: "
            + ", ".join(f"n={int(n)} {fmt_ci(e)}" for n, e in zip(ns, ends))
            + f"; DG(n={int(ns[0])}) − DG(n={int(ns[-1])}) = {d:.4f} ± {half:.4f}: falls with n "
            + verdict_of(d - half > 0 and steps)
        )
        plot_curves(
            out / "general_dg_vs_T.png",
            ts,
            {f"n = {int(n)}": [rate[(n, t)] for t in ts] for n in ns},
            "T (iterations)",
            "Iterative Square-χPO: mixture of iterates",
            ylabel=dg_label,
        )
        plot_curves(
            out / "general_dg_vs_n.png",
            ns,
            {f"T = {int(t)}": [rate[(n, t)] for n in ns] for t in ts[1:]},
            "n (labelled pairs)",
            "Iterative Square-χPO: duality gap in n",
            ylabel=dg_label,
        )
    return lines


def _general_order_lines(rows: list[dict], out: Path) -> list[str]:
    """[general order]: CTL against LTC against the central selector at the last T."""
    lines: list[str] = []
    dg_label = _DG_LABEL
    order = group_metric(
        rows, "general_order", "epsilon", "adversary", "method", "order", "iterations", metric="dg_mixture"
    )
    if order:
        t_max = max(k[4] for k in order)
        for eps, adversary in sorted({(k[0], k[1]) for k in order}):
            ctl, ltc = order[(eps, adversary, "local", "ctl", t_max)], order[(eps, adversary, "local", "ltc", t_max)]
            central = order[(eps, adversary, "central", "ctl", t_max)]
            d, half = difference_ci(ltc, ctl)
            dc, halfc = difference_ci(ctl, central)
            lines.append(
                f"[general order] ε = {eps}, α = 0.1 ({adversary} adversary), n = 4000, T = {int(t_max)}: "
                f"CTL {fmt_ci(ctl)}, LTC {fmt_ci(ltc)}, central {fmt_ci(central)}"
            )
            lines.append(
                f"            LTC − CTL = {d:.4f} ± {half:.4f}: CTL better {verdict_of(d - half > 0)}; "
                f"CTL − central = {dc:.4f} ± {halfc:.4f}: central at least as good {verdict_of(dc + halfc >= 0)} "
                f"(Thm 4.4 terms at this ε: c(ε) = {debias_factor(eps):.2f} vs 1 + 1/√ε = {1 + eps**-0.5:.2f})"
            )
        eps_adv = sorted({(k[0], k[1]) for k in order})
        ts = sorted({k[4] for k in order})
        e0, a0 = eps_adv[0]
        plot_curves(
            out / "general_order.png",
            ts,
            {
                label: [order[(e0, a0, m, o, t)] for t in ts]
                for label, (m, o) in {
                    "local CTL": ("local", "ctl"),
                    "local LTC": ("local", "ltc"),
                    "central (exp. mechanism)": ("central", "ctl"),
                }.items()
            },
            "T (iterations)",
            f"CTL / LTC / central, ε = {e0}, α = 0.1 ({a0})",
            ylabel=dg_label,
        )
    return lines
