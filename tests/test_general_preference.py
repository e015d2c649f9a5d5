"""General preferences for LLMs (Zhou et al. 2025 (Square-χPO), §4, Alg. 3): the pairwise preference model, the
self-play trainer, the driver."""

from __future__ import annotations

import json

import datasets
import numpy as np
import pytest
import torch
from trl.trainer.dpo_trainer import DataCollatorForPreference

from squarechipo.losses import self_play_loss, self_play_margin
from squarechipo.models.generation import MIXTURE_FILE, generate_responses, mixture_members
from squarechipo.models.logprobs import model_logps, tokenize_preferences
from squarechipo.privacy.door import rows_without_labels
from squarechipo.privacy.provenance.record import PrivacyRecord
from squarechipo.reward import (
    PreferenceModel,
    PrivateRewardConfig,
    PrivateRewardTrainer,
    to_pairwise_dataset,
)
from squarechipo.trainer import PRIVACY_FILE
from squarechipo.trainer.iterative import iterative_square_chipo, self_play_dataset
from squarechipo.trainer.self_play import SelfPlayConfig, SelfPlayTrainer
from tests.helpers.models import make_tiny_classifier, make_tiny_model
from tests.helpers.rows import release_questions, separable
from tests.helpers.runs import preference_config


def test_preference_model_is_antisymmetric_by_construction(tokenizer):
    model = PreferenceModel(make_tiny_classifier(tokenizer, seed=3), tokenizer, batch_size=3)
    x = ["Plan a budget.", "Pick a savings account.", "Should I buy a boat?", "Hello"]
    a = ["Track every expense.", "An insured one.", "No.", "Hi there, how can I help?"]
    b = ["Spend freely.", "Crypto.", "Yes, take a loan.", "Go away."]
    forward, backward = model.preference(x, a, b), model.preference(x, b, a)
    np.testing.assert_allclose(forward, -backward, atol=1e-6)
    assert np.abs(forward).max() > 1e-4, "a random classifier should not be exactly indifferent"
    assert (np.abs(forward) <= 1).all()
    np.testing.assert_allclose(model.preference(x, a, a), 0.0, atol=1e-7)
    with pytest.raises(ValueError, match="equal lengths"):
        model.preference(x, a, b[:2])


def _self_play_rows(tokenizer, policy, reference, target):
    pairs = datasets.Dataset.from_dict(
        {
            "prompt": [f"Question {i}?" for i in range(8)],
            "chosen": [f"Answer number {i}." for i in range(8)],
            "rejected": [f"Another reply {i}, longer than that." for i in range(8)],
        }
    )
    rows = tokenize_preferences(rows_without_labels(pairs, "two answers per prompt the test scores"), tokenizer)
    collator = DataCollatorForPreference(pad_token_id=tokenizer.pad_token_id)
    ref = model_logps(reference, rows, collator, 4, "ref")
    previous = model_logps(policy, rows, collator, 4, "previous")
    return self_play_dataset(pairs, ref, previous, target), ref, previous


def _config(tmp_path, **overrides):
    values = dict(
        output_dir=str(tmp_path / "sp"),
        beta=0.5,
        eta=0.5,
        iterations=2,
        per_device_train_batch_size=8,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        gradient_checkpointing=False,
        max_length=128,
    )
    return SelfPlayConfig(**{**values, **overrides})


def test_self_play_loss_at_the_start_is_equation_11_on_the_columns(tokenizer, tmp_path):
    """Before any update π = πᵗ, so the trainer's logps must equal the precomputed previous ones
    (same tokenization as TRL's) and its loss must equal (clip_4(f) − target)² from the columns."""
    policy, reference = make_tiny_model(tokenizer, seed=1), make_tiny_model(tokenizer, seed=2)
    target = np.linspace(-1.5, 1.5, 8)
    dataset, ref, previous = _self_play_rows(tokenizer, policy, reference, target)
    trainer = SelfPlayTrainer(
        policy,
        args=_config(tmp_path, learning_rate=0.0, max_steps=1),
        train_dataset=dataset,
        eval_dataset=dataset,
        processing_class=tokenizer,
    )
    loss = trainer.evaluate()
    f = self_play_margin(previous[0], previous[1], previous[0], previous[1], ref[0], ref[1], beta=0.5, eta=0.5)
    expected = self_play_loss(f, torch.as_tensor(target)).mean().item()
    assert loss["eval_loss"] == pytest.approx(expected, rel=1e-4, abs=1e-5)
    assert loss["eval_self_play/abs_logp_change"] < 1e-3


