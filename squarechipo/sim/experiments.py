"""Grids and runners of the simulation lab; results go to CSV, one row per (grid point, seed).

A grid point is a dict of parameters; its key (``point_key``) names it in the CSV, and a re-run skips every point whose
rows are all there (resumable). Each seed's randomness comes from ``numpy.random.default_rng([base_seed, crc32(key),
seed])``, so a point reproduces bit for bit whatever else ran before it.
"""

from __future__ import annotations

import csv
import json
import math
import zlib
from collections.abc import Iterable
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from squarechipo.losses import margin_clip
from squarechipo.privacy.measurements import LabelPipeline
from squarechipo.sim import bandit as bd
from squarechipo.sim import bt, overopt
from squarechipo.sim import general as gp
from squarechipo.sim import multistage as ms

__all__ = [
    "BANDIT_COLUMNS",
    "BT_COLUMNS",
    "GENERAL_COLUMNS",
    "GENERAL_INSTANCE",
    "bandit_grid",
    "bt_grid",
    "general_grid",
    "multistage_grid",
    "run_multistage_point",
    "run_overopt_point",
    "general_rows_per_seed",
    "overopt_rows_per_seed",
    "overopt_grid",
    "OVEROPT_COLUMNS",
    "OVEROPT_INSTANCE",
    "OVEROPT_SEEDS",
    "SCALES",
    "MULTISTAGE_COLUMNS",
    "point_key",
    "run_bandit_point",
    "run_bt_point",
    "run_general_point",
    "run_grid",
    "INSTANCE",
]

#: The default instance: 8 contexts, 6 actions, rewards in [0, 4], β = 0.5, margins clipped to ±2R_max.
INSTANCE = {"num_contexts": 8, "num_actions": 6, "r_max": 4.0, "beta": 0.5, "instance_seed": 0, "num_candidates": 16}
#: Seeds per over-optimisation point. The effect comes from rare events (the rare action winning a pair), so its
#: per-seed differences are heavy-tailed. Sized from the first default run at 20 seeds (the pilot): the per-seed SD
#: of DPO − χPO at step 3000 was 0.114 (β = 0.2) and of DPO − Square-χPO 0.088 (β = 0.05), for differences of 0.05
#: and 0.027; 80% power at two-sided α = 0.05 needs 41 and 83 seeds: 100.
OVEROPT_SEEDS = 100
#: The over-optimisation instance (fixed before its first run): as INSTANCE, with π_ref(a*|x) = 1/2 and a rare
#: worst action of mass 0.002 (:func:`squarechipo.sim.overopt.make_overopt_bandit`).
OVEROPT_INSTANCE = {"num_contexts": 8, "num_actions": 6, "r_max": 4.0, "instance_seed": 0, "rare_mass": 0.002}

