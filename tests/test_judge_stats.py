"""Position-swap bookkeeping, interval maths, verdict parsing and aggregation."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from squarechipo.evaluation.report import aggregate_runs
from squarechipo.judge import (
    calibrate,
    pair_outcome,
    parse_verdict,
    summarize_outcomes,
    wilson_interval,
)
from squarechipo.judge.stats import bootstrap_mean_interval, soft_margin, soft_outcome


def test_wilson_interval_known_values():
    # Reference values from the closed form (Wilson 1927), z = 1.96.
    low, high = wilson_interval(8, 10)
    assert low == pytest.approx(0.4902, abs=1e-4) and high == pytest.approx(0.9433, abs=1e-4)
    low, high = wilson_interval(0, 20)
    assert low == 0.0 and high == pytest.approx(0.1611, abs=1e-4)
    low, high = wilson_interval(50, 100)
    assert (low + high) / 2 == pytest.approx(0.5) and high - low == pytest.approx(0.1920, abs=1e-3)
    assert wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson_interval(5, 4)


@pytest.mark.parametrize(
    "policy_first,baseline_first,outcome",
    [(0, 1, "win"), (1, 0, "loss"), (0, 0, "tie"), (1, 1, "tie"), (None, 1, "invalid"), (0, None, "invalid")],
)
def test_pair_outcome_needs_both_orders_to_agree(policy_first, baseline_first, outcome):
    assert pair_outcome(policy_first, baseline_first) == outcome


def test_summary_counts_and_excludes_invalid():
    summary = summarize_outcomes(["win"] * 6 + ["tie"] * 2 + ["loss"] * 2 + ["invalid"] * 3)
    assert (summary.n_pairs, summary.n_valid, summary.n_invalid) == (13, 10, 3)
    assert summary.win_rate == 0.6 and summary.tie_rate == 0.2 and summary.loss_rate == 0.2
    assert summary.win_ci == wilson_interval(6, 10)
    empty = summarize_outcomes(["invalid"])
    assert math.isnan(empty.win_rate) and empty.n_invalid == 1
    with pytest.raises(ValueError, match="unknown outcomes"):
        summarize_outcomes(["draw"])


def test_ties_and_identical_responses_count_half_and_identical_is_reported_apart():
    summary = summarize_outcomes(["win"] * 5 + ["tie"] * 2 + ["identical"] * 2 + ["loss"] * 1 + ["invalid"])
    assert summary.n_valid == 10 and summary.identical == 2 and summary.identical_rate == 0.2
    assert summary.win_rate_half_ties == pytest.approx((5 + 0.5 * 4) / 10)
    assert summary.win_rate + summary.tie_rate + summary.loss_rate + summary.identical_rate == pytest.approx(1.0)
    low, high = summary.win_rate_half_ties_ci
    assert low < summary.win_rate_half_ties < high
    # No spread, no interval width; nothing judged, no interval.
    assert summarize_outcomes(["identical"] * 4).win_rate_half_ties_ci == (0.5, 0.5)
    assert all(math.isnan(v) for v in summarize_outcomes(["invalid"]).win_rate_half_ties_ci)


def test_bootstrap_interval_covers_the_truth_at_the_nominal_rate():
    # Per-prompt scores 1 / ½ / 0 with P = (0.45, 0.2, 0.35): true mean 0.55. 300 seeded repetitions of
    # 80 prompts; the BCa interval's coverage must lie within 3 binomial SE of 0.95 (0.912–0.988). Size: an exact
    # 95% interval fails this with probability 0.003. Power: a 90% interval fails it with probability 0.76, an 85%
    # one with probability above 0.999 (normal approximation to the binomial).
    rng = np.random.default_rng(12345)
    repetitions, n = 300, 80
    truth = 0.45 + 0.5 * 0.2
    covered = 0
    for _ in range(repetitions):
        scores = rng.choice([1.0, 0.5, 0.0], size=n, p=[0.45, 0.2, 0.35])
        low, high = bootstrap_mean_interval(scores, n_resamples=999, rng=rng)
        covered += low <= truth <= high
    se = math.sqrt(0.95 * 0.05 / repetitions)
    assert abs(covered / repetitions - 0.95) <= 3 * se, covered / repetitions


def test_wilson_interval_covers_at_the_nominal_rate():
    # The exact coverage of the scipy Wilson interval at n = 50, p = 0.3, summed over the binomial pmf.
    n, p = 50, 0.3
    coverage = sum(
        stats.binom.pmf(k, n, p) for k in range(n + 1) if wilson_interval(k, n)[0] <= p <= wilson_interval(k, n)[1]
    )
    assert 0.93 <= coverage <= 0.97


def test_soft_rule_cancels_a_planted_position_bias():
    # A judge whose log-odds are the true preference strength plus a constant pull towards A: it says A
    # in both orders on every pair, so the hard rule makes every pair a tie; the soft rule recovers the truth.
    rng = np.random.default_rng(0)
    truth = rng.normal(0.0, 1.0, size=200)  # > 0: the policy's response is better
    truth = truth[np.abs(truth) > 0.05]
    bias = 6.0
    policy_first = truth + bias  # policy shown as A
    baseline_first = -truth + bias  # baseline shown as A
    hard = [pair_outcome(0 if a > 0 else 1, 0 if b > 0 else 1) for a, b in zip(policy_first, baseline_first)]
    soft = [soft_outcome(a, b) for a, b in zip(policy_first, baseline_first)]
    assert set(hard) == {"tie"}
    assert soft == ["win" if t > 0 else "loss" for t in truth]
    assert [soft_margin(a, b) for a, b in zip(policy_first, baseline_first)] == pytest.approx(list(truth))


def test_soft_rule_tie_band_and_missing_log_odds():
    assert soft_outcome(0.4, -0.4, tie_band=0.5) == "tie" and soft_outcome(0.4, -0.4, tie_band=0.3) == "win"
    assert soft_outcome(-1.0, 1.0, tie_band=0.5) == "loss"
    assert soft_outcome(None, 1.0) == "invalid" and soft_outcome(float("nan"), 1.0) == "invalid"
    with pytest.raises(ValueError, match="tie_band"):
        soft_outcome(1.0, 0.0, tie_band=-1.0)


def test_calibration_accuracy_and_position_bias():
    # Pair 1 right both ways; pair 2 always says A (position bias); pair 3 always says B; pair 4 invalid.
    cal = calibrate([0, 0, 1, None], [1, 0, 1, 1])
    assert cal.n_valid == 3 and cal.n_invalid == 1
    assert cal.accuracy == pytest.approx(4 / 6)
    assert cal.hard_accuracy == pytest.approx(1 / 3)
    assert cal.position_bias_rate == pytest.approx(2 / 3)
    assert cal.soft_accuracy is None and cal.rule == "hard" and cal.rule_accuracy == cal.hard_accuracy


def test_calibration_reports_hard_and_soft_accuracy_side_by_side():
    # Every verdict says A (log-odds +3 ± the truth): hard accuracy 0, soft accuracy 3/4 (one pair leans wrong).
    truth = [1.0, 0.5, 2.0, -0.5]
    chosen_first = [3 + t for t in truth]
    rejected_first = [3 - t for t in truth]
    cal = calibrate([0] * 4, [0] * 4, chosen_first_log_odds=chosen_first, rejected_first_log_odds=rejected_first)
    assert cal.hard_accuracy == 0.0 and cal.soft_accuracy == pytest.approx(0.75)
    assert cal.rule == "soft" and cal.rule_accuracy == cal.soft_accuracy
    assert cal.soft_accuracy_ci == wilson_interval(3, 4)
    banded = calibrate(
        [0] * 4, [0] * 4, chosen_first_log_odds=chosen_first, rejected_first_log_odds=rejected_first, tie_band=0.75
    )
    assert banded.soft_accuracy == pytest.approx(0.5)  # the 0.5-strength pair is now a tie, counted as not right


@pytest.mark.parametrize(
    "reply,expected",
    [
        ("A", 0),
        ("B", 1),
        ("B.", 1),
        ("**A**", 0),
        ("Response B is better.", 1),
        ("Answer: A", 0),
        ("a", 0),
        ("", None),
        (None, None),
        ("   ", None),
        ("Both A and B are fine", None),
        ("I cannot decide.", None),
        ("Alpha", None),
        ("A gentle breeze over the sea", None),
        ("B, because it avoids debt.", 1),
        ("The better response is B.", 1),
        ("(A)", 0),
        ("A is better.", 0),
        ("Response A is safer than response B", None),
    ],
)
def test_parse_verdict(reply, expected):
    assert parse_verdict(reply) == expected


def test_aggregate_in_the_form_of_table_1(tmp_path):
    runs = []
    for setting, method, rates in [
        ("CTL", "chipo", [0.60, 0.64]),
        ("CTL", "square_chipo", [0.66, 0.70]),
        ("LTC", "chipo", [0.58]),
    ]:
        for seed, rate in enumerate(rates):
            folder = tmp_path / f"{setting}-{method}-{seed}"
            folder.mkdir()
            summary = {
                "policy": method,
                "label": {"setting": setting, "method": method},
                "overall": {"win_rate_half_ties": rate},
                "calibration": {"rule_accuracy": 0.9},
            }
            (folder / "summary.json").write_text(json.dumps(summary))
            runs.append(folder)
    text = aggregate_runs(runs, tmp_path / "table")
    assert "| Setting | chipo | square_chipo |" in text
    assert "| CTL | 62.0 ± 2.8 (n=2) | 68.0 ± 2.8 (n=2) |" in text
    assert "| LTC | 58.0 ± 0.0 (n=1) | — |" in text
    assert (tmp_path / "table" / "table.md").exists()