def test_self_play_update_moves_f_towards_the_target(tokenizer, tmp_path):
    policy, reference = make_tiny_model(tokenizer, seed=1), make_tiny_model(tokenizer, seed=2)
    target = np.full(8, 1.0)  # every a beats its b by 1
    dataset, _, _ = _self_play_rows(tokenizer, policy, reference, target)
    trainer = SelfPlayTrainer(
        policy,
        args=_config(tmp_path, learning_rate=3e-4, max_steps=10),
        train_dataset=dataset,
        eval_dataset=dataset,
        processing_class=tokenizer,
    )
    before = trainer.evaluate()
    trainer.train()
    after = trainer.evaluate()
    assert after["eval_loss"] < 0.5 * before["eval_loss"], (before, after)
    assert after["eval_self_play/f"] > before["eval_self_play/f"]


def test_self_play_rejects_bad_input(tokenizer, tmp_path):
    with pytest.raises(ValueError, match="missing"):
        SelfPlayTrainer(
            make_tiny_model(tokenizer), args=_config(tmp_path), train_dataset=separable(4), processing_class=tokenizer
        )
    with pytest.raises(ValueError, match="output_policy"):
        _config(tmp_path, output_policy="best")
    with pytest.raises(ValueError, match="iterations ≥ 2"):
        _config(tmp_path, iterations=1)
    with pytest.raises(ValueError, match="eta"):
        _config(tmp_path, eta=0.0)


def test_self_play_with_push_to_hub_checks_the_hub_before_anything_runs(tmp_path, monkeypatch):
    """The script pushes its folder at the end (it used to ignore push_to_hub); an unreachable Hub stops it first."""
    from trl import ModelConfig

    from squarechipo.scripts.self_play import SelfPlayScriptArguments, main

    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # the discard port: nothing listens
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    args = _config(tmp_path, push_to_hub=True, hub_model_id="someone/mixture")
    script = SelfPlayScriptArguments(dataset_name="unused", preference_model=str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="cannot be reached.*before anything was released or trained"):
        main(script, args, ModelConfig(model_name_or_path="unused"))
    assert not (tmp_path / "sp").exists()


def test_iterative_driver_writes_a_mixture_that_generates_and_carries_the_privacy_record(tokenizer, tmp_path):
    policy = make_tiny_model(tokenizer, seed=0)
    reference_dir = tmp_path / "reference"
    policy.save_pretrained(reference_dir)
    tokenizer.save_pretrained(reference_dir)
    preference = PreferenceModel(make_tiny_classifier(tokenizer, seed=5), tokenizer)
    args = _config(
        tmp_path,
        iterations=3,
        learning_rate=1e-3,
        num_train_epochs=1,
        responses_max_new_tokens=6,
        per_device_train_batch_size=4,
    )
    record = {
        "model_type": "preference",
        "epsilon": 1.0,
        "mechanism": "randomized_response",
        "dataset_fingerprint": "sha256:x",
    }
    out = iterative_square_chipo(
        policy,
        tokenizer,
        [f"Question {i}?" for i in range(6)],
        preference,
        args,
        reference_name=str(reference_dir),
        preference_record=PrivacyRecord.from_dict(record),
    )
    members = mixture_members(out)
    assert members == [str(reference_dir), str(out / "iterate_2"), str(out / "iterate_3")]
    saved = json.loads((out / PRIVACY_FILE).read_text())
    assert saved["epsilon"] == 1.0 and saved["output_policy"] == "mixture" and saved["iterations"] == 3
    assert saved["privacy_source"].startswith("preference model")
    assert json.loads((out / "iterate_2" / PRIVACY_FILE).read_text())["epsilon"] == 1.0
    # The trained iterates differ from π¹ = π_ref.
    from transformers import AutoModelForCausalLM

    first = AutoModelForCausalLM.from_pretrained(reference_dir).model.embed_tokens.weight
    second = AutoModelForCausalLM.from_pretrained(out / "iterate_2").model.embed_tokens.weight
    assert not torch.equal(first, second)
    third = AutoModelForCausalLM.from_pretrained(out / "iterate_3").model.embed_tokens.weight
    # The second round trained on from the first round's iterate: π³ lies nearer π² than π_ref (two rounds' updates
    # away). A round restarted from π_ref would put π³ one update from π_ref and about √2 updates from π².
    assert not torch.equal(second, third)
    assert (third - second).norm() < (third - first).norm()
    assert len(generate_responses(str(out), [f"Prompt {i}" for i in range(5)], max_new_tokens=4, seed=3)) == 5
    with pytest.raises(FileExistsError):
        iterative_square_chipo(policy, tokenizer, ["Q?"], preference, args, reference_name=str(reference_dir))


