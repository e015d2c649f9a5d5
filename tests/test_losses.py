"""Losses / Zhou et al. 2025 (Square-χPO), Algorithm 1: values, numerics, gradients and debiasing."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from squarechipo.losses import (
    CHIPO_LOG_RATIO_CLAMP,
    METHODS,
    chipo_link,
    margins,
    preference_loss,
    self_play_loss,
    self_play_margin,
)
from squarechipo.privacy.mechanisms.binary import randomized_response
from squarechipo.privacy.mechanisms.calibration import debias_factor, flip_probability
from tests.helpers.stats import Z_TOLERANCE


def _rows(n=6, seed=0, scale=2.0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return [(torch.rand(n, generator=g, dtype=torch.float64) * 2 - 1).mul(scale).to(dtype) for _ in range(4)]


# --------------------------------------------------------------------------- values


def _robust(m, c, rho):
    return (-(1 - rho) * torch.log(torch.sigmoid(m)) + rho * torch.log(torch.sigmoid(-m))) / (1 - 2 * rho)


#: The README's table of methods, typed from Zhou et al. 2025 (Square-χPO), §2 and Alg. 1: link g(ℓ) and loss on the
#: clipped margin m = clip(β·(g(ℓ⁺) − g(ℓ⁻)), ±2R_max), with c = c(ε) and ρ = 1/(1 + e^ε).
_TABLE = {
    "dpo": (lambda r: r, lambda m, c, rho: -torch.log(torch.sigmoid(m))),
    "chipo": (lambda r: torch.exp(r) + r, lambda m, c, rho: -torch.log(torch.sigmoid(m))),
    "square_chipo": (lambda r: torch.exp(r) + r, lambda m, c, rho: (2 * torch.sigmoid(m) - 1 - c) ** 2),
    "square_dpo": (lambda r: r, lambda m, c, rho: (2 * torch.sigmoid(m) - 1 - c) ** 2),
    "rdpo": (lambda r: r, _robust),
    "robust_chipo": (lambda r: torch.exp(r) + r, _robust),
}


def test_every_named_method_is_its_row_of_the_table():
    """The six names, each computed as the README's link × loss row says, clipped and unclipped, at ε = 1."""
    assert set(METHODS) == set(_TABLE)
    pc, pr, rc, rr = _rows(n=32, seed=5, scale=1.5)
    c, rho = debias_factor(1.0), flip_probability(1.0)
    for name, (link, loss) in _TABLE.items():
        for clip in (None, 0.4):
            m = 0.3 * (link(pc - rc) - link(pr - rr))
            m = m if clip is None else m.clamp(-clip, clip)
            out = preference_loss(name, pc, pr, rc, rr, beta=0.3, clip=clip, flip_rate=flip_probability(1.0))
            torch.testing.assert_close(out.margins, m, msg=f"{name} margins, clip {clip}")
            torch.testing.assert_close(out.losses, loss(m, c, rho), msg=f"{name} losses, clip {clip}")


def test_dpo_matches_closed_form():
    pc, pr, rc, rr = _rows()
    out = preference_loss("dpo", pc, pr, rc, rr, beta=0.3)
    m = 0.3 * ((pc - rc) - (pr - rr))
    torch.testing.assert_close(out.margins, m)
    torch.testing.assert_close(out.losses, -torch.log(torch.sigmoid(m)))


def test_chipo_link_is_phi_of_ratio():
    ratio = torch.linspace(-5, 5, 11, dtype=torch.float64)
    u = torch.exp(ratio)
    torch.testing.assert_close(chipo_link(ratio), u + torch.log(u))


