"""Private Bradley–Terry reward estimation (000 §6, Figure 1), with the estimators of 000.

θ* ~ N(0, I_d); each comparison has a feature difference x ~ N(0, I_d) clipped to ‖x‖ ≤ L and a
label y ~ Bernoulli(σ(⟨x, θ*⟩)). Estimators, all float64 and vectorised over trials:

- ``mle``: the non-private maximum-likelihood estimator over Θ_B = {‖θ‖ ≤ B}, solved exactly.
- ``sgd_rr``: 000 Algorithm 1 — labels through RR_ε, one pass of projected SGD on the debiased
  loss −σ(ε)·log σ(m) + (1−σ(ε))·log σ(−m) (000 eq. 4–5), here normalised by 1/(2σ(ε)−1) so it is
  :func:`squarechipo.losses.robust_log_loss` with ρ = 1/(1+e^ε); step η_t = η₀/√t with
  Polyak–Ruppert averaging and projection onto ‖θ‖ ≤ B. The iterate after n samples is the
  estimate for n, so one pass gives the whole n-grid.
- ``objective_perturbation``: 000 Algorithm 2 — argmin l_D(θ) + λ/(2n)‖θ‖² + wᵀθ/n with
  w ~ N(0, σ²I), σ = L·√(8 log(2/δ) + 4ε)/ε (Theorem 5.2), over Θ_B, solved to gradient norm < 1e-10 (the
  guarantee is for the exact minimiser). λ = L²/(2ε) satisfies the smoothness condition of the
  objective-perturbation proof (KST12) for the logistic loss, whose curvature is at most L²/4.

000's own simulation runs all three with SGD at η = 0.1; here MLE and objective perturbation are
solved exactly, which is what the guarantees and the theory assume. B = 3√d for every estimator.
"""

from __future__ import annotations

import numpy as np

from squarechipo.privacy.mechanisms import randomized_response
from squarechipo.reward.linear import mle, objective_perturbation, perturbation_sigma, sgd_debiased

__all__ = ["sample_bt", "mle", "objective_perturbation", "sgd_rr", "perturbation_sigma", "ESTIMATORS"]

ESTIMATORS = ("mle", "objective_perturbation", "sgd_rr")


def sample_bt(theta: np.ndarray, n: int, feature_bound: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Features (T, n, d) with ‖x‖ ≤ L and labels (T, n) in {0, 1} for θ* of shape (T, d)."""
    trials, d = theta.shape
    x = rng.standard_normal((trials, n, d))
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    x = x * np.minimum(1.0, feature_bound / norms)
    p = 1.0 / (1.0 + np.exp(-np.einsum("tnd,td->tn", x, theta)))
    return x, (rng.random((trials, n)) < p).astype(np.int8)


def sgd_rr(
    x: np.ndarray, y: np.ndarray, epsilon: float, radius: float, rng: np.random.Generator,
    checkpoints: list[int], step: float = 1.0,
) -> dict[int, np.ndarray]:
    """000 Algorithm 1 (local label DP): RR_ε on the labels, then :func:`~squarechipo.reward.linear.sgd_debiased`."""
    observed = randomized_response(y.astype(bool), epsilon, rng)
    return sgd_debiased(x, observed, epsilon, radius, checkpoints, step)
