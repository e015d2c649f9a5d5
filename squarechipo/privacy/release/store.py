"""The one release call, and storing releases: once per folder, saved and loaded with their ledger and marker.

:func:`release_dataset` is the one release call. With a folder it makes a release once per folder: on the main
process, under a lock beside the folder, it runs the release transaction (:mod:`squarechipo.privacy.release.
transaction`: admit, draw, stage, register in the registry of releases, seal, rename). Every rank and every re-run
reuses the saved release after checking that it was made from the same rows with the same mechanism, so no fresh
noise is ever drawn on a re-run. A release cut off after its staged copy was complete is
completed by the next run (registered if it was not, then sealed); one cut off earlier is refused.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import datasets
import filelock
import pyarrow as pa

from squarechipo.data import metadata
from squarechipo.data.fingerprint import preference_fingerprint
from squarechipo.data.integrity import marker_record
from squarechipo.data.label_roles import label_free, releases_labels
from squarechipo.data.loading import load_data_file, load_saved_folder
from squarechipo.privacy.ledger.binding import get_ledger
from squarechipo.privacy.ledger.records import PrivacyLedger, with_ledger
from squarechipo.privacy.mechanisms.measurements import Measurement
from squarechipo.privacy.release.transaction import (
    ReleaseOptions,
    complete_interrupted,
    release_in_memory,
    release_into,
    write_folder,
)

__all__ = ["load_privatized", "load_release", "release_dataset", "save_privatized", "save_release"]

logger = logging.getLogger("squarechipo")


def _check_reuse(ledger: PrivacyLedger | None, source: datasets.Dataset, pipeline: Measurement, folder: Path) -> None:
    if ledger is None or not ledger.releases:
        raise ValueError(
            f"{folder} holds a dataset with no privacy ledger: it looks like raw data, not a release. privatized_dir "
            "is the folder where squarechipo saves the released labels: point it at a new folder (the default is "
            "<output_dir>/released_train) and keep your raw data where it is. Nothing was written to it."
        )
    release = ledger.releases[-1]
    wanted = pipeline.to_dict()
    # Every parameter this run asks for must match; the ledger may add public outcomes (rows_from_prior).
    if {key: release.pipeline.get(key) for key in wanted} != wanted:
        raise ValueError(
            f"{folder} was released with pipeline {release.pipeline}, but this run asks for {wanted}. "
            "Reusing it would misstate the privacy; releasing again would query the same labels twice and spend "
            "more budget. Point the run at another folder for the new pipeline, or set the pipeline back."
        )
    source_fingerprint = preference_fingerprint(source)
    if release.data_fingerprint != source_fingerprint:
        raise ValueError(
            f"{folder} was released from different rows than this run's training split "
            f"({release.data_fingerprint} vs {source_fingerprint}); choose another folder."
        )


def _lock(folder: Path) -> filelock.FileLock:
    """One release at a time per folder, across processes and runs."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    return filelock.FileLock(str(folder.parent / f".{folder.name}.lock"))


@label_free("saves released rows only (a ledger is required)")
def save_release(released: datasets.Dataset, folder: str | os.PathLike) -> Path:
    """Save a release once and atomically: ``save_to_disk`` into a staging folder, the marker (the digests of the
    ledger and the rows) last, then a rename. A reader never sees half a release."""
    ledger = get_ledger(released, str(folder))
    if ledger is None:
        raise ValueError("only a released dataset (with its privacy ledger) is saved as a release.")
    return write_folder(released, Path(folder), marker_record(released, ledger.digest))


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
    return _load(Path(folder))[0]


def _load(folder: Path) -> tuple[datasets.Dataset, PrivacyLedger | None]:
    released = load_saved_folder(folder)
    return released, get_ledger(released, str(folder))


def _refuse_foreign(folder: Path) -> None:
    if folder.exists() and any(folder.iterdir()) and not (folder / "dataset_info.json").exists():
        raise ValueError(
            f"{folder} is not empty and holds no release: privatized_dir is the folder where squarechipo saves the "
            "released labels, so point it at a new folder. Nothing was written to it."
        )