def _saying(tokenizer, words: tuple[str, str], folder):
    """A tiny model that only ever says one of two words: its output head (untied from the input embeddings) is zero
    except for the two words' rows, which are opposite, so one of them wins each step."""
    model = make_tiny_model(tokenizer, seed=len(words[0]))
    model.config.tie_word_embeddings = False
    head = torch.zeros_like(model.lm_head.weight)
    direction = torch.randn(head.shape[1], generator=torch.Generator().manual_seed(0)) * 10
    for word, sign in zip(words, (1, -1)):
        head[tokenizer.encode(" " + word, add_special_tokens=False)[0]] = sign * direction
    model.lm_head.weight = torch.nn.Parameter(head)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def test_a_mixture_answers_each_prompt_with_a_member_drawn_by_the_seed(tokenizer, tmp_path):
    """A saved mixture (what the iterative driver writes) answers each prompt with one member, every member answers
    some prompts, and the seed fixes which: three members that each say only their own two words, 24 prompts (a member
    is absent with probability 3·(2/3)^24 ≈ 2e-4 under a uniform draw)."""
    vocabulary = {("red", "blue"), ("cat", "dog"), ("sun", "moon")}
    members = {_saying(tokenizer, words, tmp_path / words[0]): set(words) for words in vocabulary}
    (tmp_path / "mix").mkdir()
    (tmp_path / "mix" / MIXTURE_FILE).write_text(json.dumps({"members": sorted(members)}))
    prompts = [f"Prompt {i}: what should I do with {100 * i} dollars?" for i in range(24)]

    def answered_by(seed: int) -> list[str]:
        answers = generate_responses(str(tmp_path / "mix"), prompts, max_new_tokens=3, seed=seed)
        return [next(m for m, words in members.items() if set(a.split()) <= words) for a in answers]

    who = answered_by(3)
    assert set(who) == set(members) and answered_by(3) == who and answered_by(4) != who


def test_central_preference_model_selection_picks_the_trained_candidate(tokenizer, tmp_path):
    from squarechipo.select.preference import select_preference_model

    pairs = to_pairwise_dataset(separable(48))
    # A candidate trained on public rows; the selector's private rows are others.
    args = preference_config(tmp_path, train_labels_public=True)
    trainer = PrivateRewardTrainer(
        make_tiny_classifier(tokenizer, seed=1), args=args, train_dataset=pairs, processing_class=tokenizer
    )
    trainer.train()
    trained, untrained = (
        PreferenceModel(trainer.model, tokenizer),
        PreferenceModel(make_tiny_classifier(tokenizer, seed=2), tokenizer),
    )
    private = separable(32, offset=500)
    losses = [
        ((m.preference(private["prompt"], private["chosen"], private["rejected"]) - 1) ** 2).sum()
        for m in (untrained, trained)
    ]
    assert np.exp(-50 * (losses[0] - losses[1]) / 8) < 1e-6  # at ε = 50 the untrained one is (almost) never drawn
    picks = {
        select_preference_model([lambda: untrained, lambda: trained], private, 50.0, np.random.default_rng(s))
        for s in range(5)
    }
    assert picks == {1}
    with pytest.raises(ValueError, match="at least 2"):
        select_preference_model([lambda: trained], private, 1.0, np.random.default_rng(0))


def test_a_max_length_that_every_pair_exceeds_is_named_not_a_sampler_error(tokenizer, tmp_path):
    pairs = to_pairwise_dataset(release_questions(separable(8), 2.0))
    args = PrivateRewardConfig(
        output_dir=str(tmp_path / "pm"), model_type="preference", loss="square_dpo", max_length=4, report_to="none"
    )
    with pytest.raises(ValueError, match=r"all 8 rows are longer than max_length=4"):
        PrivateRewardTrainer(
            make_tiny_classifier(tokenizer), args=args, train_dataset=pairs, processing_class=tokenizer
        )