def test_square_chipo_is_brier_score_without_privacy():
    """(c) ε = ∞, no clip: (2σ(βh) − 1 − 1)² = 4·(1 − σ(βh))², the Brier score in ±1 form."""
    pc, pr, rc, rr = _rows(n=50, seed=1, scale=3.0)
    beta = 0.7
    lp, lm = (pc - rc).numpy(), (pr - rr).numpy()
    h = (np.exp(lp) + lp) - (np.exp(lm) + lm)
    p = 1.0 / (1.0 + np.exp(-beta * h))
    brier_pm1 = (2 * p - 1 - 1) ** 2
    for eps in (None, math.inf):
        out = preference_loss("square_chipo", pc, pr, rc, rr, beta=beta, clip=None, flip_rate=flip_probability(eps))
        np.testing.assert_allclose(out.losses.numpy(), brier_pm1, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(out.losses.numpy(), 4 * (1 - p) ** 2, rtol=1e-12, atol=1e-14)


def test_robust_log_with_epsilon_uses_rr_flip_rate():
    pc, pr, rc, rr = _rows(seed=2)
    eps = 0.8
    rho = flip_probability(eps)
    out = preference_loss("rdpo", pc, pr, rc, rr, beta=0.5, flip_rate=flip_probability(eps))
    m = 0.5 * ((pc - rc) - (pr - rr))
    expected = (-(1 - rho) * torch.nn.functional.logsigmoid(m) + rho * torch.nn.functional.logsigmoid(-m)) / (
        1 - 2 * rho
    )
    torch.testing.assert_close(out.losses, expected)
    same = preference_loss("rdpo", pc, pr, rc, rr, beta=0.5, flip_rate=rho)
    torch.testing.assert_close(same.losses, out.losses)


def test_square_loss_flip_rate_matches_epsilon():
    pc, pr, rc, rr = _rows(seed=3)
    eps = 0.4
    a = preference_loss("square_dpo", pc, pr, rc, rr, beta=1.0, flip_rate=flip_probability(eps))
    b = preference_loss("square_dpo", pc, pr, rc, rr, beta=1.0, flip_rate=flip_probability(eps))
    torch.testing.assert_close(a.losses, b.losses)
    m = a.margins
    torch.testing.assert_close(a.losses, (2 * torch.sigmoid(m) - 1 - debias_factor(eps)) ** 2)


def test_clip_bounds_the_margin_and_stops_its_gradient():
    pc = torch.tensor([10.0, 0.3, -10.0], dtype=torch.float64, requires_grad=True)
    zeros = torch.zeros(3, dtype=torch.float64)
    out = preference_loss("square_dpo", pc, zeros, zeros, zeros, beta=1.0, clip=2.0)
    assert out.margins.tolist() == [2.0, pytest.approx(0.3), -2.0]
    out.losses.sum().backward()
    assert pc.grad[0] == 0 and pc.grad[2] == 0 and pc.grad[1] != 0


def test_chipo_clamp_freezes_only_the_exponential():
    ratio = torch.tensor([CHIPO_LOG_RATIO_CLAMP + 5.0], dtype=torch.float64, requires_grad=True)
    value = chipo_link(ratio)
    value.backward()
    assert value.item() == pytest.approx(math.exp(CHIPO_LOG_RATIO_CLAMP) + ratio.item())
    assert ratio.grad.item() == pytest.approx(1.0)  # only the linear part passes gradient


def test_bad_arguments_raise_naming_the_field():
    pc, pr, rc, rr = _rows()
    with pytest.raises(ValueError, match="method"):
        preference_loss("ipo", pc, pr, rc, rr, beta=0.1)
    with pytest.raises(ValueError, match="beta"):
        preference_loss("dpo", pc, pr, rc, rr, beta=0.0)
    with pytest.raises(ValueError, match="clip"):
        preference_loss("dpo", pc, pr, rc, rr, beta=0.1, clip=-1.0)
    with pytest.raises(ValueError, match="flip_rate"):
        preference_loss("square_chipo", pc, pr, rc, rr, beta=0.1, flip_rate=0.5)
    with pytest.raises(ValueError, match="flip_rate"):
        preference_loss("dpo", pc, pr, rc, rr, beta=0.1, flip_rate=float("nan"))
    with pytest.raises(ValueError, match="flip_rate"):
        preference_loss("rdpo", pc, pr, rc, rr, beta=0.1, flip_rate=-0.1)
    with pytest.raises(TypeError, match="flip_rate must be a number"):
        preference_loss("rdpo", pc, pr, rc, rr, beta=0.1, flip_rate="0.1")
    from squarechipo.privacy.ledger.records import Debiasing

    with pytest.raises(ValueError, match="analyzer_weights, not a flip rate"):
        preference_loss("rdpo", pc, pr, rc, rr, beta=0.1, flip_rate=Debiasing("analyzer_weights", column="w"))
    by_answer = preference_loss("rdpo", pc, pr, rc, rr, beta=0.1, flip_rate=Debiasing("flip_rate", flip_rate=0.2))
    by_rate = preference_loss("rdpo", pc, pr, rc, rr, beta=0.1, flip_rate=0.2)
    assert torch.equal(by_answer.losses, by_rate.losses)


# --------------------------------------------------------------------------- numerics

EXTREMES = [-1e4, -100.0, -88.0, -20.0, -1.0, 0.0, 1.0, 20.0, 21.0, 88.0, 100.0, 1e4]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("method", sorted(METHODS))
def test_no_inf_or_nan_for_log_ratios_up_to_1e4(method, dtype):
    pairs = torch.tensor(list(itertools.product(EXTREMES, EXTREMES)), dtype=torch.float64)
    for clip, eps in [(None, None), (None, 0.1), (2.0, 0.5), (10.0, None)]:
        chosen = pairs[:, 0].to(dtype).requires_grad_(True)
        rejected = pairs[:, 1].to(dtype).requires_grad_(True)
        ref = torch.zeros_like(chosen)
        out = preference_loss(method, chosen, rejected, ref, ref, beta=0.1, clip=clip, flip_rate=flip_probability(eps))
        assert out.losses.dtype == torch.float32, "computed in float32 whatever the input dtype"
        assert torch.isfinite(out.losses).all() and torch.isfinite(out.margins).all()
        out.losses.mean().backward()
        assert torch.isfinite(chosen.grad.float()).all() and torch.isfinite(rejected.grad.float()).all()
    # Also when the reference carries the extreme values (log-ratio = -ref).
    policy = torch.zeros(len(pairs), dtype=dtype, requires_grad=True)
    out = preference_loss(
        method,
        policy,
        policy.detach().clone().requires_grad_(True),
        pairs[:, 0].to(dtype),
        pairs[:, 1].to(dtype),
        beta=1.0,
        flip_rate=flip_probability(0.1),
    )
    out.losses.sum().backward()
    assert torch.isfinite(out.losses).all() and torch.isfinite(policy.grad.float()).all()


@pytest.mark.parametrize("method", sorted(METHODS))
@pytest.mark.parametrize("clip,eps", [(None, None), (None, 0.7), (50.0, 2.0)])
def test_gradcheck_float64_away_from_clamps(method, clip, eps):
    inputs = [t.requires_grad_(True) for t in _rows(n=5, seed=4, scale=1.5)]

    def fn(pc, pr, rc, rr):
        return preference_loss(method, pc, pr, rc, rr, beta=0.8, clip=clip, flip_rate=flip_probability(eps)).losses

    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-7, rtol=1e-5)


