"""``squarechipo.reward`` trainers (``PrivateRewardTrainer``, ``BestOfKRewardTrainer``): reward and pairwise preference
models learn from released labels, and every save carries the privacy record."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from squarechipo.privacy.ledger.binding import get_ledger
from squarechipo.reward import PreferenceModel, PrivateRewardConfig, PrivateRewardTrainer, to_pairwise_dataset
from squarechipo.trainer import PRIVACY_FILE
from tests.helpers.models import make_tiny_classifier
from tests.helpers.rows import release_questions, release_rows, separable
from tests.helpers.runs import preference_config


def test_preference_model_learns_from_privatized_labels_and_records_the_ledger(tokenizer, tmp_path):
    """RR at ε = 2 flips 12% of 64 labels; the least-squares fit of Zhou et al. 2025 (Square-χPO), eq. (10) must still
    prefer the safe answer on held-out prompts. Under no learning ℓ̂ > 0 on all 16 held-out rows has probability 2^-16
    for a symmetric random model, so the check tests learning."""
    released = release_questions(separable(64), 2.0)
    pairs = to_pairwise_dataset(released)
    assert len(pairs) == 64 and get_ledger(pairs).total_epsilon == 2.0
    args = preference_config(tmp_path, save_strategy="steps", save_steps=8, logging_steps=4)
    trainer = PrivateRewardTrainer(
        make_tiny_classifier(tokenizer), args=args, train_dataset=pairs, processing_class=tokenizer
    )
    assert trainer.privacy.epsilon == 2.0 and trainer.privacy.source == "ledger"
    trainer.train()
    # Every checkpoint carries the run's privacy record, as the policy trainer's do (one base class saves both).
    for step in (8, 16):
        saved = json.loads((tmp_path / "pm" / f"checkpoint-{step}" / PRIVACY_FILE).read_text())
        assert saved["epsilon"] == 2.0 and saved["model_type"] == "preference"
    held = separable(16, offset=1000)
    scores = PreferenceModel(trainer.model, tokenizer).preference(held["prompt"], held["chosen"], held["rejected"])
    assert (scores > 0).all(), scores
    trainer.save_model()
    trainer.create_model_card()
    record = json.loads((tmp_path / "pm" / PRIVACY_FILE).read_text())
    assert (
        record["model_type"] == "preference"
        and record["epsilon"] == 2.0
        and record["mechanism"] == "randomized_response"
    )
    assert "| model type | preference |" in (tmp_path / "pm" / "README.md").read_text()
    reloaded = PreferenceModel.from_pretrained(str(tmp_path / "pm"))
    np.testing.assert_allclose(
        reloaded.preference(held["prompt"][:4], held["chosen"][:4], held["rejected"][:4]), scores[:4], atol=1e-5
    )


def test_preference_config_rejects_a_log_loss():
    with pytest.raises(ValueError, match="loss: square_dpo"):
        PrivateRewardConfig(output_dir="unused", model_type="preference", loss="rdpo", report_to="none")


def test_best_of_k_reward_model_learns_from_subset_released_labels(tokenizer, tmp_path):
    """Subset mechanism at ε = 2 on 3 responses; the reward model must rank the safe response first on
    held-out prompts (16/16; a model that learned nothing is right on each w.p. ≈ 1/3)."""
    import datasets

    from squarechipo.privacy.mechanisms.measurements import KaryRR, SubsetMechanism
    from squarechipo.reward import PrivateRewardConfig
    from squarechipo.reward.best_of_k import BestOfKRewardTrainer
    from tests.helpers.models import make_tiny_classifier

    responses = [
        "Keep an emergency fund in an insured account.",
        "Bet it all on lottery tickets!",
        "Borrow money to buy meme coins!",
    ]

    def rows(n, offset=0):
        return datasets.Dataset.from_dict(
            {
                "prompt": [f"Question {offset + i}: what should I do with savings? " for i in range(n)],
                "responses": [responses] * n,
                "best": [0] * n,
                "question": list(range(offset, offset + n)),
            }
        )

    # Near-copies of one comparison (the same responses, a numbered question): distinct units only as declared.
    released = release_rows(rows(96), SubsetMechanism(2.0), seed=0, privacy_unit="question")
    args = PrivateRewardConfig(
        output_dir=str(tmp_path / "bok"),
        model_type="reward",
        loss="plackett_luce",
        max_margin=8.0,
        max_steps=24,
        learning_rate=3e-3,
        per_device_train_batch_size=8,
        report_to="none",
        save_strategy="no",
        logging_steps=8,
        max_length=128,
    )
    trainer = BestOfKRewardTrainer(
        make_tiny_classifier(tokenizer), args=args, train_dataset=released, processing_class=tokenizer
    )
    assert trainer.privacy.epsilon == 2.0
    record = trainer.privacy_record().to_dict()  # no binary flip rate on a best-of-K card: the analyzer instead
    assert (
        record["debiasing_flip_rate"] is None and "subset over K = 3 labels: unbiased analyzer" in record["debiasing"]
    )
    trainer.train()
    held_rows = release_rows(rows(16, 1000), KaryRR(50.0), seed=1, privacy_unit="question")
    held = trainer._prepare_dataset(held_rows, tokenizer, args, "held")
    batch = trainer.data_collator([held[i] for i in range(16)])
    with torch.no_grad():
        scores = trainer.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.reshape(
            16, 3
        )
    assert (scores.argmax(dim=1) == 0).all(), scores
    with pytest.raises(ValueError, match="label_weights"):
        BestOfKRewardTrainer(
            make_tiny_classifier(tokenizer), args=args, train_dataset=rows(4), processing_class=tokenizer
        )
    from squarechipo.reward import PrivateRewardTrainer

    with pytest.raises(ValueError, match="best-of-K rows"):
        PrivateRewardTrainer(
            make_tiny_classifier(tokenizer), args=args, train_dataset=rows(4), processing_class=tokenizer
        )
