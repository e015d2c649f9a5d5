"""A JSON block that travels with a dataset (the privacy ledger), and the release marker saved beside it.

The data layer stores the block and never interprets it: :mod:`squarechipo.privacy.ledger.ledger` defines what it
says. The marker (:mod:`squarechipo.data.integrity`) seals the saved rows and is written by every save of a release.

- In memory and in a ``save_to_disk`` folder: at the end of ``DatasetInfo.description``, after a marker.
  ``DatasetInfo`` is copied by ``map``, ``filter``, ``select`` and ``train_test_split`` and written by
  ``save_to_disk``, so the block follows the data through the usual ``datasets`` operations. A saved folder's
  release marker is the file ``squarechipo_release.json`` (for a ``DatasetDict``, one record per split).
- Parquet: in the file's schema metadata under :data:`PARQUET_METADATA_KEY`, the marker under
  :data:`PARQUET_MARKER_KEY`.
- JSONL: in a sidecar file ``<name>.jsonl.ledger.json`` next to the data (:data:`SIDECAR_SUFFIX`), which holds
  ``{"ledger": ..., "marker": ...}``.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import datasets

from squarechipo.data.label_roles import label_free

__all__ = [
    "BLOCK_MARKER",
    "PARQUET_MARKER_KEY",
    "PARQUET_METADATA_KEY",
    "SIDECAR_SUFFIX",
    "block_digest",
    "file_kind",
    "info_with_block",
    "read_block",
    "read_block_for_path",
    "read_blocks_for_path",
    "read_folder_marker",
    "with_block",
    "without_block",
    "write_folder_block",
    "write_folder_marker",
    "write_with_block",
]

BLOCK_MARKER = "<!-- squarechipo-privacy-ledger -->"
PARQUET_METADATA_KEY = b"squarechipo.privacy_ledger"
PARQUET_MARKER_KEY = b"squarechipo.release_marker"
SIDECAR_SUFFIX = ".ledger.json"
#: A saved folder's release marker (sealed digests of its rows and ledger).
FOLDER_MARKER = "squarechipo_release.json"


def _split_description(description: str | None) -> tuple[str, str | None]:
    text = description or ""
    head, marker, tail = text.partition(BLOCK_MARKER)
    return head.rstrip(), (tail.strip() if marker else None)


def without_block(description: str | None) -> str:
    """A description with its block (if any) removed."""
    return _split_description(description)[0]


@label_free("reads the ledger block, not the rows")
def read_block(dataset: datasets.Dataset) -> str | None:
    """The block a dataset carries, or None."""
    return _split_description(dataset.info.description)[1] or None


def info_with_block(info: datasets.DatasetInfo, block: str) -> datasets.DatasetInfo:
    """A copy of ``info`` whose description ends with ``block`` (an older block is replaced)."""
    info = copy.deepcopy(info)
    head, _ = _split_description(info.description)
    info.description = (head + "\n\n" if head else "") + BLOCK_MARKER + "\n" + block
    return info


@label_free("attaches a block; every reader then matches it to the rows")
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


def block_digest(block: str | None) -> str | None:
    """The ``digest`` field a block states (what a release marker must name), or None without a block."""
    return None if block is None else json.loads(block).get("digest")


@label_free("writes a release with its ledger and marker")
def write_with_block(dataset: datasets.Dataset, path: str | os.PathLike, block: str, marker: dict[str, Any]) -> Path:
    """Write one split to ``.jsonl`` (block and marker in the sidecar) or ``.parquet`` (both in the schema
    metadata)."""
    path = Path(path)
    kind = file_kind(path)
    if kind == "dir":
        raise ValueError(f"{path}: write a folder with save_to_disk, which keeps the block in dataset_info.json.")
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "jsonl":
        dataset.to_json(str(path), lines=True, force_ascii=False)
        sidecar = {"ledger": json.loads(block), "marker": marker}
        Path(str(path) + SIDECAR_SUFFIX).write_text(json.dumps(sidecar, sort_keys=True) + "\n", encoding="utf-8")
        return path
    import pyarrow.parquet as pq

    table = dataset.with_format("arrow")[:]
    metadata = dict(table.schema.metadata or {})
    metadata[PARQUET_METADATA_KEY] = block.encode("utf-8")
    metadata[PARQUET_MARKER_KEY] = json.dumps(marker, sort_keys=True).encode("utf-8")
    pq.write_table(table.replace_schema_metadata(metadata), str(path))
    return path


def read_blocks_for_path(path: str | os.PathLike) -> tuple[str | None, dict[str, Any] | None]:
    """(the block, the release marker) stored with a JSONL/Parquet file (sidecar or metadata); None where absent.

    A sidecar written before markers existed holds the ledger alone: its marker is None."""
    path = Path(path)
    kind = file_kind(path)
    if kind == "jsonl":
        sidecar = Path(str(path) + SIDECAR_SUFFIX)
        if not sidecar.exists():
            return None, None
        stored = json.loads(sidecar.read_text(encoding="utf-8"))
        if "ledger" not in stored:
            return json.dumps(stored, sort_keys=True), None
        return json.dumps(stored["ledger"], sort_keys=True), stored.get("marker")
    if kind == "parquet":
        import pyarrow.parquet as pq

        stored = pq.read_schema(str(path)).metadata or {}
        block, marker = stored.get(PARQUET_METADATA_KEY), stored.get(PARQUET_MARKER_KEY)
        return (block.decode("utf-8") if block else None), (json.loads(marker) if marker else None)
    return None, None


def read_block_for_path(path: str | os.PathLike) -> str | None:
    """The block stored with a JSONL/Parquet file (sidecar or metadata), or None."""
    return read_blocks_for_path(path)[0]


def write_folder_block(folder: str | os.PathLike, block: str) -> None:
    """Put ``block`` into a ``save_to_disk`` folder's ``dataset_info.json`` (replacing an older one), without
    rewriting its rows."""
    path = Path(folder) / "dataset_info.json"
    info = json.loads(path.read_text(encoding="utf-8"))
    head, _ = _split_description(info.get("description"))
    info["description"] = (head + "\n\n" if head else "") + BLOCK_MARKER + "\n" + block
    path.write_text(json.dumps(info, indent=2, sort_keys=True), encoding="utf-8")


def write_folder_marker(folder: str | os.PathLike, marker: dict[str, Any]) -> None:
    """A saved folder's release marker (write it last: its presence says the save completed)."""
    (Path(folder) / FOLDER_MARKER).write_text(json.dumps(marker, indent=2), encoding="utf-8")


def read_folder_marker(folder: str | os.PathLike) -> dict[str, Any] | None:
    """A saved folder's release marker, or None."""
    path = Path(folder) / FOLDER_MARKER
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
