"""Position-swap bookkeeping, interval maths, verdict parsing and aggregation."""

from __future__ import annotations

import json
import math

import pytest

from squarechipo.evaluation.report import aggregate_runs
from squarechipo.judge import (
    calibrate,
    pair_outcome,
    parse_verdict,
    summarize_outcomes,
    wilson_interval,
)


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


def test_calibration_accuracy_and_position_bias():
    # Pair 1 right both ways; pair 2 always says A (position bias); pair 3 always says B; pair 4 invalid.
    cal = calibrate([0, 0, 1, None], [1, 0, 1, 1])
    assert cal.n_valid == 3 and cal.n_invalid == 1
    assert cal.accuracy == pytest.approx(4 / 6)
    assert cal.consistent_accuracy == pytest.approx(1 / 3)
    assert cal.position_bias_rate == pytest.approx(2 / 3)


@pytest.mark.parametrize(
    "reply,expected",
    [("A", 0), ("B", 1), ("B.", 1), ("**A**", 0), ("Response B is better.", 1), ("Answer: A", 0),
     ("a", 0), ("", None), (None, None), ("   ", None), ("Both A and B are fine", None),
     ("I cannot decide.", None), ("Alpha", None), ("A gentle breeze over the sea", None),
     ("B, because it avoids debt.", 1), ("The better response is B.", 1), ("(A)", 0), ("A is better.", 0),
     ("Response A is safer than response B", None)],
)
def test_parse_verdict(reply, expected):
    assert parse_verdict(reply) == expected


def test_aggregate_in_the_form_of_table_1(tmp_path):
    runs = []
    for setting, method, rates in [("CTL", "chipo", [0.60, 0.64]), ("CTL", "square_chipo", [0.66, 0.70]),
                                   ("LTC", "chipo", [0.58])]:
        for seed, rate in enumerate(rates):
            folder = tmp_path / f"{setting}-{method}-{seed}"
            folder.mkdir()
            summary = {"policy": method, "label": {"setting": setting, "method": method},
                       "overall": {"win_rate": rate}, "calibration": {"accuracy": 0.9}}
            (folder / "summary.json").write_text(json.dumps(summary))
            runs.append(folder)
    text = aggregate_runs(runs, tmp_path / "table")
    assert "| Setting | chipo | square_chipo |" in text
    assert "| CTL | 62.0 ± 2.8 (n=2) | 68.0 ± 2.8 (n=2) |" in text
    assert "| LTC | 58.0 ± 0.0 (n=1) | — |" in text
    assert (tmp_path / "table" / "table.md").exists()
