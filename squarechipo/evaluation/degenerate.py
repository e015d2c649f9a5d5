"""Degenerate text: a sampled response that loops, or holds a word that is no word.

Far from its reference (60-120 nats of KL) a policy's samples hold glued or corrupted tokens ("defaultortlme"), and a
gold reward model scores such text without reading it as a person would. A fall of the gold gain along training (the
over-optimisation of Gao et al. 2022 (reward over-optimisation)) may then be partly the judge scoring degenerate text;
the gain over the samples that are not degenerate tells the two apart. A response is degenerate here when

- it loops (:func:`~squarechipo.evaluation.gold.has_loop`), or
- it holds a non-word: a run of at least :data:`MIN_LETTERS` letters that is neither an English word (pyspellchecker's
  English frequency list) nor a word of the reference texts (the test rows, whose domain words such as "ETF" a general
  list lacks).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

from squarechipo.evaluation.gold import has_loop

__all__ = ["MIN_LETTERS", "DegenerateText", "degenerate_flags", "words_of"]

#: Shorter runs of letters are left alone: abbreviations and word pieces ("th", "etc") are common in fluent text.
MIN_LETTERS = 4
_WORD = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)*")
#: An English contraction's ending: "doesn't" is read as "does", not as the non-word "doesn".
_CONTRACTION = re.compile(r"(?:n['’]t|['’](?:s|re|ll|ve|d|m|t))$")


def words_of(text: str) -> list[str]:
    """The words of ``text``, lower-cased: runs of letters (digits and hyphens split words), a contraction read as
    its word ("doesn't" → "does"), other apostrophes splitting."""
    words = (_CONTRACTION.sub("", w.lower()) for w in _WORD.findall(text))
    return [part for w in words for part in re.split(r"['’]", w) if part]


@lru_cache(maxsize=1)
def _english():
    from spellchecker import SpellChecker

    return SpellChecker(language="en", distance=1)


class DegenerateText:
    """Flags degenerate responses; the words of ``reference_texts`` count as words."""

    def __init__(self, reference_texts: Iterable[str]):
        self.known = frozenset(w for text in reference_texts for w in words_of(text))

    def non_words(self, text: str) -> list[str]:
        """The words of ``text`` of at least :data:`MIN_LETTERS` letters that are neither English nor known."""
        long = {w for w in words_of(text) if len(w) >= MIN_LETTERS and w not in self.known}
        unknown = _english().unknown(long) if long else set()
        return sorted(unknown)

    def __call__(self, text: str) -> bool:
        return has_loop(text) or bool(self.non_words(text))


def degenerate_flags(flag: DegenerateText, samples: list[list[str]]) -> list[list[float]]:
    """Per sample k and prompt, 1.0 where the response is degenerate (the layout of an evaluation record)."""
    return [[float(flag(response)) for response in sample] for sample in samples]
