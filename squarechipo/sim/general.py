"""A non-transitive preference instance for iterative Square-χPO (Zhou et al. 2025 (Square-χPO), §4, Algorithm 3), with
exact duality gaps.

Contexts x ~ uniform over X, an odd number A of actions. The true preference is general:

    ℓ*(x, a, b) = 2P*(a ≻ b | x) − 1 = tanh(r(x, a) − r(x, b) + γ·C(a, b)),

where C is the cyclic tournament of A actions (a beats b when (a − b) mod A ∈ {1, …, (A−1)/2}; for
A = 3 it is rock-paper-scissors) and r a transitive part. With γ large enough no action beats all
others and the minimax (von Neumann) winner is a mixed policy. ℓ* is antisymmetric, so the game is
symmetric and its value is 0; the duality gap of Zhou et al. 2025 (Square-χPO), §4 (in ±1 form) is then exact:

    DG(π) = max_π' ℓ*(π', π) − min_π' ℓ*(π, π') = 2·E_x max_a Σ_b ℓ*(x, a, b)·π(b|x) ≥ 0,

zero exactly at a minimax winner.

Algorithm 3 step by step, all seeds at once:
1. preference-model estimation from the labelled rows (:func:`local_preference_model`: least squares
   to c(ε)·z̄ over every antisymmetric tabular ℓ ∈ [−1, 1], solved in closed form;
   :func:`central_preference_model`: the exponential mechanism over a public finite class);
2. unlabelled pairs D_x from π_ref; for t = 1..T draw one b̃ ~ π^t(x) per context, r̂ᵗ(x, a) =
   ℓ̂(x, a, b̃), and fit π^{t+1} by the regression of eq. (11) (:func:`self_play`);
3. the output is the uniform mixture of π¹..π^T (π¹ = π_ref), as in the paper; the last iterate is returned too, for
   comparison.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from squarechipo.losses import self_play_loss, self_play_margin
from squarechipo.privacy.mechanisms.calibration import debias_factor
from squarechipo.select.exponential import row_preference_losses, select_index
from squarechipo.sim.bandit import PreferenceData, fit_tabular

__all__ = [
    "GeneralInstance",
    "make_general_instance",
    "duality_gap",
    "minimax_winner",
    "local_preference_model",
    "central_preference_model",
    "preference_class",
    "self_play",
    "SelfPlayResult",
]


@dataclass(frozen=True)
class GeneralInstance:
    """ℓ*(x, a, b) as an (X, A, A) antisymmetric array in [−1, 1] and π_ref (X, A)."""

    preference: np.ndarray
    ref_policy: np.ndarray

    @property
    def prefer(self) -> np.ndarray:
        """P*(a ≻ b | x) = (1 + ℓ*)/2, the probability the labels are drawn from."""
        return 0.5 * (1.0 + self.preference)


def cyclic_tournament(num_actions: int) -> np.ndarray:
    """C(a, b) = +1 if a beats b in the cyclic tournament, −1 if b beats a, 0 on the diagonal (A odd)."""
    if num_actions < 3 or num_actions % 2 == 0:
        raise ValueError(f"num_actions must be odd and at least 3 for a cyclic tournament (got {num_actions}).")
    diff = (np.arange(num_actions)[:, None] - np.arange(num_actions)[None, :]) % num_actions
    return np.where(diff == 0, 0.0, np.where(diff <= (num_actions - 1) // 2, 1.0, -1.0))


def make_general_instance(
    num_contexts: int, num_actions: int, cycle_strength: float, reward_scale: float, rng: np.random.Generator
) -> GeneralInstance:
    """ℓ* = tanh(r_a − r_b + γ·C(a, b)) with r ~ U[0, reward_scale]; π_ref ~ Dirichlet(2·1) per context."""
    reward = rng.uniform(0.0, reward_scale, size=(num_contexts, num_actions))
    logits = reward[:, :, None] - reward[:, None, :] + cycle_strength * cyclic_tournament(num_actions)[None]
    ref = rng.dirichlet(np.full(num_actions, 2.0), size=num_contexts)
    return GeneralInstance(preference=np.tanh(logits), ref_policy=ref)


def duality_gap(preference: np.ndarray, policy: np.ndarray) -> np.ndarray:
    """DG(π) = 2·E_x max_a (ℓ*(x) π(x))_a for an antisymmetric ℓ* (Zhou et al. 2025 (Square-χPO), §4, ±1 form);
    ``policy`` (…, X, A)."""
    payoff = np.einsum("xab,...xb->...xa", preference, policy)
    return 2.0 * payoff.max(axis=-1).mean(axis=-1)


def minimax_winner(preference: np.ndarray) -> np.ndarray:
    """The von Neumann winner per context by linear programming (max_p min_b Σ_a p_a ℓ*(a, b))."""
    from scipy.optimize import linprog

    num_contexts, num_actions, _ = preference.shape
    policy = np.empty((num_contexts, num_actions))
    for x in range(num_contexts):
        # variables (p_1..p_A, v): maximise v s.t. Σ_a p_a ℓ(a, b) ≥ v ∀b, Σ p = 1, p ≥ 0
        cost = np.r_[np.zeros(num_actions), -1.0]
        upper = np.c_[-preference[x].T, np.ones(num_actions)]
        result = linprog(
            cost,
            A_ub=upper,
            b_ub=np.zeros(num_actions),
            A_eq=[np.r_[np.ones(num_actions), 0.0]],
            b_eq=[1.0],
            bounds=[(0, None)] * num_actions + [(None, None)],
            method="highs",
        )
        policy[x] = np.clip(result.x[:num_actions], 0.0, None)
    return policy / policy.sum(axis=1, keepdims=True)


def local_preference_model(
    data: PreferenceData, num_contexts: int, num_actions: int, epsilon: float | None
) -> np.ndarray:
    """Zhou et al. 2025 (Square-χPO), eq. (10): argmin over antisymmetric tabular ℓ ∈ [−1, 1] of Σ_i (ℓ(x_i, a⁰_i,
    a¹_i) − c(ε)·z̄_i)².

    Stored rows read chosen ≻ rejected, so each row says ℓ(x, chosen, rejected) ≈ c(ε). By
    antisymmetry every unordered pair {a, b} is one free value v, and the loss is Σ (v − y_i)² with
    y_i = ±c(ε): the minimiser is the mean of the y_i clipped to [−1, 1] (0 where a pair has no row).
    Returns (S, X, A, A).
    """
    scale = debias_factor(epsilon)
    seeds = data.context.shape[0]
    sums = np.zeros((seeds, num_contexts, num_actions, num_actions))
    counts = np.zeros_like(sums)
    for s in range(seeds):
        np.add.at(sums[s], (data.context[s], data.chosen[s], data.rejected[s]), scale)
        np.add.at(sums[s], (data.context[s], data.rejected[s], data.chosen[s]), -scale)
        np.add.at(counts[s], (data.context[s], data.chosen[s], data.rejected[s]), 1.0)
        np.add.at(counts[s], (data.context[s], data.rejected[s], data.chosen[s]), 1.0)
    mean = np.divide(sums, counts, out=np.zeros_like(sums), where=counts > 0)
    diagonal = np.eye(num_actions, dtype=bool)
    return np.where(diagonal, 0.0, np.clip(mean, -1.0, 1.0))


def preference_class(instance: GeneralInstance, size: int, rng: np.random.Generator) -> np.ndarray:
    """A finite public class 𝓛 (K, X, A, A), drawn without the private data: the transitive-only model,
    and ℓ* with its logits perturbed by noise of growing scale (antisymmetric by construction)."""
    logits = np.arctanh(np.clip(instance.preference, -1 + 1e-12, 1 - 1e-12))
    members = [np.zeros_like(logits)]
    for scale in np.linspace(0.0, 1.5, size - 1):
        noise = rng.normal(0.0, scale, size=logits.shape)
        members.append(np.tanh(logits + noise - np.swapaxes(noise, -1, -2)))
    return np.stack(members)


def central_preference_model(
    candidates: np.ndarray, data: PreferenceData, epsilon: float, rngs: list[np.random.Generator]
) -> np.ndarray:
    """Zhou et al. 2025 (Square-χPO), Alg. 3, central branch: sample ℓ ∈ 𝓛 ∝ exp(−ε·L(ℓ)/8), L(ℓ) = Σ_i (ℓ(x_i, a⁺_i,
    a⁻_i) − 1)².

    Each row's loss lies in [0, 4] (sensitivity 4), so this is :func:`select_index` on the raw
    (possibly corrupted) labels. Returns the sampled model per seed (S, X, A, A).
    """
    chosen = []
    for s, rng in enumerate(rngs):
        losses = row_preference_losses(candidates[:, data.context[s], data.chosen[s], data.rejected[s]]).sum(axis=1)
        chosen.append(candidates[select_index(losses, epsilon, rng)])
    return np.stack(chosen)


@dataclass(frozen=True)
class SelfPlayResult:
    """The iterates π¹..π^{T+1} (T+1, S, X, A); ``mixture`` = mean of π¹..π^T (the output of Alg. 3)."""

    iterates: np.ndarray

    @property
    def mixture(self) -> np.ndarray:
        return self.iterates[:-1].mean(axis=0)


def self_play(
    preference_model: np.ndarray,
    ref_policy: np.ndarray,
    num_unlabelled: int,
    iterations: int,
    *,
    beta: float,
    eta: float,
    rngs: list[np.random.Generator],
    max_iter: int = 60,
) -> SelfPlayResult:
    """Policy optimisation of Zhou et al. 2025 (Square-χPO), Algorithm 3 (lines 8–13), every seed at once.

    D_x: ``num_unlabelled`` triples (x, a, b), x uniform, a, b ~ π_ref. For t = 1..T: one b̃ ~ π^t(x)
    per context and seed, r̂ᵗ(x, a) = ℓ̂(x, a, b̃), and π^{t+1} = argmin Σ (clip_4(f) − r̂ᵗ_diff)²
    with f of eq. (8), fitted by L-BFGS from π^t (tabular softmax policies around π_ref).
    """
    if iterations < 1:
        raise ValueError(f"iterations (T) must be at least 1 (got {iterations}).")
    seeds = len(rngs)
    num_contexts, num_actions = ref_policy.shape

    def draw(rng, probs):
        return np.minimum(
            (rng.random(probs.shape[:-1])[..., None] > np.cumsum(probs, -1)).sum(-1),
            num_actions - 1,
        )

    x = np.stack([rng.integers(num_contexts, size=num_unlabelled) for rng in rngs])
    a = np.stack([draw(rng, ref_policy[xs]) for rng, xs in zip(rngs, x)])
    b = np.stack([draw(rng, ref_policy[xs]) for rng, xs in zip(rngs, x)])
    seed_index = np.arange(seeds)[:, None]
    log_ref = torch.log(torch.as_tensor(ref_policy, dtype=torch.float64))

    def gather(table, actions):
        return table[torch.as_tensor(seed_index), torch.as_tensor(x), torch.as_tensor(actions)]

    ref_a, ref_b = gather(log_ref.expand(seeds, -1, -1), a), gather(log_ref.expand(seeds, -1, -1), b)
    theta = torch.zeros((seeds, num_contexts, num_actions), dtype=torch.float64)
    policy = np.broadcast_to(ref_policy, (seeds, num_contexts, num_actions)).copy()
    iterates = [policy]
    for _ in range(iterations):
        opponent = np.stack([draw(rng, policy[s]) for s, rng in enumerate(rngs)])  # b̃ (S, X)
        reward = np.take_along_axis(preference_model, opponent[:, :, None, None], axis=3)[..., 0]  # r̂ᵗ (S, X, A)
        target = torch.as_tensor(reward[seed_index, x, a] - reward[seed_index, x, b])
        log_previous = torch.log(torch.as_tensor(policy))
        previous_a, previous_b = gather(log_previous, a), gather(log_previous, b)

        def row_losses(log_policy, previous_a=previous_a, previous_b=previous_b, target=target):
            f = self_play_margin(
                gather(log_policy, a), gather(log_policy, b), previous_a, previous_b, ref_a, ref_b, beta=beta, eta=eta
            )
            return self_play_loss(f, target)

        policy = fit_tabular(log_ref, theta, row_losses, max_iter)
        theta = torch.log(torch.as_tensor(policy)) - log_ref
        iterates.append(policy)
    return SelfPlayResult(np.stack(iterates))
