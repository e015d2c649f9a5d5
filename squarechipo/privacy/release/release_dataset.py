"""The one release call: :func:`release_dataset`.

In memory it runs the release transaction (:mod:`squarechipo.privacy.release.transaction`: admit, draw, register in
the registry of releases, seal); with a folder, the folder's steps around it, once per folder
(:mod:`squarechipo.privacy.release.folder`: lock, stage, register, seal, rename; reuse of a saved release, completion
of one cut off). :mod:`squarechipo.privacy.release.saved` stores released rows elsewhere.
"""

from __future__ import annotations

import os
from pathlib import Path

import datasets

from squarechipo.data.label_roles import releases_labels
from squarechipo.privacy.mechanisms.measurements import Measurement
from squarechipo.privacy.release.folder import once_per_folder
from squarechipo.privacy.release.transaction import ReleaseOptions, release_in_memory

__all__ = ["release_dataset"]


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
    return once_per_folder(Path(folder), dataset, mechanism, options, state)
