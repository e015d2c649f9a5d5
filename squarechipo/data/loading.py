"""Load preference datasets from local files, ``save_to_disk`` folders or hub ids, and validate them.

Sources, in the order they are tried:

1. a ``save_to_disk`` folder (``Dataset`` or ``DatasetDict``) — ledgers come with it;
2. a local ``.jsonl``/``.json``, ``.parquet`` or ``.csv`` file — the ledger is read from the
   Parquet metadata or the JSONL sidecar (see :mod:`squarechipo.data.metadata`);
3. a folder of such files (one file per split, e.g. ``train.jsonl``, ``test.jsonl``);
4. anything else is a hub id for :func:`datasets.load_dataset` (needs a network).

Every split that carries a privacy ledger is checked against its release marker first
(:func:`~squarechipo.data.integrity.check_marker`: a missing marker is an error), then every split is validated
(:func:`~squarechipo.data.validation.validate_preference_dataset`).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import datasets

from squarechipo.data import metadata
from squarechipo.data.integrity import check_marker
from squarechipo.data.validation import validate_preference_dataset

__all__ = ["load_data_file", "load_preference_dataset", "load_rows", "load_saved_folder"]

logger = logging.getLogger("squarechipo")

_FILE_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}


def _is_saved_dataset(path: Path) -> bool:
    return (
        (path / "dataset_dict.json").exists()
        or (path / "dataset_info.json").exists()
        and (path / "state.json").exists()
    )


#: What each file type must hold, for error messages.
_EXPECTED = {
    "json": "one JSON object per line (JSONL) or a JSON list of objects, with prompt/chosen/rejected fields",
    "parquet": "a Parquet table with prompt/chosen/rejected columns",
    "csv": "a CSV file with a header row and prompt/chosen/rejected columns",
}


def _read_rows(path: Path, builder: str) -> datasets.Dataset:
    """``datasets``' reader, with errors that name the file and say what it must hold."""
    with open(path, "rb") as handle:
        head = handle.read(4096)
    if not head.strip() and (builder != "parquet" or not head):
        raise ValueError(f"{path} is empty: write {_EXPECTED[builder]}.")
    try:
        data = datasets.load_dataset(builder, data_files=str(path), split="train")
    except Exception as error:  # datasets wraps reader errors (ArrowInvalid, DatasetGenerationError, ...)
        cause = error.__cause__ or error
        if "corresponds to no data" in str(cause):  # datasets' words for a file without a single record
            raise ValueError(f"{path} holds no rows: write {_EXPECTED[builder]}.") from error
        raise ValueError(
            f"{path} could not be read as {path.suffix} ({type(cause).__name__}: {str(cause)[:200]}). "
            f"The file must be {_EXPECTED[builder]}."
        ) from error
    if len(data) == 0:
        raise ValueError(f"{path} holds no rows: write {_EXPECTED[builder]}.")
    return data


def load_data_file(path: str | os.PathLike) -> datasets.Dataset:
    """One ``.jsonl``/``.json``, ``.parquet`` or ``.csv`` file; a ledger it carries is checked against its marker."""
    path = Path(path)
    builder = _FILE_BUILDERS.get(path.suffix.lower())
    if builder is None:
        raise ValueError(f"unsupported file type {path.suffix!r} for {path}: use .jsonl, .json, .parquet or .csv.")
    data = _read_rows(path, builder)
    # The privacy ledger of a released file travels in its sidecar or Parquet metadata (squarechipo.data.metadata),
    # with the marker that seals its rows.
    block, marker = metadata.read_blocks_for_path(path) if builder in ("json", "parquet") else (None, None)
    check_marker(marker, data, metadata.block_digest(block), str(path))
    return metadata.with_block(data, block) if block is not None else data


def load_saved_folder(path: str | os.PathLike) -> datasets.Dataset | datasets.DatasetDict:
    """A ``save_to_disk`` folder, each split that carries a ledger checked against the folder's release marker."""
    data = datasets.load_from_disk(str(path))
    marker = metadata.read_folder_marker(path)
    if isinstance(data, datasets.Dataset):
        check_marker(marker, data, metadata.block_digest(metadata.read_block(data)), str(path))
        return data
    splits = (marker or {}).get("splits", {})
    for name, split in data.items():
        check_marker(splits.get(name), split, metadata.block_digest(metadata.read_block(split)), f"{path} [{name}]")
    return data


def _load_folder_of_files(path: Path) -> datasets.DatasetDict:
    files = sorted(p for p in path.iterdir() if p.suffix.lower() in _FILE_BUILDERS)
    if not files:
        raise ValueError(
            f"{path} is a folder with no dataset: expected a save_to_disk folder or .jsonl/.parquet/.csv files."
        )
    return datasets.DatasetDict({p.stem: load_data_file(p) for p in files})


def _load_hub(name: str, config: str | None) -> datasets.DatasetDict | datasets.Dataset:
    try:
        return datasets.load_dataset(name, config)
    except Exception as error:  # network errors come in many types; the message is what matters
        raise ValueError(
            f"could not load {name!r}: it is not a local path, and loading it from the Hugging Face Hub failed "
            f"({type(error).__name__}: {error}). Check the path, or the network and the dataset id."
        ) from error


def load_rows(source: str | os.PathLike, *, config: str | None = None) -> datasets.Dataset | datasets.DatasetDict:
    """Rows of any kind from a ``save_to_disk`` folder, a data file (one dataset), a folder of data files or a hub id,
    unvalidated (:func:`load_preference_dataset` validates preference rows)."""
    path = Path(source).expanduser()
    if path.is_dir() and _is_saved_dataset(path):
        return load_saved_folder(path)
    if path.is_file():
        return load_data_file(path)
    if path.is_dir():
        return _load_folder_of_files(path)
    if path.suffix.lower() in _FILE_BUILDERS or str(source).startswith((".", "/", "~")):
        raise ValueError(f"{source} does not exist.")
    return _load_hub(str(source), config)


def load_preference_dataset(
    source: str | os.PathLike,
    *,
    split: str | None = None,
    config: str | None = None,
    drop_invalid: bool = False,
) -> datasets.Dataset | datasets.DatasetDict:
    """Load and validate a preference dataset (standard, conversational or implicit-prompt form).

    Args: source: a ``save_to_disk`` folder, a data file, a folder of data files, or a hub id. split: return only this
        split (raises, listing the available ones, if absent); a single data file is any split asked for. config: the
        hub config name, if any. drop_invalid: drop invalid rows (the count is logged) instead of raising.
    """
    data = load_rows(source, config=config)
    if split is not None:
        if isinstance(data, datasets.DatasetDict):
            if split not in data:
                raise ValueError(f"split {split!r} not in {source} (splits: {list(data)}).")
            data = data[split]
        elif split != "train":
            # One data file is whichever split the caller asks for (the train split of a recipe, the test split
            # of an evaluation), as in TRL's scripts.
            logger.info("%s is a single dataset: its %d rows are the %r split", source, len(data), split)

    def check(part: datasets.Dataset, name: str) -> datasets.Dataset:
        try:
            clean, _ = validate_preference_dataset(part, drop_invalid=drop_invalid)
        except ValueError as error:
            raise ValueError(f"{source} [{name}]: {error}") from error
        return clean

    if isinstance(data, datasets.DatasetDict):
        return datasets.DatasetDict({name: check(part, name) for name, part in data.items()})
    return check(data, split or "data")
