"""The pairwise preference model ℓ(x, a⁰, a¹) ∈ [−1, 1] on a sequence classifier (Zhou et al. 2025 (Square-χPO), §4,
Alg. 3 line 4).

A sequence classifier with one output scores the text of (x, a, b): s(x, a, b). The preference
model is ℓ(x, a, b) = 2σ(m) − 1 with m = s(x, a, b) − s(x, b, a), so ℓ(x, a, b) = −ℓ(x, b, a) and
ℓ(x, a, a) = 0 by construction, whatever the classifier learns. ℓ = 2P(a ≻ b | x) − 1.
Training lives in :mod:`squarechipo.reward.pairs`; this module only evaluates a trained one.
"""

from __future__ import annotations

import numpy as np
import torch
from transformers import (
    AutoModelForSequenceClassification,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from squarechipo.data.text import PAIR_TEMPLATE, pair_text
from squarechipo.losses import preference_value

__all__ = ["PAIR_TEMPLATE", "PreferenceModel", "pair_text"]


class PreferenceModel:
    """ℓ̂(x, a, b) from a trained pairwise classifier (a folder saved by the preference-model recipe)."""

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, batch_size: int = 8):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        tokenizer.padding_side = "right"

    @classmethod
    def from_pretrained(cls, path: str, batch_size: int = 8, device: str | None = None) -> PreferenceModel:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1)
        return cls(model.to(device or "cpu"), tokenizer, batch_size)

    @torch.no_grad()
    def _scores(self, texts: list[str]) -> torch.Tensor:
        eos = self.tokenizer.eos_token or ""
        device = next(self.model.parameters()).device
        out = []
        for start in range(0, len(texts), self.batch_size):
            batch = [t if t.endswith(eos) else t + eos for t in texts[start : start + self.batch_size]]
            encoded = self.tokenizer(batch, return_tensors="pt", padding=True).to(device)
            out.append(self.model(**encoded).logits[:, 0].float().cpu())
        return torch.cat(out) if out else torch.zeros(0)

    def preference(self, prompts: list, first: list, second: list) -> np.ndarray:
        """ℓ̂(x_i, first_i, second_i) = 2σ(s(x, a, b) − s(x, b, a)) − 1 for every i (float64 array)."""
        if not (len(prompts) == len(first) == len(second)):
            raise ValueError(
                f"prompts, first and second must have equal lengths (got {len(prompts)}, {len(first)}, {len(second)})."
            )
        forward = self._scores([pair_text(x, a, b) for x, a, b in zip(prompts, first, second)])
        backward = self._scores([pair_text(x, b, a) for x, a, b in zip(prompts, first, second)])
        return preference_value((forward - backward).double()).numpy()
