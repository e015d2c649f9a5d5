"""The user-visible text of a prompt or a response, in the standard (string) or conversational (messages) format.

One flattener for every consumer: generation, the judges, the pairwise preference model and length statistics.
"""

from __future__ import annotations

__all__ = ["PAIR_TEMPLATE", "pair_text", "prompt_text", "response_text"]


def prompt_text(prompt) -> str:
    """The text of a string prompt, or of a conversation's turns without its system message."""
    if isinstance(prompt, str):
        return prompt
    return "\n".join(message["content"] for message in prompt if message.get("role") != "system")


def response_text(response) -> str:
    """The text of a string response, or of the assistant turns of a conversational one (a message
    without a role counts as the assistant's)."""
    if isinstance(response, str):
        return response
    return "\n".join(message["content"] for message in response if message.get("role", "assistant") == "assistant")


#: The text a pairwise preference model scores for s(x, a, b) (Zhou et al. 2025 (Square-χPO), §4, Alg. 3 line 4).
PAIR_TEMPLATE = "Prompt:\n{prompt}\n\nResponse A:\n{first}\n\nResponse B:\n{second}\n\nIs response A better than B?"


def pair_text(prompt, first, second) -> str:
    """The text the classifier scores for s(x, first, second)."""
    return PAIR_TEMPLATE.format(prompt=prompt_text(prompt), first=response_text(first), second=response_text(second))
