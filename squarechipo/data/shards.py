"""Copies across Parquet shards that one machine cannot hold at once: the release's admission steps on engines made
for them.

A release refuses rows that copy another row's comparison (their noise would add up). For a set of tens of millions
of rows, the same decision is made in two steps, each on an existing engine, from the release's own functions:

1. **sketch**, a map over the shards (one call per shard, on any machine: a Slurm array, Ray Data's
   ``map_batches``, Spark's ``mapInArrow``, or ``squarechipo shards sketch``): :func:`sketch_table` gives each row's
   content hash, MinHash signature and band keys (the release's canonical form and shingle hash), a chunk of rows at a
   time; :func:`sketch_shard` writes them as Parquet, naming the shard and its sha256;
2. **copies**, a join over every sketch, in DuckDB (it joins out of core): exact copies are equal hashes, near-copy
   candidates share a band key, and only the candidates' text is read back (from their shards, checked against the
   sha256 their sketch names) to confirm them on their exact shingle sets; the release's one rule
   (:func:`~squarechipo.data.near_duplicates.merge_copies`) decides.

On the same rows, the copies are those :func:`squarechipo.data.validation.copied_rows` finds on one machine over the
shards concatenated in order (``tests/test_shards.py``). This is a check before releasing, never a way around the
release's own: each part one machine releases is checked again by the release and the registry (one door).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from squarechipo.data.fingerprint import canonical_rows
from squarechipo.data.label_roles import label_free
from squarechipo.data.near_duplicates import (
    BANDS,
    NUM_PERM,
    SCHEME,
    Copy,
    band_key_table,
    confirm_near_copies,
    merge_copies,
    signatures,
)
from squarechipo.data.row_scan import CHUNK_ROWS
from squarechipo.trust.seals import file_sha256

__all__ = ["SHARD_KEY", "SKETCH_KEY", "ShardCopies", "shard_copies", "sketch_shard", "sketch_table"]

#: The key of a sketch file's Parquet metadata: its shard (path, sha256, rows, and where `shards split` wrote it, its
#: place in its split) and scheme, as JSON.
SKETCH_KEY = b"squarechipo.sketch"
#: The key of a shard's Parquet metadata (``squarechipo shards split`` writes it): the split it is part of and its
#: index there, as JSON; a sketch carries it on.
SHARD_KEY = b"squarechipo.shard"


@label_free("hashes and sketches of each row's canonical content (the responses sorted)")
def sketch_table(table: pa.Table, first_row: int = 0) -> pa.Table:
    """Each row's number (from ``first_row``), content hash (sha256 of its canonical form), MinHash signature and LSH
    band keys, in :data:`~squarechipo.data.near_duplicates.SCHEME`: the map step, for any engine."""
    rows = canonical_rows(table)
    marks = signatures(rows, SCHEME).astype("<u4")
    keys = band_key_table(marks)
    n = len(rows)
    return pa.table(
        {
            "row": pa.array(np.arange(first_row, first_row + n, dtype=np.int64)),
            "hash": pa.array([hashlib.sha256(r.encode("utf-8")).digest() for r in rows], pa.binary(32)),
            "signature": pa.FixedSizeBinaryArray.from_buffers(
                pa.binary(NUM_PERM * 4), n, [None, pa.py_buffer(marks.tobytes())]
            ),
            "bands": pa.ListArray.from_arrays(
                pa.array(np.arange(0, n * BANDS + 1, BANDS, dtype=np.int32)), pa.array(keys.ravel())
            ),
        },
        schema=_SKETCH_SCHEMA,
    )


_SKETCH_SCHEMA = pa.schema(
    [("row", pa.int64()), ("hash", pa.binary(32)), ("signature", pa.binary(NUM_PERM * 4)),
     ("bands", pa.list_(pa.int64()))]
)  # fmt: skip


def _is_sketch(path: Path) -> bool:
    try:
        return SKETCH_KEY in (pq.read_schema(path).metadata or {})
    except (OSError, pa.ArrowInvalid):
        return False


def sketch_shard(source: str | Path, out: str | Path) -> int:
    """Sketch the preference rows of the Parquet file ``source`` into the Parquet file ``out``, a chunk at a time;
    ``out`` names the shard, its sha256 and row count, and the scheme. Returns the rows sketched."""
    source, out = Path(source), Path(out)
    if not source.is_file():
        raise FileNotFoundError(f"{source}: no such shard; give a Parquet file of preference rows.")
    reader = pq.ParquetFile(source)
    names = set(reader.schema_arrow.names)
    if not ({"chosen", "rejected"} <= names or "responses" in names):
        raise ValueError(
            f"{source}: not preference rows (columns {sorted(names)}); a shard needs prompt/chosen/rejected or "
            "prompt/responses, as a release does."
        )
    if out.resolve() == source.resolve() or (out.exists() and not _is_sketch(out)):
        raise FileExistsError(
            f"{out}: {'the shard itself' if out.resolve() == source.resolve() else 'a file that is not a sketch'}; "
            "a sketch is written beside the shards, never over a file of rows: give another --out."
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    sha256 = file_sha256(source)
    about = {"source": str(source.resolve()), "sha256": sha256, "rows": reader.metadata.num_rows, "scheme": SCHEME}
    place = (reader.schema_arrow.metadata or {}).get(SHARD_KEY)
    if place is not None:
        about["shard"] = json.loads(place)
    partial = out.with_name(f".{out.name}.partial")
    done = 0
    with pq.ParquetWriter(partial, _SKETCH_SCHEMA.with_metadata({SKETCH_KEY: json.dumps(about)})) as writer:
        for batch in reader.iter_batches(batch_size=CHUNK_ROWS):
            writer.write_table(sketch_table(pa.Table.from_batches([batch]), done))
            done += batch.num_rows
    if file_sha256(source) != sha256 or done != about["rows"]:
        partial.unlink()
        raise ValueError(f"{source} changed while it was sketched: sketch it again once nothing writes to it.")
    os.replace(partial, out)  # whole or not at all: a sketch cut off midway is never read as one
    return done


@dataclass(frozen=True)
class _Shard:
    sketch: Path
    source: Path
    sha256: str
    rows: int
    offset: int


def _in_split_order(abouts: list[tuple[Path, dict]]) -> list[tuple[Path, dict]]:
    """The sketches in their split's order: by the index each records where its shard was written by ``shards
    split`` (all of one split, none missing), else in the order given. A sketch of another split, or a missing
    shard, would shift every later row number: refused."""
    placed = [(sketch, about) for sketch, about in abouts if "shard" in about]
    if not placed:
        return abouts
    for sketch, about in placed:
        place = about["shard"]
        if not (isinstance(place, dict) and all(type(place.get(k)) is int for k in ("index", "shards"))):
            raise ValueError(
                f"{sketch.name}: its shard's place ({place!r}) is not what shards split writes (an index, a count): "
                "sketch that shard again."
            )
    first = placed[0][1]["shard"]
    split = {k: v for k, v in first.items() if k != "index"}
    for sketch, about in abouts:
        other = {k: v for k, v in about.get("shard", {}).items() if k != "index"}
        if other != split:
            raise ValueError(
                f"{sketch.name} sketches {_split_words(other)}, {placed[0][0].name} {_split_words(split)}: give the "
                "sketches of one split's shards only."
            )
    order = sorted(abouts, key=lambda item: item[1]["shard"]["index"])
    indices = [about["shard"]["index"] for _, about in order]
    if indices != list(range(split["shards"])):
        missing = sorted(set(range(split["shards"])) - set(indices))
        raise ValueError(
            f"the sketches hold shards {indices} of the {split['shards']} of {_split_words(split)}; without "
            f"{'shard ' + str(missing[0]) if missing else 'each shard once'} every later row number would shift: give "
            "every shard's sketch once."
        )
    return order


def _split_words(split: dict) -> str:
    if not split:
        return "a shard that no shards split wrote (it records no split)"
    return f"split {split.get('split')!r} of {Path(split.get('dataset', '')).name} in {split.get('shards')} shards"


def _shards(sketches: list[Path], rows_dir: Path | None) -> list[_Shard]:
    """Each sketch's shard, in its split's order (:func:`_in_split_order`), with the number of its first row among
    all."""
    abouts = []
    for sketch in sketches:
        if not sketch.is_file():
            raise FileNotFoundError(
                f"{sketch}: no such sketch; make it with squarechipo shards sketch SHARD --out ..."
            )
        meta = (pq.read_schema(sketch).metadata or {}).get(SKETCH_KEY)
        if meta is None:
            raise ValueError(
                f"{sketch}: not a sketch (no {SKETCH_KEY.decode()} metadata); make it with shards sketch."
            )
        about = json.loads(meta)
        if about["scheme"] != SCHEME:
            raise ValueError(f"{sketch}: sketched in {about['scheme']}, not {SCHEME}: sketch its shard again.")
        twice = next((earlier for earlier, seen in abouts if seen["sha256"] == about["sha256"]), None)
        if twice is not None:
            raise ValueError(
                f"{sketch} and {twice} sketch the same shard: each of its rows would count as a copy of itself. "
                "Give each shard's sketch once."
            )
        abouts.append((sketch, about))
    found, offset = [], 0
    for sketch, about in _in_split_order(abouts):
        source = Path(about["source"]) if rows_dir is None else rows_dir / Path(about["source"]).name
        found.append(_Shard(sketch, source, about["sha256"], about["rows"], offset))
        offset += about["rows"]
    return found


def _duckdb():
    try:
        import duckdb
    except ImportError:
        raise ImportError(
            "finding copies across shards joins their sketches in DuckDB, which is not installed: "
            "pip install 'squarechipo[scale]'"
        ) from None
    return duckdb


def _candidates_and_exact(shards: list[_Shard]) -> tuple[list[Copy], set[tuple[int, int]]]:
    """(the exact copies, the near-copy candidate pairs of rows whose hashes differ), from DuckDB over the sketches."""
    duckdb = _duckdb()
    with duckdb.connect() as db:
        db.register(
            "shards", pa.table({"filename": [str(s.sketch) for s in shards], "first": [s.offset for s in shards]})
        )
        db.read_parquet([str(s.sketch) for s in shards], filename=True).create_view("sketches")
        db.execute("CREATE TEMP VIEW rows AS SELECT s.first + k.row AS g, k.hash, k.bands FROM sketches k "
                   "JOIN shards s USING (filename)")  # fmt: skip
        exact = db.execute(
            "SELECT g, first FROM (SELECT g, min(g) OVER (PARTITION BY hash) AS first FROM rows) WHERE g <> first "
            "ORDER BY g"
        ).fetchall()
        pairs = db.execute(
            "WITH b AS (SELECT g, hash, unnest(bands) AS band FROM rows) "
            "SELECT DISTINCT x.g, y.g FROM b x JOIN b y ON x.band = y.band AND x.g < y.g WHERE x.hash <> y.hash"
        ).fetchall()
    return [Copy(first, g, "the same text once retyping is folded") for g, first in exact], set(pairs)


def _reader(shards: list[_Shard]):
    """``rows_of`` for the candidates: their canonical text, read from their shards (each checked against the sha256
    its sketch names)."""
    offsets = np.array([s.offset for s in shards])

    def rows_of(wanted: list[int]) -> dict[int, str]:
        text: dict[int, str] = {}
        at = np.searchsorted(offsets, wanted, side="right") - 1
        for index in sorted(set(at.tolist())):
            shard = shards[index]
            if not shard.source.is_file():
                raise FileNotFoundError(
                    f"{shard.source}: the shard {shard.sketch} was made from is not there; give the folder that holds "
                    "the shards with --rows DIR."
                )
            if file_sha256(shard.source) != shard.sha256:
                raise ValueError(
                    f"{shard.source} is not the shard {shard.sketch} was made from (its sha256 differs): sketch it "
                    "again."
                )
            rows = [g for g, i in zip(wanted, at.tolist()) if i == index]
            table = pq.read_table(shard.source).take(pa.array([g - shard.offset for g in rows], pa.int64()))
            text.update(zip(rows, canonical_rows(table)))
        return text

    return rows_of


@dataclass(frozen=True)
class ShardCopies:
    """What the copies step decided: every row that copies an earlier one, numbered among all the shards' rows."""

    rows: int
    copies: list[Copy]
    shards: list[tuple[str, int, int]]  # (shard, its first row among all, rows)

    def to_dict(self) -> dict:
        def where(g: int) -> dict:
            name, first, _ = next(s for s in reversed(self.shards) if s[1] <= g)
            return {"row": g, "shard": name, "shard_row": g - first}

        listed = [{**where(c.later), "copies": where(c[0]), "why": c[2]} for c in self.copies]
        return {"rows": self.rows, "copies": listed, "shards": [list(s) for s in self.shards]}


@label_free("copies are found from label-free hashes and canonical text")
def shard_copies(sketches: list[str | Path], rows_dir: str | Path | None = None) -> ShardCopies:
    """Every row of the shards (concatenated in the order of ``sketches``) that copies an earlier row: exact copies
    and confirmed near-copies, decided as a release decides. ``rows_dir``: where the shards are now, by name (default:
    where they were sketched)."""
    shards = _shards([Path(s) for s in sketches], None if rows_dir is None else Path(rows_dir))
    exact, pairs = _candidates_and_exact(shards)
    near = confirm_near_copies(pairs, _reader(shards))
    listed = [(str(s.source), s.offset, s.rows) for s in shards]
    return ShardCopies(sum(s.rows for s in shards), merge_copies(exact, near), listed)
