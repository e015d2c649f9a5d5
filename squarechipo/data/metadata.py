"""A JSON block that travels with a dataset (the privacy ledger), wherever the dataset is stored.

The data layer stores the block and never reads it: :mod:`squarechipo.privacy.ledger` defines what it says.

- In memory and in a ``save_to_disk`` folder: at the end of ``DatasetInfo.description``, after a marker.
  ``DatasetInfo`` is copied by ``map``, ``filter``, ``select`` and ``train_test_split`` and written by
  ``save_to_disk``, so the block follows the data through the usual ``datasets`` operations.
- Parquet: in the file's schema metadata under :data:`PARQUET_METADATA_KEY`.
- JSONL: in a sidecar file ``<name>.jsonl.ledger.json`` next to the data (:data:`SIDECAR_SUFFIX`).
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

import datasets

__all__ = [
    "BLOCK_MARKER",
    "PARQUET_METADATA_KEY",
    "SIDECAR_SUFFIX",
    "file_kind",
    "info_with_block",
    "read_block",
    "read_block_for_path",
    "with_block",
    "write_with_block",
]

BLOCK_MARKER = "<!-- squarechipo-privacy-ledger -->"
PARQUET_METADATA_KEY = b"squarechipo.privacy_ledger"
SIDECAR_SUFFIX = ".ledger.json"


def _split_description(description: str | None) -> tuple[str, str | None]:
    text = description or ""
    head, marker, tail = text.partition(BLOCK_MARKER)
    return head.rstrip(), (tail.strip() if marker else None)


def read_block(dataset: datasets.Dataset) -> str | None:
    """The block a dataset carries, or None."""
    return _split_description(dataset.info.description)[1] or None


def info_with_block(info: datasets.DatasetInfo, block: str) -> datasets.DatasetInfo:
    """A copy of ``info`` whose description ends with ``block`` (an older block is replaced)."""
    info = copy.deepcopy(info)
    head, _ = _split_description(info.description)
    info.description = (head + "\n\n" if head else "") + BLOCK_MARKER + "\n" + block
    return info


def with_block(dataset: datasets.Dataset, block: str) -> datasets.Dataset:
    """Attach ``block`` to ``dataset`` (in place on its ``info``; returns the dataset)."""
    dataset.info.description = info_with_block(dataset.info, block).description
    return dataset


def file_kind(path: Path) -> str:
    """``jsonl``, ``parquet`` or ``dir`` (a ``save_to_disk`` folder)."""
    name = path.name.lower()
    if name.endswith((".jsonl", ".json")):
        return "jsonl"
    if name.endswith(".parquet"):
        return "parquet"
    if path.suffix == "" or path.is_dir():
        return "dir"
    raise ValueError(f"unsupported file type for {path}: use a folder (save_to_disk), .jsonl or .parquet.")


def write_with_block(dataset: datasets.Dataset, path: str | os.PathLike, block: str) -> Path:
    """Write one split to ``.jsonl`` (block in the sidecar) or ``.parquet`` (block in the schema metadata)."""
    path = Path(path)
    kind = file_kind(path)
    if kind == "dir":
        raise ValueError(f"{path}: write a folder with save_to_disk, which keeps the block in dataset_info.json.")
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "jsonl":
        dataset.to_json(str(path), lines=True, force_ascii=False)
        Path(str(path) + SIDECAR_SUFFIX).write_text(block + "\n", encoding="utf-8")
        return path
    import pyarrow.parquet as pq

    table = dataset.with_format("arrow")[:]
    metadata = dict(table.schema.metadata or {})
    metadata[PARQUET_METADATA_KEY] = block.encode("utf-8")
    pq.write_table(table.replace_schema_metadata(metadata), str(path))
    return path


def read_block_for_path(path: str | os.PathLike) -> str | None:
    """The block stored with a JSONL/Parquet file (sidecar or metadata), or None."""
    path = Path(path)
    kind = file_kind(path)
    if kind == "jsonl":
        sidecar = Path(str(path) + SIDECAR_SUFFIX)
        return sidecar.read_text(encoding="utf-8").strip() if sidecar.exists() else None
    if kind == "parquet":
        import pyarrow.parquet as pq

        block = (pq.read_schema(str(path)).metadata or {}).get(PARQUET_METADATA_KEY)
        return block.decode("utf-8") if block else None
    return None