@releases_labels("randomized response (or the measurement given) stands between the raw labels and the output")
def release_dataset(
    dataset: datasets.Dataset,
    mechanism: Measurement,
    folder: str | os.PathLike | None = None,
    *,
    seed: int | None = None,
    compose: bool = False,
    part: str | None = None,
    public_columns: list[str] | tuple[str, ...] = (),
    rerelease: bool = False,
    privacy_unit: str | None = None,
    dataset_name: str | None = None,
    state=None,
) -> datasets.Dataset:
    """Release a dataset's labels through ``mechanism`` once, record it in the registry of releases, and return the
    released rows with their signed ledger; with ``folder``, save it there the first time and reuse it after.

    Args:
        dataset: raw preference pairs whose ``chosen`` is the true preferred response, in any TRL format
            (validated first; invalid rows raise — drop them explicitly with
            ``validate_preference_dataset(..., drop_invalid=True)``), or raw best-of-K rows.
        mechanism: a :class:`~squarechipo.privacy.mechanisms.measurements.Measurement` (``LabelPipeline`` for ε, α,
            adversary and order; ``KaryRR``, ``SubsetMechanism`` or ``RRWithPrior``).
        folder: where the release is saved (a ``save_to_disk`` folder, its ledger and marker inside). The first call
            releases into it; every later call (a re-run of the same script, another rank) loads the saved release
            after checking it came from the same rows and mechanism, so no fresh noise is ever drawn. One release at
            a time per folder (a file lock); one cut off is completed from its staged copy by the next call. ``None``:
            the release is returned in memory only (saving it is then yours: :func:`save_privatized`).
        seed: ``None`` (default) draws from OS entropy: use this for real labels. An integer is for simulation and
            makes the noise reproducible by anyone who knows it; the ledger records that a fixed seed was used, never
            the seed.
        compose: (``LabelPipeline`` only) the dataset already carries a ledger and you mean to add noise to its
            released labels. That is post-processing of the earlier release (the raw labels keep its ε); the ledger
            records the new release, sums the ε (a valid, loose bound) and gives the tight ε of the stored labels
            (``stored_labels_epsilon``).
        part: the name of the disjoint part of a larger dataset these rows are (multi-stage training,
            Ghazi et al. 2021 (label DP)); releases on disjoint parts compose in parallel in the ledger.
        public_columns: (pairs) columns besides prompt/chosen/rejected that do not depend on the label (an id, a
            category): kept. Label-carrying columns are dropped and named in the ledger; any other column raises.
        rerelease: raw rows released before into the registry of releases (:mod:`squarechipo.privacy.release.
            registry`) are refused, naming the earlier release and where it was saved, unless this is True; then
            the ledger adds the earlier releases' ε (basic composition) to its total.
        privacy_unit: a column that identifies the unit of privacy (a labeller or comparison id). Without it the
            unit is one comparison, and rows that copy another row's comparison (exactly, retyped or nearly) are
            refused. With it, rows of one unit compose (the ledger's ε is per unit: ε × the most rows one unit has),
            content copies across units are allowed, and the registry counts both the units and each comparison's
            content. The column is kept only if it is also in ``public_columns``.
        dataset_name: the name the registry knows these rows by, for a privacy budget set per dataset
            (``squarechipo registry budget set --dataset NAME``); None: the registry's or the unit's budget applies.
        state: an ``accelerate.PartialState`` in distributed runs (with ``folder``): the main process releases and
            the others wait, then load. ``None`` = a single process.

    Returns:
        A new dataset with the kept columns and the signed ledger attached.
    """
    options = ReleaseOptions(seed, compose, part, public_columns, rerelease, privacy_unit, dataset_name)
    if folder is None:
        return release_in_memory(dataset, mechanism, options)
    return _once_per_folder(Path(folder), dataset, mechanism, options, state)


def _once_per_folder(folder: Path, dataset, mechanism: Measurement, options: ReleaseOptions, state):
    """The release in ``folder``: made by the main process the first time (completing one cut off), loaded and
    checked after, and on every other rank."""
    released = None
    if state is None or state.is_main_process:
        with _lock(folder):
            complete_interrupted(folder, _load)
            if not (folder / "dataset_info.json").exists():
                _refuse_foreign(folder)
                released = release_into(folder, dataset, mechanism, options)
                logger.warning("released %d rows through %s to %s", len(released), mechanism.to_dict(), folder)
    if state is not None:
        state.wait_for_everyone()
        _receive_if_unseen(folder, state)
    if released is None:  # an earlier release (or the main process's): checked before it is used
        released, ledger = _load(folder)
        _check_reuse(ledger, dataset, mechanism, folder)
        logger.info("reusing the release saved in %s (no fresh noise)", folder)
    return released


def _receive_if_unseen(folder: Path, state) -> None:
    """Ranks that cannot see the main process's release (nodes without a shared filesystem) receive its rows.

    What travels is the released table and its ledger, as saved: never the swap mask, which with the raw rows
    would be the noise itself. Each receiving node saves a copy in its own ``folder`` (its record, and what a
    re-run there loads). Every rank must call this (it is collective).
    """
    from accelerate.utils import broadcast_object_list, gather_object

    seen = gather_object([(folder / "dataset_info.json").exists()])
    if all(seen):
        return
    payload: list = [None]
    if state.is_main_process:
        released = datasets.load_from_disk(str(folder))
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, released.data.table.schema) as writer:
            writer.write_table(released.data.table)
        payload = [(sink.getvalue().to_pybytes(), get_ledger(released).to_json())]
    broadcast_object_list(payload, from_process=0)
    if (folder / "dataset_info.json").exists():
        return
    table_bytes, ledger_json = payload[0]
    table = pa.ipc.open_stream(pa.py_buffer(table_bytes)).read_all()
    received = with_ledger(datasets.Dataset(table), PrivacyLedger.from_json(ledger_json))
    save_release(received, folder)
    logger.warning(
        "rank %d could not see the main process's release; received its %d released rows into %s",
        state.process_index,
        len(received),
        folder,
    )
