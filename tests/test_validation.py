"""Bad preference data gets a clear error naming the field and the fix; nothing is dropped silently."""

from __future__ import annotations

import logging

import datasets
import pytest

from squarechipo.data.validation import detect_format, validate_preference_dataset
from squarechipo.privacy import LabelPipeline, release_dataset


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
