"""Label mechanisms: randomized response, Huber corruption, CTL and LTC."""

from __future__ import annotations

import math

import numpy as np
import pytest

from squarechipo.privacy.calibration import flip_probability
from squarechipo.privacy.measurements import LabelPipeline
from squarechipo.privacy.mechanisms import ctl, huber_corruption, ltc, randomized_response
from tests.conftest import Z_TOLERANCE, binomial_se

N = 1_000_000


@pytest.mark.parametrize("epsilon", [0.1, 0.5, 1.0, 2.0, 5.0])
def test_rr_flip_rate_within_4_standard_errors(epsilon):
    rng = np.random.default_rng(20261122)
    labels = rng.random(N) < 0.3
    out = randomized_response(labels, epsilon, rng)
    q = 1 / (1 + math.exp(epsilon))
    rate = np.mean(out != labels)
    assert abs(rate - q) <= Z_TOLERANCE * binomial_se(q, N), (rate, q)


def _wrong_rate(run, epsilon, alpha, seed):
    rng = np.random.default_rng(seed)
    truth = rng.random(N) < 0.5
    return np.mean(run(truth, epsilon, alpha, rng) != truth)


@pytest.mark.parametrize("epsilon,alpha", [(0.5, 0.1), (1.0, 0.2), (2.0, 0.05), (0.1, 0.4)])
def test_ctl_and_ltc_wrong_label_rates_match_closed_forms(epsilon, alpha):
    q = 1 / (1 + math.exp(epsilon))
    ctl_expected = alpha + q - 2 * alpha * q
    ltc_expected = alpha + q - alpha * q
    ctl_rate = _wrong_rate(ctl, epsilon, alpha, seed=1)
    ltc_rate = _wrong_rate(ltc, epsilon, alpha, seed=2)
    assert abs(ctl_rate - ctl_expected) <= Z_TOLERANCE * binomial_se(ctl_expected, N)
    assert abs(ltc_rate - ltc_expected) <= Z_TOLERANCE * binomial_se(ltc_expected, N)
    # LTC is worse by αq; the difference of two independent estimates has SE sqrt(se1² + se2²).
    se_diff = math.hypot(binomial_se(ctl_expected, N), binomial_se(ltc_expected, N))
    assert abs((ltc_rate - ctl_rate) - alpha * q) <= Z_TOLERANCE * se_diff
    # The pipeline object gives the same closed forms.
    assert LabelPipeline(epsilon, alpha, order="ctl").expected_flip_rate() == pytest.approx(ctl_expected)
    assert LabelPipeline(epsilon, alpha, order="ltc").expected_flip_rate() == pytest.approx(ltc_expected)


@pytest.mark.parametrize("order", ["ctl", "ltc"])
def test_random_adversary_rate_matches_pipeline_closed_form(order):
    pipeline = LabelPipeline(epsilon=1.0, corruption_rate=0.3, adversary="random", order=order)
    rng = np.random.default_rng(7)
    truth = rng.random(N) < 0.5
    rate = np.mean(pipeline.apply(truth, rng) != truth)
    expected = pipeline.expected_flip_rate()
    assert abs(rate - expected) <= Z_TOLERANCE * binomial_se(expected, N)


def test_targeted_adversary_only_touches_target_rows():
    rng = np.random.default_rng(3)
    n = 200_000
    truth = rng.random(n) < 0.5
    target = np.arange(n) % 4 == 0
    out = huber_corruption(truth, 0.3, rng, adversary="targeted", target=target)
    assert np.array_equal(out[~target], truth[~target])
    rate = np.mean(out[target] != truth[target])
    assert abs(rate - 0.3) <= Z_TOLERANCE * binomial_se(0.3, int(target.sum()))


def test_fixed_adversary_writes_its_label():
    rng = np.random.default_rng(4)
    n = 200_000
    truth = rng.random(n) < 0.5
    fixed = np.ones(n, dtype=np.int8)
    out = huber_corruption(truth.astype(np.int8), 0.25, rng, adversary="fixed", fixed_labels=fixed)
    assert out.dtype == np.int8
    changed = out != truth
    assert np.all(out[changed] == 1)  # only ever moved towards the fixed label
    expected = 0.25 * np.mean(truth == 0)
    assert abs(changed.mean() - expected) <= Z_TOLERANCE * binomial_se(expected, n)


def test_ltc_flip_adversary_is_wrong_with_respect_to_truth():
    """LTC: a contaminated row is wrong whatever RR did to it (Zhou et al. 2025 (Square-χPO), App. E: mask set to
    1)."""
    rng = np.random.default_rng(5)
    truth = np.zeros(100_000, dtype=bool)
    out = ltc(truth, 0.5, 0.5, rng)
    q = flip_probability(0.5)
    expected = 0.5 + q - 0.5 * q
    assert abs(out.mean() - expected) <= Z_TOLERANCE * binomial_se(expected, truth.size)


def test_outputs_keep_dtype_and_never_touch_inputs():
    labels = np.array([0, 1, 1, 0] * 1000, dtype=np.int64)
    before = labels.copy()
    out = randomized_response(labels, 0.5, np.random.default_rng(0))
    assert out.dtype == np.int64 and np.array_equal(labels, before)
    assert set(np.unique(out)) <= {0, 1}


def test_explicit_generator_only_no_global_state():
    labels = np.zeros(10_000, dtype=bool)
    np.random.seed(0)
    a = ctl(labels, 1.0, 0.1, np.random.default_rng(42))
    np.random.seed(999)
    b = ctl(labels, 1.0, 0.1, np.random.default_rng(42))
    assert np.array_equal(a, b)
    c = ctl(labels, 1.0, 0.1, np.random.default_rng(43))
    assert not np.array_equal(a, c)
    with pytest.raises(TypeError, match="numpy.random.Generator"):
        randomized_response(labels, 1.0, 42)


def test_no_privacy_no_corruption_is_identity():
    labels = np.random.default_rng(0).random(1000) < 0.5
    assert np.array_equal(randomized_response(labels, None, np.random.default_rng(1)), labels)
    assert np.array_equal(huber_corruption(labels, 0.0, np.random.default_rng(1)), labels)


def test_bad_inputs_raise():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="labels must contain only 0 and 1"):
        randomized_response(np.array([0, 2]), 1.0, rng)
    with pytest.raises(ValueError, match="labels must be a 0/1 array"):
        randomized_response(np.array([0.0, 1.0]), 1.0, rng)
    with pytest.raises(ValueError, match="corruption_rate"):
        huber_corruption(np.array([0, 1]), 0.6, rng)
    with pytest.raises(ValueError, match="adversary"):
        huber_corruption(np.array([0, 1]), 0.1, rng, adversary="evil")
    with pytest.raises(ValueError, match="target"):
        huber_corruption(np.array([0, 1]), 0.1, rng, adversary="targeted")
    with pytest.raises(ValueError, match="order"):
        LabelPipeline(epsilon=1.0, order="both")
    with pytest.raises(ValueError, match="epsilon"):
        LabelPipeline(epsilon=-1.0)
    with pytest.raises(ValueError, match="fixed_preference"):
        LabelPipeline(corruption_rate=0.1, adversary="fixed")