# --------------------------------------------------------------------------- statistics


@pytest.mark.parametrize("method", ["square_chipo", "square_dpo"])
def test_square_loss_bounded_by_one_plus_c_squared(method):
    """(b) every row's square loss is ≤ (1 + c(ε))², and the bound is approached."""
    values = torch.tensor(EXTREMES, dtype=torch.float64)
    grid = torch.cartesian_prod(values, values)
    zeros = torch.zeros(len(grid), dtype=torch.float64)
    for eps in (0.05, 0.5, 2.0, None):
        c = debias_factor(eps)
        for clip in (None, 4.0):
            out = preference_loss(
                method, grid[:, 0], grid[:, 1], zeros, zeros, beta=1.0, clip=clip, flip_rate=flip_probability(eps)
            )
            assert (out.losses <= (1 + c) ** 2 + 1e-9).all()
        unclipped = preference_loss(
            method, grid[:, 0], grid[:, 1], zeros, zeros, beta=1.0, flip_rate=flip_probability(eps)
        )
        assert unclipped.losses.max().item() == pytest.approx((1 + c) ** 2, rel=1e-6)


def _swap_aware_gradient(method, theta, swapped, beta, epsilon):
    """Mean gradient over rows of the loss at θ = (ℓ⁺ policy logp, ℓ⁻ policy logp), rows swapped where asked."""
    theta = theta.detach().clone().requires_grad_(True)
    n = swapped.shape[0]
    a = theta[0].expand(n)
    b = theta[1].expand(n)
    s = torch.as_tensor(swapped)
    chosen = torch.where(s, b, a)
    rejected = torch.where(s, a, b)
    ref = torch.zeros(n, dtype=torch.float64)
    loss = preference_loss(
        method, chosen, rejected, ref, ref, beta=beta, flip_rate=flip_probability(epsilon)
    ).losses.mean()
    (grad,) = torch.autograd.grad(loss, theta)
    return grad.numpy()


