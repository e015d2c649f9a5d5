"""A local judge: a transformers causal LM that compares next-token probabilities of "A" and "B".

No free generation: after the chat-formatted question the model's probability of each answer
letter is read off the next-token distribution (summed over the letter with and without a
leading space), and the larger wins. Deterministic, batched, and never malformed. The default
model is the embedded SmolLM2-135M-Instruct.

Each verdict also carries the log-odds log P(A) − log P(B), so the soft rule of
:mod:`squarechipo.judge.stats` can average the two orders and cancel the judge's position prior:
small models pick one letter whatever they are shown, which makes the hard rule all ties.
"""

from __future__ import annotations

import inspect
import json

import torch
from tqdm.auto import tqdm
from transformers import AutoModelForCausalLM

from squarechipo.judge.base import PairwiseJudge, Verdict
from squarechipo.judge.templates import FINANCE_TEMPLATE, JudgeTemplate

__all__ = ["TransformersJudge"]


class TransformersJudge(PairwiseJudge):
    def __init__(
        self,
        model: str = "embedded",
        template: JudgeTemplate = FINANCE_TEMPLATE,
        *,
        batch_size: int = 8,
        device: str | None = None,
        max_length: int = 2048,
        dtype: torch.dtype | None = None,
    ) -> None:
        path = self._setup_local(model, "transformers", batch_size, max_length, device, padding_side="left")
        self.template = template
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(self.device).eval()
        self.option_ids = [self._letter_ids(option) for option in template.options]

    def _letter_ids(self, letter: str) -> list[int]:
        ids = set()
        for variant in (letter, " " + letter):
            tokens = self.tokenizer.encode(variant, add_special_tokens=False)
            if len(tokens) == 1:
                ids.add(tokens[0])
        if not ids:
            raise ValueError(f"option {letter!r} is not a single token for this tokenizer; use one-token options.")
        return sorted(ids)

    @torch.no_grad()
    def verdicts(self, prompts, responses_a, responses_b) -> list[Verdict]:
        texts = [
            self.tokenizer.apply_chat_template(
                self.template.messages(p, a, b), add_generation_prompt=True, tokenize=False
            )
            for p, a, b in zip(prompts, responses_a, responses_b)
        ]
        results: list[Verdict] = []
        starts = range(0, len(texts), self.batch_size)
        for start in tqdm(starts, desc=f"local judge ({len(texts)} pairs)", unit="batch", disable=len(starts) < 2):
            batch = self.tokenizer(
                texts[start : start + self.batch_size],
                return_tensors="pt",
                padding=True,
                truncation=True,
                max_length=self.max_length,
                add_special_tokens=False,
            ).to(self.device)
            logits = _next_token_logits(self.model, batch).float()
            log_probs = torch.log_softmax(logits, dim=-1)
            scores = torch.stack([torch.logsumexp(log_probs[:, ids], dim=-1) for ids in self.option_ids], dim=-1)
            for row in scores:
                probs = row.exp().tolist()
                raw = json.dumps({f"P({o})": round(p, 6) for o, p in zip(self.template.options, probs)})
                results.append(Verdict(choice=int(row.argmax()), raw=raw, log_odds=float(row[0] - row[1])))
        return results


def _next_token_logits(model, batch) -> torch.Tensor:
    """The logits at the last position, which alone the judge reads: computed there alone (``logits_to_keep=1``)
    where the model takes it, rather than over every position × the vocabulary."""
    if "logits_to_keep" in inspect.signature(model.forward).parameters:
        return model(**batch, logits_to_keep=1, use_cache=False).logits[:, -1]
    return model(**batch, use_cache=False).logits[:, -1]
