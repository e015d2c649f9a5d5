"""squarechipo.stats against its definitions: scipy's tests and intervals, simulation, Holm's step-down rule, power
and its inverses, Fieller's interval, the length regression. Each function is checked as a property where one exists
(the mutation run of this module uses this file)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from squarechipo.stats import (
    holm,
    mde,
    paired_test,
    power,
    ratio_interval,
    seeds_for_power,
    share_explained,
    verdict,
)
from tests.helpers.stats import Z_TOLERANCE, binomial_se


def test_paired_test_is_scipys_one_sample_t_test_and_interval():
    x = [1.2, -0.3, 2.5, 0.8, 1.9, 0.1]
    result = paired_test(x)
    mean, sd, n = np.mean(x), np.std(x, ddof=1), len(x)
    half = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
    assert (result.mean, result.low, result.high) == pytest.approx((mean, mean - half, mean + half))
    t = mean / (sd / math.sqrt(n))
    assert result.p_value == pytest.approx(2 * stats.t.sf(abs(t), n - 1))
    assert result.sd == pytest.approx(sd) and result.n == n
    assert math.isnan(paired_test([3.0]).low) and paired_test([3.0]).mean == 3.0
    assert paired_test([2.0, 2.0, 2.0]).p_value == 0.0 and paired_test([0.0, 0.0]).p_value == 1.0


def test_holm_adjusts_step_down_and_keeps_the_input_order():
    # Sorted 0.01, 0.02, 0.03, 0.04 of m = 4: ×4, ×3, ×2, ×1 = 0.04, 0.06, 0.06, 0.04 → running max 0.04, 0.06,
    # 0.06, 0.06.
    assert holm([0.03, 0.01, 0.04, 0.02]) == pytest.approx([0.06, 0.04, 0.06, 0.06])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # capped at 1
    adjusted = holm([0.01, float("nan"), 0.02])
    assert adjusted[0] == pytest.approx(0.02) and math.isnan(adjusted[1]) and adjusted[2] == pytest.approx(0.02)


def test_power_of_the_paired_t_test_matches_a_simulation():
    n, effect, sd = 8, 1.0, 1.5
    rng = np.random.default_rng(0)
    draws = rng.normal(effect, sd, size=(40_000, n))
    rejected = stats.ttest_1samp(draws, 0.0, axis=1).pvalue < 0.05
    expected = power(n, effect, sd)
    assert abs(rejected.mean() - expected) < Z_TOLERANCE * binomial_se(expected, len(draws))
    assert power(n, 0.0, sd) == pytest.approx(0.05)  # no effect: the test's level


def test_power_with_two_or_three_seeds_is_finite_where_scipys_noncentral_t_is_nan():
    # The main run's first seeds: scipy's nct.cdf is NaN in the far tail at df 1-2, which once stopped the report.
    for n, effect in ((2, 8.0), (2, 64.0), (3, 16.0)):
        value = power(n, effect, 1.0)
        assert 0.0 < value <= 1.0 and value == power(n, -effect, 1.0)
    rng = np.random.default_rng(3)
    draws = rng.normal(8.0, 1.0, size=(40_000, 2))
    rejected = (stats.ttest_1samp(draws, 0.0, axis=1).pvalue < 0.05).mean()
    assert abs(rejected - power(2, 8.0, 1.0)) < Z_TOLERANCE * binomial_se(power(2, 8.0, 1.0), len(draws))
    assert power(2, mde(2, 3.0), 3.0) == pytest.approx(0.8, abs=1e-8)


def test_seeds_for_power_is_the_smallest_size_that_reaches_it_and_mde_inverts_power():
    n = seeds_for_power(2.0, 3.0)
    assert power(n, 2.0, 3.0) >= 0.8 > power(n - 1, 2.0, 3.0)
    assert power(n, mde(n, 3.0), 3.0) == pytest.approx(0.8, abs=1e-8)
    assert mde(n, 3.0) <= 2.0 < mde(n - 1, 3.0)
    with pytest.raises(ValueError, match="effect must be > 0"):
        seeds_for_power(0.0, 1.0)


def test_verdicts_follow_the_adjusted_p_value_and_state_the_mde():
    up, down = paired_test([2.0, 2.5, 3.0, 2.2]), paired_test([-2.0, -2.5, -3.0, -2.2])
    assert verdict(up, 0.01, 1.0) == "holds" and verdict(down, 0.01, 1.0) == "reversed"
    assert verdict(up, 0.2, 1.234, unit=" points") == "not decided at MDE 1.23 points"


def test_fieller_interval_inverts_the_t_test_of_the_ratio():
    rng = np.random.default_rng(1)
    b = rng.normal(2.0, 0.3, 6)
    a = 0.5 * b + rng.normal(0, 0.1, 6)
    result = ratio_interval(a, b)
    assert result["ratio"] == pytest.approx(a.mean() / b.mean())
    critical = stats.t.ppf(0.975, 5)
    for rho in (result["low"], result["high"]):  # at the ends, the t-statistic of a − ρb is exactly critical
        d = a - rho * b
        assert abs(d.mean() / (d.std(ddof=1) / math.sqrt(6))) == pytest.approx(critical)
    assert result["low"] < 0.5 < result["high"]
    unbounded = ratio_interval([1.0, 2.0, 0.5], [0.1, -0.2, 0.15])  # a denominator not away from 0
    assert math.isinf(unbounded["low"]) and math.isinf(unbounded["high"])


def test_share_explained_regresses_the_gain_on_the_length_difference():
    x = np.array([-2.0, 0.0, 1.0, 3.0, 4.0])
    y = 0.5 + 0.25 * x
    fit = share_explained(y, x)
    assert (fit["slope"], fit["intercept"], fit["r2"]) == pytest.approx((0.25, 0.5, 1.0))
    assert fit["share"] == pytest.approx(0.25 * x.mean() / y.mean())


def test_paired_test_takes_its_confidence_level_and_names_its_degenerate_cases():
    x = [1.2, -0.3, 2.5, 0.8, 1.9, 0.1]
    ci = stats.ttest_1samp(x, 0.0).confidence_interval(confidence_level=0.8)
    assert (paired_test(x, confidence=0.8).low, paired_test(x, confidence=0.8).high) == pytest.approx(
        (ci.low, ci.high)
    )
    empty = paired_test([])
    assert empty.n == 0 and all(math.isnan(v) for v in (empty.mean, empty.low, empty.high, empty.p_value, empty.sd))
    assert paired_test([3.0]).n == 1 and math.isnan(paired_test([3.0]).p_value) and math.isnan(paired_test([3.0]).sd)
    flat = paired_test([-2.0, -2.0])
    assert (flat.mean, flat.low, flat.high, flat.p_value, flat.sd, flat.n) == (-2.0, -2.0, -2.0, 0.0, 0.0, 2)
    two = paired_test([1.0, 2.0])
    assert two.to_dict() == {
        "mean": 1.5,
        "low": two.low,
        "high": two.high,
        "p_value": two.p_value,
        "sd": two.sd,
        "n": 2,
    }


def _holm_by_steps(p: np.ndarray, alpha: float) -> np.ndarray:
    """Holm's procedure as he stated it: reject the smallest p while p_(k) ≤ α/(m − k + 1), stop at the first that
    is not; NaN is not a hypothesis."""
    valid = np.flatnonzero(~np.isnan(p))
    rejected = np.zeros(p.shape, dtype=bool)
    for k, index in enumerate(valid[np.argsort(p[valid], kind="stable")]):
        if p[index] > alpha / (len(valid) - k):
            break
        rejected[index] = True
    return rejected


def test_holm_adjusted_p_values_reject_exactly_what_holms_procedure_rejects_at_every_level():
    rng = np.random.default_rng(7)
    for _ in range(300):
        m = int(rng.integers(1, 8))
        p = rng.choice([rng.uniform(0, 0.2), rng.uniform(0, 1)], size=m) * rng.uniform(0.2, 1.0, size=m)
        p[rng.random(m) < 0.15] = np.nan
        adjusted = np.array(holm(p.tolist()))
        assert np.array_equal(np.isnan(adjusted), np.isnan(p))
        valid = ~np.isnan(p)
        assert np.all(adjusted[valid] >= p[valid]) and np.all(adjusted[valid] <= 1.0)
        for alpha in (0.01, 0.05, 0.1, 0.3):
            assert np.array_equal(np.nan_to_num(adjusted, nan=2.0) <= alpha, _holm_by_steps(p, alpha)), (p, alpha)
    assert holm([]) == [] and holm([0.2]) == [0.2]


def test_power_takes_its_level_and_handles_no_spread_and_too_few_pairs():
    assert power(6, 0.0, 1.0, alpha=0.1) == pytest.approx(0.1)
    assert power(6, 0.7, 1.0, alpha=0.1) > power(6, 0.7, 1.0, alpha=0.01)
    critical = stats.t.ppf(1 - 0.1 / 2, 5)
    delta = 0.7 * math.sqrt(6)
    assert power(6, 0.7, 1.0, alpha=0.1) == pytest.approx(
        stats.nct.sf(critical, 5, delta) + stats.nct.cdf(-critical, 5, delta)
    )
    assert power(6, 0.5, 0.0) == 1.0 and power(6, 0.0, 0.0, alpha=0.2) == 0.2 and power(6, -0.5, 0.0) == 1.0
    assert math.isnan(power(1, 1.0, 1.0)) and math.isnan(power(0, 1.0, 1.0))


def test_the_quadrature_tails_are_scipys_noncentral_t_where_scipy_has_them():
    from squarechipo.stats import _two_tails_by_quadrature

    for df, critical, noncentrality in ((1, 12.7, 2.0), (2, 4.3, 3.0), (5, 2.57, 0.5), (9, 2.26, 4.0)):
        upper, lower = _two_tails_by_quadrature(critical, df, noncentrality)
        assert upper == pytest.approx(stats.nct.sf(critical, df, noncentrality), rel=1e-6, abs=1e-12)
        assert lower == pytest.approx(stats.nct.cdf(-critical, df, noncentrality), rel=1e-6, abs=1e-12)


def test_seeds_for_power_and_mde_take_their_target_and_level():
    for target, alpha in ((0.9, 0.05), (0.8, 0.01), (0.5, 0.1)):
        n = seeds_for_power(1.0, 1.5, target=target, alpha=alpha)
        assert power(n, 1.0, 1.5, alpha) >= target > (power(n - 1, 1.0, 1.5, alpha) if n > 2 else -1.0)
        found = mde(n, 1.5, target=target, alpha=alpha)
        assert power(n, found, 1.5, alpha) == pytest.approx(target, abs=1e-8) and found <= 1.0
    assert seeds_for_power(1.0, 0.0) == 2  # no spread: the fewest pairs a t-test takes
    assert mde(1, 2.0) == math.inf and mde(5, 0.0) == 0.0
    assert mde(2, 1.0) > 4.0  # two pairs need more than four SDs: the search doubles its bracket
    with pytest.raises(ValueError, match=r"^effect must be > 0 and sd ≥ 0 \(got effect=1\.0, sd=-1\.0\)\.$"):
        seeds_for_power(1.0, -1.0)
    with pytest.raises(ValueError, match=r"^more than 3 pairs would be needed for effect 0\.1 at SD 1\.0\.$"):
        seeds_for_power(0.1, 1.0, limit=3)


def test_a_verdict_needs_the_adjusted_p_strictly_below_its_level():
    up = paired_test([2.0, 2.5, 3.0, 2.2])
    assert verdict(up, 0.05, 1.0) == "not decided at MDE 1.00"  # at the level, not below it
    assert verdict(up, 0.04, 1.0, alpha=0.01) == "not decided at MDE 1.00" and verdict(up, 0.04, 1.0) == "holds"
    assert verdict(up, math.nan, 0.5, unit=" nats") == "not decided at MDE 0.50 nats"


def test_share_explained_without_a_line_to_fit_and_with_no_mean_gain():
    few = share_explained([1.0, 3.0], [0.5, 1.0])
    assert math.isnan(few["slope"]) and few["intercept"] == 2.0 and math.isnan(few["r2"]) and few["share"] == 0.0
    same_length = share_explained([1.0, 2.0, 6.0], [1.0, 1.0, 1.0])
    assert math.isnan(same_length["slope"]) and same_length["intercept"] == 3.0 and same_length["share"] == 0.0
    assert math.isnan(share_explained([], [])["intercept"])
    x, y = np.array([-1.0, 0.0, 1.0, 2.0]), np.array([-1.0, 1.0, 0.5, -0.5])
    fit = share_explained(y, x)
    assert math.isnan(fit["share"])  # a mean gain of 0 has no share
    assert fit["r2"] == pytest.approx(np.corrcoef(x, y)[0, 1] ** 2) and fit["intercept"] == pytest.approx(
        y.mean() - fit["slope"] * x.mean()
    )


def test_fiellers_interval_takes_its_confidence_and_names_its_degenerate_cases():
    rng = np.random.default_rng(2)
    b = rng.normal(2.0, 0.3, 7)
    a = 0.4 * b + rng.normal(0, 0.1, 7)
    narrow, wide = ratio_interval(a, b, confidence=0.8), ratio_interval(a, b)
    assert wide["low"] < narrow["low"] < narrow["ratio"] < narrow["high"] < wide["high"] and narrow["n"] == 7
    for rho in (narrow["low"], narrow["high"]):
        d = a - rho * b
        assert abs(d.mean() / (d.std(ddof=1) / math.sqrt(7))) == pytest.approx(stats.t.ppf(0.9, 6))
    one = ratio_interval([1.0], [2.0])
    assert one["ratio"] == 0.5 and math.isnan(one["low"]) and math.isnan(one["high"]) and one["n"] == 1
    assert math.isnan(ratio_interval([], [])["ratio"]) and ratio_interval([], [])["n"] == 0
    zero = ratio_interval([1.0, 2.0, 3.0], [1.0, -1.0, 0.0])
    assert math.isnan(zero["ratio"]) and zero["low"] == -math.inf and zero["high"] == math.inf


def test_holm_reads_a_missing_p_value_as_nan_and_ties_in_any_order_give_the_same_values():
    """A claim that could not be tested has no p (null in a summary's JSON)."""
    adjusted = holm([0.01, None, 0.02])
    assert adjusted[0] == pytest.approx(0.02) and math.isnan(adjusted[1]) and adjusted[2] == pytest.approx(0.02)
    assert holm([0.02, 0.01, 0.02]) == pytest.approx([0.04, 0.03, 0.04])


def test_seeds_for_power_searches_up_to_its_limit_and_no_further():
    needed = seeds_for_power(0.5, 1.0)
    assert seeds_for_power(0.5, 1.0, limit=needed) == needed
    with pytest.raises(ValueError, match=rf"^more than {needed - 1} pairs would be needed"):
        seeds_for_power(0.5, 1.0, limit=needed - 1)


def test_mde_brackets_its_root_at_its_own_level():
    """At α = 0.001 and three pairs the MDE is many SDs; the bracket must grow under that level, not the default's."""
    found = mde(3, 1.0, alpha=0.001)
    assert found > 2 * mde(3, 1.0) and power(3, found, 1.0, alpha=0.001) == pytest.approx(0.8, abs=1e-8)
    assert mde(4, 1.0) > 0.0 and power(4, mde(4, 1.0), 1.0) == pytest.approx(0.8, abs=1e-8)


def test_a_small_positive_mean_holds_and_a_small_negative_one_is_reversed():
    assert verdict(paired_test([0.5, 0.52, 0.48, 0.51]), 0.01, 0.1) == "holds"
    assert verdict(paired_test([-0.5, -0.52, -0.48, -0.51]), 0.01, 0.1) == "reversed"


def test_share_explained_fits_a_line_from_three_units():
    fit = share_explained([1.0, 2.0, 3.5], [0.0, 1.0, 2.0])
    assert fit["slope"] == pytest.approx(1.25) and fit["intercept"] == pytest.approx(11 / 12)


def test_fieller_interval_from_two_units_and_the_unbounded_set_keeps_its_count():
    two = ratio_interval([1.0, 1.2], [2.0, 2.1])
    assert math.isfinite(two["low"]) and two["low"] < two["ratio"] < two["high"] and two["n"] == 2
    d = np.array([1.0, 1.2]) - two["low"] * np.array([2.0, 2.1])
    assert abs(d.mean() / (d.std(ddof=1) / math.sqrt(2))) == pytest.approx(stats.t.ppf(0.975, 1))
    assert ratio_interval([1.0, 2.0, 0.5], [0.1, -0.2, 0.15])["n"] == 3


def test_wilson_interval_takes_its_confidence_and_refuses_impossible_counts():
    from squarechipo.stats import wilson_interval

    z = stats.norm.ppf(0.9)
    k, n = 7, 20
    centre = (k + z**2 / 2) / (n + z**2)
    half = z * math.sqrt(k * (n - k) / n + z**2 / 4) / (n + z**2)
    assert wilson_interval(k, n, confidence=0.8) == pytest.approx((centre - half, centre + half))
    assert wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError, match=r"^successes must lie in \[0, n\] \(got 21 of 20\)\.$"):
        wilson_interval(21, 20)