#: The label-pipeline columns every alignment study shares (the bandit and the general-preference lab).
_PIPELINE_COLUMNS = ["study", "method", "n", "epsilon", "alpha", "order", "adversary"]
BANDIT_COLUMNS = [
    *_PIPELINE_COLUMNS,
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
OVEROPT_COLUMNS = [
    "study",
    "method",
    "n",
    "beta",
    "policy_class",
    "step",
    "seed",
    "value",
    "overopt",
    "rare_loss",
    "key",
]
BT_COLUMNS = ["study", "estimator", "n", "epsilon", "d", "seed", "error", "key"]
GENERAL_COLUMNS = [*_PIPELINE_COLUMNS, "seed", "iterations", "dg_mixture", "dg_last", "model_error", "key"]

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


def point_key(point: dict) -> str:
    return json.dumps(point, sort_keys=True)


def _rngs(base_seed: int, key: str, seeds: Iterable[int]) -> list[np.random.Generator]:
    return [np.random.default_rng([base_seed, zlib.crc32(key.encode()), s]) for s in seeds]


#: Parameters that do not change a study's data, only what is done with it: every value of them sees the same draws
#: for a seed, so comparisons across them are paired by seed (the robust study: methods, α and adversaries share the
#: clean pairs and labels, the corruption's own draws come after; the over-optimisation study: methods share data).
_PAIRED = {"robust": ("method", "alpha", "adversary"), "overopt": ("method",)}


def _data_key(point: dict) -> str:
    shared = _PAIRED.get(point["study"], ())
    return point_key({k: v for k, v in point.items() if k not in shared})


def _eps(value) -> float | None:
    return None if value is None or math.isinf(value) else float(value)


def _point_bandit(point: dict) -> bd.Bandit:
    """The fixed bandit instance (:data:`INSTANCE`) at the point's coverage, drawn from the instance seed."""
    inst = INSTANCE
    rng = np.random.default_rng(inst["instance_seed"])
    return bd.make_bandit(inst["num_contexts"], inst["num_actions"], inst["r_max"], point["coverage"], rng)


# ----------------------------------------------------------------------------- grids


#: Grid sizes: ``smoke`` (seconds: every study at its smallest, to check an install), ``default`` (minutes) and
#: ``full`` (hours).
SCALES = ("smoke", "default", "full")
#: n of the rate studies: large enough that the fixed-β fit's 1/n bias is small next to its n^-1/2 error.
RATE_NS = {"smoke": [2000, 8000], "default": [2000, 4000, 8000, 16000, 32000, 64000]}
#: β of the β ∝ n^-1/2 rate study at the smallest n (Zhou et al. 2025 (Square-χPO), Thm 3.5 chooses β this way).
RATE_BETA0 = 0.5


def _pick(scale: str, smoke, default, full):
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES} (got {scale!r}).")
    return {"smoke": smoke, "default": default, "full": full}[scale]


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
    for eps in _pick(scale, [0.5, inf], [0.1, 0.5, 1.0, 2.0, inf], [0.1, 0.25, 0.5, 1.0, 2.0, 5.0, inf]):
        add("privacy", method="square_chipo", epsilon=eps)
    for eps in _pick(scale, [1.0], [0.5, 1.0, 2.0], [0.25, 0.5, 1.0, 2.0, 5.0]):
        for order in ("ctl", "ltc"):
            add("order", method="square_chipo", epsilon=eps, alpha=0.2, order=order)
    methods = ("square_chipo", "chipo", "dpo")
    for method in methods:  # the α = 0 reference each method's loss is measured against
        add("robust", method=method, adversary="none")
    for alpha in _pick(scale, [0.2], [0.1, 0.2, 0.4], [0.1, 0.2, 0.3, 0.4]):
        for adversary in _pick(scale, ["flip"], ["flip", "fixed"], ["flip", "fixed", "random"]):
            for method in methods:
                add("robust", method=method, alpha=alpha, adversary=adversary)
    for eps in _pick(scale, [1.0], [0.5, 1.0], [0.25, 0.5, 1.0, 2.0]):
        for method in ("central", "square_chipo"):
            add("central", method=method, epsilon=eps, alpha=0.1)
    if scale == "full":
        for n in ns:
            for eps in (0.5, 1.0, inf):
                for alpha in (0.0, 0.2):
                    add("full_rate", method="square_chipo", n=n, epsilon=eps, alpha=alpha)
    return points


def overopt_grid(scale: str = "default") -> list[dict]:
    """Over-optimisation as Huang et al. 2024 pose it (:mod:`squarechipo.sim.overopt`): methods × β × n × policy
    class, each measured along optimisation steps."""
    points = []
    for n in _pick(scale, [500], [500], [500, 2000]):
        for beta in _pick(scale, [0.2], [0.05, 0.2], [0.02, 0.05, 0.2, 0.5]):
            for policy_class in overopt.CLASSES:
                for method in ("dpo", "chipo", "square_chipo"):
                    point = {"study": "overopt", "method": method, "n": n, "beta": beta, "policy_class": policy_class}
                    point["rare_mass"] = OVEROPT_INSTANCE["rare_mass"]
                    if scale == "smoke":
                        point["max_step"] = 100  # the plumbing only: over-optimisation shows after ~300 steps
                    points.append(point)
    return points


def bt_grid(scale: str = "default") -> list[dict]:
    """Chowdhury et al. 2024 (private reward estimation), Figure 1: d = 5 (default), plus d = 3 and 10 in the full
    grid; every estimator and ε."""
    points = []
    for d in _pick(scale, [5], [5], [3, 5, 10]):
        points.append({"study": "bt", "estimator": "mle", "epsilon": math.inf, "d": d})
        for eps in _pick(scale, (1.0,), (0.1, 0.5, 1.0), (0.1, 0.5, 1.0)):
            for estimator in ("objective_perturbation", "rr_mle", "sgd_rr", "sgd_rr_averaged"):
                points.append({"study": "bt", "estimator": estimator, "epsilon": eps, "d": d})
    return points


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
    ns = _pick(scale, [250, 2000], [250, 2000, 16000], [250, 1000, 4000, 16000, 64000])
    if scale == "smoke":
        base["max_iterations"] = 4  # the plumbing only
    points = [{**base, "n": n} for n in ns]
    for eps in _pick(scale, [1.0], [1.0], [0.5, 1.0, 2.0]):
        for adversary in _pick(scale, ["fixed"], ["fixed"], ["fixed", "flip"]):
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


def multistage_grid(scale: str = "default") -> list[dict]:
    """LP-2ST vs LP-1ST (Ghazi et al. 2021 (label DP)) on the bandit of :data:`INSTANCE` (coverage 0.2, n = 2000)
    across ε."""
    eps = _pick(scale, [0.5, 2.0], [0.1, 0.5, 1.0, 2.0], [0.1, 0.25, 0.5, 1.0, 2.0, 4.0])
    splits = _pick(scale, [0.5], [0.5], [0.3, 0.5, 0.7])
    return [
        {"study": "multistage", "n": 2000, "epsilon": e, "split": sp, "coverage": 0.2, "temperature": 1.0}
        for e in eps
        for sp in splits
    ]


