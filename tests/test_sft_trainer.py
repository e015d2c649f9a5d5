"""The SFT trainer's lean LM head: TRL's loss, gradients and metrics, from the labelled positions alone."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig
from trl import SFTConfig, SFTTrainer
from trl.kernels import ChunkedLogProbFunction

from squarechipo.models.logprob_kernel import CpuLogProbFunction
from squarechipo.trainer.sft import LeanSFTTrainer


def _step(trainer_class, model, tokenizer, rows, tmp_path, monkeypatch, layout):
    """One batch through ``compute_loss`` and backward: the loss, the trainable parameters' gradients, the logged
    metrics and how many positions the LM head projected."""
    padding_free = layout == "padding_free"
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    args = SFTConfig(
        output_dir=str(tmp_path / trainer_class.__name__),
        per_device_train_batch_size=8,
        max_length=None if padding_free else 128,  # TRL: padding-free without packing does not truncate
        padding_free=padding_free,
        report_to="none",
        use_cpu=True,
    )
    peft = {"peft_config": lora} if layout == "lora" else {}
    trainer = trainer_class(model, args=args, train_dataset=rows, processing_class=tokenizer, **peft)
    batch = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
    projected = []

    def counting(apply):
        def counting_apply(hidden, *rest):
            projected.append(hidden.shape[0])
            return apply(hidden, *rest)

        return counting_apply

    with monkeypatch.context() as patch:
        for kernel in (ChunkedLogProbFunction, CpuLogProbFunction):  # TRL's head and, on a CPU, the lean head's
            patch.setattr(kernel, "apply", counting(kernel.apply))
        loss = trainer.compute_loss(trainer.model, batch)
    loss.backward()
    metrics = {key: values[-1] for key, values in trainer._metrics["train"].items()}
    grads = [p.grad.clone() for p in trainer.model.parameters() if p.requires_grad]
    assert any(g.abs().sum() > 0 for g in grads)  # (LoRA: B starts at zero, so only B has a gradient)
    return loss.detach(), grads, metrics, sum(projected), batch


@pytest.mark.parametrize("layout", ["padded", "padding_free", "lora"])
def test_lean_sft_head_gives_trls_loss_gradients_and_metrics_from_the_completion_positions_alone(
    tokenizer, tiny_model_factory, finance_splits, tmp_path, monkeypatch, layout
):
    """Prompt-completion rows (TRL's completion-only loss), padded, padding-free (one row, position ids restarting
    at each sequence) or with LoRA adapters: the lean head projects only the completion positions and gives TRL's
    SFT loss, gradients, entropy and token accuracy."""
    rows = finance_splits["finance_sft_mixed_conversational"]["train"].select(range(8))
    runs = [
        _step(trainer, tiny_model_factory(1, torch.float64), tokenizer, rows, tmp_path, monkeypatch, layout)
        for trainer in (SFTTrainer, LeanSFTTrainer)
    ]
    want, got = runs
    batch = want[4]
    completion = int((batch["labels"][:, 1:] != -100).sum())
    assert want[3] == batch["labels"][:, 1:].numel() > 1.5 * completion  # TRL's head: every position (CPU)
    assert got[3] == completion  # the lean head: the labelled ones
    torch.testing.assert_close(got[0], want[0], rtol=1e-6, atol=1e-7)
    for a, b in zip(got[1], want[1], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
    assert set(got[2]) == set(want[2]) >= {"entropy", "mean_token_accuracy"}
    for key in ("entropy", "mean_token_accuracy"):
        assert got[2][key] == pytest.approx(want[2][key], abs=1e-6), key
