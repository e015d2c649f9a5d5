"""Bad preference data gets a clear error naming the field and the fix; nothing is dropped silently."""

from __future__ import annotations

import logging

import datasets
import numpy as np
import pytest

from squarechipo.data.validation import detect_format, validate_preference_dataset
from squarechipo.privacy import LabelPipeline, get_ledger, release_dataset
from tests.helpers.rows import plan_rows


def rows(**overrides):
    base = {"prompt": ["p1", "p2", "p3"], "chosen": ["c1", "c2", "c3"], "rejected": ["r1", "r2", "r3"]}
    base.update(overrides)
    return datasets.Dataset.from_dict(base)


def test_detects_the_four_formats():
    def msg(t):
        return [{"role": "user", "content": t}]

    assert detect_format(rows()).name == "standard, explicit prompt"
    assert detect_format(rows().remove_columns("prompt")).name == "standard, implicit prompt"
    conv = datasets.Dataset.from_list([{"prompt": msg("q"), "chosen": msg("a"), "rejected": msg("b")}])
    assert detect_format(conv).name == "conversational, explicit prompt"
    assert detect_format(conv.remove_columns("prompt")).name == "conversational, implicit prompt"


def test_missing_column():
    with pytest.raises(ValueError, match="no 'rejected' column.*rename"):
        validate_preference_dataset(rows().remove_columns("rejected"))


def test_empty_dataset():
    with pytest.raises(ValueError, match="dataset is empty"):
        validate_preference_dataset(rows().select([]))


def test_non_string_column():
    with pytest.raises(ValueError, match="column 'chosen' has type int64"):
        validate_preference_dataset(rows(chosen=[1, 2, 3]))


def test_mixed_formats():
    data = datasets.Dataset.from_list(
        [
            {
                "prompt": "q",
                "chosen": [{"role": "assistant", "content": "a"}],
                "rejected": [{"role": "assistant", "content": "b"}],
            }
        ]
    )
    with pytest.raises(ValueError, match="mixed formats.*prompt is standard, chosen is conversational"):
        validate_preference_dataset(data)


@pytest.mark.parametrize(
    "overrides,reason",
    [
        ({"chosen": ["c1", None, "c3"]}, "missing chosen: 1 row"),
        ({"rejected": ["r1", "   ", "r3"]}, "empty rejected: 1 row"),
        ({"prompt": ["", "p2", "p3"]}, "empty prompt: 1 row"),
        ({"rejected": ["c1", "r2", "r3"]}, "identical chosen and rejected: 1 row"),
    ],
)
def test_invalid_rows_raise_naming_the_field(overrides, reason):
    with pytest.raises(ValueError, match=r"(?s)" + reason + r".*drop_invalid=True"):
        validate_preference_dataset(rows(**overrides))


def test_empty_conversation_and_empty_message():
    def msg(t):
        return [{"role": "assistant", "content": t}]

    data = datasets.Dataset.from_list(
        [
            {"chosen": msg("a"), "rejected": msg("b")},
            {"chosen": [], "rejected": msg("b")},
            {"chosen": msg("a"), "rejected": msg(" ")},
            {"chosen": msg("same"), "rejected": msg("same")},
        ]
    )
    with pytest.raises(ValueError) as info:
        validate_preference_dataset(data)
    text = str(info.value)
    assert "empty chosen: 1 row(s) (rows 1)" in text
    assert "empty rejected: 1 row(s) (rows 2)" in text
    assert "identical chosen and rejected: 1 row(s) (rows 3)" in text


def test_drop_invalid_returns_and_logs_the_count(caplog):
    data = rows(chosen=["c1", None, "c3"], rejected=["r1", "r2", "c3"])
    with caplog.at_level(logging.WARNING, logger="squarechipo"):
        clean, report = validate_preference_dataset(data, drop_invalid=True)
    assert len(clean) == 1 and clean["prompt"] == ["p1"]
    assert report.n_dropped == 2 and report.n_rows == 3
    assert report.reasons == {"missing chosen": 1, "identical chosen and rejected": 1}
    assert "dropped 2 of 3 invalid preference rows" in caplog.text


def test_privatize_refuses_invalid_rows():
    with pytest.raises(ValueError, match="identical chosen and rejected"):
        release_dataset(rows(rejected=["c1", "r2", "r3"]), LabelPipeline(epsilon=1.0))


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("pairs.jsonl", b"this is not json\n", r"pairs.jsonl could not be read as .jsonl \(ArrowInvalid: JSON parse"),
        ("pairs.jsonl", b"", r"pairs.jsonl is empty: write one JSON object per line"),
        ("pairs.jsonl", b"\n  \n", r"pairs.jsonl is empty"),
        ("pairs.json", b"[]", r"pairs.json holds no rows"),
        ("pairs.parquet", b"garbage", r"pairs.parquet could not be read as .parquet .*must be a Parquet table"),
        ("pairs.csv", b"prompt,chosen\nq,a\n", r"pairs.csv \[data\]: dataset has no 'rejected' column"),
    ],
    ids=["not-json", "empty", "blank", "empty-list", "not-parquet", "missing-column"],
)
def test_unreadable_files_name_the_file_and_the_fix(tmp_path, name, content, message):
    from squarechipo.data import load_preference_dataset

    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ValueError, match=message):
        load_preference_dataset(str(path))


