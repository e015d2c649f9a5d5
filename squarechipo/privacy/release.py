"""Release a training split once and reuse it: on re-runs and on every distributed rank.

Drawing fresh randomized-response noise on a re-run would spend the privacy budget again, and two
ranks drawing their own noise would train on different labels. :func:`release_once` privatizes on
the main process only, saves the result with its ledger (atomically), and every other call — other
ranks, later runs, resumed runs — loads that saved release after checking that it was made from the
same rows with the same pipeline.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path

import datasets

from squarechipo.data.fingerprint import preference_fingerprint
from squarechipo.privacy.dataset import privatize_dataset
from squarechipo.privacy.ledger import get_ledger
from squarechipo.privacy.pipeline import LabelPipeline
from squarechipo.privacy.prior_release import RRWithPriorRelease

__all__ = ["release_once"]

logger = logging.getLogger("squarechipo")


Mechanism = LabelPipeline | RRWithPriorRelease


def _check_reuse(released: datasets.Dataset, source: datasets.Dataset, pipeline: Mechanism, folder: Path) -> None:
    ledger = get_ledger(released)
    if ledger is None or not ledger.releases:
        raise ValueError(f"{folder} holds a dataset without a privacy ledger; delete it or choose another folder.")
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


def release_once(
    dataset: datasets.Dataset,
    pipeline: Mechanism,
    folder: str | os.PathLike,
    *,
    seed: int | None = None,
    state=None,
    part: str | None = None,
) -> datasets.Dataset:
    """Return the released version of ``dataset``: privatize and save it the first time, load it after.

    Args:
        dataset: the raw split (``chosen`` = the true preference).
        pipeline: the label pipeline, or an :class:`RRWithPriorRelease` (LP-2ST's part 2).
        folder: where the release is saved (``save_to_disk``; the ledger travels inside).
        seed: ``None`` = OS entropy (real data); an integer for simulation only.
        state: an ``accelerate.PartialState`` in distributed runs; the main process writes and the
            others wait, then load. ``None`` = a single process.
        part: the disjoint part these rows are (multi-stage training; see ``privatize_dataset``).
    """
    folder = Path(folder)
    is_main = True if state is None else state.is_main_process
    if is_main and not (folder / "dataset_info.json").exists():
        if isinstance(pipeline, LabelPipeline):
            released = privatize_dataset(dataset, pipeline, seed=seed, part=part)
        else:
            released = pipeline.release(dataset, seed=seed, part=part)
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
        try:
            released.save_to_disk(str(staging))
            os.replace(staging, folder)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        logger.warning("released %d training rows through %s to %s", len(released), pipeline.to_dict(), folder)
    if state is not None:
        state.wait_for_everyone()
    released = datasets.load_from_disk(str(folder))
    _check_reuse(released, dataset, pipeline, folder)
    return released
