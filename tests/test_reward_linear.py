"""``squarechipo.reward.linear`` and ``squarechipo.reward.features``: private linear reward heads on frozen features
(Chowdhury et al. 2024 (private reward estimation))."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.rows import release_rows


def test_linear_head_on_frozen_features_learns_from_released_and_raw_rows(tokenizer, finance_splits):
    """Chowdhury et al. 2024 (private reward estimation) on frozen features of a (tiny) LM: θ̂_RR and averaged SGD-RR
    on RR-released rows and objective perturbation on raw rows all rank held-out chosen above rejected more often than
    chance (exact binomial bound)."""
    from squarechipo.privacy import LabelPipeline
    from squarechipo.privacy.ledger.binding import get_ledger
    from squarechipo.privacy.ledger.debiasing import resolve_privacy
    from squarechipo.reward.features import comparison_features, fit_linear_head
    from tests.helpers.models import make_tiny_model

    model = make_tiny_model(tokenizer, seed=0)
    data = finance_splits["finance_preference"]["train"]
    raw, held = data.select(range(120)), data.select(range(120, 180))
    released = release_rows(raw, LabelPipeline(epsilon=2.0), seed=0)
    privacy = resolve_privacy(get_ledger(released), epsilon=None, flip_rate=None, override=False)
    x_released = comparison_features(model, tokenizer, released, feature_bound=5.0)
    # The central estimator reads raw labels by design (objective perturbation stands between them and its output):
    # the caller takes that responsibility; the held-out rows are gold pairs for the test.
    x_raw = comparison_features(model, tokenizer, raw, feature_bound=5.0, labels_public=True)
    x_held = comparison_features(model, tokenizer, held, feature_bound=5.0, labels_public=True)
    local = fit_linear_head(x_released, "rr_mle", privacy, radius=10.0, feature_bound=5.0)
    averaged = fit_linear_head(x_released, "sgd_rr_averaged", privacy, radius=10.0, feature_bound=5.0, step=5.0)
    central = fit_linear_head(
        x_raw,
        "objective_perturbation",
        None,
        radius=10.0,
        feature_bound=5.0,
        epsilon=8.0,
        rng=np.random.default_rng(0),
    )
    for theta in (local, averaged, central):
        correct = int((x_held @ theta > 0).sum())
        # P(Binomial(60, 1/2) ≥ 40) ≈ 0.0067: above this, the head learned the preference.
        assert correct >= 40, correct
    with pytest.raises(ValueError, match="raw rows"):
        fit_linear_head(
            x_released,
            "objective_perturbation",
            privacy,
            radius=10.0,
            feature_bound=5.0,
            epsilon=1.0,
            rng=np.random.default_rng(0),
        )


@pytest.mark.parametrize("wrapped", [False, True], ids=["model", "peft"])
def test_frozen_features_are_the_last_hidden_state_at_the_last_token_and_skip_the_lm_head(tokenizer, wrapped):
    """φ(x, a) is the full model's last hidden state (after the final norm) at the last real token, bit for bit, and
    the language-model head never runs: its logits (positions × vocabulary) were computed and thrown away. A PEFT
    model too (its ``base_model_prefix`` attribute led to the whole causal LM, which has no last_hidden_state)."""
    import torch
    from peft import LoraConfig, get_peft_model

    from squarechipo.reward.features import response_features, reward_texts
    from tests.helpers.models import make_tiny_model

    model = make_tiny_model(tokenizer, seed=0)
    if wrapped:
        model = get_peft_model(model, LoraConfig(r=2, target_modules="all-linear", init_lora_weights=False))
    model.eval()
    prompts = [[{"role": "user", "content": "Save or spend?"}], [{"role": "user", "content": "Hi"}]]
    responses = [
        [{"role": "assistant", "content": "Save most of it, then spend."}],
        [{"role": "assistant", "content": "Hello"}],
    ]
    calls = []
    hook = model.get_output_embeddings().register_forward_hook(lambda *_: calls.append(1))
    try:
        features = response_features(model, tokenizer, prompts, responses, batch_size=2)
    finally:
        hook.remove()
    assert not calls
    side, tokenizer.padding_side = tokenizer.padding_side, "right"  # as response_features batches them
    try:
        batch = tokenizer(reward_texts(tokenizer, prompts, responses), return_tensors="pt", padding=True)
    finally:
        tokenizer.padding_side = side
    with torch.no_grad():
        hidden = model(**batch, output_hidden_states=True, use_cache=False).hidden_states[-1]
    last = batch["attention_mask"].sum(dim=1) - 1
    assert np.array_equal(features, hidden[torch.arange(2), last].double().numpy())
