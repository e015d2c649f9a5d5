"""Decoding that drops finished rows (squarechipo.models.generation._decode) against transformers' ``generate``."""

from __future__ import annotations

import pytest
import torch
from tqdm.auto import tqdm

from squarechipo.models import generation


def _prompts(finance_splits, n=5):
    return finance_splits["finance_preference_conversational"]["test"]["prompt"][:n]


def _tokens(model, tokenizer, prompts, max_new_tokens, race_seed=None):
    """The tokens each row emits in one batch (greedy, or the exact draw seeded ``race_seed``): the decode loop."""
    tokenizer.padding_side = "left"
    texts = [tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=False) for p in prompts]
    batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    settings = {"do_sample": False, "max_new_tokens": max_new_tokens}
    if race_seed is not None:
        settings["logits_processor"] = [generation.ExponentialRaceSampler(race_seed)]
    with torch.no_grad(), tqdm(disable=True) as progress:
        return generation._decode(model, batch, settings, tokenizer.pad_token_id, progress)


@pytest.mark.parametrize("exact", [False, True])
def test_rows_that_end_leave_the_batch_and_every_answer_is_generates(
    tokenizer, tiny_model_factory, finance_splits, monkeypatch, exact
):
    """Prompts of different lengths (left padding), end-of-sequence tokens that the model emits at different steps
    (rows end at 3, 7 or never): greedy and exact answers equal ``generate``'s, token for token."""
    model = tiny_model_factory(0, torch.float64).eval()
    with torch.no_grad():
        for weight in model.parameters():
            weight.mul_(6)  # a random tiny model answers "\n" to everything; larger weights answer each prompt apart
    prompts = _prompts(finance_splits)
    emitted = _tokens(model, tokenizer, prompts, 10, race_seed=3 if exact else None)
    assert len({tuple(row) for row in emitted.tolist()}) == len(prompts)
    model.generation_config.eos_token_id = [int(emitted[0, 3]), int(emitted[2, 7])]
    run = dict(max_new_tokens=10, batch_size=8, exact_sampling=exact, seed=3)
    ours = generation.generate_with_model(model, tokenizer, prompts, **run)
    monkeypatch.setattr(generation, "_plain_generation_config", lambda model: False)
    theirs = generation.generate_with_model(model, tokenizer, prompts, **run)
    assert ours == theirs
    ended = _tokens(model, tokenizer, prompts, 10, race_seed=3 if exact else None)
    assert (ended[0, 4:] == tokenizer.pad_token_id).all() and (ended[2, 8:] == tokenizer.pad_token_id).all()
    assert ended[1, 9] != tokenizer.pad_token_id or ended[1, 9] in model.generation_config.eos_token_id


def test_a_generation_config_that_adds_a_processor_goes_to_generate(tiny_model_factory):
    """A setting the decode loop does not apply (a repetition penalty, a minimum length, beams) sends the model to
    ``generate``, which applies it."""
    model = tiny_model_factory(0)
    assert generation._plain_generation_config(model)
    for name, value in {"repetition_penalty": 1.3, "min_new_tokens": 4, "num_beams": 2}.items():
        model = tiny_model_factory(0)
        setattr(model.generation_config, name, value)
        assert not generation._plain_generation_config(model), name
