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
    from squarechipo.privacy.ledger.ledger import Debiasing

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


def test_the_chipo_difference_beyond_the_direct_range_is_the_definition():
    """max(ℓ⁺, ℓ⁻) > 80 goes through log|e^{ℓ⁺} − e^{ℓ⁻}|: in float64, where e^100 is representable, it must equal
    (e^{ℓ⁺} − e^{ℓ⁻}) + (ℓ⁺ − ℓ⁻) for either sign and any gap, and 0 + d at d = 0."""
    from squarechipo.losses import chipo_difference

    chosen = torch.tensor([100.0, 99.5, 85.0, 90.0, 120.0, 95.0, 101.0], dtype=torch.float64)
    rejected = torch.tensor([99.5, 100.0, 84.999, 60.0, 120.0, 95.0 - 1e-3, 100.0], dtype=torch.float64)
    h = chipo_difference(chosen, rejected, log_cap=200.0)
    exact = torch.exp(chosen) - torch.exp(rejected) + (chosen - rejected)
    torch.testing.assert_close(h, exact, rtol=1e-9, atol=0.0)
    capped = chipo_difference(chosen[:2], rejected[:2], log_cap=90.0)  # |e^ℓ⁺ − e^ℓ⁻| > e^90: the cap, signed
    torch.testing.assert_close(
        capped, torch.tensor([math.exp(90.0) + 0.5, -math.exp(90.0) - 0.5], dtype=torch.float64)
    )


def test_a_chipo_margin_under_a_clip_that_does_not_bind_is_exact():
    """The χPO term's cap follows the clip (log(clip/β) + 1): with a clip of 1e12, a term of e^25 is not capped at the
    unclipped default e^20."""
    zero = torch.zeros(1, dtype=torch.float64)
    chosen = torch.full((1,), 25.0, dtype=torch.float64)
    m = margins(chosen, zero, zero, zero, beta=0.01, link="chipo", clip=1e12)
    assert m.item() == pytest.approx(0.01 * (math.exp(25.0) - 1.0 + 25.0), rel=1e-12)


def test_margins_refuse_bad_links_and_clips_naming_them_and_compute_in_the_widest_dtype():
    rows = _rows(dtype=torch.float32)
    with pytest.raises(ValueError, match=r"^link must be one of \('dpo', 'chipo'\) \(got 'ipo'\); chipo is Square"):
        margins(*rows, beta=0.1, link="ipo")
    for clip in (0, 0.0, -1.0, "2"):
        with pytest.raises(ValueError, match=r"^clip \(= 2·R_max\) must be positive or None for no clip \(got"):
            margins(*rows, beta=0.1, link="dpo", clip=clip)
    for position in range(4):  # any one input in float64 makes the margin float64
        mixed = [r.double() if i == position else r for i, r in enumerate(rows)]
        assert margins(*mixed, beta=0.1, link="chipo").dtype == torch.float64


def test_the_square_loss_without_a_scale_is_the_loss_without_privacy():
    from squarechipo.losses import square_loss

    m = torch.linspace(-5, 5, 11, dtype=torch.float64)
    torch.testing.assert_close(square_loss(m), (2 * torch.sigmoid(m) - 2.0) ** 2)


def test_a_ledgers_debiasing_is_read_as_its_flip_rate_and_anything_else_refused():
    from squarechipo.privacy.ledger.debiasing import Debiasing

    rows = _rows()
    none = preference_loss("robust_chipo", *rows, beta=0.1, flip_rate=Debiasing("none"))
    torch.testing.assert_close(none.losses, preference_loss("robust_chipo", *rows, beta=0.1, flip_rate=0.0).losses)

    class MethodOnly:
        method = "flip_rate"

    for value, name in ((MethodOnly(), "MethodOnly"), ("0.1", "str")):
        with pytest.raises(
            TypeError, match=rf"^flip_rate must be a number in \[0, 0\.5\) or a Debiasing \(got {name}\)"
        ):
            preference_loss("robust_chipo", *rows, beta=0.1, flip_rate=value)


