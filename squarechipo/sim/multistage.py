"""LP-2ST (Ghazi et al. 2021 (label DP), multi-stage training with RRWithPrior) against LP-1ST (plain RR) on the
alignment bandit.

LP-1ST: every label through RR_ε once, Square-χPO with c(ε) on all n rows.
LP-2ST: the n rows are split (``split`` to part 1). Stage 1 fits Square-χPO with RR on part 1. Stage 2
queries each part-2 label once through RRWithPrior with the stage-1 policy's preference as the
prior, p(u ≻ v) = σ(β·h_χPO(u, v)/τ) (τ the temperature), and trains on both parts: RR rows keep the
c(ε) debiasing; rows released from the prior (k* = 1, a function of the prior alone) are
pseudo-labels — dropped or kept with weight ``prior_weight`` and no debiasing. Every label is used
once, so the whole run is ε-label-DP (parallel composition over the two parts).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from squarechipo.losses import margins, square_loss
from squarechipo.privacy.mechanisms.binary import randomized_response
from squarechipo.privacy.mechanisms.calibration import debias_factor
from squarechipo.privacy.mechanisms.label_dp import rr_with_prior
from squarechipo.sim.bandit import Bandit, PreferenceData, fit_tabular

__all__ = ["TwoStageRelease", "fit_weighted_square_chipo", "lp1st", "lp2st", "lp2st_release"]


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


class TwoStageRelease(NamedTuple):
    """LP-2ST's training rows (part 1 then part 2, per seed): ``data``, per-row debiasing ``scale`` and
    ``weight``, and ``from_prior`` (seeds, n) marking part-2 rows released from the prior."""

    data: PreferenceData
    scale: np.ndarray
    weight: np.ndarray
    from_prior: np.ndarray


def stage2_prior(
    stage1: np.ndarray, log_ref: np.ndarray, x, u, v, *, beta: float, clip: float | None, temperature: float
) -> np.ndarray:
    """(n, 2) prior [P(v preferred), P(u preferred)] of each pair from the stage-1 policy (contexts × actions): the
    Bradley–Terry probability σ(h/T) of its χPO margin h (Ghazi et al. 2021 (label DP), §4)."""
    # A stage-1 policy can underflow to exactly 0 on an action; log 0 = −inf on both sides of a margin
    # would make it NaN, so floor at the smallest positive double (ℓ ≈ −708: the link's value is still finite).
    log_pi = np.log(np.maximum(stage1, np.finfo(np.float64).tiny))
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
    return np.stack([1 - p_u, p_u], axis=1)


def _stage2_release(
    part2: PreferenceData, stage1: np.ndarray, log_ref: np.ndarray, epsilon: float, rngs, *, beta, clip, temperature
):
    """Each part-2 label queried once through RRWithPrior with the stage-1 prior: (chosen, rejected, from_prior)."""
    for s, rng in enumerate(rngs):
        x, good, bad = part2.context[s], part2.chosen[s], part2.rejected[s]
        # Present each pair in a random order (u, v); the label is 1 when u is the preferred one.
        swap = rng.random(len(x)) < 0.5
        u, v = np.where(swap, bad, good), np.where(swap, good, bad)
        label = (~swap).astype(np.int64)
        prior = stage2_prior(stage1[s], log_ref, x, u, v, beta=beta, clip=clip, temperature=temperature)
        released, from_prior = rr_with_prior(label, prior, epsilon, rng)
        u_wins = released == 1
        yield np.where(u_wins, u, v), np.where(u_wins, v, u), from_prior


def lp2st_release(
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
) -> TwoStageRelease:
    """LP-2ST's release (Ghazi et al. 2021 (label DP), §4): part 1 through RR_ε, a stage-1 fit, part 2 through
    RRWithPrior."""
    if not 0 < split < 1:
        raise ValueError(f"split must be in (0, 1) (got {split}): the fraction of rows in stage 1.")
    if prior_rows not in ("weight", "drop"):
        raise ValueError(f"prior_rows must be 'weight' or 'drop' (got {prior_rows!r}).")
    if not temperature > 0:
        raise ValueError(f"temperature must be positive (got {temperature}).")
    n = clean.context.shape[1]
    cut = int(round(split * n))
    c = debias_factor(epsilon)
    part1 = _rr(_take(clean, slice(0, cut)), epsilon, rngs)
    ones1 = np.ones(part1.context.shape)
    stage1 = fit_weighted_square_chipo(bandit, part1, c * ones1, ones1, beta=beta, clip=clip)
    part2 = _take(clean, slice(cut, n))
    stage2 = list(
        _stage2_release(
            part2, stage1, np.log(bandit.ref_policy), epsilon, rngs, beta=beta, clip=clip, temperature=temperature
        )
    )
    chosen2, rejected2, from_prior2 = (np.stack(column) for column in zip(*stage2))
    from_prior = np.concatenate([np.zeros(part1.context.shape, dtype=bool), from_prior2], axis=1)
    w_prior = 0.0 if prior_rows == "drop" else prior_weight
    data = PreferenceData(
        clean.context,
        np.concatenate([part1.chosen, chosen2], axis=1),
        np.concatenate([part1.rejected, rejected2], axis=1),
    )
    return TwoStageRelease(data, np.where(from_prior, 1.0, c), np.where(from_prior, w_prior, 1.0), from_prior)


def lp2st(bandit: Bandit, clean: PreferenceData, epsilon: float, rngs, *, beta: float, clip: float | None, **options):
    """Returns (policies, mean fraction of part-2 rows released from the prior); ``options`` as
    :func:`lp2st_release` (split, temperature, prior_rows, prior_weight)."""
    release = lp2st_release(bandit, clean, epsilon, rngs, beta=beta, clip=clip, **options)
    cut = int(round(options.get("split", 0.5) * clean.context.shape[1]))
    policies = fit_weighted_square_chipo(bandit, release.data, release.scale, release.weight, beta=beta, clip=clip)
    return policies, float(release.from_prior[:, cut:].mean())
