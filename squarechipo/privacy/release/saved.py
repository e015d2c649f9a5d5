"""Storing releases: released rows saved to and loaded from a folder, a JSONL or a Parquet file with their ledger
and marker (:func:`squarechipo.privacy.release.release_dataset.release_dataset` saves into a folder itself)."""

from __future__ import annotations

import os
from pathlib import Path

import datasets

from squarechipo.data import metadata
from squarechipo.data.integrity import marker_record
from squarechipo.data.label_roles import label_free
from squarechipo.data.loading import load_data_file, load_saved_folder
from squarechipo.privacy.ledger.binding import get_ledger
from squarechipo.privacy.release.folder import load, save_release, write_folder

__all__ = ["load_privatized", "load_release", "save_privatized"]


@label_free("saves released rows only (a ledger is required)")
def save_privatized(data: datasets.Dataset | datasets.DatasetDict, path: str | os.PathLike) -> Path:
    """Save a privatized dataset to a folder, ``.jsonl`` or ``.parquet``: the ledger travels with it, and so does the
    release marker that every loader checks (:mod:`squarechipo.data.integrity`). A ``DatasetDict`` goes to a folder,
    with one marker record per split that carries a ledger."""
    path = Path(path)
    if isinstance(data, datasets.DatasetDict):
        if metadata.file_kind(path) != "dir":
            raise ValueError("a DatasetDict can only be saved to a folder; pick a split for .jsonl/.parquet.")
        ledgers = {name: get_ledger(split, f"{path} [{name}]") for name, split in data.items()}
        if all(ledger is None for ledger in ledgers.values()):
            raise ValueError(
                "no split has a privacy ledger; privatize one first (squarechipo.privacy.release.transaction)."
            )
        splits = {n: marker_record(data[n], ledger.digest) for n, ledger in ledgers.items() if ledger is not None}
        return write_folder(data, path, {"splits": splits})
    ledger = get_ledger(data, str(path))
    if ledger is None:
        raise ValueError(
            "dataset has no privacy ledger; privatize it first (squarechipo.privacy.release.transaction)."
        )
    if metadata.file_kind(path) == "dir":
        return save_release(data, path)
    return metadata.write_with_block(data, path, ledger.to_json(), marker_record(data, ledger.digest))


def load_privatized(path: str | os.PathLike) -> datasets.Dataset | datasets.DatasetDict:
    """Load what :func:`save_privatized` wrote, after checking its ledger's seal and its rows against the marker.

    Raises:
        ValueError: when the data carries no ledger (load public data with the generic loader).
        IntegrityError: when its rows, ledger or marker were changed or removed.
    """
    path = Path(path)
    data = load_saved_folder(path) if metadata.file_kind(path) == "dir" else load_data_file(path)
    splits = data.values() if isinstance(data, datasets.DatasetDict) else [data]
    if not any(get_ledger(split, str(path)) is not None for split in splits):
        sidecar = f"{path}{metadata.SIDECAR_SUFFIX}" if metadata.file_kind(path) == "jsonl" else str(path)
        raise ValueError(f"no privacy ledger found in {sidecar}: it was not saved by save_privatized.")
    return data


def load_release(folder: str | os.PathLike) -> datasets.Dataset:
    """A saved release, after checking its ledger's digest and its rows against the folder's marker."""
    return load(Path(folder))[0]
