"""Over-optimisation as Huang et al. 2024 (χPO) (*Correcting the mythos of KL-regularization: direct alignment without
overoptimization via χ²-preference optimization*) pose it, on a bandit with exact values.

The instance keeps the optimal action well covered (π_ref(a*|x) = 1/2) and makes one bad action rare
(π_ref(a_rare|x) = ``rare_mass``, reward 0, the worst). With n pairs from π_ref the rare action shows up in a
handful of pairs, and now and then wins one by Bradley–Terry noise. DPO's loss keeps rewarding a larger
ratio π/π_ref for such an action (its implicit reward β·log(π/π_ref) is unbounded), so optimised longer it moves
mass onto the rare action: the value rises, then falls. χPO's link ϕ(u) = u + log u grows linearly in the ratio,
which is what Huang et al. 2024 (χPO) show prevents this (the χ² term pays for mass on poorly covered actions).

Policies are tabular, log π_θ = log_softmax(log π_ref + g(θ)), trained full batch with Adam for up to ``steps``
steps and measured at log-spaced checkpoints, every seed at once:

- ``tabular``: g(θ) = θ, unbounded ratios (Assumption 3.3 of Zhou et al. 2025 (Square-χPO) / Huang et al. 2024 (χPO)'s
  bounded implicit reward does not hold);
- ``bounded``: g(θ) = B·tanh(θ/B), so π/π_ref ≤ e^{2B}: the bounded class the theorems assume.

What is measured at each checkpoint: the value lost against the method's own target, J(π*_β) − J(π̂) (the
over-optimisation), the value lost to the rare action E_x π̂(a_rare|x)·(max_a r*(x, a) − r*(x, a_rare)), and J(π̂).
"""

from __future__ import annotations

import numpy as np
import torch

from squarechipo.losses import preference_loss
from squarechipo.sim.bandit import Bandit, PreferenceData, sample_preferences, target_policy, value

__all__ = ["CHECKPOINTS", "CLASSES", "fit_over_steps", "make_overopt_bandit", "rare_loss"]

#: Optimisation steps at which the policies are measured (log-spaced).
CHECKPOINTS = (10, 30, 100, 300, 1000, 3000)
CLASSES = ("tabular", "bounded")


def make_overopt_bandit(
    num_contexts: int, num_actions: int, r_max: float, rare_mass: float, rng: np.random.Generator
) -> Bandit:
    """Rewards uniform in [r_max/4, r_max] but a last, rare action with reward 0; π_ref gives the best action 1/2,
    the rare action ``rare_mass`` and the rest equal shares."""
    reward = rng.uniform(r_max / 4, r_max, size=(num_contexts, num_actions))
    reward[:, -1] = 0.0
    ref = np.full((num_contexts, num_actions), (0.5 - rare_mass) / (num_actions - 2))
    ref[np.arange(num_contexts), reward.argmax(axis=1)] = 0.5
    ref[:, -1] = rare_mass
    return Bandit(reward=reward, ref_policy=ref)


def rare_loss(bandit: Bandit, policies: np.ndarray) -> np.ndarray:
    """E_x π(a_rare|x)·(max_a r*(x, a) − r*(x, a_rare)): the value the policies lose to the rare (last) action."""
    gap = bandit.reward.max(axis=1) - bandit.reward[:, -1]
    return (policies[..., -1] * gap).mean(axis=-1)


def _link(method: str) -> str:
    return "dpo" if method in ("dpo", "square_dpo", "rdpo") else "chipo"


def fit_over_steps(
    bandit: Bandit,
    data: PreferenceData,
    method: str,
    *,
    beta: float,
    policy_class: str,
    bound: float = 2.0,
    learning_rate: float = 0.05,
    steps: tuple[int, ...] = CHECKPOINTS,
) -> dict[int, np.ndarray]:
    """Adam on the method's mean loss per seed, full batch from θ = 0; the policies (S, X, A) at each step count in
    ``steps``. No clip: the theorems' clip at 2R_max would hide what the links do with a large ratio."""
    if policy_class not in CLASSES:
        raise ValueError(f"policy_class must be one of {CLASSES} (got {policy_class!r}).")
    log_ref = torch.log(torch.as_tensor(bandit.ref_policy, dtype=torch.float64))
    seeds = data.context.shape[0]
    index = torch.arange(seeds)[:, None]
    x, chosen, rejected = (torch.as_tensor(a) for a in (data.context, data.chosen, data.rejected))
    theta = torch.zeros((seeds, *bandit.reward.shape), dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.Adam([theta], lr=learning_rate)

    def log_policy():
        shift = theta if policy_class == "tabular" else bound * torch.tanh(theta / bound)
        return torch.log_softmax(log_ref + shift, dim=-1)

    ref_c, ref_r = log_ref[x, chosen], log_ref[x, rejected]
    found: dict[int, np.ndarray] = {}
    for step in range(1, max(steps) + 1):
        optimizer.zero_grad()
        lp = log_policy()
        losses = preference_loss(
            method, lp[index, x, chosen], lp[index, x, rejected], ref_c, ref_r, beta=beta, clip=None
        ).losses
        losses.mean(dim=1).sum().backward()
        optimizer.step()
        if step in steps:
            with torch.no_grad():
                found[step] = torch.exp(log_policy()).numpy()
    return found


def run_point(point: dict, rngs: list[np.random.Generator], instance: dict) -> list[dict]:
    """Every seed and checkpoint of one over-optimisation point: data from π_ref, fit, exact measurements."""
    bandit = make_overopt_bandit(
        instance["num_contexts"],
        instance["num_actions"],
        instance["r_max"],
        point["rare_mass"],
        np.random.default_rng(instance["instance_seed"]),
    )
    data = sample_preferences(bandit, point["n"], None, rngs)
    steps = tuple(t for t in CHECKPOINTS if t <= point.get("max_step", CHECKPOINTS[-1]))
    fits = fit_over_steps(
        bandit, data, point["method"], beta=point["beta"], policy_class=point["policy_class"], steps=steps
    )
    target = float(value(bandit, target_policy(bandit, point["beta"], _link(point["method"]))))
    rows = []
    for step, policies in fits.items():
        values, lost = value(bandit, policies), rare_loss(bandit, policies)
        for seed, (v, r) in enumerate(zip(values, lost)):
            rows.append({"step": step, "seed": seed, "value": v, "overopt": target - v, "rare_loss": r})
    return rows
