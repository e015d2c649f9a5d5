"""squarechipo.data.shards: copies across Parquet shards, sketched per shard and joined in DuckDB, are the copies one
machine finds over the same rows concatenated in order."""

from __future__ import annotations

import json
import shutil

import datasets
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from squarechipo.cli import main
from squarechipo.data.fingerprint import row_hashes
from squarechipo.data.validation import copied_rows

_TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30)


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


def test_twelve_shards_given_in_any_order_are_joined_in_the_splits_order(tmp_path, capsys):
    """`shards split` numbers shards part-0 … part-11; a glob or a text sort puts part-10 before part-2. The copies'
    row numbers are the split's whatever order the sketches are given in."""
    rows = _rows_with_copies()
    rows.save_to_disk(str(tmp_path / "data"))
    assert main(["shards", "split", str(tmp_path / "data"), "--shards", "12", "--out", str(tmp_path / "shards")]) == 0
    for i in range(12):
        assert main(["shards", "sketch", str(tmp_path / "shards" / f"part-{i}.parquet"),
                     "--out", str(tmp_path / "sketches" / f"part-{i}.parquet")]) == 0  # fmt: skip
    given_ = sorted(str(f) for f in (tmp_path / "sketches").glob("*.parquet"))[::-1]  # text order, reversed
    assert main(["shards", "copies", *given_, "--out", str(tmp_path / "copies.json")]) == 0
    found = json.loads((tmp_path / "copies.json").read_text())
    assert [(c["copies"]["row"], c["row"]) for c in found["copies"]] == [(c[0], c[1]) for c in copied_rows(rows)]


def test_row_numbers_hold_past_a_sketch_chunk_and_at_each_shards_first_row(tmp_path):
    """A shard longer than one sketch chunk (16,384 rows) keeps counting its rows across chunks, and a copy of a
    shard's first row is read from that shard, not the one before: an exact copy of row 16,386 and a near-copy of
    row 16,390 (shard 1's first) are found with those numbers."""
    from squarechipo.data.row_scan import CHUNK_ROWS
    from squarechipo.data.shards import shard_copies, sketch_shard

    rng = np.random.default_rng(3)
    words = np.array([f"w{i}" for i in range(5000)])
    n = CHUNK_ROWS + 6

    def texts(count: int, length: int) -> list[str]:
        return [" ".join(row) for row in words[rng.integers(0, len(words), size=(count, length))]]

    big = datasets.Dataset.from_dict({"prompt": texts(n, 8), "chosen": texts(n, 30), "rejected": texts(n, 30)})
    first = {"prompt": texts(1, 8)[0], "chosen": texts(1, 30)[0], "rejected": texts(1, 30)[0]}
    copied = big[n - 4]
    shard_1 = datasets.Dataset.from_list([first, copied])
    near = {**first, "chosen": first["chosen"] + " indeed"}
    shard_2 = datasets.Dataset.from_list([near])
    sketches = []
    for i, shard in enumerate((big, shard_1, shard_2)):
        shard.to_parquet(str(tmp_path / f"part-{i}.parquet"))
        sketch_shard(tmp_path / f"part-{i}.parquet", tmp_path / f"sketch-{i}.parquet")
        sketches.append(tmp_path / f"sketch-{i}.parquet")
    found = {(c[0], c[1]) for c in shard_copies(sketches, None).copies}
    assert found == {(n - 4, n + 1), (n, n + 2)}, found


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


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.tuples(_TEXT, _TEXT, _TEXT).filter(lambda t: t[1] != t[2]), min_size=1, max_size=8),
    st.lists(st.booleans(), min_size=8, max_size=8),
)
def test_a_sketch_carries_no_label_swapping_any_pair_leaves_it_unchanged(triples, swaps):
    """A shard holds raw labels (the order of chosen and rejected); its sketch leaves the custodian's machine for any
    engine. Whatever the rows and whichever pairs are swapped, the sketch is the same table."""
    import pyarrow as pa

    from squarechipo.data.shards import sketch_table

    def table(flip):
        rows = [(p, r, c) if f else (p, c, r) for (p, c, r), f in zip(triples, flip)]
        return pa.table({name: [r[i] for r in rows] for i, name in enumerate(("prompt", "chosen", "rejected"))})

    assert sketch_table(table(swaps)).equals(sketch_table(table([False] * 8)))


