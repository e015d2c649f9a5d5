"""Private Bradley–Terry reward estimation (Chowdhury et al. 2024 (private reward estimation), §6, Figure 1), with the
estimators of Chowdhury et al. 2024 (private reward estimation).

θ* ~ N(0, I_d); each comparison has a feature difference x ~ N(0, I_d) clipped to ‖x‖ ≤ L and a
label y ~ Bernoulli(σ(⟨x, θ*⟩)). Estimators, all float64 and vectorised over trials:

- ``mle``: the non-private maximum-likelihood estimator over Θ_B = {‖θ‖ ≤ B}, solved exactly.
- ``rr_mle``: Chowdhury et al. 2024 (private reward estimation), §4's θ̂_RR, the main local estimator — labels through
  RR_ε, then the debiased log loss (Chowdhury et al. 2024 (private reward estimation), eq. 4–6) minimised exactly over
  Θ_B. Theorem 4.2 / Corollary 4.3: its error is c(ε) = (e^ε+1)/(e^ε−1) times the MLE's rate.
- ``sgd_rr``: Chowdhury et al. 2024 (private reward estimation), Algorithm 1 with Theorem 4.5's schedule — one
  projected pass, η_t = 1/(λt) with λ = γ_ε·κ (γ = 1/(2 + e^{−2LB} + e^{2LB}), κ = λ_min of the features' second
  moment, public under label DP), the last iterate. γ is a worst case: here L·B ≈ 28, so λ ≈ 1e-25 and the steps are
  huge.
- ``sgd_rr_averaged``: the same pass with η_t = η₀/√t and Polyak–Ruppert averaging (no theorem of
  Chowdhury et al. 2024 (private reward estimation) covers it). For the SGD estimators the iterate after n samples is
  the estimate for n.
- ``objective_perturbation``: Chowdhury et al. 2024 (private reward estimation), Algorithm 2 — argmin l_D(θ) +
  λ/(2n)‖θ‖² + wᵀθ/n with w ~ N(0, σ²I), σ = L·√(8 log(2/δ) + 4ε)/ε (Theorem 5.2), over Θ_B, solved to gradient norm <
  1e-10 (the guarantee is for the exact minimiser). λ = L²/(2ε) satisfies the smoothness condition of the
  objective-perturbation proof (KST12) for the logistic loss, whose curvature is at most L²/4.

Chowdhury et al. 2024 (private reward estimation)'s own simulation runs its estimators with SGD at η = 0.1; here MLE,
θ̂_RR and objective perturbation are solved exactly, which is what the guarantees and the theory assume. B = 3√d for
every estimator.
"""

from __future__ import annotations

import numpy as np

from squarechipo.privacy.mechanisms.binary import randomized_response
from squarechipo.reward.linear import (
    mle,
    objective_perturbation,
    perturbation_sigma,
    rr_debiased_mle,
    sgd_debiased,
    sgd_debiased_averaged,
    strong_convexity,
)

__all__ = [
    "sample_bt",
    "mle",
    "objective_perturbation",
    "rr_mle",
    "sgd_rr",
    "sgd_rr_averaged",
    "perturbation_sigma",
    "coverage",
]


def sample_bt(
    theta: np.ndarray, n: int, feature_bound: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Features (T, n, d) with ‖x‖ ≤ L and labels (T, n) in {0, 1} for θ* of shape (T, d)."""
    trials, d = theta.shape
    x = rng.standard_normal((trials, n, d))
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    x = x * np.minimum(1.0, feature_bound / norms)
    p = 1.0 / (1.0 + np.exp(-np.einsum("tnd,td->tn", x, theta)))
    return x, (rng.random((trials, n)) < p).astype(np.int8)


def coverage(x: np.ndarray) -> float:
    """κ: the smallest eigenvalue of the features' second moment E[xxᵀ]
    (Chowdhury et al. 2024 (private reward estimation) Assumption 4.4), pooled over trials."""
    trials, n, _ = x.shape
    return float(np.linalg.eigvalsh(np.einsum("tnd,tne->de", x, x) / (trials * n)).min())


def rr_mle(x: np.ndarray, y: np.ndarray, epsilon: float, radius: float, rng: np.random.Generator) -> np.ndarray:
    """Chowdhury et al. 2024 (private reward estimation), §4 θ̂_RR (local label DP): RR_ε on the labels, then
    :func:`~squarechipo.reward.linear.rr_debiased_mle`."""
    return rr_debiased_mle(x, randomized_response(y.astype(bool), epsilon, rng), epsilon, radius)


def sgd_rr(
    x: np.ndarray,
    y: np.ndarray,
    epsilon: float,
    radius: float,
    feature_bound: float,
    rng: np.random.Generator,
    checkpoints: list[int],
) -> dict[int, np.ndarray]:
    """Chowdhury et al. 2024 (private reward estimation), Algorithm 1 with Theorem 4.5's schedule η_t = 1/(γ_ε·κ·t),
    last iterate."""
    observed = randomized_response(y.astype(bool), epsilon, rng)
    lam = strong_convexity(epsilon, feature_bound, radius, coverage(x))
    return sgd_debiased(x, observed, epsilon, radius, checkpoints, strong_convexity_lambda=lam)


def sgd_rr_averaged(
    x: np.ndarray,
    y: np.ndarray,
    epsilon: float,
    radius: float,
    rng: np.random.Generator,
    checkpoints: list[int],
    step: float = 1.0,
) -> dict[int, np.ndarray]:
    """RR_ε, then :func:`~squarechipo.reward.linear.sgd_debiased_averaged` (η₀/√t, Polyak–Ruppert averaging)."""
    observed = randomized_response(y.astype(bool), epsilon, rng)
    return sgd_debiased_averaged(x, observed, epsilon, radius, checkpoints, step)
