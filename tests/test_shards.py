"""squarechipo.data.shards: copies across Parquet shards, sketched per shard and joined in DuckDB, are the copies one
machine finds over the same rows concatenated in order."""

from __future__ import annotations

import json
import shutil

import datasets
import numpy as np

from squarechipo.cli import main
from squarechipo.data.fingerprint import row_hashes
from squarechipo.data.validation import copied_rows


def _rows_with_copies() -> datasets.Dataset:
    """90 distinct comparisons, then copies of earlier rows placed so that some cross shard boundaries: an exact
    copy with the pair swapped, a retyped one (capitals, extra spaces), two near-copies (a word added, a sentence
    repeated)."""
    rng = np.random.default_rng(11)
    vocabulary = [f"w{i}" for i in range(800)]
    prompts = [" ".join(rng.choice(vocabulary, 8)) for _ in range(90)]
    chosen = [" ".join(rng.choice(vocabulary, 40)) for _ in range(90)]
    rejected = [" ".join(rng.choice(vocabulary, 40)) for _ in range(90)]
    prompts += [prompts[3], prompts[40].upper(), prompts[7], prompts[66]]
    chosen += [rejected[3], "  " + chosen[40].upper(), chosen[7] + " extra", chosen[66] + " " + chosen[66][:60]]
    rejected += [chosen[3], rejected[40], rejected[7], rejected[66]]
    return datasets.Dataset.from_dict({"prompt": prompts, "chosen": chosen, "rejected": rejected})


def test_copies_across_shards_are_the_copies_one_machine_finds(tmp_path, capsys):
    """Three shards, each sketched on its own (as an engine's map step would), then joined: the content hashes are
    the rows' (the release's units), and the copies and their reasons are those of the one-machine check over the
    shards in order. A sketch whose shard changed since, or a folder without the shards, is refused in one line."""
    rows = _rows_with_copies()
    shards = [rows.select(range(a, b)) for a, b in ((0, 30), (30, 75), (75, len(rows)))]
    for i, shard in enumerate(shards):
        shard.to_parquet(str(tmp_path / "shards" / f"part-{i}.parquet"))
        assert main(["shards", "sketch", str(tmp_path / "shards" / f"part-{i}.parquet"),
                     "--out", str(tmp_path / "sketches" / f"part-{i}.parquet")]) == 0  # fmt: skip
    import pyarrow.parquet as pq

    sketched = [
        h for i in range(3) for h in pq.read_table(tmp_path / "sketches" / f"part-{i}.parquet")["hash"].to_pylist()
    ]
    assert sketched == row_hashes(rows)
    sketches = [str(tmp_path / "sketches" / f"part-{i}.parquet") for i in range(3)]
    assert main(["shards", "copies", *sketches, "--out", str(tmp_path / "copies.json")]) == 0
    printed = capsys.readouterr().out
    assert "4 of 94 rows copy an earlier row (2 exactly, 2 as near-copies)" in printed
    found = json.loads((tmp_path / "copies.json").read_text())
    expected = copied_rows(rows)
    assert [(c["copies"]["row"], c["row"], c["why"]) for c in found["copies"]] == [tuple(c) for c in expected]
    assert {c["row"] for c in found["copies"]} == {90, 91, 92, 93}
    assert found["copies"][0]["shard"].endswith("part-2.parquet") and found["copies"][0]["shard_row"] == 15

    moved = tmp_path / "moved"
    shutil.move(tmp_path / "shards", moved)
    assert main(["shards", "copies", *sketches]) == 1
    assert capsys.readouterr().err.startswith(
        f"squarechipo shards: error: {tmp_path}/shards/part-0.parquet: the shard {tmp_path}/sketches/part-0.parquet "
        "was made from is not there; give the folder that holds the shards with --rows DIR."
    )
    assert main(["shards", "copies", *sketches, "--rows", str(moved)]) == 0
    shards[2].select(range(18)).to_parquet(str(moved / "part-2.parquet"))
    assert main(["shards", "copies", *sketches, "--rows", str(moved)]) == 1
    error = capsys.readouterr().err
    assert "part-2.parquet is not the shard" in error and "(its sha256 differs): sketch it again" in error


def test_a_shard_that_is_not_preference_rows_is_refused_naming_it(tmp_path, capsys):
    datasets.Dataset.from_dict({"text": ["a b c"]}).to_parquet(str(tmp_path / "plain.parquet"))
    assert main(["shards", "sketch", str(tmp_path / "plain.parquet"), "--out", str(tmp_path / "s.parquet")]) == 1
    assert "plain.parquet: not preference rows (columns ['text'])" in capsys.readouterr().err


def test_a_saved_split_becomes_contiguous_shards_and_bad_requests_are_one_line(tmp_path, capsys):
    rows = _rows_with_copies()
    datasets.DatasetDict({"train": rows}).save_to_disk(str(tmp_path / "saved"))
    assert main(["shards", "split", str(tmp_path / "saved"), "--shards", "4", "--out", str(tmp_path / "shards")]) == 0
    back = datasets.concatenate_datasets(
        [datasets.Dataset.from_parquet(str(tmp_path / "shards" / f"part-{i}.parquet")) for i in range(4)]
    )
    assert back.to_dict() == rows.to_dict()
    for argv, said in (
        (["--split", "test", "--shards", "2"], "has no split 'test' (splits: ['train']): pass --split."),
        (["--shards", "0"], "--shards must be from 1 to the 94 rows of"),
    ):
        assert main(["shards", "split", str(tmp_path / "saved"), *argv, "--out", str(tmp_path / "x")]) == 1
        assert said in capsys.readouterr().err