@pytest.mark.parametrize("method", ["square_chipo", "square_dpo"])
@pytest.mark.parametrize(
    "theta,p_true,epsilon",
    [((0.3, -0.2), 0.8, 0.5), ((-0.5, 0.4), 0.65, 1.0), ((0.1, 0.0), 0.3, 2.0), ((1.0, 1.2), 0.9, 0.2)],
)
def test_debiased_square_loss_gradient_is_unbiased_under_rr(method, theta, p_true, epsilon):
    """(a) E over true labels and RR noise of ∇ square loss with c(ε) equals the clean expected gradient."""
    theta = torch.tensor(theta, dtype=torch.float64)
    beta, n = 0.9, 400_000
    rng = np.random.default_rng(1234)
    g_keep = _swap_aware_gradient(method, theta, np.array([False]), beta, None)
    g_swap = _swap_aware_gradient(method, theta, np.array([True]), beta, None)
    clean = p_true * g_keep + (1 - p_true) * g_swap  # exact clean expectation (c = 1)

    # True label: 0 = stored order is right (prob p_true); RR then flips it; the observed label swaps rows.
    true_swaps = rng.random(n) >= p_true
    observed = randomized_response(true_swaps, epsilon, rng)
    private = _swap_aware_gradient(method, theta, observed, beta, epsilon)

    # Each row's gradient is one of two vectors (c(ε)-scaled targets), so the SE is exact:
    c_keep = _swap_aware_gradient(method, theta, np.array([False]), beta, epsilon)
    c_swap = _swap_aware_gradient(method, theta, np.array([True]), beta, epsilon)
    pi_keep = p_true * (1 - flip_probability(epsilon)) + (1 - p_true) * flip_probability(epsilon)
    se = np.abs(c_keep - c_swap) * math.sqrt(pi_keep * (1 - pi_keep) / n)
    assert np.all(np.abs(private - clean) <= Z_TOLERANCE * se), (private, clean, se)

    # Power check: without c(ε) the same noisy labels give a gradient many SEs away.
    naive = _swap_aware_gradient(method, theta, observed, beta, None)
    assert np.max(np.abs(naive - clean) / se) > 3 * Z_TOLERANCE


# --------------------------------------------------------------------------- χPO when both log-ratios are large


def test_saturated_chipo_margin_is_exact_with_zero_gradient():
    # ℓ⁺ = 25, ℓ⁻ = 22, β = 0.1, 2R_max = 10: Zhou et al. 2025 (Square-χPO) gives m = clip(0.1·(e^25 − e^22 + 3)) = +10
    # (saturated).
    chosen = torch.tensor([25.0], requires_grad=True)
    rejected = torch.tensor([22.0], requires_grad=True)
    zero = torch.zeros(1)
    m = margins(chosen, rejected, zero, zero, beta=0.1, link="chipo", clip=10.0)
    assert m.item() == 10.0
    m.sum().backward()
    assert chosen.grad.item() == 0.0 and rejected.grad.item() == 0.0
    swapped = margins(torch.tensor([22.0]), torch.tensor([25.0]), zero, zero, beta=0.1, link="chipo", clip=10.0)
    assert swapped.item() == -10.0


