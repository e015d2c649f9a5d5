"""Every interval the reports print, recomputed here from synthetic records with the right distribution.

The gold-gain report's "95% t interval" once printed ±1 standard error and no test noticed: these tests compute each
interval independently (scipy's Student's t quantile over prompts or seeds, Fieller's quadratic, a percentile
bootstrap) and compare it with what the report code returns and prints.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from squarechipo.evaluation.gold_report import format_summary
from squarechipo.evaluation.policy import compare
from squarechipo.stats import ratio_interval


def _t_interval(values: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    n = len(values)
    half = stats.t.ppf(0.5 + confidence / 2, n - 1) * values.std(ddof=1) / math.sqrt(n)
    return values.mean() - half, values.mean() + half


def _records(prompts: int = 20, samples: int = 2, seed: int = 0):
    rng = np.random.default_rng(seed)
    reward_sft = rng.normal(-3.0, 1.0, (samples, prompts))
    reward_policy = reward_sft + rng.normal(0.4, 1.0, (samples, prompts))
    words = rng.integers(20, 80, (samples, prompts)).astype(float)

    def record(reward):
        return {
            "reward": reward.tolist(),
            "logp": rng.normal(-60, 5, (samples, prompts)).tolist(),
            "logp_ref": rng.normal(-61, 5, (samples, prompts)).tolist(),
            "words": words.tolist(),
            "loop": np.zeros((samples, prompts)).tolist(),
            "pool_logp": rng.normal(-60, 5, (4, prompts)).tolist(),
            "test_logp": rng.normal(-50, 5, (2, prompts)).tolist(),
        }

    constants = {
        "pool_reward": rng.normal(-3, 1, (4, prompts)).tolist(),
        "ref_test_logp": rng.normal(-50, 5, (2, prompts)).tolist(),
        "pair_reward": rng.normal(-3, 1, (2, prompts)).tolist(),
    }
    return record(reward_policy), record(reward_sft), constants, reward_policy - reward_sft


def test_the_gold_reports_intervals_are_student_t_over_prompts():
    policy, sft, constants, delta = _records()
    summary = compare(policy, sft, constants)
    per_prompt = delta.mean(axis=0)
    low, high = _t_interval(per_prompt)
    assert (summary["gold_gain"]["low"], summary["gold_gain"]["high"]) == (pytest.approx(low), pytest.approx(high))
    win = (1 / (1 + np.exp(-delta))).mean(axis=0)
    assert summary["expected_win"]["low"] == pytest.approx(_t_interval(win)[0])
    # ±1 standard error would be about half as wide at 19 degrees of freedom (t = 2.09): the interval is the t one.
    assert (high - low) / (2 * per_prompt.std(ddof=1) / math.sqrt(len(per_prompt))) == pytest.approx(
        stats.t.ppf(0.975, 19)
    )
    printed = format_summary(summary)[0]
    assert f"[{low:+.3f}, {high:+.3f}]" in printed and "95% t interval over 20 prompts" in printed


def test_a_studys_arm_intervals_are_student_t_over_seeds():
    from squarechipo.reproduce.study.design import Arm, StudyDesign
    from squarechipo.reproduce.study.report import arm_rows, claims

    arm, other = Arm("dpo", "CTL", 1.0), Arm("square_chipo", "CTL", 1.0)
    design = StudyDesign.from_dict(
        {
            **StudyDesign().to_dict(),
            "main_arms": [vars(arm), vars(other)],
            "claims": [{"name": "sq ≥ dpo", "first": other.key, "second": arm.key}],
        }
    )
    rng = np.random.default_rng(4)
    wins = {a.key: 0.55 + rng.normal(0, 0.02, 5) for a in (arm, other)}
    records = []
    for key, values in wins.items():
        for seed, value in enumerate(values):
            summary = {m: {"mean": value} for m in ("expected_win", "hard_win", "gold_gain", "kl", "pool_gain")}
            summary.update(implicit_accuracy=0.7, loop_rate=0.0, words=50.0, length_regression={"share": 0.1})
            records.append({"arm": key, "seed": seed, "summary": summary})
    row = next(r for r in arm_rows(records, design) if r["arm"] == arm.key)
    low, high = _t_interval(100 * wins[arm.key])
    assert (row["expected_win"]["low"], row["expected_win"]["high"]) == (pytest.approx(low), pytest.approx(high))
    (claim,) = claims(records, design)
    difference = 100 * (wins[other.key] - wins[arm.key])
    assert (claim["low"], claim["high"]) == tuple(pytest.approx(v) for v in _t_interval(difference))
    assert claim["p_value"] == pytest.approx(stats.ttest_1samp(difference, 0).pvalue)


def test_the_share_of_the_clean_gain_is_fiellers_interval():
    """Fieller's 95% interval for a ratio of paired means, solved here from its quadratic."""
    rng = np.random.default_rng(9)
    clean = rng.normal(1.0, 0.15, 7)
    private = 0.6 * clean + rng.normal(0, 0.1, 7)
    found = ratio_interval(private, clean)
    n, t = len(clean), stats.t.ppf(0.975, len(clean) - 1)
    a, b = private.mean(), clean.mean()
    v11, v22 = private.var(ddof=1) / n, clean.var(ddof=1) / n
    v12 = np.cov(private, clean, ddof=1)[0, 1] / n
    # (a − ρ b)² = t² (v11 − 2ρ v12 + ρ² v22): a quadratic in ρ.
    qa, qb, qc = b * b - t * t * v22, -2 * (a * b - t * t * v12), a * a - t * t * v11
    roots = sorted(np.roots([qa, qb, qc]).real)
    assert found["ratio"] == pytest.approx(a / b)
    assert (found["low"], found["high"]) == (pytest.approx(roots[0]), pytest.approx(roots[1]))


def test_the_bootstrap_interval_is_the_percentile_interval_of_resampled_means():
    from squarechipo.judge.stats import bootstrap_mean_interval

    values = np.random.default_rng(2).binomial(1, 0.6, 60).astype(float)
    low, high = bootstrap_mean_interval(values, rng=np.random.default_rng(3))[:2]
    means = np.random.default_rng(3).choice(values, size=(10_000, len(values))).mean(axis=1)
    reference = np.quantile(means, [0.025, 0.975])
    assert abs(low - reference[0]) <= 0.02 and abs(high - reference[1]) <= 0.02
    assert low < values.mean() < high
