"""The alignment bandit of Zhou et al. 2025 (Square-χPO) with exact suboptimality gaps.

Contexts x ~ uniform over X, actions a ∈ A, a true reward r*(x, a) ∈ [0, R_max], preferences under
Bradley–Terry: P(a⁰ ≻ a¹ | x) = σ(r*(x, a⁰) − r*(x, a¹)). Pairs are drawn from π_ref, whose
coverage of the optimal action is set exactly: π_ref(a*(x)|x) = q, the rest uniform, so the
single-policy concentrability of the optimal policy is C* = max_x 1/π_ref(a*|x) = 1/q.

Policies are tabular: log π_θ = log_softmax(log π_ref + θ), trained full-batch in float64 with the
core loss library (:func:`squarechipo.losses.preference_loss`), every seed of a grid point at once.
J(π) = E_x Σ_a π(a|x) r*(x, a) is exact; the distance to the best policy is reported, and to the method's own
population target π*_β: the KL-regularised optimum for a DPO link, the χ²+KL-regularised one for a χPO link
(Zhou et al. 2025 (Square-χPO), eq. 3).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from squarechipo.losses import METHODS, margins, preference_loss
from squarechipo.privacy.mechanisms.calibration import flip_probability
from squarechipo.privacy.mechanisms.measurements import LabelPipeline
from squarechipo.select.exponential import row_square_losses, select_index

__all__ = [
    "Bandit",
    "PreferenceData",
    "make_bandit",
    "fit_tabular",
    "sample_pairs",
    "sample_preferences",
    "fit_policies",
    "value",
    "target_policy",
    "candidate_class",
    "central_select",
]


@dataclass(frozen=True)
class Bandit:
    """An instance: rewards (X, A) in [0, R_max] and the reference policy (X, A)."""

    reward: np.ndarray
    ref_policy: np.ndarray

    @property
    def best_value(self) -> float:
        return float(self.reward.max(axis=1).mean())

    @property
    def concentrability(self) -> float:
        """C* = max_x π*(a*|x)/π_ref(a*|x) for the deterministic optimal policy."""
        best = self.reward.argmax(axis=1)
        return float((1.0 / self.ref_policy[np.arange(len(best)), best]).max())


def make_bandit(
    num_contexts: int, num_actions: int, r_max: float, coverage: float, rng: np.random.Generator
) -> Bandit:
    """Uniform rewards in [0, R_max]; π_ref puts mass ``coverage`` on each context's best action."""
    if not 0 < coverage < 1:
        raise ValueError(f"coverage must be in (0, 1) (got {coverage}); it is π_ref(a*|x).")
    reward = rng.uniform(0.0, r_max, size=(num_contexts, num_actions))
    ref = np.full((num_contexts, num_actions), (1.0 - coverage) / (num_actions - 1))
    ref[np.arange(num_contexts), reward.argmax(axis=1)] = coverage
    return Bandit(reward=reward, ref_policy=ref)


@dataclass(frozen=True)
class PreferenceData:
    """Seeds × rows of (context, chosen action, rejected action) as stored after the label pipeline."""

    context: np.ndarray  # (S, n)
    chosen: np.ndarray  # (S, n)
    rejected: np.ndarray  # (S, n)


def sample_preferences(
    bandit: Bandit,
    n: int,
    pipeline: LabelPipeline | None,
    rngs: list[np.random.Generator],
    adversary_prefers: np.ndarray | None = None,
) -> PreferenceData:
    """Draw n pairs per seed from π_ref, true BT labels, then the label pipeline (None = clean); the ``fixed``
    adversary writes ``adversary_prefers`` (see :func:`sample_pairs`)."""
    r = bandit.reward
    prefer = 1.0 / (1.0 + np.exp(-(r[:, :, None] - r[:, None, :])))
    return sample_pairs(prefer, bandit.ref_policy, n, pipeline, rngs, adversary_prefers)


