"""squarechipo.privacy.ledger.records: a ledger is bound to the rows it released, and every reader checks it."""

from __future__ import annotations

import datasets
import pytest

from squarechipo.data.integrity import IntegrityError
from squarechipo.privacy import LabelPipeline, get_ledger, release_dataset


def _rows(start: int, n: int = 20) -> datasets.Dataset:
    return datasets.Dataset.from_dict(
        {
            "prompt": [f"How should I use ${100 + i} for goal {i}?" for i in range(start, start + n)],
            "chosen": [f"Save it toward goal {i}." for i in range(start, start + n)],
            "rejected": [f"Gamble it on goal {i}!" for i in range(start, start + n)],
        }
    )


@pytest.fixture(scope="module")
def released():
    return release_dataset(_rows(0), LabelPipeline(epsilon=0.5), seed=0)


def test_post_processing_of_released_rows_keeps_the_ledger(released):
    """Selecting, shuffling, filtering, splitting, a repeated row: still the released rows, exactly as written."""
    kept = {
        "select": released.select([3, 1, 2]),
        "shuffle": released.shuffle(seed=1),
        "filter": released.filter(lambda row: "1" in row["prompt"]),
        "split": released.train_test_split(test_size=0.25, seed=0)["test"],
        "repeated row": datasets.concatenate_datasets([released, released.select([0])]),
    }
    for name, data in kept.items():
        assert get_ledger(data, name).total_epsilon == 0.5, name


def test_rows_added_edited_or_relabelled_after_the_release_are_refused(released):
    """Raw rows put in front of (or after) a release kept its ledger, so training applied c(ε) to raw labels and the
    card claimed ε 0.5; a relabelled or edited row is not a released row either."""
    raw = _rows(100)
    for name, data in {
        "raw rows in front": datasets.concatenate_datasets([raw, released]),
        "raw rows after": datasets.concatenate_datasets([released, raw]),
    }.items():
        with pytest.raises(IntegrityError, match=r"20 of 40 rows .* are not rows its privacy ledger released"):
            get_ledger(data, name)
    swap = released.map(
        lambda row, i: {"chosen": row["rejected"], "rejected": row["chosen"]} if i == 4 else row, with_indices=True
    )
    with pytest.raises(IntegrityError, match=r"1 of 20 rows \(row 4\) .* labels or text were changed"):
        get_ledger(swap)
    edited = released.map(lambda row, i: {"prompt": row["prompt"] + " Quickly." if i == 7 else row["prompt"]},
                          with_indices=True)  # fmt: skip
    with pytest.raises(IntegrityError, match=r"row 7\)"):
        get_ledger(edited)


def test_two_releases_concatenated_give_a_clear_error_not_a_json_one(released):
    other = release_dataset(_rows(200), LabelPipeline(epsilon=1.0), seed=0)
    with pytest.raises(IntegrityError, match="not valid JSON .*combine_parts"):
        get_ledger(datasets.concatenate_datasets([released, other]))


def test_a_streamed_or_pre_tokenised_release_cannot_pass_unchecked(released):
    streamed = released.to_iterable_dataset()  # datasets drops the description, ledger included ...
    assert get_ledger(streamed) is None
    streamed.info.description = released.info.description  # ... and where it is kept, it cannot be checked
    with pytest.raises(IntegrityError, match="IterableDataset carries this privacy ledger"):
        get_ledger(streamed)
    ids = released.map(lambda row: {"prompt_ids": [1, 2], "chosen_ids": [3], "rejected_ids": [4]})
    tokenised = ids.remove_columns(["prompt", "chosen", "rejected"])
    with pytest.raises(IntegrityError, match=r"columns changed after the release \(added \['chosen_ids'"):
        get_ledger(tokenised)
