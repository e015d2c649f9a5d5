"""squarechipo.privacy.ledger.ledger: a ledger is bound to the rows it released, and every reader checks it."""

from __future__ import annotations

import re

import datasets
import pytest

from squarechipo.privacy import LabelPipeline, get_ledger, release_dataset
from squarechipo.trust.seals import IntegrityError


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
    from squarechipo.privacy.ledger.ledger import PrivacyLedger, with_ledger

    return with_ledger(rows.flatten_indices(), PrivacyLedger(releases=tuple(releases)))


def _edited(rows: datasets.Dataset, index: int = 2) -> datasets.Dataset:
    return rows.map(
        lambda row, i: {"prompt": row["prompt"] + " (edited)" if i == index else row["prompt"]}, with_indices=True
    )


def test_a_ledger_from_before_row_sets_holds_only_on_the_rows_it_fingerprinted(released):
    from dataclasses import replace

    (release,) = get_ledger(released).releases
    unbound = replace(release, row_set=None, row_columns=None, row_hash_bytes=4)  # as squarechipo 0.2 wrote them
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

    from squarechipo.data.fingerprint import _released_row_hashes, encode_row_set

    (release,) = get_ledger(released).releases
    text_only = replace(release, row_set=encode_row_set(_released_row_hashes(released)), row_columns=None)
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

    from squarechipo.data.fingerprint import _released_row_hashes, encode_row_set

    first = release_dataset(_rows(100), LabelPipeline(epsilon=1.0), seed=1)
    second = release_dataset(_rows(200), LabelPipeline(epsilon=1.0), seed=2)
    exact = replace(get_ledger(first).releases[0], part="a")
    text_only = replace(
        get_ledger(second).releases[0],
        part="b",
        row_columns=None,
        row_set=encode_row_set(_released_row_hashes(second)),
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


def test_pairwise_rows_carry_every_release_of_their_source_as_it_was_sealed(released):
    """A release composed on another (compose=True) relabels the same rows: the derived rows carry both releases as
    the source's ledger sealed them (without their row sets: derived rows are checked in their own process)."""
    from dataclasses import replace

    from squarechipo.privacy.ledger.binding import pairwise_rows

    twice = release_dataset(released, LabelPipeline(epsilon=1.0), seed=4, compose=True)
    before = get_ledger(twice).releases
    after = get_ledger(pairwise_rows(twice)).releases
    assert list(after) == [replace(release, row_set=None) for release in before]
    assert get_ledger(pairwise_rows(twice)).total_epsilon == pytest.approx(1.5)


# The ledger's record: its refusals of forged or foreign records, its canonical form, and the defaults of a release.


def _forged(released, **fields):
    """The released ledger's record with a release's fields changed and the digest recomputed (a forger who knows the
    seal's recipe): only the release's agreement with its own pipeline can refuse it."""
    from squarechipo.privacy.ledger.ledger import _sealed_view
    from squarechipo.trust.seals import seal

    record = get_ledger(released).to_dict()
    record["releases"][0].update(fields)
    return seal(record, view=_sealed_view)


@pytest.mark.parametrize(
    "fields,problems",
    [
        ({"epsilon": 2.0}, "ε 2.0 but its pipeline has ε 0.5"),
        (
            {"epsilon": 2.0, "corruption_rate": 0.3},
            "ε 2.0 but its pipeline has ε 0.5; α 0.3 but its pipeline has α 0.0",
        ),
        ({"corruption_rate": 0.3}, "α 0.3 but its pipeline has α 0.0"),
        ({"mechanism": "none"}, "mechanism 'none' for a pipeline of ε 0.5"),
    ],
)
def test_a_resealed_release_that_disagrees_with_its_own_pipeline_is_refused_naming_each_disagreement(
    released, fields, problems
):
    from squarechipo.privacy.ledger.ledger import PrivacyLedger

    record = _forged(released, **fields)
    with pytest.raises(
        IntegrityError,
        match=rf"^train: a release in the privacy ledger disagrees with itself: "
        rf"{re.escape(problems)}\.$",
    ):
        PrivacyLedger.from_dict(record, "train")


def test_a_pipeline_naming_another_mechanism_is_refused_too(released):
    from squarechipo.privacy.ledger.ledger import PrivacyLedger

    pipeline = {"mechanism": "k_rr", "epsilon": 0.5}
    with pytest.raises(
        IntegrityError,
        match=r"^x: a release in the privacy ledger disagrees with itself: mechanism "
        r"'randomized_response' but its pipeline is 'k_rr'\.$",
    ):
        PrivacyLedger.from_dict(_forged(released, pipeline=pipeline), "x")


def test_a_foreign_or_joined_record_is_refused_naming_where_and_the_stored_form_is_canonical(released):
    import json

    from squarechipo.privacy.ledger.ledger import PrivacyLedger

    ledger = get_ledger(released)
    with pytest.raises(ValueError, match=r"^eval: not a squarechipo privacy ledger \(format='other/1'\)\.$"):
        PrivacyLedger.from_dict({**ledger.to_dict(), "format": "other/1"}, "eval")
    joined = ledger.to_json() + "\n" + ledger.to_json()
    with pytest.raises(
        IntegrityError,
        match=r"^eval: its privacy ledger is not valid JSON \(Extra data at character "
        r"\d+\): it was edited, or rows of datasets with different ledgers were put together "
        r"\(datasets\.concatenate_datasets joins their descriptions\)\. Combine released parts with "
        r"squarechipo\.privacy\.combine_parts, or use one release\.$",
    ):
        PrivacyLedger.from_json(joined, "eval")
    text = ledger.to_json()
    assert text == json.dumps(json.loads(text), sort_keys=True)  # one text per ledger: sealed, compared, hashed
    assert PrivacyLedger.from_json(text).verified_digest == ledger.to_dict()["digest"]
    assert json.loads(text)["total_epsilon"] == 0.5 and json.loads(text)["debias_factor"] == ledger.debias_factor
    grown = ledger.with_release(ledger.releases[0])
    assert grown.verified_digest is None and grown.digest != ledger.digest


def test_a_release_records_plain_defaults_and_when_it_was_made_in_utc():
    from squarechipo.privacy.ledger.ledger import Debiasing, Release

    release = Release.now("randomized_response", 1.0, 10, fixed_seed=True, pipeline={"epsilon": 1.0},
                          row_columns=["prompt", "chosen"], privacy_unit="user")  # fmt: skip
    assert (release.corruption_rate, release.earlier_releases, release.earlier_epsilon) == (0.0, 0, 0.0)
    assert release.public_columns == [] and release.dropped_columns == {} and release.privacy_unit == "user"
    assert release.row_columns == ["chosen", "prompt"] and release.created_at.endswith("+00:00")
    assert Debiasing("none").describe() == {"method": "none", "flip_rate": 0.0, "debias_factor": 1.0}
    assert Debiasing("analyzer_weights", column="label_weights").describe() == {
        "method": "analyzer_weights", "column": "label_weights"}  # fmt: skip


def _kary(mechanism: str, part=None, epsilon=1.0):
    from squarechipo.privacy.ledger.ledger import Release

    pipeline = {"mechanism": mechanism, "epsilon": epsilon, "num_labels": 4}
    return Release.now(mechanism, epsilon, 10, fixed_seed=True, pipeline=pipeline, part=part)


def test_each_k_ary_release_is_debiased_its_own_way_per_part_and_never_as_a_flip_rate():
    """RRWithPrior labels are used as released, K-RR and subset labels through their analyzer's weights (column
    label_weights); a K-ary release composed with another has no unbiased analyzer; a binary flip rate or c(ε) is
    refused for K-ary labels, naming the mechanisms."""
    from squarechipo.privacy.ledger.ledger import PrivacyLedger

    prior = PrivacyLedger(releases=(_kary("rr_with_prior"),)).debiasing_for(None)
    assert (prior.method, prior.column, prior.part) == ("as_released", None, None)
    split = PrivacyLedger(releases=(_kary("k_rr", part="lp2st/part1"), _kary("k_rr", part="lp2st/part2")))
    weights = split.debiasing_for("lp2st/part1")
    assert (weights.method, weights.column, weights.part) == ("analyzer_weights", "label_weights", "lp2st/part1")
    assert split.debiasing().part is None and split.debiasing().method == "analyzer_weights"
    with pytest.raises(
        ValueError,
        match=r"^the rows of part None went through \['k_rr', 'subset'\]: a K-ary release "
        r"composed with another release has no unbiased analyzer\. Release the raw rows once with one "
        r"K-ary mechanism\.$",
    ):
        PrivacyLedger(releases=(_kary("k_rr"), _kary("subset"))).debiasing_for(None)
    mixed = PrivacyLedger(releases=(_kary("k_rr", part="a"), _kary("rr_with_prior", part="b")))
    with pytest.raises(
        ValueError,
        match=r"^the disjoint parts of this dataset need different debiasing \(\{'a': \{"
        r"'method': 'analyzer_weights', 'column': 'label_weights'\}, 'b': \{'method': 'as_released', "
        r"'column': None\}\}\); debias each part separately \(PrivacyLedger\.debiasing_for\(part\)\)\.$",
    ):
        mixed.debiasing()
    with pytest.raises(
        ValueError,
        match=r"^the debias factor c\(ε\) is defined for binary randomized response, but these "
        r"labels were released by \['k_rr', 'subset'\] over K labels\. Train on the analyzer weights the "
        r"release wrote \(label_weights, BestOfKRewardTrainer\) instead of debiasing a flip rate\.$",
    ):
        _ = PrivacyLedger(releases=(_kary("k_rr", part="a"), _kary("subset", part="b"))).debias_factor
    two = PrivacyLedger(releases=(_kary("k_rr", part="a"), _kary("subset", part="b")))
    assert two.to_dict()["analyzer"] == "; ".join(r.semantics for r in two.releases)  # each release's, in order


def test_ledger_records_name_where_by_default_and_the_first_format_is_still_read(released, tmp_path):
    import json

    from squarechipo.privacy.ledger.ledger import PrivacyLedger, Release, read_ledger_for_path
    from squarechipo.trust.seals import seal

    with pytest.raises(IntegrityError, match=r"^dataset: its privacy ledger must be a JSON object \(got list\)\.$"):
        PrivacyLedger.from_json("[]")
    with pytest.raises(ValueError, match=r"^eval: not a squarechipo privacy ledger \(format='x'\)\.$"):
        PrivacyLedger.from_json(json.dumps({"format": "x"}), "eval")
    with pytest.raises(ValueError, match=r"^dataset: not a squarechipo privacy ledger"):
        PrivacyLedger.from_dict({"format": "x"})
    record = get_ledger(released).to_dict()
    with pytest.raises(IntegrityError, match=r"^eval: "):
        PrivacyLedger.from_dict({**record, "digest": "sha256:" + "0" * 64}, "eval")
    first = seal({**{k: v for k, v in record.items() if k != "digest"}, "format": "squarechipo.privacy_ledger/1"})
    assert PrivacyLedger.from_dict(first).total_epsilon == 0.5
    (tmp_path / "rows.jsonl").write_text('{"prompt": "p", "chosen": "a", "rejected": "b"}\n')
    assert read_ledger_for_path(tmp_path / "rows.jsonl") is None  # a file with no ledger has none
    assert Release.now("none", None, 3, fixed_seed=False, pipeline={}).row_columns is None


def test_a_release_holds_when_its_columns_are_reordered_cast_or_re_encoded(tmp_path):
    """A planted bug hashed the columns in their stored order, not sorted: a release whose columns were only
    reordered was then refused, and no test reordered columns. Reordered, cast to an equal type (large_string) and
    re-encoded (Parquet, pandas), the rows are the released ones; an edited value is still refused."""
    import pyarrow as pa

    from squarechipo.data import metadata

    rows = _rows(300, 12).add_column("row_id", list(range(12)))
    released = release_dataset(rows, LabelPipeline(epsilon=1.0), seed=3, public_columns=["row_id"])
    info = datasets.DatasetInfo(description=released.info.description)
    reordered = released.select_columns(["rejected", "row_id", "prompt", "chosen"])
    assert reordered.column_names != released.column_names and get_ledger(reordered).total_epsilon == 1.0
    table = released.with_format("arrow")[:]
    large = table.cast(pa.schema([pa.field(f.name, pa.large_string() if f.type == pa.string() else f.type)
                                  for f in table.schema]))  # fmt: skip
    cast = datasets.Dataset(large, info=info.copy())
    assert get_ledger(cast).total_epsilon == 1.0
    released.to_parquet(str(tmp_path / "rows.parquet"))
    for again in (
        datasets.Dataset.from_parquet(str(tmp_path / "rows.parquet"), info=info.copy()),
        datasets.Dataset.from_pandas(
            released.to_pandas()[list(reversed(released.column_names))], info=info.copy(), preserve_index=False
        ),  # fmt: skip
    ):
        assert get_ledger(again).total_epsilon == 1.0
    bumped = reordered.map(lambda row, i: {"row_id": row["row_id"] + (i == 0)}, with_indices=True)
    edited = metadata.with_block(bumped, metadata.read_block(released))
    with pytest.raises(IntegrityError, match=r"1 of 12 rows \(row 0\)"):
        get_ledger(edited)


def test_a_mechanism_this_version_does_not_know_is_refused_and_the_table_names_each_measurement(released):
    """The ledger's mechanism names come from one table (MECHANISMS): a release naming another (a newer version's, or
    a forger's) is refused, never debiased by a guess; each measurement's name is in the table, pointing back at it."""
    from squarechipo.privacy.ledger.ledger import PrivacyLedger
    from squarechipo.privacy.mechanisms.measurements import MECHANISMS, KaryRR, RRWithPrior, SubsetMechanism

    pipeline = {"mechanism": "geometric", "epsilon": 0.5}
    with pytest.raises(IntegrityError, match=r"mechanism 'geometric' is none of \['k_rr', 'none', 'randomized_resp"):
        PrivacyLedger.from_dict(_forged(released, mechanism="geometric", pipeline=pipeline), "x")
    assert all(MECHANISMS[kind.name].measurement is kind for kind in (KaryRR, RRWithPrior, SubsetMechanism))
    assert [n for n, k in MECHANISMS.items() if k.flips_binary] == ["randomized_response", "rr_with_prior"]
