"""A pairwise judge interface close to TRL's former ``BasePairwiseJudge`` (removed in TRL 1.1).

``judge(prompts, completions, shuffle_order=True)`` returns, per prompt, the index (0 or 1) of the better completion,
or -1 when the judge gave no usable answer. Judges written for TRL's interface plug in unchanged; squarechipo's judges
also expose :meth:`PairwiseJudge.verdicts`, which keeps the raw reply for the report.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["BasePairwiseJudge", "PairwiseJudge", "Verdict"]


class BasePairwiseJudge(ABC):
    """TRL's former pairwise judge interface."""

    @abstractmethod
    def judge(self, prompts: list[str], completions: list[list[str]], shuffle_order: bool = True) -> list[int]:
        """Index of the better completion of each pair (-1 when there is no usable answer)."""


@dataclass(frozen=True)
class Verdict:
    """One judgment of (prompt, response_a, response_b) as shown: 0 = A better, 1 = B, None = no answer.

    ``log_odds``: the judge's log P(A better) − log P(B better) where it reports one (next-token
    probabilities, server logprobs, or a reward difference r(A) − r(B) under Bradley–Terry); None
    otherwise. The soft decision rule of :mod:`squarechipo.judge.stats` averages it over both orders.
    """

    choice: int | None
    raw: str
    log_odds: float | None = None


def _check_model_exists(path: str, kind: str) -> None:
    """A judge model that names a local folder must be one; a hub id (``org/name``) is left to transformers."""
    from pathlib import Path

    from squarechipo.models.embedded import names_local_folder

    local = Path(path).expanduser()
    if names_local_folder(path) and not (local / "config.json").is_file():
        what = "is not a model folder (no config.json)" if local.is_dir() else "does not exist"
        raise ValueError(
            f"--judge-model {path} {what}: give the folder of a saved {kind} model (e.g. the output_dir of "
            "squarechipo gold-judge), 'embedded', or a hub id."
        )


class PairwiseJudge(BasePairwiseJudge):
    """Base of squarechipo's judges: implement :meth:`verdicts`; :meth:`judge` follows TRL's contract."""

    name: str = "judge"

    def _setup_local(
        self,
        model: str,
        kind: str,
        batch_size: int,
        max_length: int,
        device: str | None,
        padding_side: str | None = None,
    ) -> str:
        """Shared set-up of the judges that run a transformers model here: resolve the model, pick the
        device (GPU when present), load the tokenizer with a pad token. Returns the model path."""
        from transformers import AutoTokenizer

        from squarechipo.models import resolve_model_path

        _check_model_exists(str(model), kind)  # named as the user gave it, before the alias is resolved
        path = resolve_model_path(model)
        self.name = f"{kind}:{model}"
        self.batch_size, self.max_length = batch_size, max_length
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        if padding_side is not None:
            self.tokenizer.padding_side = padding_side
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        return path

    @abstractmethod
    def verdicts(self, prompts: list[str], responses_a: list[str], responses_b: list[str]) -> list[Verdict]:
        """Judge each pair as shown (A first); never raises for a bad reply, returns choice None."""

    def judge(self, prompts, completions, shuffle_order=True, seed: int | None = None) -> list[int]:
        order = (
            np.random.default_rng(seed).random(len(prompts)) < 0.5 if shuffle_order else np.zeros(len(prompts), bool)
        )
        first = [pair[1] if swap else pair[0] for pair, swap in zip(completions, order)]
        second = [pair[0] if swap else pair[1] for pair, swap in zip(completions, order)]
        results = []
        for verdict, swap in zip(self.verdicts(list(prompts), first, second), order):
            if verdict.choice is None:
                results.append(-1)
            else:
                results.append(1 - verdict.choice if swap else verdict.choice)
        return results
