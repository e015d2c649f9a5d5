"""Degenerate text (squarechipo.evaluation.degenerate) and the gold gain without it (the evaluator's summary)."""

from __future__ import annotations

import numpy as np
import pytest

from squarechipo.evaluation.degenerate import DegenerateText, degenerate_flags, words_of
from squarechipo.evaluation.policy import _without_degenerate
from squarechipo.stats import paired_test


def test_a_response_is_degenerate_when_it_loops_or_holds_a_long_non_word():
    flag = DegenerateText(["Which ETFs suit a Roth IRA?", "Buy a broad ETF."])
    fluent = "Keep an emergency fund, then buy broad ETFs in your Roth account every month."
    assert not flag(fluent) and flag.non_words(fluent) == []  # "etfs", "roth": words of the test rows
    assert flag.non_words("Ban the offer early; defaultortlme keeps it.") == ["defaultortlme"]  # glued tokens
    assert flag("Wassilytheta says save.") and flag("save save save save")  # a non-word; a loop
    assert not flag("Buy xyz ETF, qqq too.")  # runs shorter than four letters are left alone
    assert words_of("401k-plans don't, O'Neil's") == ["k", "plans", "do", "o", "neil"]  # digits and hyphens split
    assert flag.non_words("It doesn't pay, and they aren't sure.") == []  # contractions read as their words
    assert DegenerateText([]).non_words("fintechish etfs") == ["etfs", "fintechish"]  # no reference: English only
    samples = [["Buy broad ETFs.", "defaultortlme"], ["save save save save", "Keep a fund."]]  # (k, prompt)
    assert degenerate_flags(flag, samples) == [[0.0, 1.0], [1.0, 0.0]]  # an evaluation record's layout


def test_the_gain_without_degenerate_samples_reads_only_pairs_where_neither_response_is_degenerate():
    delta = np.array([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]])  # (samples, prompts)
    policy = np.array([[0, 1, 0, 1], [0, 0, 0, 1]], dtype=float)
    sft = np.array([[0, 0, 1, 0], [0, 0, 0, 0]], dtype=float)
    out = _without_degenerate(delta, policy, sft)
    # Prompt 0 keeps both pairs, 1 and 2 their clean one, 3 none (left out).
    expected = paired_test(np.array([3.0, 6.0, 7.0])).to_dict()
    assert out["gold_gain_clean"] == pytest.approx(expected) and out["clean_prompts"] == 3
    assert (out["degenerate_rate"], out["sft_degenerate_rate"]) == (0.375, 0.125)
    assert _without_degenerate(delta, np.ones_like(policy), sft)["gold_gain_clean"] is None  # nothing clean


def test_a_claim_on_a_metric_its_cells_lack_names_the_cell_and_the_fix():
    from squarechipo.reproduce.study.claims import metric_at

    record = {"cell": "ctl_dpo_seed0", "summary": {"gold_gain": {"mean": 0.5}}, "checkpoints": []}
    assert metric_at(record, "gold_gain") == 0.5
    with pytest.raises(ValueError, match=r"cell 'ctl_dpo_seed0' has no gold_gain_clean at the end: .* evaluate the"):
        metric_at(record, "gold_gain_clean")
