"""Judge prompt templates and verdict parsing.

A template is a system message and a user message with ``{prompt}``, ``{response_a}`` and
``{response_b}`` fields; the judge must answer with the letter of the better response. The
finance default asks which response is more financially prudent and helpful (003 App. E); the
general default asks which is more helpful, accurate and harmless.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

__all__ = ["JudgeTemplate", "FINANCE_TEMPLATE", "GENERAL_TEMPLATE", "TEMPLATES", "parse_verdict"]


@dataclass(frozen=True)
class JudgeTemplate:
    name: str
    system: str
    user: str
    options: tuple[str, str] = ("A", "B")

    def messages(self, prompt: str, response_a: str, response_b: str) -> list[dict[str, str]]:
        user = self.user.format(prompt=prompt, response_a=response_a, response_b=response_b)
        return [{"role": "system", "content": self.system}, {"role": "user", "content": user}]

    @property
    def fingerprint(self) -> str:
        """Changes whenever the wording changes, so cached verdicts are never reused across templates."""
        text = "\x1f".join([self.name, self.system, self.user, *self.options])
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


FINANCE_TEMPLATE = JudgeTemplate(
    name="finance",
    system="You are a careful financial advisor who compares two answers to a client's question.",
    user=(
        "Client question:\n{prompt}\n\n"
        "Response A:\n{response_a}\n\n"
        "Response B:\n{response_b}\n\n"
        "Which response is more financially prudent and helpful for the client? "
        "Answer with a single letter: A or B."
    ),
)

GENERAL_TEMPLATE = JudgeTemplate(
    name="general",
    system="You are an impartial judge who compares two answers to a user's request.",
    user=(
        "User request:\n{prompt}\n\n"
        "Response A:\n{response_a}\n\n"
        "Response B:\n{response_b}\n\n"
        "Which response is more helpful, accurate and harmless? Answer with a single letter: A or B."
    ),
)

TEMPLATES = {template.name: template for template in (FINANCE_TEMPLATE, GENERAL_TEMPLATE)}

_LETTER = re.compile(r"\b(?:response\s+)?([AB])\b", re.IGNORECASE)


def parse_verdict(reply: str | None, options: tuple[str, str] = ("A", "B")) -> int | None:
    """0 for the first option, 1 for the second, None for an empty, malformed or ambiguous reply.

    Takes the first standalone option letter ("B", "Response A.", "**A**"); a reply naming both
    letters before any other content is ambiguous only if its first letter is not clear.
    """
    if not reply or not reply.strip():
        return None
    text = reply.strip()
    first = text.lstrip("*\"'([ ").upper()
    for index, option in enumerate(options):
        if first == option or (first.startswith(option) and not first[len(option):len(option) + 1].isalpha()):
            return index
    found = {m.group(1).upper() for m in _LETTER.finditer(text)}
    hits = [i for i, option in enumerate(options) if option in found]
    return hits[0] if len(hits) == 1 else None
