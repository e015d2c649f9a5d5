"""The exponential-mechanism score-vector selector: distribution, a DP audit, bounds and stability."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from squarechipo.select import row_square_losses, select_index
from squarechipo.select.exponential import _mechanism_logits, select_indices

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
