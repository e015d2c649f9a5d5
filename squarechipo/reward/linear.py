"""Private linear reward heads under the Bradley–Terry model (Chowdhury et al. 2024 (private reward estimation)), as
pure float64 functions.

A comparison has a feature difference x = φ(x, a⁺) − φ(x, a⁻) (‖x‖ ≤ L) and a label y ∈ {0, 1}; the
reward is ⟨θ, φ⟩ with θ in the ball Θ_B = {‖θ‖ ≤ B}. Arrays are vectorised over trials: x (T, n, d),
y (T, n). For one model pass T = 1.

- :func:`mle` — the non-private MLE over Θ_B, solved exactly (Newton + KKT bisection).
- :func:`rr_debiased_mle` — θ̂_RR of Chowdhury et al. 2024 (private reward estimation), §4 (eq. 6, Theorem 4.2 /
  Corollary 4.3): the debiased log loss of labels released by RR_ε, minimised exactly over Θ_B like the MLE.
- :func:`sgd_debiased` — θ̂_SGD-RR, Chowdhury et al. 2024 (private reward estimation), Algorithm 1 with Theorem 4.5's
  schedule: one projected pass, η_t = 1/(λt) with λ = γ_ε·κ, returning the last iterate.
- :func:`sgd_debiased_averaged` — the same pass with η_t = η₀/√t and Polyak–Ruppert averaging (a
  common practical variant; Theorem 4.5 does not cover it).
- :func:`objective_perturbation` — Chowdhury et al. 2024 (private reward estimation), Algorithm 2 (central label DP):
  argmin l_D(θ) + λ/2‖θ‖² + wᵀθ, w ~ N(0, σ²I), σ = L·√(8 log(2/δ) + 4ε)/ε (Theorem 5.2), λ = L²/(2ε), over Θ_B. The
  guarantee is for the exact minimiser: every Newton solve must reach gradient norm ≤ ``GRADIENT_TOLERANCE`` within
  ``NEWTON_ITERATIONS`` and every bisection step must be decided by a certificate, or :class:`NotConvergedError` is
  raised instead of returning an inexact θ.

Labels released by RR_ε with flip rate ρ = 1/(1+e^ε) enter the debiased loss as the soft labels
(ỹ − ρ)/(1 − 2ρ): the normalised debiased loss [(1−ρ)·ℓ(m, ỹ) − ρ·ℓ(m, 1−ỹ)]/(1−2ρ) equals the
logistic loss with that label up to a constant (its gradient is (σ(m) − (ỹ − ρ)/(1−2ρ))·x).
"""

from __future__ import annotations

import math

import numpy as np

from squarechipo.privacy.mechanisms.calibration import flip_probability

__all__ = [
    "NotConvergedError",
    "mle",
    "objective_perturbation",
    "perturbation_sigma",
    "rr_debiased_mle",
    "sgd_debiased",
    "sgd_debiased_averaged",
    "strong_convexity",
]

#: Newton stops when every trial's gradient has max-norm below this (Chowdhury et al. 2024 (private reward estimation),
#: Alg. 2 needs the exact minimiser).
GRADIENT_TOLERANCE = 1e-10
NEWTON_ITERATIONS = 100