def test_t_interval_is_students_over_the_values_given():
    from squarechipo.stats import t_interval

    values = [0.3, -0.1, 0.5, 0.2, 0.4]
    for confidence in (0.9, 0.95):
        ci = stats.t.interval(confidence, len(values) - 1, loc=np.mean(values), scale=stats.sem(values))
        assert t_interval(values, confidence) == pytest.approx((np.mean(values), *ci))
    assert t_interval(values) == t_interval(values, 0.95)  # the default level is 95%
    two = t_interval([1.0, 3.0])
    assert two == pytest.approx((2.0, *stats.t.interval(0.95, 1, loc=2.0, scale=1.0)))  # two values: an interval
    one = t_interval([2.0])
    assert one[0] == 2.0 and math.isnan(one[1]) and math.isnan(one[2])
    assert all(math.isnan(v) for v in t_interval([]))


def test_the_bootstrap_interval_is_scipys_bca_with_the_settings_given_and_repeatable_without_a_generator():
    from squarechipo.stats import bootstrap_mean_interval

    x = np.random.default_rng(1).normal(0.2, 1.0, 40)
    ours = bootstrap_mean_interval(x, confidence=0.8, n_resamples=999, rng=np.random.default_rng(5))
    theirs = stats.bootstrap(
        (x,), np.mean, confidence_level=0.8, n_resamples=999, method="BCa", rng=np.random.default_rng(5)
    ).confidence_interval
    assert ours == (theirs.low, theirs.high)
    assert bootstrap_mean_interval(x) == bootstrap_mean_interval(x)  # no generator given: a fixed one
    assert bootstrap_mean_interval([3.0]) == (3.0, 3.0) and bootstrap_mean_interval([2.0, 2.0]) == (2.0, 2.0)
    assert all(math.isnan(v) for v in bootstrap_mean_interval([]))
