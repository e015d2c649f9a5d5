"""A release's folder, every step in one place: the lock, the staged copy, its completion after a cut-off, the seal
and the rename, and the reuse of a saved release.

The one release call (:func:`squarechipo.privacy.release.release_dataset.release_dataset`) with a folder runs
:func:`once_per_folder`: on the main process, under a lock beside the folder, it completes a release cut off there,
or runs the release transaction (:mod:`squarechipo.privacy.release.transaction`: admit, draw, register, seal) with
the folder's steps around it:

1. **stage**: the rows alone, then what registering them needs (their registry keys, the unsealed release), into a
   staging folder. Rows without a ledger read as raw labels, which every reader refuses: a staged folder is never
   readable as a release;
2. **register** and **seal** (the transaction's), then the ledger and the release marker are written into the staged
   copy and the folder is renamed into place.

Every rank and every re-run reuses the saved release after checking that it was made from the same rows with the
same mechanism, so no fresh noise is ever drawn on a re-run. A staged release cut off at any point after its rows
and keys were written is completed by the next run (:func:`complete_interrupted`): registered if it was not,
sealed, renamed. One cut off earlier is refused.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from dataclasses import replace
from pathlib import Path

import datasets
import filelock
import pyarrow as pa

from squarechipo.data import metadata
from squarechipo.data.fingerprint import preference_fingerprint
from squarechipo.data.integrity import MARKER, marker_record
from squarechipo.data.label_roles import label_free, releases_labels
from squarechipo.data.loading import load_saved_folder
from squarechipo.data.row_scan import scan_rows
from squarechipo.privacy.ledger.binding import get_ledger
from squarechipo.privacy.ledger.ledger import PrivacyLedger, Release, with_ledger
from squarechipo.privacy.mechanisms.measurements import Measurement
from squarechipo.privacy.release.budget import BudgetAsk
from squarechipo.privacy.release.registry import RegistryError, earlier_releases, register_release, registry_scheme
from squarechipo.privacy.release.transaction import ReleaseOptions, _Release
from squarechipo.trust.seals import IntegrityError, check_seal, seal

__all__ = [
    "PENDING_FILE",
    "UNITS_FILE",
    "complete_interrupted",
    "load",
    "once_per_folder",
    "release_into",
    "save_release",
    "staging_folder",
    "write_folder",
]

logger = logging.getLogger("squarechipo")
#: In a staged release: the keys it enters into the registry of releases (a declared privacy unit's column may not
#: be kept in the rows), removed once it is sealed.
UNITS_FILE = "squarechipo_registry_units.bin"
#: In a staged release: the release as drawn, before its ledger is sealed (written after the rows and keys, itself
#: sealed like a ledger, and removed once the release is sealed).
PENDING_FILE = "squarechipo_pending_release.json"


def _lock(folder: Path) -> filelock.FileLock:
    """One release at a time per folder, across processes and runs."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    return filelock.FileLock(str(folder.parent / f".{folder.name}.lock"))


def load(folder: Path) -> tuple[datasets.Dataset, PrivacyLedger | None]:
    """A saved release and its ledger; loading checks its marker against its rows and ledger."""
    released = load_saved_folder(folder)
    return released, get_ledger(released, str(folder))


def _refuse_foreign(folder: Path) -> None:
    """Refuse a folder that holds something other than a release: it is never written over."""
    if folder.exists() and any(folder.iterdir()) and not (folder / "dataset_info.json").exists():
        raise ValueError(
            f"{folder} is not empty and holds no release: privatized_dir is the folder where squarechipo saves the "
            "released labels, so point it at a new folder. Nothing was written to it."
        )


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


