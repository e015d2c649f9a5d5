"""A judge that prefers the response with the higher reward of a sequence-classification reward model.

Any ``AutoModelForSequenceClassification`` with one output works: a TRL ``RewardTrainer`` output,
squarechipo's ``PrivateRewardTrainer`` output (``model_type: reward``), the gold judge of
``recipes/gold_judge.py``, or a public model such as Skywork-Reward or ArmoRM where a user has it.
Each (prompt, response) is scored once, batched, on GPU when there is one; the verdict compares
r(x, A) with r(x, B). It is position-free by construction: swapping the two responses flips the
verdict exactly, and the log-odds r(A) − r(B) (Bradley–Terry) feed the soft rule with a tie band.
"""

from __future__ import annotations

import json

import numpy as np
import torch
from transformers import AutoModelForSequenceClassification

from squarechipo.judge.base import PairwiseJudge, Verdict
from squarechipo.reward.features import reward_texts, sequence_scores

__all__ = ["RewardModelJudge"]


class RewardModelJudge(PairwiseJudge):
    """``verdicts`` compare rewards; scores are cached per (prompt, response), so both orders cost one pass."""

    def __init__(
        self,
        model: str,
        *,
        batch_size: int = 16,
        device: str | None = None,
        max_length: int = 1024,
        dtype: torch.dtype | None = None,
    ) -> None:
        path = self._setup_local(model, "reward-model", batch_size, max_length, device)
        self.template = None
        self.model = AutoModelForSequenceClassification.from_pretrained(path, dtype=dtype).to(self.device).eval()
        if self.model.config.num_labels != 1:
            raise ValueError(
                f"--judge-model {model}: a reward model has one output (num_labels=1), this one has "
                f"{self.model.config.num_labels}. Use a scalar reward model (TRL RewardTrainer, PrivateRewardTrainer "
                "with model_type: reward, recipes/gold_judge.py)."
            )
        if self.model.config.pad_token_id is None:
            self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self._cache: dict[tuple[str, str], float] = {}

    def _as_text(self, prompt: str, response: str) -> str:
        if self.tokenizer.chat_template:
            return reward_texts(
                self.tokenizer, [[{"role": "user", "content": prompt}]], [[{"role": "assistant", "content": response}]]
            )[0]
        return reward_texts(self.tokenizer, [prompt], [response])[0]

    def rewards(self, prompts: list[str], responses: list[str]) -> np.ndarray:
        """r(x, a) for each (prompt, response), float64."""
        keys = list(zip(prompts, responses))
        missing = list(dict.fromkeys(k for k in keys if k not in self._cache))
        if missing:
            texts = [self._as_text(p, r) for p, r in missing]
            scores = sequence_scores(
                self.model,
                self.tokenizer,
                texts,
                batch_size=self.batch_size,
                max_length=self.max_length,
                desc="reward-model judge",
            )[:, 0]
            self._cache.update(zip(missing, scores.tolist()))
        return np.array([self._cache[k] for k in keys])

    def verdicts(self, prompts, responses_a, responses_b) -> list[Verdict]:
        reward_a = self.rewards(list(prompts), list(responses_a))
        reward_b = self.rewards(list(prompts), list(responses_b))
        return [
            # Equal rewards give A in both orders: a tie under the hard rule.
            Verdict(
                choice=0 if a >= b else 1,
                raw=json.dumps({"reward_a": round(a, 6), "reward_b": round(b, 6)}),
                log_odds=a - b,
            )
            for a, b in zip(reward_a.tolist(), reward_b.tolist())
        ]
