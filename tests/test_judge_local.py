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


@pytest.mark.integration  # the embedded 135M model
def test_local_judge_reads_option_probabilities(judge, finance_splits):
    test = finance_splits["finance_preference"]["test"].select(range(6))
    head_inputs = []  # the LM head runs on the last position alone, not positions × vocabulary
    hook = judge.model.get_output_embeddings().register_forward_hook(lambda _, x, __: head_inputs.append(x[0].shape))
    try:
        verdicts = judge.verdicts(test["prompt"], test["chosen"], test["rejected"])
    finally:
        hook.remove()
    assert len(verdicts) == 6 and [shape[:2] for shape in head_inputs] == [(4, 1), (2, 1)]
    for verdict in verdicts:
        probs = json.loads(verdict.raw)
        assert set(probs) == {"P(A)", "P(B)"} and 0 < probs["P(A)"] + probs["P(B)"] <= 1 + 1e-6
        assert verdict.choice == int(probs["P(B)"] > probs["P(A)"])
    # The probabilities are the model's next-token mass on the letters, read here without the judge's code: one
    # unpadded conversation, a full softmax, and every vocabulary entry that decodes to "A" or " A" (or B).
    import torch

    tokenizer = judge.tokenizer
    letters = {o: [i for i in range(len(tokenizer)) if tokenizer.decode([i]) in (o, " " + o)] for o in ("A", "B")}
    for row, verdict in zip(test.select(range(2)), verdicts):
        messages = FINANCE_TEMPLATE.messages(row["prompt"], row["chosen"], row["rejected"])
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        ids = tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            probs = torch.softmax(judge.model(input_ids=ids).logits[0, -1].double(), dim=-1)
        reported = json.loads(verdict.raw)
        for option, ids_of_letter in letters.items():
            assert reported[f"P({option})"] == pytest.approx(probs[ids_of_letter].sum().item(), abs=1e-4)
    # Deterministic: the same inputs give the same verdicts, batched or not.
    again = [judge.verdicts([p], [c], [r])[0] for p, c, r in zip(test["prompt"], test["chosen"], test["rejected"])]
    assert [v.choice for v in again] == [v.choice for v in verdicts]


@pytest.fixture
def tiny_judge(tokenizer, tmp_path):
    """The same judge class on the tiny test model: its verdicts are arbitrary but deterministic, which is all the
    bookkeeping of shuffled orders needs (the 135M model took about 30 s for these 24 judgments)."""
    from tests.helpers.models import make_tiny_model

    make_tiny_model(tokenizer, seed=3).save_pretrained(tmp_path / "tiny")
    tokenizer.save_pretrained(tmp_path / "tiny")
    return TransformersJudge(str(tmp_path / "tiny"), FINANCE_TEMPLATE, batch_size=4)


def test_trl_style_judge_maps_shuffled_orders_back(tiny_judge, finance_splits, capsys):
    judge = tiny_judge
    test = finance_splits["finance_preference"]["test"].select(range(8))
    prompts, chosen, rejected = test["prompt"], test["chosen"], test["rejected"]
    capsys.readouterr()
    as_given = [v.choice for v in judge.verdicts(prompts, chosen, rejected)]
    shown = capsys.readouterr().err  # progress a batch at a time: 8 pairs in batches of 4
    assert "local judge (8 pairs)" in shown and "2/2 [" in shown
    swapped = [v.choice for v in judge.verdicts(prompts, rejected, chosen)]
    seed = 5
    order = np.random.default_rng(seed).random(len(prompts)) < 0.5
    # Some rows are shown swapped and some not: mapping none of them back, or all of them, then fails even for a
    # judge that always picks the same position (as the random tiny model does), since its swapped rows flip.
    assert order.any() and not order.all()
    picks = judge.judge(prompts, [[c, r] for c, r in zip(chosen, rejected)], shuffle_order=True, seed=seed)
    for pick, swap, direct, reverse in zip(picks, order, as_given, swapped):
        assert pick == (1 - reverse if swap else direct)
    assert judge.judge(prompts, [[c, r] for c, r in zip(chosen, rejected)], shuffle_order=False) == as_given


def test_the_judge_table_names_every_judge_the_config_offers_and_each_loads_a_pairwise_judge():
    """`--judge NAME` is dispatched through one table (as the losses' METHODS): every choice the config offers is in
    it, each entry loads a pairwise judge class, and says what it compares and where it comes from."""
    import typing

    from squarechipo.evaluation.config import WinRateConfig
    from squarechipo.judge.base import PairwiseJudge
    from squarechipo.judge.registry import JUDGES

    offered = set(typing.get_args(typing.get_type_hints(WinRateConfig)["judge"]))
    assert offered == set(JUDGES)
    for kind in JUDGES.values():
        assert issubclass(kind.load(), PairwiseJudge) and kind.compares and kind.reference