def test_self_play_margin_refuses_a_step_size_that_is_not_positive_and_finite_and_keeps_the_policys_dtype():
    rows = [r.float() for r in _rows(6)] + [r.float() for r in _rows(6, seed=1)[:2]]
    a, b, ref_a, ref_b, prev_a, prev_b = rows
    for eta in (0, 0.0, -1.0, math.inf, math.nan, "1"):
        with pytest.raises(ValueError, match=r"^eta \(the mirror-descent step size η of Zhou et al\. 2025 "):
            self_play_margin(a, b, prev_a, prev_b, ref_a, ref_b, beta=0.1, eta=eta)
    mixed = self_play_margin(a, b, prev_a.double(), prev_b.double(), ref_a, ref_b, beta=0.1, eta=2.0)
    assert mixed.dtype == torch.float32


def test_the_self_play_loss_is_the_square_of_the_clipped_margin_minus_the_target():
    """(clip(f, ±4) − r̂_diff)² (Zhou et al. 2025 (Square-χPO), eq. (11)), at both clips and inside."""
    f = torch.tensor([-9.0, -4.0, -1.5, 0.0, 2.5, 4.0, 7.0], dtype=torch.float64)
    target = torch.tensor([1.0, -2.0, 0.5, -1.0, 2.0, 0.0, -0.5], dtype=torch.float32)
    expected = (f.clamp(-4.0, 4.0) - target.double()) ** 2
    loss = self_play_loss(f, target)
    assert loss.dtype == torch.float64
    assert self_play_loss(f.float(), target.double()).dtype == torch.float32  # the margin's dtype, not the target's
    torch.testing.assert_close(loss, expected)


def test_preference_value_plackett_luce_margin_clip_and_saturation_against_their_definitions():
    from squarechipo.losses import (
        SATURATED_MARGIN,
        margin_clip,
        plackett_luce_top1_loss,
        preference_value,
        saturation,
    )

    m = torch.linspace(-8, 8, 17, dtype=torch.float64)
    torch.testing.assert_close(preference_value(m), torch.tanh(m / 2))
    scores = torch.tensor([[1.0, 2.0, 0.5], [0.0, -1.0, 3.0]], dtype=torch.float64)
    weights = torch.tensor([[0.0, 1.0, 0.0], [2.0, -0.5, -0.5]], dtype=torch.float64)
    expected = -(weights * (scores - torch.logsumexp(scores, dim=-1, keepdim=True))).sum(dim=-1)
    torch.testing.assert_close(plackett_luce_top1_loss(scores, weights), expected)
    assert plackett_luce_top1_loss(scores.float(), weights.float()).dtype == torch.float32
    wide = scores * 3.3 + 0.17  # bfloat16 scores are scored in float32: a bfloat16 log-softmax keeps 3 digits
    low = plackett_luce_top1_loss(wide.bfloat16(), weights.bfloat16())
    exact = plackett_luce_top1_loss(wide.bfloat16().double(), weights.bfloat16().double())
    assert low.dtype == torch.float32 and torch.allclose(low.double(), exact, rtol=1e-6, atol=1e-5)
    with pytest.raises(
        ValueError, match=r"^scores and label_weights must both be \(n, K\) \(got \(2, 3\) and \(2, 2\)\)"
    ):
        plackett_luce_top1_loss(scores, weights[:, :2])
    assert margin_clip(None) is None and margin_clip(3) == 6.0 and isinstance(margin_clip(3), float)
    margin = torch.tensor([12.0, -12.0, 11.99999, 10.0, -9.5, 9.0, 0.0, 1.0])
    assert saturation(margin, 12.0) == pytest.approx((3 / 8, 5 / 8))  # ±12 and 12(1 − 1e-6) clipped; 10, 9.5 flat
    assert saturation(margin, None) == pytest.approx((0.0, float((margin.abs() > SATURATED_MARGIN).float().mean())))