@releases_labels("the release's folder steps, run only by the one release call (release_dataset)")
def once_per_folder(folder: Path, dataset, mechanism: Measurement, options: ReleaseOptions, state):
    """The release in ``folder``: made by the main process the first time (completing one cut off), loaded and
    checked after, and on every other rank."""
    released = None
    if state is None or state.is_main_process:
        made = [p for p in (folder.parent, *folder.parent.parents) if not p.exists()]
        lock = _lock(folder)
        try:
            with lock:
                complete_interrupted(folder)
                if not (folder / "dataset_info.json").exists():
                    _refuse_foreign(folder)
                    released = release_into(folder, dataset, mechanism, options)
                    logger.warning("released %d rows through %s to %s", len(released), mechanism.to_dict(), folder)
        except BaseException:
            _tidy_refused(folder, lock, made)
            raise
    if state is not None:
        state.wait_for_everyone()
        _receive_if_unseen(folder, state)
    if released is None:  # an earlier release (or the main process's): checked before it is used
        released, ledger = load(folder)
        _check_reuse(ledger, dataset, mechanism, folder)
        logger.info("reusing the release saved in %s (no fresh noise)", folder)
    return released


def _tidy_refused(folder: Path, lock: filelock.FileLock, made: list[Path]) -> None:
    """A refused release leaves nothing behind: not its lock file, nor the folders made for it (where still empty);
    a folder that holds a release, or anything else, stays as it was."""
    if folder.exists():
        return
    Path(lock.lock_file).unlink(missing_ok=True)
    for parent in made:  # the deepest first
        try:
            parent.rmdir()
        except OSError:  # not empty (another process wrote there meanwhile), or gone
            break


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


@label_free("saves released rows only (a ledger is required)")
def save_release(released: datasets.Dataset, folder: str | os.PathLike) -> Path:
    """Save a release once and atomically: ``save_to_disk`` into a staging folder, the marker (the digests of the
    ledger and the rows) last, then a rename. A reader never sees half a release."""
    ledger = get_ledger(released, str(folder))
    if ledger is None:
        raise ValueError("only a released dataset (with its privacy ledger) is saved as a release.")
    return write_folder(released, Path(folder), marker_record(released, ledger.digest))


