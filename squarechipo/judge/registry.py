"""The judges, as a table (as :data:`squarechipo.losses.METHODS` is for the losses): ``--judge NAME`` → the class
that judges, what it compares, and where it comes from. Each class is imported only when it is used."""

from __future__ import annotations

import importlib
from dataclasses import dataclass

__all__ = ["JUDGES", "JudgeKind"]


@dataclass(frozen=True)
class JudgeKind:
    """One judge: its class (``module:Class``), what it compares, and its reference."""

    target: str
    compares: str
    reference: str

    def load(self) -> type:
        """The judge's class, imported now."""
        module, name = self.target.split(":")
        return getattr(importlib.import_module(module), name)


#: ``--judge NAME`` → :class:`JudgeKind`.
JUDGES: dict[str, JudgeKind] = {
    "local": JudgeKind(
        "squarechipo.judge.local:TransformersJudge",
        "a causal LM's probability of each option letter, both orders (default: the embedded SmolLM2-135M)",
        "Zheng et al. 2023 (LLM-as-a-judge), pairwise comparison with position swap",
    ),
    "reward-model": JudgeKind(
        "squarechipo.judge.reward_model:RewardModelJudge",
        "r(x, a) − r(x, b) of a sequence-classification reward model (a TRL RewardTrainer or the gold judge)",
        "Bradley and Terry 1952: P(a ≻ b) = σ(r(x, a) − r(x, b))",
    ),
    "openai": JudgeKind(
        "squarechipo.judge.openai_compatible:OpenAICompatibleJudge",
        "an OpenAI-compatible endpoint's verdict (vLLM, Ollama, llama.cpp, transformers serve), both orders",
        "Zheng et al. 2023 (LLM-as-a-judge)",
    ),
}