def test_a_sketch_never_overwrites_rows_is_written_whole_and_each_shard_counts_once(tmp_path, capsys, monkeypatch):
    """Careless and hostile uses: `--out` naming the shard itself or another file of rows; a shard rewritten while it
    is sketched (its sketch would describe neither version); the same shard's sketch given twice (each row would
    copy itself); a split into a folder holding an earlier split's extra shards. Each is one line, and nothing is
    overwritten or left half-written."""
    import pyarrow.parquet as pq

    from squarechipo.data import shards as shards_module

    rows = _rows_with_copies()
    shard, other = tmp_path / "part-0.parquet", tmp_path / "other.parquet"
    rows.select(range(40)).to_parquet(str(shard))
    rows.select(range(40, 60)).to_parquet(str(other))
    before = shard.read_bytes()
    for out, said in ((shard, "the shard itself"), (other, "a file that is not a sketch")):
        assert main(["shards", "sketch", str(shard), "--out", str(out)]) == 1
        assert f"{out}: {said}; a sketch is written beside the shards" in capsys.readouterr().err
    assert shard.read_bytes() == before and pq.read_table(other).num_rows == 20
    sketch = tmp_path / "s" / "part-0.parquet"
    assert main(["shards", "sketch", str(shard), "--out", str(sketch)]) == 0
    assert main(["shards", "sketch", str(shard), "--out", str(sketch)]) == 0  # the same command again: the same sketch
    assert main(["shards", "copies", str(sketch), str(sketch)]) == 1
    assert "sketch the same shard: each of its rows would count as a copy of itself" in capsys.readouterr().err
    older = tmp_path / "s" / "older.parquet"  # a sketch of another shingle hash: its band keys would never meet
    table = pq.read_table(sketch)
    about = {**json.loads(table.schema.metadata[shards_module.SKETCH_KEY]), "scheme": "datasketch.sha1-32/1"}
    pq.write_table(table.replace_schema_metadata({shards_module.SKETCH_KEY: json.dumps(about)}), older)
    for given_, said in (
        (other, "not a sketch (no squarechipo.sketch metadata)"),
        (tmp_path / "none.parquet", "no such sketch; make it with squarechipo shards sketch"),
        (older, "sketched in datasketch.sha1-32/1, not squarechipo.words-fmix64/1: sketch its shard again"),
    ):
        assert main(["shards", "copies", str(given_)]) == 1
        assert said in capsys.readouterr().err

    real = shards_module.sketch_table

    def while_a_writer_appends(table, first_row=0):  # another process rewrites the shard mid-way
        rows.select(range(41)).to_parquet(str(shard))
        return real(table, first_row)

    monkeypatch.setattr(shards_module, "sketch_table", while_a_writer_appends)
    cut = tmp_path / "s" / "cut.parquet"
    assert main(["shards", "sketch", str(shard), "--out", str(cut)]) == 1
    assert "changed while it was sketched: sketch it again" in capsys.readouterr().err
    assert not cut.exists() and not list((tmp_path / "s").glob(".*partial"))

    datasets.DatasetDict({"train": rows}).save_to_disk(str(tmp_path / "saved"))
    assert main(["shards", "split", str(tmp_path / "saved"), "--shards", "3", "--out", str(tmp_path / "x")]) == 0
    assert main(["shards", "split", str(tmp_path / "saved"), "--shards", "3", "--out", str(tmp_path / "x")]) == 0
    assert main(["shards", "split", str(tmp_path / "saved"), "--shards", "2", "--out", str(tmp_path / "x")]) == 1
    error = capsys.readouterr().err
    assert "holds shards of another split" in error and "part-2.parquet" in error


