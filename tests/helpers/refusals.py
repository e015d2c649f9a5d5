"""What a refusal says: the fix it names, word for word (a refusal's message is what a user acts on)."""

from __future__ import annotations

from collections.abc import Callable

import pytest


def says(error: BaseException, *phrases: str) -> str:
    """The error's message, whitespace folded, after checking that it says each phrase."""
    text = " ".join(str(error).split())
    missing = [phrase for phrase in phrases if phrase not in text]
    assert not missing, f"the message {text!r} does not say {missing}"
    return text


def refused(kind: type[BaseException], call: Callable[[], object], *phrases: str) -> str:
    """``call()`` raises ``kind``, whose message says each phrase; the message."""
    with pytest.raises(kind) as caught:
        call()
    return says(caught.value, *phrases)