def _stage(release: _Release, folder: Path) -> Path:
    """The rows, the keys the release registers, then the release as drawn, into the folder's staging copy."""
    staging = staging_folder(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    release._rows().save_to_disk(str(staging))
    pending, units = release._pending()
    if pending["counted"]:
        (staging / UNITS_FILE).write_bytes(units)
    # Sealed like a ledger: an edit to what completion would seal (an ε, the ledger it composes) is refused.
    (staging / PENDING_FILE).write_text(json.dumps(seal(pending), sort_keys=True), encoding="utf-8")
    return staging


def _finish(staging: Path, folder: Path, released: datasets.Dataset, digest: str) -> None:
    """Seal a staged release (its ledger into ``dataset_info.json``, then the marker) and rename it into place."""
    metadata.write_folder_block(staging, metadata.read_block(released))
    metadata.write_folder_marker(staging, marker_record(released, digest))
    (staging / UNITS_FILE).unlink(missing_ok=True)
    (staging / PENDING_FILE).unlink(missing_ok=True)
    os.replace(staging, folder)


@releases_labels("the release's steps into a folder, run only by the one release call (release_dataset)")
def release_into(folder: Path, dataset: datasets.Dataset, mechanism: Measurement, options: ReleaseOptions):
    """Every step into ``folder`` (which must not hold a release): admit, draw, stage, register, seal, rename. A
    release the registry refuses is discarded before anything could read it. Called only by the one release call."""
    release = _Release(dataset, mechanism, options)
    release._admit()
    release._draw()
    staging = _stage(release, folder)
    # From here the staged rows are completed, registered and sealed, by the next run if this one stops.
    try:
        release._register(str(folder))
    except RegistryError:
        shutil.rmtree(staging)
        raise
    released, digest = release._sealed()
    _finish(staging, folder, released, digest)
    return released


def staging_folder(folder: Path) -> Path:
    """Where a release into ``folder`` is staged before its rename."""
    return folder.parent / f".{folder.name}.staging"


@label_free("writes rows whose ledger its callers checked (save_release, save_privatized)")
def write_folder(data: datasets.Dataset | datasets.DatasetDict, folder: Path, marker: dict) -> Path:
    """Stage, seal (the marker last) and rename a release that is already registered or not counted (a saved
    release, a received copy): a reader never sees half a release."""
    staging = staging_folder(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    data.save_to_disk(str(staging))
    metadata.write_folder_marker(staging, marker)
    os.replace(staging, folder)
    return folder


def complete_interrupted(folder: Path) -> None:
    """Complete a release cut off after its staged rows and keys were written: registered (if it was not), sealed,
    renamed. A staged copy the rename already
    replaced is removed; one cut off before its keys were written is refused."""
    staging = staging_folder(folder)
    if not staging.exists():
        return
    pending, sealed = staging / PENDING_FILE, (staging / MARKER).is_file()
    if folder.exists() and (pending.is_file() or sealed):
        shutil.rmtree(staging)  # the rename happened after all: the staged copy is a leftover
        return
    if pending.is_file() and not folder.exists():
        record = json.loads(pending.read_text(encoding="utf-8"))
        check_seal(
            record, str(pending), "staged release record", f"Delete {staging} and release again (nothing read it)."
        )
        released, digest = _seal_staged(staging, folder, record)
        _finish(staging, folder, released, digest)
        logger.warning("completed an interrupted release from its staged copy: %s", folder)
        return
    if sealed and not folder.exists():  # sealed, cut off before the rename
        load(staging)
        os.replace(staging, folder)
        logger.warning("completed an interrupted release from its staged copy: %s", folder)
        return
    raise ValueError(
        f"an interrupted release left {staging} unfinished (its rows or keys were not all written). Nothing could "
        f"read it as a release, but its noise was drawn from the raw labels, and squarechipo never draws fresh noise "
        f"silently. To release again, delete {staging} yourself; the new release draws new noise, which is sound "
        "only because nothing of the interrupted one was read."
    )


def _seal_staged(staging: Path, folder: Path, pending: dict) -> tuple[datasets.Dataset, str]:
    """Register (if it was not) and seal a staged release from its rows, keys and pending record. The registry must
    still hold exactly the earlier releases its ledger composed with; otherwise it is refused, never made visible."""
    rows = datasets.load_from_disk(str(staging))
    release = Release(**pending["release"])
    existing = None if pending["existing"] is None else PrivacyLedger.from_dict(pending["existing"], str(staging))
    if pending["counted"]:
        marks = scan_rows(rows, sketched=True, scheme=registry_scheme()).sketch
        blob = (staging / UNITS_FILE).read_bytes()
        if hashlib.sha256(blob).hexdigest() != pending["units_sha256"]:
            raise IntegrityError(
                f"{staging / UNITS_FILE}: the registry keys of the interrupted release are not those it staged (the "
                f"file was changed), so it is not completed. Delete {staging} and release again (nothing read it)."
            )
        units = [blob[i : i + 32] for i in range(0, len(blob), 32)]
        now = earlier_releases(units, marks)
        # Registered already (cut off after it): its ledger was decided then, whatever came after.
        if release.release_id not in now.ids and now.ids != frozenset(pending["expected"]):
            raise RegistryError(
                f"the interrupted release staged in {staging} composed with {release.earlier_releases} earlier "
                f"release(s) (ε {release.earlier_epsilon:g}), but the registry now holds {now.describe()}: its ledger "
                f"would understate the ε, so it is not completed. Delete {staging} and release again (nothing read "
                "it)."
            )
        # The budgets in force now hold it, or it is refused: one lowered since the draw binds its completion too.
        # A release staged by a version that kept no ask is held to every budget as one naming no dataset or unit.
        asked = pending.get("ask") or {"dataset": None, "unit": None, "columns": rows.column_names,
                                        "n_rows": len(rows), "epsilon": pending["epsilon"]}  # fmt: skip
        ask = BudgetAsk(**asked)
        registry_id, budget = register_release(
            release.release_id, units, marks, pending["epsilon"], release.created_at, expected=now, folder=str(folder),
            ask=ask,
        )  # fmt: skip
        release = replace(release, registry_id=registry_id, budget=budget or release.budget)
    record = (existing or PrivacyLedger()).with_release(release).to_dict()
    info = metadata.info_with_block(rows.info, json.dumps(record, sort_keys=True))
    return datasets.Dataset(rows.data, info=info, split=rows.split), record["digest"]