def test_sketches_follow_the_shard_index_they_record_and_a_stray_sketch_or_a_missing_shard_is_refused(
    tmp_path, capsys
):
    """`shards copies sketches/*.parquet` took a stray sketch of another split as shard 0 and shifted every row
    number: a shard written by `shards split` records its split and index, its sketch carries them, and the join
    orders by them (whatever the file names) and refuses a sketch of another split or a missing shard. A shard's label
    column, which a sketch does not read, is named."""
    rows = _rows_with_copies()
    rows.add_column("label", [1] * len(rows)).save_to_disk(str(tmp_path / "data"))
    rows.select(range(30)).save_to_disk(str(tmp_path / "other"))
    assert main(["shards", "split", str(tmp_path / "data"), "--shards", "3", "--out", str(tmp_path / "shards")]) == 0
    assert main(["shards", "split", str(tmp_path / "other"), "--shards", "2", "--out", str(tmp_path / "o")]) == 0
    names = {0: "c", 1: "a", 2: "b"}  # file names whose order is not the split's
    capsys.readouterr()
    for i, name in names.items():
        assert main(["shards", "sketch", str(tmp_path / "shards" / f"part-{i}.parquet"),
                     "--out", str(tmp_path / "sk" / f"{name}.parquet")]) == 0  # fmt: skip
        assert "not read: its label column(s) 'label' (a sketch holds no label)" in capsys.readouterr().out
    assert (
        main(["shards", "sketch", str(tmp_path / "o" / "part-0.parquet"), "--out", str(tmp_path / "stray.parquet")])
        == 0
    )
    sketches = [str(tmp_path / "sk" / f"{n}.parquet") for n in "abc"]
    assert main(["shards", "copies", *sketches, "--out", str(tmp_path / "copies.json")]) == 0
    found = json.loads((tmp_path / "copies.json").read_text())
    assert [(c["copies"]["row"], c["row"]) for c in found["copies"]] == [(c[0], c[1]) for c in copied_rows(rows)]
    capsys.readouterr()
    assert main(["shards", "copies", str(tmp_path / "stray.parquet"), *sketches]) == 1
    err = capsys.readouterr().err
    assert "stray.parquet sketches split 'train' of other in 2 shards, a.parquet split 'train' of data in 3" in err
    assert "give the sketches of one split's shards only" in err and len(err.strip().splitlines()) == 1
    assert main(["shards", "copies", *sketches[:2]]) == 1  # shard 0 (c.parquet) left out
    assert "without shard 0 every later row number would shift" in capsys.readouterr().err


@settings(max_examples=60, deadline=None)
@given(shards=st.integers(1, 12), data=st.data())
def test_sketches_of_one_split_in_any_order_come_back_in_the_splits_order_and_any_gap_or_stranger_is_refused(
    shards, data
):
    """`_in_split_order` over any permutation of a split's sketches gives them in index order; leaving any one out,
    giving one twice, or adding one of another split is refused (every later row number would shift)."""
    from pathlib import Path

    import pytest

    from squarechipo.data.shards import _in_split_order

    split = {"dataset": "/d/data", "split": "train", "fingerprint": "f", "shards": shards}
    sketches = [(Path(f"s{i}.parquet"), {"shard": {**split, "index": i}}) for i in range(shards)]
    given_ = data.draw(st.permutations(sketches))
    assert _in_split_order(list(given_)) == sketches
    broken = data.draw(st.sampled_from(["gap", "twice", "stranger"]))
    k = data.draw(st.integers(0, shards - 1))
    if broken == "gap" and shards > 1:
        bad = [s for s in given_ if s[1]["shard"]["index"] != k]
    elif broken == "twice":
        bad = [*given_, sketches[k]]
    else:
        bad = [*given_, (Path("x.parquet"), {"shard": {**split, "fingerprint": "other", "index": k}})]
    with pytest.raises(ValueError, match="every later row number would shift|of one split's shards only"):
        _in_split_order(bad)
    edited = data.draw(st.sampled_from(["1", None, 1.0, True]))  # an index edited by hand: one line, no traceback
    with pytest.raises(ValueError, match=r"s0.parquet: its shard's place .* is not what shards split writes"):
        _in_split_order([(Path("s0.parquet"), {"shard": {**split, "index": edited}}), *sketches[1:]])
