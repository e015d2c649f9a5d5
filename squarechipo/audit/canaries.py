"""Label inference with canaries: an empirical ε lower bound for a whole training run.

m canary pairs with random labels (a fair coin picks which response is preferred, so the content says nothing
about the label) are added to the training rows and released with them. After training, each canary's raw label is
guessed from a model's preference between its two responses. If every canary label reaches the model only through
an ε-label-DP release (training is post-processing), each guess is right with probability at most e^ε/(1 + e^ε),
whatever the other canaries do, so the number of right guesses is dominated by Binomial(k, e^ε/(1 + e^ε))
(Steinke et al. 2023 (one-run audit), for pure ε-DP and random labels). A one-sided Clopper–Pearson lower bound p on
the accuracy then gives ε ≥ log(p / (1 − p)). A label that also reaches the model another way (a starting model trained
on the canaries' chosen responses) breaks the assumption, and the bound shows it.

As in Steinke et al. 2023 (one-run audit), §5, the auditor may abstain: it guesses only the k canaries whose scores
are largest in magnitude, because the domination holds whatever guesses are made and whichever are left out. k is not
chosen after seeing the outcome: every k of a grid fixed in advance (:data:`GUESS_FRACTIONS` of the canaries) is
scored, each at confidence 1 − α/|grid| (Bonferroni), and the largest of those bounds is reported, so the whole holds
at 1 − α.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import datasets
import numpy as np
from scipy import stats

from squarechipo.data.label_roles import label_free, releases_labels
from squarechipo.data.text import response_text

__all__ = [
    "CANARY_TEXTS",
    "CANARY_WORDS",
    "GUESS_FRACTIONS",
    "CanaryAudit",
    "canary_epsilon_bound",
    "guess_counts",
    "plant_canaries",
    "random_word_responses",
    "score_guesses",
]

#: The fractions of the canaries guessed (the most confident first); fixed before any audit was run at this grid.
GUESS_FRACTIONS = (0.1, 0.25, 0.5, 1.0)


def canary_epsilon_bound(correct: int, guesses: int, alpha: float = 0.05) -> float:
    """log(p / (1 − p)) for p the one-sided Clopper–Pearson lower bound (confidence 1 − α) of correct/guesses;
    0 when p ≤ ½ (no evidence of a leak)."""
    if guesses == 0 or correct == 0:
        return 0.0
    low = stats.binomtest(correct, guesses, alternative="greater").proportion_ci(1 - alpha, method="exact").low
    return max(0.0, math.log(low / (1.0 - low))) if low < 1.0 else math.inf


#: What a canary's two responses are: random word strings (:func:`random_word_responses`) or the source rows' own.
CANARY_TEXTS = ("random", "rows")

#: Words in each response of a random-word canary; fixed before any audit was run with such canaries.
CANARY_WORDS = 16


def _with_text(response, text: str):
    """``response`` with its text replaced, in its own format (a string, or messages whose last one is the answer)."""
    return [*response[:-1], {**response[-1], "content": text}] if isinstance(response, list) else text


@label_free("replaces responses with random words")
def random_word_responses(
    source: datasets.Dataset, rng: np.random.Generator, words: int = CANARY_WORDS
) -> datasets.Dataset:
    """The source pairs with both responses replaced by independent strings of ``words`` words, drawn uniformly
    from the words of the source's own responses (the prompts are kept).

    The privacy guarantee holds for every row, so an auditor may plant the rows easiest to detect, as DP audits
    with canaries do. Two natural answers to one prompt share most of their words, so a
    model trained on one raises the other nearly as much; two random strings share almost nothing, so whatever a
    model learned about one response shows on that response alone.
    """
    text = " ".join(response_text(r) for column in ("chosen", "rejected") for r in source[column])
    vocabulary = np.array(sorted({w for w in re.findall(r"[a-z]+", text.lower()) if len(w) >= 3}))
    if len(vocabulary) < words:
        raise ValueError(f"the canary source rows have {len(vocabulary)} distinct words, fewer than {words}")
    draws = rng.integers(0, len(vocabulary), size=(len(source), 2, words))

    def replace(row, index):
        chosen, rejected = (" ".join(vocabulary[draws[index, side]]) for side in (0, 1))
        return {"chosen": _with_text(row["chosen"], chosen), "rejected": _with_text(row["rejected"], rejected)}

    return source.map(replace, with_indices=True, desc="drawing random-word canaries")


@releases_labels("plants canary rows with labels of the audit's own, which the audited run then releases")
def plant_canaries(source: datasets.Dataset, rng: np.random.Generator) -> tuple[datasets.Dataset, np.ndarray]:
    """Canary rows from ``source`` pairs with fair-coin labels: label 1 swaps chosen and rejected.

    Returns the canary rows (TRL preference format, ready to join the training rows) and the labels, which the
    auditor keeps and training never sees.
    """
    labels = rng.integers(0, 2, size=len(source))
    swapped = labels.astype(bool)

    def canary(row, index):
        if swapped[index]:
            return {"chosen": row["rejected"], "rejected": row["chosen"]}
        return {}

    rows = source.map(canary, with_indices=True, desc="planting canaries")
    return rows, labels


def score_guesses(scores: np.ndarray, labels: np.ndarray) -> tuple[int, int]:
    """(right guesses, guesses): a canary is guessed label 0 when its score (the implied preference for a⁰ over a¹,
    a⁰ the source row's original chosen response) is positive; a score of exactly 0 abstains."""
    scores, labels = np.asarray(scores, dtype=np.float64), np.asarray(labels)
    decided = scores != 0
    guesses = (scores < 0).astype(int)
    return int(np.count_nonzero((guesses == labels) & decided)), int(np.count_nonzero(decided))


def guess_counts(
    scores: np.ndarray, labels: np.ndarray, fractions: tuple[float, ...] = GUESS_FRACTIONS
) -> tuple[tuple[int, int], ...]:
    """(right, guesses) when guessing only the ⌈f·m⌉ canaries with the largest |score|, for each f in ``fractions``
    (the rest abstain; ties in |score| are broken by index, which does not depend on the labels)."""
    scores = np.asarray(scores, dtype=np.float64)
    order = np.argsort(-np.abs(scores), kind="stable")
    counts = []
    for fraction in fractions:
        kept = order[: math.ceil(fraction * len(scores))]
        counts.append(score_guesses(scores[kept], np.asarray(labels)[kept]))
    return tuple(counts)


@dataclass(frozen=True)
class CanaryAudit:
    """The outcome of a training-run audit (public: counts and the bound, never a canary's label).

    ``guesses[i]`` and ``correct[i]`` are the counts when guessing :data:`GUESS_FRACTIONS` ``[i]`` of the canaries.
    """

    canaries: int
    guesses: tuple[int, ...]
    correct: tuple[int, ...]
    claimed_epsilon: float | None
    alpha: float

    def bounds(self) -> tuple[float, ...]:
        """Each abstention level's bound, at confidence 1 − α/levels (Bonferroni over the grid)."""
        level = self.alpha / len(self.guesses)
        return tuple(canary_epsilon_bound(c, g, level) for c, g in zip(self.correct, self.guesses))

    @property
    def lower_bound(self) -> float:
        """The audit's ε lower bound at confidence 1 − α: the largest of the grid's Bonferroni-corrected bounds."""
        return max(self.bounds(), default=0.0)

    @property
    def verdict(self) -> str:
        if self.claimed_epsilon is None:
            return "no ε claimed"
        return "REFUTED: the run leaks more than ε" if self.lower_bound > self.claimed_epsilon else "within ε"