def sample_pairs(
    prefer: np.ndarray,
    ref_policy: np.ndarray,
    n: int,
    pipeline: LabelPipeline | None,
    rngs: list[np.random.Generator],
    adversary_prefers: np.ndarray | None = None,
) -> PreferenceData:
    """n rows per seed: x uniform, a⁰, a¹ ~ π_ref(x), a⁰ preferred w.p. ``prefer[x, a⁰, a¹]``, then the pipeline.

    ``prefer`` (X, A, A) is any preference probability P(a ≻ b | x): Bradley–Terry or general
    (Zhou et al. 2025 (Square-χPO), §4). ``adversary_prefers`` (X, A, A) booleans is what the ``fixed`` adversary
    writes (a ≻ b).
    """
    num_contexts, num_actions = ref_policy.shape
    cdf = np.cumsum(ref_policy, axis=1)
    contexts, chosen, rejected = [], [], []
    for rng in rngs:
        x = rng.integers(num_contexts, size=n)
        a0 = np.minimum((rng.random(n)[:, None] > cdf[x]).sum(axis=1), num_actions - 1)
        a1 = np.minimum((rng.random(n)[:, None] > cdf[x]).sum(axis=1), num_actions - 1)
        first_preferred = rng.random(n) < prefer[x, a0, a1]
        fixed = None if adversary_prefers is None else adversary_prefers[x, a0, a1]
        observed = (
            first_preferred
            if pipeline is None
            else pipeline.apply(first_preferred, rng, fixed_labels=fixed).astype(bool)
        )
        contexts.append(x)
        chosen.append(np.where(observed, a0, a1))
        rejected.append(np.where(observed, a1, a0))
    return PreferenceData(np.stack(contexts), np.stack(chosen), np.stack(rejected))


def _gather(log_policy: torch.Tensor, data: PreferenceData) -> tuple[torch.Tensor, torch.Tensor]:
    seeds = torch.arange(log_policy.shape[0])[:, None]
    x = torch.as_tensor(data.context)
    return log_policy[seeds, x, torch.as_tensor(data.chosen)], log_policy[seeds, x, torch.as_tensor(data.rejected)]


#: A fit has converged when the largest entry of the loss gradient is below this (float64, per seed and entry).
GRAD_TOLERANCE = 1e-7


def fit_tabular(
    log_ref: torch.Tensor,
    theta: torch.Tensor,
    row_losses,
    max_iter: int = 300,
    *,
    rounds: int = 1,
    tolerance: float = GRAD_TOLERANCE,
    return_gradient: bool = False,
):
    """Minimise Σ_seeds mean(row_losses(log π_θ)) over tabular θ (L-BFGS, float64), from ``theta``.

    log π_θ = log_softmax(log π_ref + θ); ``row_losses`` maps (S, X, A) log-policies to (S, rows) losses. L-BFGS runs
    ``max_iter`` iterations at a time, restarted (up to ``rounds`` times) until the largest gradient entry is at most
    ``tolerance`` (a restart loses L-BFGS's history, so prefer one long run: the bandit studies' :func:`fit_policies`
    runs up to 5000 iterations, once more if needed, and reports how far each fit is from stationary instead of
    stopping at a fixed count). Returns the fitted policies (S, X, A), and with ``return_gradient`` also that largest
    gradient entry; raises if the fit produced a non-finite policy.
    """
    theta = theta.detach().clone().requires_grad_(True)

    def objective():
        return row_losses(torch.log_softmax(log_ref + theta, dim=-1)).mean(dim=1).sum()

    gradient = math.inf
    for _ in range(rounds):
        optimizer = torch.optim.LBFGS(
            [theta],
            lr=1.0,
            max_iter=max_iter,
            tolerance_grad=tolerance,
            tolerance_change=1e-15,
            history_size=20,
            line_search_fn="strong_wolfe",
        )

        def closure(optimizer=optimizer):
            optimizer.zero_grad()
            loss = objective()
            loss.backward()
            return loss

        optimizer.step(closure)
        theta.grad = None
        objective().backward()
        gradient = float(theta.grad.abs().max())
        if not math.isfinite(gradient) or gradient <= tolerance:
            break
    with torch.no_grad():
        policies = torch.softmax(log_ref + theta, dim=-1).numpy()
    if not np.isfinite(policies).all():
        raise FloatingPointError("the fit diverged (non-finite policy); losses unbounded below need a clip.")
    return (policies, gradient) if return_gradient else policies