BT_NS = [1000, 2000, 4000, 7000, 10000]
BT_DELTA = 1e-3


# ----------------------------------------------------------------------------- runners


def run_bandit_point(point: dict, seeds: list[int], base_seed: int = 0) -> list[dict]:
    """Every seed of one grid point: data, label pipeline, fit (or central selection), exact gaps."""
    key = point_key(point)
    inst = INSTANCE
    bandit = _point_bandit(point)
    rngs = _rngs(base_seed, _data_key(point), seeds)
    epsilon = _eps(point["epsilon"])
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


def overopt_rows_per_seed(point: dict) -> int:
    """How many checkpoints one seed of an over-optimisation point writes."""
    return sum(t <= point.get("max_step", overopt.CHECKPOINTS[-1]) for t in overopt.CHECKPOINTS)


def run_overopt_point(point: dict, seeds: list[int], base_seed: int = 0) -> list[dict]:
    """Every seed and checkpoint of one over-optimisation point (:func:`squarechipo.sim.overopt.run_point`)."""
    key = point_key(point)
    rows = overopt.run_point(point, _rngs(base_seed, _data_key(point), seeds), OVEROPT_INSTANCE)
    return [{**point, **row, "seed": seeds[row["seed"]], "key": key} for row in rows]


def run_bt_point(point: dict, seeds: list[int], base_seed: int = 0) -> list[dict]:
    """All trials (seeds) of one estimator at every n of :data:`BT_NS`, on shared θ* and data per trial."""
    key = point_key(point)
    d = point["d"]
    # θ*, features and true labels depend on (d, trial) only, so every estimator sees the same data.
    data_rng = np.random.default_rng([base_seed, d, 7])
    theta_star = data_rng.standard_normal((max(seeds) + 1, d))[seeds]
    feature_bound = math.sqrt(d) + 2.0
    x, y = bt.sample_bt(theta_star, max(BT_NS), feature_bound, data_rng)
    rng = _rngs(base_seed, key, [0])[0]
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


def run_general_point(point: dict, seeds: list[int], base_seed: int = 0) -> list[dict]:
    """Every seed of one point of :func:`general_grid`: labels, preference model, T_max self-play iterations."""
    key = point_key(point)
    inst = GENERAL_INSTANCE
    shape = (inst["num_contexts"], inst["num_actions"], inst["cycle_strength"], inst["reward_scale"])
    instance = gp.make_general_instance(*shape, np.random.default_rng(inst["instance_seed"]))
    rngs = _rngs(base_seed, key, seeds)
    epsilon = _eps(point["epsilon"])
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


def run_multistage_point(point: dict, seeds: list[int], base_seed: int = 0) -> list[dict]:
    """LP-1ST, LP-2ST (prior rows weighted 1) and LP-2ST (prior rows dropped) on the same clean rows per seed."""
    key = point_key(point)
    inst = INSTANCE
    bandit = _point_bandit(point)
    beta, clip = inst["beta"], margin_clip(inst["r_max"])
    target = bd.value(bandit, bd.target_policy(bandit, beta, "chipo"))
    rows = []
    for method in MULTISTAGE_METHODS:
        rngs = _rngs(base_seed, key, seeds)  # the same clean rows and noise stream for every method
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


def _done_keys(path: Path, columns: list[str], expected_rows: dict[str, int]) -> set[str]:
    """Keys with all their rows in ``path``; rows of a point cut off mid-write are removed."""
    if not path.exists():
        return set()
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["key"]] = counts.get(row["key"], 0) + 1
    complete = {key for key, count in counts.items() if count >= expected_rows.get(key, 0)}
    if len(complete) < len(counts):
        with path.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=columns, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(row for row in rows if row["key"] in complete)
    return complete


def run_grid(
    points: list[dict],
    runner,
    columns: list[str],
    path: Path,
    seeds: list[int],
    rows_per_seed=1,
    base_seed: int = 0,
    desc: str = "grid",
) -> int:
    """Run the points not yet in ``path`` (CSV), appending each point's rows as soon as it finishes.

    ``rows_per_seed``: the rows one seed of a point writes (a number, or a function of the point)."""
    per_seed = rows_per_seed if callable(rows_per_seed) else (lambda point: rows_per_seed)
    expected = {point_key(p): len(seeds) * per_seed(p) for p in points}
    done = _done_keys(path, columns, expected)
    todo = [p for p in points if point_key(p) not in done]
    path.parent.mkdir(parents=True, exist_ok=True)
    new_file = not path.exists()
    with path.open("a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, extrasaction="ignore")
        if new_file:
            writer.writeheader()
        for point in tqdm(todo, desc=desc, unit="point"):
            writer.writerows(runner(point, seeds, base_seed))
            handle.flush()
    return len(todo)