def test_a_file_whose_rows_mix_kinds_is_refused_naming_the_column_and_the_rows(tmp_path):
    from squarechipo.data import load_preference_dataset

    numbers = tmp_path / "numbers.jsonl"
    numbers.write_text('{"prompt":"p","chosen":"a","rejected":"b"}\n{"prompt":"q","chosen":5,"rejected":"b"}\n')
    with pytest.raises(ValueError, match=r"column 'chosen' mixes .* Row 0 holds text, row 1 holds a value of type"):
        load_preference_dataset(numbers)
    formats = tmp_path / "formats.jsonl"
    formats.write_text(
        '{"prompt":"p","chosen":"a","rejected":"b"}\n'
        '{"prompt":[{"role":"user","content":"q"}],"chosen":[{"role":"assistant","content":"a"}],'
        '"rejected":[{"role":"assistant","content":"b"}]}\n'
    )
    with pytest.raises(ValueError, match=r"column 'prompt' mixes .* row 1 holds a list of messages"):
        load_preference_dataset(formats)


def test_label_carrying_columns_are_dropped_and_named_and_undeclared_ones_refused():
    scores = {
        "id": lambda n: list(range(n)),
        "score_chosen": lambda n: [9.0] * n,
        "score_rejected": lambda n: [2.0] * n,
        "messages": lambda n: [[{"role": "assistant", "content": f"Save it, plan {i}."}] for i in range(n)],
    }
    rows = plan_rows(**scores)
    released = release_dataset(rows, LabelPipeline(epsilon=0.5), seed=0, public_columns=["id"])
    assert released.column_names == ["prompt", "chosen", "rejected", "id"]
    (release,) = get_ledger(released).releases
    assert sorted(release.dropped_columns) == ["messages", "score_chosen", "score_rejected"]
    assert release.public_columns == ["id"]
    # With the scores gone, nothing beside the released pair says which rows were swapped.
    swapped = np.array(released["chosen"]) != np.array(rows["chosen"])
    assert 0 < swapped.sum() < len(rows)
    with pytest.raises(ValueError, match=r"columns \['id'\] are neither prompt/chosen/rejected nor declared public"):
        release_dataset(rows, LabelPipeline(epsilon=0.5), seed=0)
    with pytest.raises(ValueError, match=r"columns \['score_chosen'\] can carry the label .* cannot be public"):
        release_dataset(rows, LabelPipeline(epsilon=0.5), seed=0, public_columns=["id", "score_chosen"])


def test_duplicated_rows_are_refused_with_their_count_and_the_helper_drops_them():
    from squarechipo.data.validation import drop_duplicate_rows

    rows = plan_rows(10)
    twice = datasets.concatenate_datasets([rows, rows.select([0, 3])])
    with pytest.raises(ValueError, match=r"2 of 12 rows copy another row's comparison: row 10 copies row 0"):
        release_dataset(twice, LabelPipeline(epsilon=1.0), seed=0)
    clean, dropped = drop_duplicate_rows(twice)
    assert dropped == 2 and clean["prompt"] == rows["prompt"]


#: Ways to retype a text without changing it: by accident (spaces, a line break, case, a copy from a web page with a
#: no-break space or a BOM) and on purpose (zero-width characters, full-width letters, a soft hyphen, bidi marks).
_RETYPED = {
    "trailing space": lambda t: t + " ",
    "double spaces and a line break": lambda t: t.replace(" ", "  ", 1).replace(" ", "\n", 1),
    "upper case": str.upper,
    "no-break space": lambda t: t.replace(" ", "\u00a0"),
    "byte-order mark": lambda t: "\ufeff" + t,
    "zero-width space and joiners": lambda t: "\u200b".join(t[:5]) + "\u200d" + t[5:],
    "full-width letters": lambda t: "".join(chr(ord(c) + 0xFEE0) if "a" <= c <= "z" else c for c in t),
    "soft hyphen and bidi marks": lambda t: "\u00ad\u200e" + t + "\u200f",
}


@pytest.mark.parametrize("name", list(_RETYPED))
def test_near_duplicates_are_duplicates(name):
    """Released together, k retyped copies of a row get k independent RR draws, whose majority is the raw label:
    each variant counts as a copy of its row, in the release's refusal and in drop_duplicate_rows."""
    from squarechipo.data.validation import drop_duplicate_rows

    rows = plan_rows(10)
    retype = _RETYPED[name]
    variants = rows.select(range(4)).map(lambda r: {k: retype(v) for k, v in r.items()})
    assert variants["prompt"] != rows["prompt"][:4]  # the bytes differ
    both = datasets.concatenate_datasets([rows, variants])
    with pytest.raises(ValueError, match=r"4 of 14 rows copy another row's comparison: row 10 copies row 0 \(the"):
        release_dataset(both, LabelPipeline(epsilon=0.5), seed=0)
    clean, dropped = drop_duplicate_rows(both)
    assert dropped == 4 and clean["prompt"] == rows["prompt"]
