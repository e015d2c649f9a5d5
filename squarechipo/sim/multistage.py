"""LP-2ST (001, multi-stage training with RRWithPrior) against LP-1ST (plain RR) on the alignment bandit.

LP-1ST: every label through RR_ε once, Square-χPO with c(ε) on all n rows.
LP-2ST: the n rows are split (``split`` to part 1). Stage 1 fits Square-χPO with RR on part 1. Stage 2
queries each part-2 label once through RRWithPrior with the stage-1 policy's preference as the
prior, p(u ≻ v) = σ(β·h_χPO(u, v)/τ) (τ the temperature), and trains on both parts: RR rows keep the
c(ε) debiasing; rows released from the prior (k* = 1, a function of the prior alone) are
pseudo-labels — dropped or kept with weight ``prior_weight`` and no debiasing. Every label is used
once, so the whole run is ε-label-DP (parallel composition over the two parts).
"""

from __future__ import annotations

import numpy as np
import torch

from squarechipo.losses import margins, square_loss
from squarechipo.privacy.calibration import debias_factor
from squarechipo.privacy.label_dp import rr_with_prior
from squarechipo.privacy.mechanisms import randomized_response
from squarechipo.sim.bandit import Bandit, PreferenceData, fit_tabular

__all__ = ["fit_weighted_square_chipo", "lp1st", "lp2st"]


def fit_weighted_square_chipo(
    bandit: Bandit, data: PreferenceData, scale: np.ndarray, weight: np.ndarray, *, beta: float, clip: float | None
) -> np.ndarray:
    """Σ_i w_i·(2σ(m_i) − 1 − c_i)² / Σ_i w_i per seed, with per-row debiasing c_i and weights w_i."""
    log_ref = torch.log(torch.as_tensor(bandit.ref_policy, dtype=torch.float64))
    seeds = data.context.shape[0]
    s_index = torch.arange(seeds)[:, None]
    x, c, r = (torch.as_tensor(a) for a in (data.context, data.chosen, data.rejected))
    scale_t, weight_t = torch.as_tensor(scale, dtype=torch.float64), torch.as_tensor(weight, dtype=torch.float64)
    norm = weight_t.sum(dim=1, keepdim=True).clamp(min=1e-12) / weight_t.shape[1]

    def row_losses(log_policy):
        m = margins(
            log_policy[s_index, x, c],
            log_policy[s_index, x, r],
            log_ref[x, c],
            log_ref[x, r],
            beta=beta,
            link="chipo",
            clip=clip,
        )
        return weight_t * square_loss(m, scale_t) / norm

    return fit_tabular(log_ref, torch.zeros((seeds, *bandit.reward.shape), dtype=torch.float64), row_losses)


def _rr(data: PreferenceData, epsilon: float, rngs) -> PreferenceData:
    """RR on clean rows (chosen = truly preferred): label 1 = "rejected is preferred", so a released 1 swaps."""
    clean_labels = np.zeros(data.context.shape[1], dtype=bool)
    flips = np.stack([randomized_response(clean_labels, epsilon, rng) for rng in rngs])
    return PreferenceData(
        data.context, np.where(flips, data.rejected, data.chosen), np.where(flips, data.chosen, data.rejected)
    )


def _take(data: PreferenceData, columns: slice) -> PreferenceData:
    return PreferenceData(data.context[:, columns], data.chosen[:, columns], data.rejected[:, columns])


def lp1st(
    bandit: Bandit, clean: PreferenceData, epsilon: float, rngs, *, beta: float, clip: float | None
) -> np.ndarray:
    released = _rr(clean, epsilon, rngs)
    ones = np.ones(clean.context.shape)
    return fit_weighted_square_chipo(bandit, released, debias_factor(epsilon) * ones, ones, beta=beta, clip=clip)


def lp2st(
    bandit: Bandit,
    clean: PreferenceData,
    epsilon: float,
    rngs,
    *,
    beta: float,
    clip: float | None,
    split: float = 0.5,
    temperature: float = 1.0,
    prior_rows: str = "weight",
    prior_weight: float = 1.0,
) -> tuple[np.ndarray, float]:
    """Returns (policies, mean fraction of part-2 rows released from the prior)."""
    if not 0 < split < 1:
        raise ValueError(f"split must be in (0, 1) (got {split}): the fraction of rows in stage 1.")
    if prior_rows not in ("weight", "drop"):
        raise ValueError(f"prior_rows must be 'weight' or 'drop' (got {prior_rows!r}).")
    if not temperature > 0:
        raise ValueError(f"temperature must be positive (got {temperature}).")
    n = clean.context.shape[1]
    cut = int(round(split * n))
    part1 = _rr(_take(clean, slice(0, cut)), epsilon, rngs)
    ones1 = np.ones(part1.context.shape)
    stage1 = fit_weighted_square_chipo(bandit, part1, debias_factor(epsilon) * ones1, ones1, beta=beta, clip=clip)
    part2 = _take(clean, slice(cut, n))
    log_ref = np.log(bandit.ref_policy)
    contexts, chosen, rejected, scale, weight, from_prior_share = [], [], [], [], [], []
    for s, rng in enumerate(rngs):
        x, good, bad = part2.context[s], part2.chosen[s], part2.rejected[s]
        # Present each pair in a random order (u, v); the label is 1 when u is the preferred one.
        swap = rng.random(len(x)) < 0.5
        u, v = np.where(swap, bad, good), np.where(swap, good, bad)
        label = (~swap).astype(np.int64)
        log_pi = np.log(stage1[s])
        h = margins(
            torch.as_tensor(log_pi[x, u]),
            torch.as_tensor(log_pi[x, v]),
            torch.as_tensor(log_ref[x, u]),
            torch.as_tensor(log_ref[x, v]),
            beta=beta,
            link="chipo",
            clip=clip,
        ).numpy()
        p_u = 1.0 / (1.0 + np.exp(-h / temperature))
        released, from_prior = rr_with_prior(label, np.stack([1 - p_u, p_u], axis=1), epsilon, rng)
        u_wins = released == 1
        contexts.append(np.r_[part1.context[s], x])
        chosen.append(np.r_[part1.chosen[s], np.where(u_wins, u, v)])
        rejected.append(np.r_[part1.rejected[s], np.where(u_wins, v, u)])
        c = debias_factor(epsilon)
        scale.append(np.r_[np.full(cut, c), np.where(from_prior, 1.0, c)])
        w_prior = 0.0 if prior_rows == "drop" else prior_weight
        weight.append(np.r_[np.ones(cut), np.where(from_prior, w_prior, 1.0)])
        from_prior_share.append(from_prior.mean())
    data = PreferenceData(np.stack(contexts), np.stack(chosen), np.stack(rejected))
    policies = fit_weighted_square_chipo(bandit, data, np.stack(scale), np.stack(weight), beta=beta, clip=clip)
    return policies, float(np.mean(from_prior_share))
