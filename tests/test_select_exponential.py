"""The exponential-mechanism score-vector selector: distribution, a DP audit, bounds and stability."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from scipy import stats

from squarechipo.select import row_square_losses, select_index
from squarechipo.select.exponential import _mechanism_logits, row_preference_losses, select_indices

N_DRAWS = 100_000


def _frequencies(losses, epsilon, seed, n=N_DRAWS):
    """Counts of n selections, drawn at once (the same indices as n calls of select_index: see the next test)."""
    return np.bincount(select_indices(losses, epsilon, np.random.default_rng(seed), n), minlength=len(losses))


def test_batched_selections_are_the_single_draws_of_the_same_stream():
    losses = [0.0, 3.0, 5.0, 8.0, 20.0]
    one_by_one = [select_index(losses, 1.0, rng) for rng in [np.random.default_rng(5)] for _ in range(3000)]
    batched = select_indices(losses, 1.0, np.random.default_rng(5), 3000)
    assert batched.tolist() == one_by_one and len(set(one_by_one)) >= 3
    with pytest.raises(TypeError, match="Generator"):
        select_indices(losses, 1.0, 42, 10)


def _softmax(x):
    z = np.exp(x - x.max())
    return z / z.sum()


@pytest.mark.parametrize(
    "epsilon,losses", [(1.0, [0.0, 3.0, 5.0, 8.0, 20.0]), (0.3, [10.0, 12.0, 11.0]), (5.0, [2.0, 2.5, 9.0])]
)
def test_selection_frequencies_match_softmax(epsilon, losses):
    """Chi-square goodness of fit against softmax(−ε·L/8); reject only at p < 1e-4."""
    counts = _frequencies(losses, epsilon, seed=11)
    expected = N_DRAWS * _softmax(-epsilon * np.array(losses) / 8.0)
    keep = expected >= 5  # chi-square validity; merge the tail into one cell
    observed = np.append(counts[keep], counts[~keep].sum()) if (~keep).any() else counts
    expected = np.append(expected[keep], expected[~keep].sum()) if (~keep).any() else expected
    assert stats.chisquare(observed, expected).pvalue > 1e-4


def test_dp_audit_on_worst_case_neighbours():
    """Neighbouring datasets: one row moves candidate 0's loss by +4 and candidate 1's by −4 (the most
    a row can, each row loss lying in [0, 4]). The selection-frequency log-ratio must stay ≤ ε plus
    a tolerance of 4 standard errors (delta method: SE(log p̂) ≈ sqrt((1 − p)/(n·p)))."""
    epsilon = 1.0
    base = np.array([20.0, 16.0, 18.0])
    neighbour = base + np.array([4.0, -4.0, 0.0])
    a = _frequencies(base, epsilon, seed=1)
    b = _frequencies(neighbour, epsilon, seed=2)
    pa, pb = a / N_DRAWS, b / N_DRAWS
    ratios = np.abs(np.log(pa) - np.log(pb))
    se = np.sqrt((1 - pa) / (N_DRAWS * pa) + (1 - pb) / (N_DRAWS * pb))
    assert np.all(ratios <= epsilon + 4 * se), (ratios, se)
    # The audit has power: the worst-case pair comes close to ε on candidate 0 or 1.
    assert ratios[:2].max() >= 0.5 * epsilon


def test_row_loss_is_bounded_in_0_4_for_extreme_margins():
    margins = torch.tensor([-1e9, -50.0, -2.0, 0.0, 2.0, 50.0, 1e9, -1e4, 1e4], dtype=torch.float64)
    losses = row_square_losses(margins)
    assert torch.all(losses >= 0) and torch.all(losses <= 4)
    assert losses[0].item() == pytest.approx(4.0) and losses[6].item() == pytest.approx(0.0)
    assert torch.all(torch.isfinite(row_square_losses(margins.float())))


def test_numerically_stable_for_huge_losses_and_budgets():
    rng = np.random.default_rng(0)
    losses = np.array([1e9, 1e9 + 50.0, 2e9, 1e9 - 10.0])
    for epsilon in (1e-3, 1.0, 100.0):
        logits = _mechanism_logits(losses, epsilon)
        assert np.all(np.isfinite(logits)) and logits.max() == 0.0
    assert {select_index(losses, 100.0, rng) for _ in range(200)} == {3}  # the argmin, with certainty
    equal = np.full(4, 1e9)
    counts = np.bincount([select_index(equal, 100.0, rng) for _ in range(4000)], minlength=4)
    assert np.all(np.abs(counts / 4000 - 0.25) <= 4 * math.sqrt(0.25 * 0.75 / 4000))


def test_bad_inputs_raise():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="epsilon"):
        select_index([1.0, 2.0], 0.0, rng)
    with pytest.raises(ValueError, match="epsilon"):
        select_index([1.0, 2.0], math.inf, rng)
    with pytest.raises(ValueError, match="finite"):
        select_index([1.0, float("nan")], 1.0, rng)
    with pytest.raises(ValueError, match="non-empty 1-D"):
        select_index([], 1.0, rng)
    with pytest.raises(TypeError, match="Generator"):
        select_index([1.0, 2.0], 1.0, 42)


@pytest.mark.parametrize("sensitivity", [0.5, 1.0, 4.0, 9.0])
def test_selection_follows_the_sensitivity_it_is_given(sensitivity):
    """Probability ∝ exp(−ε·L/(2Δ)) at the Δ passed, one draw at a time and batched: a Δ of 0.5 sharpens the law
    eight-fold against the default Δ = 4 (a caller whose row losses are bounded more tightly spends less ε)."""
    losses, epsilon = np.array([0.0, 1.0, 2.0]), 1.0
    expected = _softmax(-epsilon * losses / (2.0 * sensitivity))
    counts = np.bincount(select_indices(losses, epsilon, np.random.default_rng(3), 20_000, sensitivity), minlength=3)
    assert stats.chisquare(counts, 20_000 * expected).pvalue > 1e-4
    rng = np.random.default_rng(4)
    singles = np.bincount([select_index(losses, epsilon, rng, sensitivity) for _ in range(4000)], minlength=3)
    assert stats.chisquare(singles, 4000 * expected).pvalue > 1e-4
    np.testing.assert_allclose(np.exp(_mechanism_logits(losses, epsilon, sensitivity)), expected / expected.max())


@pytest.mark.parametrize("sensitivity", [0, 0.0, -1.0, math.inf, math.nan, "4", None])
def test_a_sensitivity_that_is_not_positive_and_finite_is_refused_naming_it(sensitivity):
    with pytest.raises(
        ValueError, match=rf"^sensitivity must be positive and finite \(got {re.escape(repr(sensitivity))}\)"
    ):
        select_index([1.0, 2.0], 1.0, np.random.default_rng(0), sensitivity)


def test_the_logits_are_float64_whatever_the_losses_dtype():
    """float32 losses (a model's) are widened before scaling: at ε = 100 and L ≈ 1e6 the logits are about 1.25e7,
    which float32 rounds to whole numbers, moving each candidate's probability."""
    losses = np.array([1e6, 1e6 + 0.25, 1e6 + 0.5], dtype=np.float32)
    for given in (losses, torch.from_numpy(losses), losses.tolist()):
        logits = _mechanism_logits(given, 100.0)
        assert logits.dtype == np.float64
        np.testing.assert_allclose(logits, -100.0 * (losses.astype(np.float64) - 1e6) / 8.0, rtol=0, atol=1e-9)


def test_refusals_name_what_was_given():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match=r"^losses must be finite; a NaN or inf loss"):
        select_index([1.0, math.inf], 1.0, rng)
    for call in (lambda: select_index([1.0, 2.0], 1.0, [0]), lambda: select_indices([1.0, 2.0], 1.0, [0], 3)):
        with pytest.raises(TypeError, match=r"^rng must be a numpy\.random\.Generator \(got list\)"):
            call()


def test_the_general_preference_row_loss_is_the_square_loss_of_its_preference():
    """(ℓ − 1)² on ℓ ∈ [−1, 1], in [0, 4]; with ℓ = 2σ(m) − 1 it equals the Square-χPO row loss at c = 1, for numpy
    arrays and torch tensors alike (Zhou et al. 2025 (Square-χPO), Alg. 3, line 6)."""
    margins = torch.linspace(-6.0, 6.0, 25, dtype=torch.float64)
    preference = 2.0 * torch.sigmoid(margins) - 1.0
    torch.testing.assert_close(row_preference_losses(preference), row_square_losses(margins))
    values = np.array([-1.0, -0.5, 0.0, 0.5, 1.0])
    np.testing.assert_allclose(row_preference_losses(values), [4.0, 2.25, 1.0, 0.25, 0.0])
