"""The local transformers judge (next-token probabilities of "A"/"B") on the embedded model, and the
TRL-style ``judge()`` bookkeeping of shuffled orders."""

from __future__ import annotations

import json

import numpy as np
import pytest

from squarechipo.judge.local import TransformersJudge
from squarechipo.judge.templates import FINANCE_TEMPLATE


@pytest.fixture(scope="module")
def judge(embedded_path):
    return TransformersJudge("embedded", FINANCE_TEMPLATE, batch_size=4)


def test_local_judge_reads_option_probabilities(judge, finance_splits):
    test = finance_splits["finance_preference"]["test"].select(range(6))
    verdicts = judge.verdicts(test["prompt"], test["chosen"], test["rejected"])
    assert len(verdicts) == 6
    for verdict in verdicts:
        probs = json.loads(verdict.raw)
        assert set(probs) == {"P(A)", "P(B)"} and 0 < probs["P(A)"] + probs["P(B)"] <= 1 + 1e-6
        assert verdict.choice == int(probs["P(B)"] > probs["P(A)"])
    # Deterministic: the same inputs give the same verdicts, batched or not.
    again = [judge.verdicts([p], [c], [r])[0] for p, c, r in zip(test["prompt"], test["chosen"], test["rejected"])]
    assert [v.choice for v in again] == [v.choice for v in verdicts]


def test_trl_style_judge_maps_shuffled_orders_back(judge, finance_splits):
    test = finance_splits["finance_preference"]["test"].select(range(8))
    prompts, chosen, rejected = test["prompt"], test["chosen"], test["rejected"]
    as_given = [v.choice for v in judge.verdicts(prompts, chosen, rejected)]
    swapped = [v.choice for v in judge.verdicts(prompts, rejected, chosen)]
    seed = 5
    order = np.random.default_rng(seed).random(len(prompts)) < 0.5
    picks = judge.judge(prompts, [[c, r] for c, r in zip(chosen, rejected)], shuffle_order=True, seed=seed)
    for pick, swap, direct, reverse in zip(picks, order, as_given, swapped):
        assert pick == (1 - reverse if swap else direct)
    assert judge.judge(prompts, [[c, r] for c, r in zip(chosen, rejected)], shuffle_order=False) == as_given