def fit_policies(
    bandit: Bandit,
    data: PreferenceData,
    method: str,
    *,
    beta: float,
    clip: float | None,
    epsilon: float | None,
    max_iter: int = 5000,
    return_gradient: bool = False,
):
    """Minimise the method's mean loss per seed (L-BFGS to a gradient tolerance, float64); returns policies
    (S, X, A), and with ``return_gradient`` the largest gradient entry at the end (:func:`fit_tabular`).

    The learner knows ε (public) and debiases with c(ε) (square losses) or the RR flip rate (robust
    log losses); it does not know the corruption rate α.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {tuple(METHODS)} (got {method!r}).")
    log_ref = torch.log(torch.as_tensor(bandit.ref_policy, dtype=torch.float64))
    seeds = data.context.shape[0]
    ref_chosen, ref_rejected = _gather(log_ref.expand(seeds, -1, -1), data)

    def row_losses(log_policy):
        chosen, rejected = _gather(log_policy, data)
        return preference_loss(
            method,
            chosen,
            rejected,
            ref_chosen,
            ref_rejected,
            beta=beta,
            clip=clip,
            flip_rate=flip_probability(epsilon),
        ).losses

    try:
        return fit_tabular(
            log_ref,
            torch.zeros((seeds, *bandit.reward.shape), dtype=torch.float64),
            row_losses,
            max_iter,
            rounds=2,
            return_gradient=return_gradient,
        )
    except FloatingPointError as error:
        raise FloatingPointError(
            f"{method}: the fit diverged (non-finite policy). Losses unbounded below (robust log) need a clip: "
            "pass clip = 2·R_max."
        ) from error


def value(bandit: Bandit, policy: np.ndarray) -> np.ndarray:
    """J(π) = E_x Σ_a π(a|x) r*(x, a), exact; ``policy`` may have leading (seed) dimensions."""
    return (policy * bandit.reward).sum(axis=-1).mean(axis=-1)


def _solve_chi_ratio(u: np.ndarray) -> np.ndarray:
    """w > 0 with w + log w = u (Newton on t = log w; the map is increasing and convex)."""
    t = np.where(u > 1.0, np.log(np.maximum(u, 1.0)), u - 1.0)
    t = np.minimum(t, u)
    for _ in range(60):
        t = t - (np.exp(t) + t - u) / (np.exp(t) + 1.0)
    return np.exp(t)


def target_policy(bandit: Bandit, beta: float, link: str, reward: np.ndarray | None = None) -> np.ndarray:
    """π*_β for a link: argmax_π E[Σ π r] − β·D(π‖π_ref), D = KL (dpo) or χ² + KL (chipo)
    (Zhou et al. 2025 (Square-χPO), eq. 3)."""
    r = bandit.reward if reward is None else reward
    ref = bandit.ref_policy
    if link == "dpo":
        logits = np.log(ref) + r / beta
        logits -= logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        return p / p.sum(axis=1, keepdims=True)
    if link != "chipo":
        raise ValueError(f"link must be dpo or chipo (got {link!r}).")
    # Stationarity: β(w + log w) = r − λ(x), w = π/π_ref; λ(x) by bisection so that Σ_a π_ref w = 1.
    low = (r.min(axis=1) - beta * 60.0)[:, None]
    high = (r.max(axis=1) + beta * 60.0)[:, None]
    for _ in range(200):
        mid = 0.5 * (low + high)
        mass = (ref * _solve_chi_ratio((r - mid) / beta)).sum(axis=1, keepdims=True)
        low, high = np.where(mass > 1.0, mid, low), np.where(mass > 1.0, high, mid)
    p = ref * _solve_chi_ratio((r - 0.5 * (low + high)) / beta)
    return p / p.sum(axis=1, keepdims=True)


def candidate_class(bandit: Bandit, beta: float, size: int, rng: np.random.Generator) -> np.ndarray:
    """A finite class Π chosen without the private data: π_ref and χPO targets of noisy rewards (K, X, A)."""
    r_max = float(bandit.reward.max())
    scales = np.linspace(0.1, 1.0, size - 1) * r_max
    noisy = [bandit.reward + rng.normal(0.0, s, size=bandit.reward.shape) for s in scales]
    return np.stack([bandit.ref_policy] + [target_policy(bandit, beta, "chipo", r) for r in noisy])


def central_select(
    bandit: Bandit,
    candidates: np.ndarray,
    data: PreferenceData,
    *,
    beta: float,
    clip: float | None,
    epsilon: float,
    rngs: list[np.random.Generator],
) -> np.ndarray:
    """Zhou et al. 2025 (Square-χPO), Algorithm 2 per seed: L(π) = Σ_i (2σ(m_i) − 2)² on the raw labels, sampled by
    ``select_index``."""
    log_candidates = torch.log(torch.as_tensor(candidates, dtype=torch.float64))
    log_ref = torch.log(torch.as_tensor(bandit.ref_policy, dtype=torch.float64))
    chosen_policies = []
    for s, rng in enumerate(rngs):
        x = torch.as_tensor(data.context[s])
        c, r = torch.as_tensor(data.chosen[s]), torch.as_tensor(data.rejected[s])
        m = margins(
            log_candidates[:, x, c],
            log_candidates[:, x, r],
            log_ref[x, c],
            log_ref[x, r],
            beta=beta,
            link="chipo",
            clip=clip,
        )
        losses = row_square_losses(m).sum(dim=1).numpy()
        chosen_policies.append(candidates[select_index(losses, epsilon, rng)])
    return np.stack(chosen_policies)
