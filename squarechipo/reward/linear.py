"""Private linear reward heads under the Bradley–Terry model (000), as pure float64 functions.

A comparison has a feature difference x = φ(x, a⁺) − φ(x, a⁻) (‖x‖ ≤ L) and a label y ∈ {0, 1}; the
reward is ⟨θ, φ⟩ with θ in the ball Θ_B = {‖θ‖ ≤ B}. Arrays are vectorised over trials: x (T, n, d),
y (T, n). For one model pass T = 1.

- :func:`mle` — the non-private MLE over Θ_B, solved exactly (Newton + KKT bisection).
- :func:`sgd_debiased` — 000 Algorithm 1 on labels already released by RR_ε: one projected pass of
  SGD on the debiased loss (:func:`squarechipo.losses.robust_log_loss` with ρ = 1/(1+e^ε)),
  η_t = η₀/√t, Polyak–Ruppert averaging.
- :func:`objective_perturbation` — 000 Algorithm 2 (central label DP): argmin l_D(θ) + λ/2‖θ‖² + wᵀθ,
  w ~ N(0, σ²I), σ = L·√(8 log(2/δ) + 4ε)/ε (Theorem 5.2), λ = L²/(2ε), over Θ_B. The guarantee is
  for the exact minimiser: it is solved to gradient norm < 1e-10 (and KKT bisection to 2^-40 on the
  ball's multiplier), which is stated here rather than assumed.
"""

from __future__ import annotations

import math

import numpy as np

from squarechipo.privacy.calibration import flip_probability

__all__ = ["mle", "objective_perturbation", "perturbation_sigma", "sgd_debiased"]


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def _newton(x: np.ndarray, y: np.ndarray, ridge: float, linear: np.ndarray, iterations: int = 100) -> np.ndarray:
    """argmin Σ_i logloss(⟨x_i, θ⟩, y_i) + ridge/2‖θ‖² + ⟨linear, θ⟩ per trial, by damped Newton."""
    trials, n, d = x.shape
    theta = np.zeros((trials, d))
    ridge = np.broadcast_to(np.asarray(ridge, dtype=np.float64).reshape(-1, 1) if np.ndim(ridge) else np.full((trials, 1), float(ridge)), (trials, 1))
    objective = lambda th: (  # noqa: E731
        np.logaddexp(0.0, np.einsum("tnd,td->tn", x, th)) - y * np.einsum("tnd,td->tn", x, th)
    ).sum(1) + 0.5 * ridge[:, 0] * (th**2).sum(1) + (linear * th).sum(1)
    for _ in range(iterations):
        p = _sigmoid(np.einsum("tnd,td->tn", x, theta))
        grad = np.matmul(np.swapaxes(x, 1, 2), (p - y)[..., None])[..., 0] + ridge * theta + linear
        if np.abs(grad).max() < 1e-10:
            break
        hessian = np.matmul(np.swapaxes(x * (p * (1 - p))[..., None], 1, 2), x) + (ridge[:, :, None] + 1e-12) * np.eye(d)
        step = np.linalg.solve(hessian, grad[..., None])[..., 0]
        t, current = np.ones((trials, 1)), objective(theta)
        for _ in range(30):  # backtracking keeps separable or flat trials stable
            worse = objective(theta - t * step) > current + 1e-12
            if not worse.any():
                break
            t = np.where(worse[:, None], 0.5 * t, t)
        theta = theta - t * step
    return theta


def _in_ball(x: np.ndarray, y: np.ndarray, ridge: float, linear: np.ndarray, radius: float) -> np.ndarray:
    """argmin over Θ_B = {‖θ‖ ≤ B} of the strictly convex objective (000 eq. 8 and Algorithm 2).

    KKT: the solution is the unconstrained minimiser when it lies in the ball; otherwise it is the
    minimiser with an extra ridge μ ≥ 0 for which ‖θ(μ)‖ = B, found by bisection on μ (‖θ(μ)‖ decreases in μ).
    """
    theta = _newton(x, y, ridge, linear)
    outside = np.linalg.norm(theta, axis=1) > radius
    if not outside.any():
        return theta
    xs, ys, ls = x[outside], y[outside], linear[outside]
    low, high = np.zeros(outside.sum()), np.full(outside.sum(), 1.0)
    while True:  # grow the bracket until every trial is inside the ball
        inside = np.linalg.norm(_newton(xs, ys, ridge + high[:, None], ls), axis=1) <= radius
        if inside.all():
            break
        high = np.where(inside, high, 4.0 * high)
    for _ in range(40):
        mid = 0.5 * (low + high)
        inside = np.linalg.norm(_newton(xs, ys, ridge + mid[:, None], ls), axis=1) <= radius
        low, high = np.where(inside, low, mid), np.where(inside, mid, high)
    theta[outside] = _newton(xs, ys, ridge + high[:, None], ls)
    return theta


def mle(x: np.ndarray, y: np.ndarray, radius: float) -> np.ndarray:
    """Non-private MLE over Θ_B (a tiny ridge 1e-6 only guards against separable samples)."""
    return _in_ball(x, y, 1e-6, np.zeros(x.shape[::2]), radius)


def perturbation_sigma(epsilon: float, delta: float, feature_bound: float) -> float:
    """σ = L·√(8 log(2/δ) + 4ε)/ε (000 Theorem 5.2)."""
    return feature_bound * math.sqrt(8.0 * math.log(2.0 / delta) + 4.0 * epsilon) / epsilon


def objective_perturbation(
    x: np.ndarray, y: np.ndarray, epsilon: float, delta: float, feature_bound: float, radius: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """000 Algorithm 2 (central label DP) over Θ_B, solved exactly."""
    sigma = perturbation_sigma(epsilon, delta, feature_bound)
    noise = rng.normal(0.0, sigma, size=x.shape[::2])
    return _in_ball(x, y, feature_bound**2 / (2.0 * epsilon), noise, radius)


def sgd_debiased(
    x: np.ndarray, observed: np.ndarray, epsilon: float | None, radius: float, checkpoints: list[int], step: float = 1.0,
) -> dict[int, np.ndarray]:
    """000 Algorithm 1 on released labels ``observed`` (T, n): one projected, averaged SGD pass; estimates at checkpoints."""
    trials, n, d = x.shape
    rho = flip_probability(epsilon)
    sign = np.where(np.asarray(observed).astype(bool), 1.0, -1.0)
    theta, average = np.zeros((trials, d)), np.zeros((trials, d))
    out = {}
    wanted = set(checkpoints)
    for t in range(n):
        m = sign[:, t] * np.einsum("td,td->t", x[:, t], theta)
        # d/dm of [−(1−ρ) log σ(m) + ρ log σ(−m)]/(1−2ρ)
        dloss = (-(1.0 - rho) * (1.0 - _sigmoid(m)) - rho * _sigmoid(m)) / (1.0 - 2.0 * rho)
        theta = theta - (step / math.sqrt(t + 1.0)) * (dloss * sign[:, t])[:, None] * x[:, t]
        norm = np.linalg.norm(theta, axis=1, keepdims=True)
        theta = theta * np.minimum(1.0, radius / np.maximum(norm, 1e-300))
        average += (theta - average) / (t + 1.0)
        if t + 1 in wanted:
            out[t + 1] = average.copy()
    return out