class NotConvergedError(RuntimeError):
    """A solve that a guarantee needs to be exact did not converge."""


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def _newton(
    x: np.ndarray,
    y: np.ndarray,
    ridge,
    linear: np.ndarray,
    *,
    theta: np.ndarray | None = None,
    radius: float | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """argmin Σ_i logloss(⟨x_i, θ⟩, y_i) + ridge/2‖θ‖² + ⟨linear, θ⟩ per trial, by damped Newton.

    ``y`` may be any real (the debiased soft labels lie outside [0, 1]); ``theta`` warm-starts. Returns
    (θ, converged, side): converged[t] says trial t reached max-norm gradient ≤ ``GRADIENT_TOLERANCE``
    within ``NEWTON_ITERATIONS``. With ``radius``, a trial may stop earlier, once strong convexity
    (modulus ≥ ridge) certifies on which side of the ball its minimiser θ* lies: ‖θ − θ*‖ ≤ ‖∇f(θ)‖/ridge.
    side[t] is +1 (outside), −1 (inside) or 0 (undecided).
    """
    iterations, tolerance = NEWTON_ITERATIONS, GRADIENT_TOLERANCE
    trials, n, d = x.shape
    theta = np.zeros((trials, d)) if theta is None else np.array(theta, dtype=np.float64)
    ridge = np.broadcast_to(
        np.asarray(ridge, dtype=np.float64).reshape(-1, 1) if np.ndim(ridge) else np.full((trials, 1), float(ridge)),
        (trials, 1),
    )

    def objective(th):
        return (
            (np.logaddexp(0.0, np.einsum("tnd,td->tn", x, th)) - y * np.einsum("tnd,td->tn", x, th)).sum(1)
            + 0.5 * ridge[:, 0] * (th**2).sum(1)
            + (linear * th).sum(1)
        )

    side = np.zeros(trials)
    for _ in range(iterations + 1):
        p = _sigmoid(np.einsum("tnd,td->tn", x, theta))
        grad = np.matmul(np.swapaxes(x, 1, 2), (p - y)[..., None])[..., 0] + ridge * theta + linear
        converged = np.abs(grad).max(axis=1) <= tolerance
        done = converged
        if radius is not None:
            norm, bound = np.linalg.norm(theta, axis=1), np.linalg.norm(grad, axis=1) / ridge[:, 0]
            side = np.where(norm - bound > radius, 1.0, np.where(norm + bound <= radius, -1.0, 0.0))
            side = np.where(converged & (side == 0), np.where(norm > radius, 1.0, -1.0), side)
            done = side != 0
        if done.all():
            break
        hessian = np.matmul(np.swapaxes(x * (p * (1 - p))[..., None], 1, 2), x) + (ridge[:, :, None] + 1e-12) * np.eye(
            d
        )
        step = np.linalg.solve(hessian, grad[..., None])[..., 0]
        t, current = np.ones((trials, 1)), objective(theta)
        # Backtracking keeps separable or flat trials stable. Near the minimum a Newton step lowers the objective
        # by less than its rounding error, so increases within that error are not counted as worse.
        slack = 1e-12 * np.maximum(1.0, np.abs(current))
        for _ in range(30):
            worse = objective(theta - t * step) > current + slack
            if not worse.any():
                break
            t = np.where(worse[:, None], 0.5 * t, t)
        theta = np.where(done[:, None], theta, theta - t * step)
    return theta, converged, side


def _solved(x, y, ridge, linear, what: str, theta: np.ndarray | None = None) -> np.ndarray:
    theta, converged, _ = _newton(x, y, ridge, linear, theta=theta)
    if not converged.all():
        raise NotConvergedError(
            f"{what}: Newton did not reach gradient norm ≤ {GRADIENT_TOLERANCE:g} in {NEWTON_ITERATIONS} iterations "
            "on "
            f"{int((~converged).sum())} of {len(converged)} trials; the estimate would not be the exact minimiser "
            "the guarantee is stated for. Rescale the features (‖x‖ ≤ L of order 1–10) or shrink the ball radius."
        )
    return theta


def _in_ball(x: np.ndarray, y: np.ndarray, ridge: float, linear: np.ndarray, radius: float) -> np.ndarray:
    """argmin over Θ_B = {‖θ‖ ≤ B} of the strictly convex objective (Chowdhury et al. 2024 (private reward estimation),
    eq. 6, eq. 8 and Algorithm 2).

    KKT: the solution is the unconstrained minimiser when it lies in the ball; otherwise it is the
    minimiser θ(μ) with an extra ridge μ ≥ 0 for which ‖θ(μ)‖ = B (‖θ(μ)‖ decreases in μ). The bracket
    is certified: μ ≥ ‖∇f(0)‖/B puts θ(μ) in the ball. Each bisection step decides the side of the
    ball by a strong-convexity certificate (or raises); the returned solve must converge (or raises).
    An unconstrained solve that does not converge (the debiased loss is unbounded below) goes to the
    bisection, which then either finds the boundary solution or must converge at μ → 0.
    """
    theta, converged, _ = _newton(x, y, ridge, linear)
    outside = ~converged | (np.linalg.norm(theta, axis=1) > radius)
    if not outside.any():
        return theta
    xs, ys, ls = x[outside], y[outside], linear[outside]
    gradient_at_zero = np.matmul(np.swapaxes(xs, 1, 2), (0.5 - ys)[..., None])[..., 0] + ls
    low = np.zeros(outside.sum())
    high = np.maximum(np.linalg.norm(gradient_at_zero, axis=1) / radius, 1e-12)
    warm = _solved(xs, ys, ridge + high[:, None], ls, "KKT bracket")
    for _ in range(40):
        mid = 0.5 * (low + high)
        theta_mid, _, side = _newton(xs, ys, ridge + mid[:, None], ls, theta=warm, radius=radius)
        if (side == 0).any():
            raise NotConvergedError(
                f"KKT bisection: Newton could not tell in {NEWTON_ITERATIONS} iterations whether "
                "the minimiser lies in the ball; rescale the features or shrink the radius."
            )
        inside = side < 0
        low, high = np.where(inside, low, mid), np.where(inside, mid, high)
        warm = np.where(inside[:, None], theta_mid, warm)
    theta[outside] = _solved(xs, ys, ridge + high[:, None], ls, "KKT solution", theta=warm)
    return theta


def mle(x: np.ndarray, y: np.ndarray, radius: float) -> np.ndarray:
    """Non-private MLE over Θ_B (a tiny ridge 1e-6 only guards against separable samples)."""
    return _in_ball(x, y, 1e-6, np.zeros(x.shape[::2]), radius)


def perturbation_sigma(epsilon: float, delta: float, feature_bound: float) -> float:
    """σ = L·√(8 log(2/δ) + 4ε)/ε (Chowdhury et al. 2024 (private reward estimation), Theorem 5.2)."""
    return feature_bound * math.sqrt(8.0 * math.log(2.0 / delta) + 4.0 * epsilon) / epsilon


def objective_perturbation(
    x: np.ndarray,
    y: np.ndarray,
    epsilon: float,
    delta: float,
    feature_bound: float,
    radius: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """Chowdhury et al. 2024 (private reward estimation), Algorithm 2 (central label DP) over Θ_B, solved exactly."""
    sigma = perturbation_sigma(epsilon, delta, feature_bound)
    noise = rng.normal(0.0, sigma, size=x.shape[::2])
    return _in_ball(x, y, feature_bound**2 / (2.0 * epsilon), noise, radius)


def rr_debiased_mle(x: np.ndarray, observed: np.ndarray, epsilon: float | None, radius: float) -> np.ndarray:
    """θ̂_RR (Chowdhury et al. 2024 (private reward estimation), eq. 6): argmin over Θ_B of the debiased log loss of
    RR_ε-released labels, solved exactly.

    ε-label-DP by RR and post-processing. Its error is c(ε) = (e^ε+1)/(e^ε−1) times the MLE's rate
    (Theorem 4.2, Corollary 4.3). The same tiny ridge (1e-6) as :func:`mle`.
    """
    rho = flip_probability(epsilon)
    soft = (np.asarray(observed, dtype=np.float64) - rho) / (1.0 - 2.0 * rho)
    return _in_ball(x, soft, 1e-6, np.zeros(x.shape[::2]), radius)


def strong_convexity(epsilon: float | None, feature_bound: float, radius: float, coverage: float) -> float:
    """λ = γ_ε·κ of Chowdhury et al. 2024 (private reward estimation), Theorem 4.5: γ = 1/(2 + e^{−2LB} + e^{2LB}), γ_ε
    = (2σ(ε) − 1)·γ, κ = λ_min(Σ).

    γ is the worst-case curvature σ' over ‖x‖ ≤ L, ‖θ‖ ≤ B, so it is tiny for large L·B (the schedule
    1/(λt) then takes huge steps); pass a measured curvature to :func:`sgd_debiased` instead if you know one.
    """
    gamma = 1.0 / (2.0 + math.exp(-2.0 * feature_bound * radius) + math.exp(min(2.0 * feature_bound * radius, 700.0)))
    return (1.0 - 2.0 * flip_probability(epsilon)) * gamma * coverage


def _debiased_gradient_factor(x_t, theta, sign_t, rho) -> np.ndarray:
    """d/dm of [−(1−ρ) log σ(m) + ρ log σ(−m)]/(1−2ρ) at m = ±⟨x_t, θ⟩ (the normalised loss of
    Chowdhury et al. 2024 (private reward estimation), eq. 4–5)."""
    m = sign_t * np.einsum("td,td->t", x_t, theta)
    return (-(1.0 - rho) * (1.0 - _sigmoid(m)) - rho * _sigmoid(m)) / (1.0 - 2.0 * rho)


def _project(theta: np.ndarray, radius: float) -> np.ndarray:
    norm = np.linalg.norm(theta, axis=1, keepdims=True)
    return theta * np.minimum(1.0, radius / np.maximum(norm, 1e-300))


def sgd_debiased(
    x: np.ndarray,
    observed: np.ndarray,
    epsilon: float | None,
    radius: float,
    checkpoints: list[int],
    *,
    strong_convexity_lambda: float,
) -> dict[int, np.ndarray]:
    """θ̂_SGD-RR: Chowdhury et al. 2024 (private reward estimation), Algorithm 1 on released labels with Theorem 4.5's
    schedule; the last iterate at checkpoints.

    θ_{t+1} = Π_Θ_B(θ_t − η_t ĝ_t), η_t = 1/(λt), λ = γ_ε·κ (:func:`strong_convexity`), ĝ_t the gradient of
    Chowdhury et al. 2024 (private reward estimation)'s (unnormalised) debiased loss, whose curvature is (2σ(ε)−1)·σ'.
    Theorem 4.5 bounds the last iterate.
    """
    if not (strong_convexity_lambda > 0 and math.isfinite(strong_convexity_lambda)):
        raise ValueError(f"strong_convexity_lambda must be positive and finite (got {strong_convexity_lambda!r}).")
    trials, n, d = x.shape
    rho = flip_probability(epsilon)
    sign = np.where(np.asarray(observed).astype(bool), 1.0, -1.0)
    theta = np.zeros((trials, d))
    out, wanted = {}, set(checkpoints)
    for t in range(n):
        # Chowdhury et al. 2024 (private reward estimation)'s loss is (1 − 2ρ) times the normalised one: ĝ_t = (1 −
        # 2ρ)·(normalised gradient).
        grad = (
            (1.0 - 2.0 * rho)
            * (_debiased_gradient_factor(x[:, t], theta, sign[:, t], rho) * sign[:, t])[:, None]
            * x[:, t]
        )
        theta = _project(theta - grad / (strong_convexity_lambda * (t + 1.0)), radius)
        if t + 1 in wanted:
            out[t + 1] = theta.copy()
    return out


def sgd_debiased_averaged(
    x: np.ndarray,
    observed: np.ndarray,
    epsilon: float | None,
    radius: float,
    checkpoints: list[int],
    step: float = 1.0,
) -> dict[int, np.ndarray]:
    """One projected pass of SGD on the normalised debiased loss with η_t = η₀/√t and Polyak–Ruppert
    averaging; the average at checkpoints. Not the schedule of Chowdhury et al. 2024 (private reward estimation),
    Theorem 4.5 (no theorem there covers it)."""
    trials, n, d = x.shape
    rho = flip_probability(epsilon)
    sign = np.where(np.asarray(observed).astype(bool), 1.0, -1.0)
    theta, average = np.zeros((trials, d)), np.zeros((trials, d))
    out, wanted = {}, set(checkpoints)
    for t in range(n):
        grad = (_debiased_gradient_factor(x[:, t], theta, sign[:, t], rho) * sign[:, t])[:, None] * x[:, t]
        theta = _project(theta - (step / math.sqrt(t + 1.0)) * grad, radius)
        average += (theta - average) / (t + 1.0)
        if t + 1 in wanted:
            out[t + 1] = average.copy()
    return out
