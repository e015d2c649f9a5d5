"""Judge prompt templates and verdict parsing.

A template is a system message and a user message with ``{prompt}``, ``{response_a}`` and
``{response_b}`` fields; the judge must answer with the letter of the better response. The
finance default asks which response is more financially prudent and helpful
(Zhou et al. 2025 (Square-χPO), App. E); the general default asks which is more helpful, accurate and harmless.
"""

from __future__ import annotations

import hashlib
import re
import string
from dataclasses import dataclass
from pathlib import Path

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

    @classmethod
    def from_file(cls, path: str | Path) -> JudgeTemplate:
        """A template from a YAML file with ``system`` and ``user`` (and optionally ``name``); the user message must
        use exactly the fields ``{prompt}``, ``{response_a}`` and ``{response_b}``."""
        import yaml

        file = Path(path)
        if not file.is_file():
            raise ValueError(f"--template-file {file}: no such file; write a YAML file with `system` and `user`.")
        spec = yaml.safe_load(file.read_text(encoding="utf-8"))
        missing = [k for k in ("system", "user") if not isinstance(spec, dict) or not isinstance(spec.get(k), str)]
        if missing:
            raise ValueError(f"{file}: the template needs the text fields {missing} (and may have `name`).")
        fields = {name for _, name, _, _ in string.Formatter().parse(spec["user"]) if name is not None}
        wanted = {"prompt", "response_a", "response_b"}
        if fields != wanted:
            missing, unknown = sorted(wanted - fields) or "none", sorted(fields - wanted) or "none"
            raise ValueError(
                f"{file}: the `user` message must use the fields {{prompt}}, {{response_a}} and {{response_b}}; "
                f"it is missing {missing} and has unknown {unknown} (write literal braces as {{{{ and }}}})."
            )
        return cls(name=spec.get("name", file.stem), system=spec["system"], user=spec["user"])

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

_WRAPPERS = "*_`\"' "


def parse_verdict(reply: str | None, options: tuple[str, str] = ("A", "B")) -> int | None:
    """0 for the first option, 1 for the second, None for an empty, malformed or ambiguous reply.

    Accepted: the bare letter ("B", "**A**", "b"), the letter followed by punctuation or by "is"/
    "because" ("B.", "A is better", "B, because ..."), or an explicit "Response/Answer/Option X"
    naming exactly one option ("Answer: A", "The better response is B."). Anything else — a reply
    that merely starts with the word "A" ("A gentle breeze ..."), names both options, or none — is
    None, so it is counted as invalid rather than guessed.
    """
    if not reply or not reply.strip():
        return None
    letters = "".join(re.escape(o) for o in options)
    first_line = reply.strip().splitlines()[0].strip(_WRAPPERS)
    if first_line.upper() in options:
        return options.index(first_line.upper())
    leading = re.match(rf"^\(?([{letters}])\)?(?:\s*[.,!:;)]|\s+(?:is|because)\b|$)", first_line)
    if leading:
        return options.index(leading.group(1))
    named = {
        m.group(1)
        for m in re.finditer(
            rf"\b(?:response|answer|option)\s*(?:is\s*)?:?\s*\(?([{letters}])\b", reply, re.IGNORECASE
        )
    }
    return options.index(named.pop()) if len(named) == 1 else None
