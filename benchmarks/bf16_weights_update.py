"""Benchmark note (not a test): how much of one AdamW step survives in bfloat16 weights.

    .venv/bin/python benchmarks/bf16_weights_update.py

Loads the embedded SmolLM2-135M in bfloat16, gives every weight a unit-scale gradient and takes one AdamW step
(whose first step moves each weight by about the learning rate), and prints the share of weights that changed.
Below bfloat16's resolution (8 bits of mantissa) an update is rounded away: why a policy is not trained in bf16
weights (docs/benchmarks.md, docs/training.md).
"""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM

from squarechipo.models import resolve_model_path


def changed_share(model: torch.nn.Module, lr: float, seed: int = 0) -> float:
    """The share of weights that one AdamW step at ``lr`` changes (the model is restored afterwards)."""
    params = list(model.parameters())
    before = [p.detach().clone() for p in params]
    generator = torch.Generator().manual_seed(seed)
    for p in params:
        p.grad = torch.randn(p.shape, generator=generator).to(p.dtype)
    torch.optim.AdamW(params, lr=lr, weight_decay=0.0).step()
    changed = sum(int((p != b).sum()) for p, b in zip(params, before))
    with torch.no_grad():
        for p, b in zip(params, before):
            p.copy_(b)
            p.grad = None
    return changed / sum(p.numel() for p in params)


def main() -> None:
    model = AutoModelForCausalLM.from_pretrained(resolve_model_path("embedded"), dtype=torch.bfloat16)
    for lr in (1e-5, 1e-4, 1e-3):
        print(f"bf16 weights, one AdamW step at lr {lr:g}: {changed_share(model, lr):.2%} of the weights changed")


if __name__ == "__main__":
    main()
