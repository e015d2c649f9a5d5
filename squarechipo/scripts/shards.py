"""``squarechipo shards``: copies across Parquet shards one machine cannot hold at once (docs/scale.md).

    squarechipo shards split data/finance_preference --split train --shards 3 --out shards  # a saved set as Parquet
    squarechipo shards sketch shards/part-0.parquet --out sketches/part-0.parquet   # one shard, on any machine
    squarechipo shards copies sketches/*.parquet --out copies.json                   # DuckDB joins every sketch

``sketch`` is the map step (a Slurm array or any engine runs it once per shard); ``copies`` joins the sketches and
confirms near-copies on the candidates' text alone, deciding as a release decides
(:mod:`squarechipo.data.shards`). A release still checks its own rows: this says, before, which rows to leave out.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

__all__ = ["main", "make_parser"]


def make_parser(prog: str = "squarechipo shards") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    split = commands.add_parser("split", help="a saved dataset's split as contiguous Parquet shards")
    split.add_argument("dataset", help="a folder written by save_to_disk (a Dataset or a DatasetDict)")
    split.add_argument("--split", default="train", help="the split of a DatasetDict (default train)")
    split.add_argument("--shards", type=int, required=True, help="how many shards")
    split.add_argument("--out", required=True, help="the folder the shards are written to (part-K.parquet)")
    sketch = commands.add_parser("sketch", help="each row's content hash, MinHash signature and band keys")
    sketch.add_argument("shard", help="a Parquet file of preference rows")
    sketch.add_argument("--out", required=True, help="the sketch's Parquet file")
    copies = commands.add_parser("copies", help="every row that copies an earlier one, across all the shards")
    copies.add_argument("sketches", nargs="+", help="the sketches, in the order of their shards")
    copies.add_argument("--rows", help="the folder that holds the shards now (default: where they were sketched)")
    copies.add_argument("--out", help="write the copies here as JSON")
    return parser


def main(argv: list[str] | None = None) -> int:
    from squarechipo.data.near_duplicates import describe_copies
    from squarechipo.data.shards import shard_copies, sketch_shard

    args = make_parser().parse_args(argv)
    if args.command == "split":
        return _split(args)
    if args.command == "sketch":
        rows = sketch_shard(args.shard, args.out)
        print(f"sketched {rows:,} rows of {args.shard} into {args.out}{_unread_labels(args.shard)}")
        return 0
    found = shard_copies(sorted(args.sketches, key=_natural), args.rows)  # a split's own order where they record it
    exact = sum(1 for c in found.copies if c[2].startswith("the same text"))
    print(
        f"{len(found.copies):,} of {found.rows:,} rows copy an earlier row ({exact:,} exactly, "
        f"{len(found.copies) - exact:,} as near-copies)"
        + (f": {describe_copies(found.copies)}" if found.copies else "")
    )
    if args.out:
        Path(args.out).write_text(json.dumps(found.to_dict(), indent=1), encoding="utf-8")
        print(f"written to {args.out}")
    return 0


def _unread_labels(shard: str) -> str:
    """The words naming a shard's label columns, which a sketch does not read (it holds each row's content only)."""
    import pyarrow.parquet as pq

    from squarechipo.data.columns import LABEL_CARRYING, PAIR_COLUMNS

    names = [n for n in pq.read_schema(shard).names if n not in (*PAIR_COLUMNS, "responses")]
    labels = [n for n in names if LABEL_CARRYING.search(n)]
    if not labels:
        return ""
    return f"; not read: its label column(s) {', '.join(map(repr, labels))} (a sketch holds no label)"


def _natural(name: str) -> list:
    """A path's sort key with its numbers compared as numbers: part-2 before part-10, as `shards split` numbers them
    (a shell's glob, and a text sort, put part-10 first)."""
    import re

    return [(0, int(piece), "") if piece.isdigit() else (1, 0, piece) for piece in re.split(r"(\d+)", name)]


def _write_shard(table, path: Path, split: dict, index: int, shards: int) -> None:
    """Write shard ``index`` of ``shards`` of a split as Parquet (the raw rows, as the custodian keeps them), naming in
    its metadata the split (the dataset, its split and its fingerprint) and its index, which its sketch carries on:
    sketches are then joined in the split's order, and a sketch of another split is refused."""
    import pyarrow.parquet as pq

    from squarechipo.data.shards import SHARD_KEY

    meta = {**(table.schema.metadata or {}), SHARD_KEY: json.dumps({**split, "index": index, "shards": shards})}
    pq.write_table(table.replace_schema_metadata(meta), str(path))


def _split(args: argparse.Namespace) -> int:
    import datasets

    data = datasets.load_from_disk(args.dataset)
    if isinstance(data, datasets.DatasetDict):
        if args.split not in data:
            raise ValueError(f"{args.dataset} has no split {args.split!r} (splits: {sorted(data)}): pass --split.")
        data = data[args.split]
    if not 1 <= args.shards <= len(data):
        raise ValueError(f"--shards must be from 1 to the {len(data):,} rows of {args.dataset} (got {args.shards}).")
    out = Path(args.out)
    written = {f"part-{index}.parquet" for index in range(args.shards)}
    stale = sorted(str(f) for f in out.glob("part-*.parquet") if f.name not in written)
    if stale:  # a glob of the folder would read them as shards of this split
        raise FileExistsError(
            f"{out} holds shards of another split ({', '.join(stale[:3])}{', ...' if len(stale) > 3 else ''}): give "
            "an empty folder, or remove them first."
        )
    out.mkdir(parents=True, exist_ok=True)
    datasets.disable_progress_bars()
    split = {"dataset": str(Path(args.dataset).resolve()), "split": args.split, "fingerprint": data._fingerprint}
    for index in range(args.shards):
        table = data.shard(args.shards, index, contiguous=True).with_format("arrow")[:]
        _write_shard(table, out / f"part-{index}.parquet", split, index, args.shards)
    print(f"wrote {len(data):,} rows of {args.dataset} as {args.shards} shards into {out}")
    return 0
