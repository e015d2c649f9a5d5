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


# Ledgers of earlier formats, and ledgers over parts bound to different columns, built from a real release's records.


def _with_releases(rows: datasets.Dataset, *releases) -> datasets.Dataset:
    from squarechipo.privacy.ledger.records import PrivacyLedger, with_ledger

    return with_ledger(rows.flatten_indices(), PrivacyLedger(releases=tuple(releases)))


def _edited(rows: datasets.Dataset, index: int = 2) -> datasets.Dataset:
    return rows.map(
        lambda row, i: {"prompt": row["prompt"] + " (edited)" if i == index else row["prompt"]}, with_indices=True
    )


def test_a_ledger_from_before_row_sets_holds_only_on_the_rows_it_fingerprinted(released):
    from dataclasses import replace

    (release,) = get_ledger(released).releases
    unbound = replace(release, row_set=None, row_columns=None)
    assert get_ledger(_with_releases(released, unbound)).total_epsilon == 0.5
    with pytest.raises(
        IntegrityError,
        match=r"^edited: its privacy ledger was written before ledgers were bound to "
        r"their rows, and these rows are not the rows it released\. Load the release as saved; a "
        r"ledger cannot be carried to other rows\.$",
    ):
        get_ledger(_with_releases(_edited(released), unbound), "edited")


def test_a_row_set_from_before_column_binding_checks_every_row_and_label(released):
    """Row sets over (prompt, chosen, rejected) alone: an edited row or a swapped pair is outside the set."""
    from dataclasses import replace

    from squarechipo.data.fingerprint import encode_row_set, released_row_hashes

    (release,) = get_ledger(released).releases
    text_only = replace(release, row_set=encode_row_set(released_row_hashes(released)), row_columns=None)
    assert get_ledger(_with_releases(released, text_only)).total_epsilon == 0.5
    swapped = released.map(
        lambda row, i: {"chosen": row["rejected"], "rejected": row["chosen"]} if i == 4 else row, with_indices=True
    )
    for name, rows, row in (("edited", _edited(released), 2), ("relabelled", swapped, 4)):
        with pytest.raises(IntegrityError, match=rf"^{name}: 1 of 20 rows \(row {row}\) are not rows its privacy"):
            get_ledger(_with_releases(rows, text_only), name)
    tokenized = datasets.Dataset.from_dict({"input_ids": [[1, 2, 3]] * 20})
    with pytest.raises(
        IntegrityError,
        match=r"^tokens: these rows hold no prompt/chosen/rejected \(or responses\) "
        r"text, so they cannot be matched to the privacy ledger they carry\. Pass the released text rows",
    ):
        get_ledger(_with_releases(tokenized, text_only), "tokens")


def test_rows_of_two_parts_bound_in_two_formats_hold_where_each_row_is_in_either_set():
    """A row is outside only if it is in none of the parts' row sets: the rows of a part bound to every column and
    those of a part bound to its text alone are all accepted together; an edited row of either is not."""
    from dataclasses import replace

    from squarechipo.data.fingerprint import encode_row_set, released_row_hashes

    first = release_dataset(_rows(100), LabelPipeline(epsilon=1.0), seed=1)
    second = release_dataset(_rows(200), LabelPipeline(epsilon=1.0), seed=2)
    exact = replace(get_ledger(first).releases[0], part="a")
    text_only = replace(
        get_ledger(second).releases[0], part="b", row_columns=None, row_set=encode_row_set(released_row_hashes(second))
    )
    both = datasets.concatenate_datasets([first, second])
    assert get_ledger(_with_releases(both, exact, text_only)).parts == ("a", "b")
    for index in (3, 25):
        with pytest.raises(IntegrityError, match=rf"^both: 1 of 40 rows \(row {index}\) are not rows"):
            get_ledger(_with_releases(_edited(both, index), exact, text_only), "both")


def test_a_column_change_is_named_against_the_closest_released_columns(released):
    """Two parts bound to different columns: the error compares the rows with the part whose columns they are
    closest to, names what was added and what was removed, and says how to keep the ledger."""
    from dataclasses import replace

    (release,) = get_ledger(released).releases
    with_zeta = released.add_column("zeta", ["z"] * 20)
    a = replace(release, part="a")
    zeta_rows = _rows(300).add_column("zeta", ["z"] * 20)
    zeta_release = release_dataset(zeta_rows, LabelPipeline(epsilon=0.5), seed=3, public_columns=["zeta"])
    b = replace(get_ledger(zeta_release).releases[0], part="b")
    assert b.row_columns == ["chosen", "prompt", "rejected", "zeta"]
    changed = with_zeta.add_column("extra", ["x"] * 20)
    with pytest.raises(
        IntegrityError,
        match=r"^split: its columns changed after the release \(added \['extra'\]\); a "
        r"privacy ledger covers the rows exactly as released, with the columns \['chosen', 'prompt', "
        r"'rejected', 'zeta'\]\.",
    ):
        get_ledger(_with_releases(changed, a, b), "split")
    renamed = released.rename_column("chosen", "preferred").add_column("extra", ["x"] * 20)
    with pytest.raises(
        IntegrityError,
        match=r"^renamed: its columns changed after the release \(added \['extra', "
        r"'preferred'\]; removed or renamed \['chosen'\]\).* keep the released columns as they are \("
        r"remove the added ones with dataset\.remove_columns\), and compute anything else from the rows "
        r"after reading the ledger\.$",
    ):
        get_ledger(renamed, "renamed")


def test_pairwise_rows_bind_the_latest_release_of_each_part_and_leave_earlier_records_as_they_were(released):
    """A release composed on another (compose=True) relabels the same rows: the derived rows are bound through the
    latest one, and the earlier release's record is not rewritten."""
    from squarechipo.privacy.ledger.binding import pairwise_rows

    twice = release_dataset(released, LabelPipeline(epsilon=1.0), seed=4, compose=True)
    before = get_ledger(twice).releases
    after = get_ledger(pairwise_rows(twice)).releases
    assert len(after) == 2 and after[0] == before[0] and after[1].row_set != before[1].row_set
    assert get_ledger(pairwise_rows(twice)).total_epsilon == pytest.approx(1.5)