def test_chipo_margin_keeps_the_exponential_difference_when_both_ratios_are_large():
    # Unclipped: h = e^25 − e^24.5 + 0.5, far from DPO's 0.5.
    chosen, rejected = torch.tensor([25.0], dtype=torch.float64), torch.tensor([24.5], dtype=torch.float64)
    zero = torch.zeros(1, dtype=torch.float64)
    m = margins(chosen, rejected, zero, zero, beta=1e-10, link="chipo", log_cap=60.0)
    assert m.item() == pytest.approx(1e-10 * (math.exp(25) - math.exp(24.5) + 0.5), rel=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_chipo_margin_is_finite_for_huge_log_ratios(dtype):
    values = torch.tensor([-1e4, -300.0, -25.0, 0.0, 19.9, 20.1, 25.0, 300.0, 1e4])
    chosen = values.repeat_interleave(len(values)).to(dtype).requires_grad_(True)
    rejected = values.repeat(len(values)).to(dtype).requires_grad_(True)
    zero = torch.zeros_like(chosen)
    for clip in (10.0, None):
        for method in ("square_chipo", "chipo"):
            out = preference_loss(
                method, chosen, rejected, zero, zero, beta=0.1, clip=clip, flip_rate=flip_probability(0.5)
            )
            out.losses.sum().backward()
            assert torch.isfinite(out.losses).all() and torch.isfinite(out.margins).all()
            assert torch.isfinite(chosen.grad).all() and torch.isfinite(rejected.grad).all()
            chosen.grad, rejected.grad = None, None
    f = self_play_margin(chosen, rejected, zero, zero, zero, zero, beta=0.1, eta=1.0)
    self_play_loss(f, torch.zeros_like(f)).sum().backward()
    assert torch.isfinite(chosen.grad).all()


def test_chipo_margin_gradcheck_away_from_the_clip():
    # Both sides below 20, across 20, and both above 20 (the log-space branch), with and without d = 0.
    chosen = torch.tensor([0.0, 0.3, 19.0, 24.0, 30.0, 27.0], dtype=torch.float64, requires_grad=True)
    rejected = torch.tensor([0.0, -0.2, 21.0, 23.0, 29.9, 27.0], dtype=torch.float64, requires_grad=True)
    zero = torch.zeros(6, dtype=torch.float64)

    def fn(a, b):
        return margins(a, b, zero, zero, beta=1e-12, link="chipo", log_cap=60.0)

    assert torch.autograd.gradcheck(fn, (chosen, rejected), eps=1e-6, atol=1e-8, rtol=1e-4)
    # The exact gradient at ℓ⁺ = ℓ⁻ = 0 (every row at the first step): ∂h/∂ℓ⁺ = e^0 + 1 = 2.
    a, b = torch.zeros(1, requires_grad=True), torch.zeros(1, requires_grad=True)
    margins(a, b, torch.zeros(1), torch.zeros(1), beta=1.0, link="chipo").sum().backward()
    assert a.grad.item() == 2.0 and b.grad.item() == -2.0


def test_self_play_margin_cancels_exactly_at_large_log_ratios():
    # π = π^t with both log-ratios near 30: f = (1 + 1/η)βh − (β/η)h = βh, h = e^30 − e^29 + 1.
    a, b = torch.tensor([30.0], dtype=torch.float64), torch.tensor([29.0], dtype=torch.float64)
    zero = torch.zeros(1, dtype=torch.float64)
    f = self_play_margin(a, b, a, b, zero, zero, beta=1e-13, eta=0.5)
    assert f.item() == pytest.approx(1e-13 * (math.exp(30) - math.exp(29) + 1.0), rel=1e-9)
