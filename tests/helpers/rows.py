"""Preference rows for tests: distinct comparisons, so the release's copy check (exact and near-copies) passes."""

from __future__ import annotations

import random

import datasets

#: Words that make each row's wording its own (rows that differ only in a number are near-copies of one comparison).
_WORDS = (
    "rent roof car trip school wedding laptop garden boat piano bike dentist move bakery tractor violin camera "
    "kitchen puppy loan course visa hearing surgery festival studio sofa printer ferry harvest museum ladder tent "
    "kayak library orchard glasses stroller heater chimney fence satellite bridge canoe telescope bakery2 market"
).split()


def _word(i: int, salt: int) -> str:
    return random.Random(i).sample(_WORDS, 6)[salt]


def distinct_pairs(n: int, offset: int = 0) -> datasets.Dataset:
    """n prompt/chosen/rejected rows (chosen is the prudent answer) whose wording differs from row to row."""
    rows = range(offset, offset + n)
    return datasets.Dataset.from_dict(
        {
            "prompt": [
                f"Question {i}: with ${100 + 7 * i} set aside for the {_word(i, 0)} and the {_word(i, 1)}, what now?"
                for i in rows
            ],
            "chosen": [f"Cover the {_word(i, 2)} first, then save for the {_word(i, 3)} in a bank." for i in rows],
            "rejected": [f"Skip the {_word(i, 4)}; bet it all on the {_word(i, 5)} lottery tonight." for i in rows],
        }
    )


#: Label-free metadata of the test data (the finance generator's id and category); declared public in releases.
PUBLIC_METADATA = ("id", "category", "row_id")


def release_rows(dataset, mechanism, **kwargs):
    """``release_dataset`` with the data's label-free metadata declared public (the generator's id and category)."""
    from squarechipo.privacy import release_dataset

    public = [c for c in PUBLIC_METADATA if c in dataset.column_names]
    return release_dataset(dataset, mechanism, public_columns=public, **kwargs)


def plan_rows(n=40, **extra):
    """``n`` rows about spending plans, with optional extra columns (name → function of n)."""
    data = {
        "prompt": [f"How should I spend ${100 + i} on plan {i}?" for i in range(n)],
        "chosen": [f"Save it, plan {i}." for i in range(n)],
        "rejected": [f"Bet it all, plan {i}!" for i in range(n)],
    }
    return datasets.Dataset.from_dict({**data, **{k: v(n) for k, v in extra.items()}})


def separable(n: int, offset: int = 0) -> datasets.Dataset:
    """One comparison asked n times (numbered questions, the same two answers): near-copies of one comparison, which a
    release takes as distinct units only when a column declares them (``question``, the privacy unit)."""
    return datasets.Dataset.from_dict(
        {
            "prompt": [f"Question {offset + i}: should I keep my savings safe?" for i in range(n)],
            "chosen": ["Yes, keep an emergency fund in an insured account."] * n,
            "rejected": ["Bet everything on lottery tickets tonight!"] * n,
        }
    )


def release_questions(rows: datasets.Dataset, epsilon: float) -> datasets.Dataset:
    """Rows released at ε by randomized response, each numbered question its own privacy unit."""
    from squarechipo.privacy import LabelPipeline, release_dataset

    numbered = rows.add_column("question", list(range(len(rows))))
    return release_dataset(numbered, LabelPipeline(epsilon=epsilon), seed=0, privacy_unit="question")


def checked(dataset, public: bool = False):
    """The rows of a released (or, with ``public``, a public) dataset as the door hands them to helpers that read
    labels in memory."""
    from squarechipo.privacy.door import checked_rows

    return checked_rows(dataset, split="train", public=public, reader="a test", declare="public=True")
