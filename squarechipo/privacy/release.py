"""The one dataset-level release: every path that turns raw labels into released ones goes through here.

:func:`release_dataset` takes rows and a measurement (:mod:`squarechipo.privacy.measurements`) and
returns the released rows with the ledger extended by one release:

- **preference pairs** (prompt/chosen/rejected, any TRL format): the stored orientation *is* the label
 . The released label decides whether chosen and rejected are swapped, so no label column
  exists that could leak the raw one. A measurement with a prior (RRWithPrior, LP-2ST's stage 2) sees
  each pair in its canonical, label-free order (:func:`canonical_pairs`) and marks the rows released from
  the prior in the public column ``label_from_prior``. Only ``prompt``, ``chosen``, ``rejected`` and the columns
  the caller declares public survive: a column that can carry the label (scores, ratings, ``messages`` holding
  the chosen answer, a "shown first" flag) is dropped and named in the log and the ledger, and any other column is
  refused until it is declared public (``public_columns``) or removed;
- **best-of-K rows** (prompt/responses/best, :mod:`squarechipo.data.kary`): the raw ``best`` column is
  removed; ``released_best`` or ``released_subset``, the analyzer weights ``label_weights`` and, for
  RRWithPrior, ``label_from_prior`` are added.

The released dataset is built from fresh Arrow arrays: no index column, no cache file of the input, no
record of which rows were swapped. :func:`release_once` makes the release once per output folder: on the
main process, saved with its ledger, and reused by every rank and every re-run after checking that it was
made from the same rows with the same mechanism, so no fresh noise is ever drawn on a re-run.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
from pathlib import Path

import datasets
import filelock
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from squarechipo.data import metadata
from squarechipo.data.fingerprint import (
    encode_row_set,
    fingerprint_of,
    preference_fingerprint,
    released_row_hashes,
    row_hashes,
)
from squarechipo.data.integrity import MARKER, marker_record
from squarechipo.data.kary import validate_kary
from squarechipo.data.loading import load_data_file, load_saved_folder
from squarechipo.data.validation import validate_preference_dataset
from squarechipo.privacy.ledger import PrivacyLedger, extend_ledger, get_ledger, with_ledger
from squarechipo.privacy.measurements import FIXED_PREFERENCES, LabelPipeline, Measurement
from squarechipo.privacy.registry import EarlierReleases, earlier_releases, record_release

__all__ = [
    "FROM_PRIOR_COLUMN",
    "canonical_first_is_chosen",
    "canonical_pairs",
    "combine_parts",
    "load_privatized",
    "load_release",
    "release_dataset",
    "release_once",
    "save_privatized",
    "save_release",
]

logger = logging.getLogger("squarechipo")

#: Public per-row flag: the released label is the prior's argmax (k* = 1).
FROM_PRIOR_COLUMN = "label_from_prior"
#: The columns a pair release always keeps: the released label is their order.
PAIR_COLUMNS = ("prompt", "chosen", "rejected")
#: Column names that can carry the label (a score or rating per response, a preference or winner, a conversation
#: ending in the chosen answer, which response was shown first): dropped by a release, never public.
LABEL_CARRYING = re.compile(r"score|rating|label|prefer|winner|shown_first|messages|chosen|rejected", re.IGNORECASE)


def _column_policy(columns: list[str], public_columns) -> tuple[list[str], dict[str, str]]:
    """(public columns kept, label-carrying columns dropped with why); raises for undeclared columns."""
    public = list(public_columns or ())
    extra = [c for c in columns if c not in PAIR_COLUMNS and c != FROM_PRIOR_COLUMN]
    carrying = [c for c in extra if LABEL_CARRYING.search(c)]
    bad_public = [c for c in public if c in carrying]
    if bad_public:
        raise ValueError(
            f"columns {bad_public} can carry the label (their name says score, rating, label, preference, "
            "messages, ...), so they cannot be public: remove them from public_columns; the release drops them."
        )
    unknown = [c for c in extra if c not in carrying and c not in public]
    if unknown:
        raise ValueError(
            f"columns {unknown} are neither prompt/chosen/rejected nor declared public. A column kept beside "
            "released labels must not depend on the raw label: list the label-free ones in public_columns "
            "(label_public_columns in a config), or remove them (dataset.remove_columns)."
        )
    # A declared column the rows do not have keeps nothing: one config can serve data with and without it.
    return [c for c in public if c in columns], {c: "can carry the label" for c in carrying}


def _key(response) -> str:
    return hashlib.sha256(json.dumps(response, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


def canonical_first_is_chosen(dataset: datasets.Dataset) -> np.ndarray:
    """True where the canonical first response u (smaller hash) is the stored ``chosen``. Private: it is the label."""
    return np.array([_key(c) <= _key(r) for c, r in zip(dataset["chosen"], dataset["rejected"])], dtype=bool)


def canonical_pairs(dataset: datasets.Dataset) -> datasets.Dataset:
    """prompt / chosen = u / rejected = v in the canonical, label-free order (for computing a prior)."""
    first = canonical_first_is_chosen(dataset)
    u = [c if f else r for c, r, f in zip(dataset["chosen"], dataset["rejected"], first)]
    v = [r if f else c for c, r, f in zip(dataset["chosen"], dataset["rejected"], first)]
    return datasets.Dataset.from_dict({"prompt": dataset["prompt"], "chosen": u, "rejected": v})


def _response_lengths(column: pa.ChunkedArray, conversational: bool) -> np.ndarray:
    if not conversational:
        return pc.utf8_length(column).to_numpy(zero_copy_only=False)
    return np.array(
        [sum(len(m.get("content") or "") for m in conversation) for conversation in column.to_pylist()],
        dtype=np.int64,
    )


def _target_mask(table: pa.Table, pipeline: LabelPipeline) -> np.ndarray:
    name = pipeline.target_column
    if name is None:
        raise ValueError(
            "adversary='targeted' needs target_column (and target_values unless the column is boolean), "
            "e.g. target_column='category', target_values=['Investments']."
        )
    if name not in table.column_names:
        raise ValueError(f"target_column {name!r} is not a column of the dataset (columns: {table.column_names}).")
    column = table[name]
    if pipeline.target_values is None:
        if not pa.types.is_boolean(column.type):
            raise ValueError(
                f"target_column {name!r} has type {column.type}; give target_values, or use a boolean column."
            )
        mask = column.fill_null(False)
    else:
        mask = pc.is_in(column, value_set=pa.array(list(pipeline.target_values), type=column.type))
    return mask.to_numpy(zero_copy_only=False).astype(bool)


def _fixed_labels(table: pa.Table, pipeline: LabelPipeline, conversational: bool) -> np.ndarray:
    rule = pipeline.fixed_preference
    if rule in FIXED_PREFERENCES:
        chosen = _response_lengths(table["chosen"], conversational)
        rejected = _response_lengths(table["rejected"], conversational)
        # Label True = the adversary prefers `rejected`; on equal lengths it keeps `chosen`.
        return rejected > chosen if rule == "longer" else rejected < chosen
    if rule not in table.column_names:
        raise ValueError(
            f"fixed_preference must be one of {FIXED_PREFERENCES} or a boolean column name (got {rule!r})."
        )
    column = table[rule]
    if not pa.types.is_boolean(column.type):
        raise ValueError(f"fixed_preference column {rule!r} must be boolean (True = prefers rejected).")
    return column.fill_null(False).to_numpy(zero_copy_only=False).astype(bool)


def _pair_context(table: pa.Table, mechanism: Measurement, conversational: bool) -> dict:
    """What the targeted and fixed adversaries need from the rows (public columns and lengths)."""
    if not (isinstance(mechanism, LabelPipeline) and mechanism.is_corrupted):
        return {}
    if mechanism.adversary == "targeted":
        return {"target": _target_mask(table, mechanism)}
    if mechanism.adversary == "fixed":
        return {"fixed_labels": _fixed_labels(table, mechanism, conversational)}
    return {}


def _release_pairs(dataset: datasets.Dataset, mechanism: Measurement, rng: np.random.Generator, public_columns):
    """(table of the kept columns with chosen/rejected as released, 2, public outcome) for preference pairs."""
    _, report = validate_preference_dataset(dataset)
    public, dropped = _column_policy(dataset.column_names, public_columns)
    table = dataset.with_format("arrow")[:]
    n = table.num_rows
    if mechanism.canonical_pairs:
        # Label 1 = the canonical first response u is preferred; the prior is given in that order.
        first_is_chosen = canonical_first_is_chosen(dataset)
        result = mechanism.release_labels(first_is_chosen.astype(np.int64), 2, rng)
        swap = result.labels.astype(bool) != first_is_chosen
        del first_is_chosen
    else:
        # Label 1 = the stored rejected response is preferred: the truth is 0 on every raw row.
        context = _pair_context(table, mechanism, report.format.conversational)
        result = mechanism.release_labels(np.zeros(n, dtype=bool), 2, rng, **context)
        swap = result.labels
    swap = pa.array(swap)
    chosen, rejected = table["chosen"], table["rejected"]
    table = table.set_column(table.schema.get_field_index("chosen"), "chosen", pc.if_else(swap, rejected, chosen))
    table = table.set_column(table.schema.get_field_index("rejected"), "rejected", pc.if_else(swap, chosen, rejected))
    if result.from_prior is not None:
        table = table.append_column(FROM_PRIOR_COLUMN, pa.array(result.from_prior))
    table = table.select([c for c in table.column_names if c in PAIR_COLUMNS or c in public or c == FROM_PRIOR_COLUMN])
    if dropped:
        logger.warning("the release dropped %d label-carrying column(s): %s", len(dropped), sorted(dropped))
    return _own_buffers(table), 2, {**result.outcome, "public_columns": public, "dropped_columns": dropped}


def _own_buffers(table: pa.Table) -> pa.Table:
    """A copy of ``table`` in buffers of its own. The input's columns are slices of the caller's table, whose buffers
    run on into rows that are not released (the next row's id, category or prompt bytes): saved as they are, those
    bytes would be written into the release's Arrow files."""
    return table.take(pa.array(np.arange(table.num_rows, dtype=np.int64))).combine_chunks()


def _release_best_of_k(dataset: datasets.Dataset, mechanism: Measurement, rng: np.random.Generator, public_columns):
    """(table without ``best`` and with the released columns, K, public outcome) for best-of-K rows."""
    k = validate_kary(dataset)
    best = np.asarray(dataset["best"], dtype=np.int64)
    result = mechanism.release_labels(best, k, rng)
    del best
    table = dataset.remove_columns(["best"]).with_format("arrow")[:]
    table = table.append_column(mechanism.kary_column, pa.array(result.labels.tolist()))
    if result.from_prior is not None:
        table = table.append_column(FROM_PRIOR_COLUMN, pa.array(result.from_prior))
    # RRWithPrior has no unbiased linear analyzer: its weights are the one-hot release itself.
    weights = result.weights if result.weights is not None else np.eye(k)[result.labels]
    table = table.append_column("label_weights", pa.array(weights.tolist()))
    return _own_buffers(table), k, result.outcome


def _check_not_released(existing: PrivacyLedger | None, mechanism: Measurement, compose: bool) -> None:
    if existing is None or not existing.releases:
        return
    if not isinstance(mechanism, LabelPipeline):
        raise ValueError(
            f"dataset was already privatized: its labels were already released (total epsilon "
            f"{existing.total_epsilon}). {mechanism.name} must see the "
            "raw labels, each queried once. Releasing again would spend more ε on the same labels; release the "
            "raw rows instead."
        )
    if not compose:
        raise ValueError(
            f"dataset was already privatized (ledger: total epsilon {existing.total_epsilon}, "
            f"{len(existing.releases)} release(s)): its labels are the released ones. Privatizing them again is "
            "post-processing of that release: it spends nothing on the raw labels, which keep the first "
            "release's ε, but it adds noise that cannot be removed and changes the flip rate the loss debiases "
            "for. Reuse the released data as it is. If you do want the extra noise, pass compose=True: the "
            "ledger adds the release, reports the sum of the ε (valid but loose) and the tight ε of the stored "
            "labels (stored_labels_epsilon). To release the raw labels a second time, privatize the raw rows."
        )


def _release_fields(mechanism: Measurement, n_rows: int, num_labels: int, outcome: dict, **fields) -> dict:
    """What the ledger records of this release: the measurement's description and public outcome, never a label."""
    outcome = dict(outcome)
    columns = {key: outcome.pop(key) for key in ("public_columns", "dropped_columns") if key in outcome}
    pipeline = {**mechanism.to_dict(), **({"num_labels": num_labels} if num_labels != 2 else {}), **outcome}
    return {**mechanism.ledger_fields(), "n_rows": n_rows, "pipeline": pipeline, **columns, **fields}


def _refuse_duplicates(repeats: int, n_rows: int) -> None:
    """Copies of one pair would each get their own noise, and their majority would give the label back."""
    if repeats:
        raise ValueError(
            f"{repeats} of {n_rows} rows repeat another row's prompt and responses. Randomized response would "
            "draw independent noise for each copy, and together the copies reveal the label (their majority), so "
            "the release refuses them: keep one row per pair first, e.g. with "
            "squarechipo.data.validation.drop_duplicate_rows(dataset)."
        )


def release_dataset(
    dataset: datasets.Dataset,
    mechanism: Measurement,
    *,
    seed: int | None = None,
    compose: bool = False,
    part: str | None = None,
    public_columns: list[str] | tuple[str, ...] = (),
    rerelease: bool = False,
) -> datasets.Dataset:
    """Release a dataset's labels through ``mechanism`` once, and record it in the ledger.

    Args:
        dataset: raw preference pairs whose ``chosen`` is the true preferred response, in any TRL format
            (validated first; invalid rows raise — drop them explicitly with
            ``validate_preference_dataset(..., drop_invalid=True)``), or raw best-of-K rows.
        mechanism: a :class:`~squarechipo.privacy.measurements.Measurement` (``LabelPipeline`` for ε, α,
            adversary and order; ``KaryRR``, ``SubsetMechanism`` or ``RRWithPrior``).
        seed: ``None`` (default) draws from OS entropy: use this for real labels. An integer is for
            simulation and makes the noise reproducible by anyone who knows it; the ledger records that
            a fixed seed was used, never the seed.
        compose: (``LabelPipeline`` only) the dataset already carries a ledger and you mean to add noise
            to its released labels. That is post-processing of the earlier release (the raw labels keep
            its ε); the ledger records the new release, sums the ε (a valid, loose bound) and gives the
            tight ε of the stored labels (``stored_labels_epsilon``).
        part: the name of the disjoint part of a larger dataset these rows are (multi-stage training,
            Ghazi et al. 2021 (label DP)); releases on disjoint parts compose in parallel in the ledger.
        public_columns: (pairs) columns besides prompt/chosen/rejected that do not depend on the label (an id, a
            category): kept. Label-carrying columns are dropped and named in the ledger; any other column raises.
        rerelease: raw rows released before on this machine (:mod:`squarechipo.privacy.registry`) are refused
            unless this is True; then the ledger adds the earlier releases' ε (basic composition) to its total.

    Returns:
        A new dataset with the kept columns and the ledger attached. Rows that repeat another row's prompt and
        responses, retyped copies included, raise (see :func:`squarechipo.data.validation.duplicate_rows`).
    """
    released, _, register = _release(
        dataset, mechanism, seed=seed, compose=compose, part=part, public_columns=public_columns, rerelease=rerelease
    )
    register()
    return released


def _earlier(hashes: list[bytes], mechanism: Measurement, rerelease: bool) -> EarlierReleases:
    """The composed ε of earlier releases of these rows (0 for none); refuses them unless ``rerelease``."""
    earlier = earlier_releases(hashes)
    if earlier.rows and not rerelease:
        raise ValueError(
            f"{earlier.describe()} on this machine. Releasing the same rows again draws fresh noise, and the "
            f"copies together reveal the labels. Reuse the earlier release (its folder or file), or pass "
            f"rerelease=True (label_rerelease: true in a config): the ledger and the card then state ε "
            f"{earlier.epsilon + mechanism.epsilon:g}, the basic composition of all releases of these rows."
        )
    return earlier


def _release(dataset, mechanism, *, seed, compose, part, public_columns, rerelease=False):
    """(the released dataset, its ledger's digest, a callable that enters it into this machine's registry of
    releases): check the input, draw the noise once, build the ledger once."""
    if isinstance(dataset, datasets.DatasetDict):
        raise ValueError(
            "got a DatasetDict; release the split you train on, e.g. release_dataset(ds['train'], mechanism)."
        )
    if not isinstance(mechanism, Measurement):
        raise TypeError(
            f"mechanism must be a squarechipo.privacy.measurements.Measurement, e.g. LabelPipeline(epsilon=1.0) "
            f"(got {type(mechanism).__name__})."
        )
    existing = get_ledger(dataset)
    _check_not_released(existing, mechanism, compose)
    hashes = row_hashes(dataset)
    fingerprint, repeats = fingerprint_of(hashes)
    _refuse_duplicates(repeats, len(dataset))
    # Raw rows released with OS entropy are what the registry counts (a fixed seed is a simulation).
    counted = existing is None and seed is None and mechanism.epsilon is not None
    earlier = _earlier(hashes, mechanism, rerelease) if counted else None
    rng = np.random.default_rng(seed)
    best_of_k = "responses" in dataset.column_names or "best" in dataset.column_names
    release_rows = _release_best_of_k if best_of_k else _release_pairs
    table, num_labels, outcome = release_rows(dataset, mechanism, rng, public_columns)
    del rng
    fields = _release_fields(mechanism, len(dataset), num_labels, outcome, fixed_seed=seed is not None)
    if earlier is not None:
        fields.update(earlier_epsilon=earlier.epsilon, earlier_releases=len(earlier.releases))
    fields["row_set"] = encode_row_set(released_row_hashes(datasets.Dataset(table)))
    info, digest = extend_ledger(dataset.info, existing, **fields, data_fingerprint=fingerprint, part=part)
    # The released columns differ for best-of-K and prior-guided rows: the features follow the new table.
    info.features = datasets.Features.from_arrow_schema(table.schema)
    released = datasets.Dataset(table, info=info, split=dataset.split)
    logger.info("released %d rows through %s", len(released), mechanism.to_dict())
    made = get_ledger(released).releases[-1].created_at

    def register() -> None:
        if counted:
            record_release(digest, hashes, mechanism.epsilon, made)

    return released, digest, register


def combine_parts(first: datasets.Dataset, second: datasets.Dataset) -> datasets.Dataset:
    """Concatenate two released disjoint parts; the ledger lists both releases (parallel composition)."""
    ledgers = [get_ledger(part) for part in (first, second)]
    if any(ledger is None for ledger in ledgers):
        raise ValueError("both parts must be released datasets with a privacy ledger.")
    parts = [r.part for ledger in ledgers for r in ledger.releases]
    if None in parts or len(set(parts)) != len(parts):
        raise ValueError(f"each part's releases must name a distinct part (got {parts}); pass part=… when releasing.")
    parts_data = [
        p if FROM_PRIOR_COLUMN in p.column_names else p.add_column(FROM_PRIOR_COLUMN, [False] * len(p))
        for p in (first, second)
    ]
    combined = datasets.concatenate_datasets([parts_data[0].cast(parts_data[1].features), parts_data[1]])
    ledger = PrivacyLedger(releases=ledgers[0].releases + ledgers[1].releases)
    return with_ledger(combined, ledger)


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


def _staging(folder: Path) -> Path:
    return folder.parent / f".{folder.name}.staging"


def _finish_interrupted(folder: Path) -> None:
    """Complete a release cut off between its save and its rename, or refuse one cut off earlier."""
    staging = _staging(folder)
    if not staging.exists():
        return
    if (staging / MARKER).is_file():
        if folder.exists():
            shutil.rmtree(staging)  # the rename happened after all: the staged copy is a leftover
        else:
            os.replace(staging, folder)
            logger.warning("completed an interrupted release from its staged copy: %s", folder)
        return
    raise ValueError(
        f"an interrupted release left {staging} unfinished (it has no {MARKER}). No run trained on it, but its noise "
        f"was drawn from the raw labels, and squarechipo never draws fresh noise silently. To release again, delete "
        f"{staging} yourself; the new release draws new noise, which is sound only because nothing of the "
        "interrupted one was read."
    )


def save_release(released: datasets.Dataset, folder: str | os.PathLike) -> Path:
    """Save a release once and atomically: ``save_to_disk`` into a staging folder, the marker (the digests of the
    ledger and the rows) last, then a rename. A reader never sees half a release."""
    ledger = get_ledger(released, str(folder))
    if ledger is None:
        raise ValueError("only a released dataset (with its privacy ledger) is saved as a release.")
    return _write(released, Path(folder), marker_record(released, ledger.digest))


def _write(data: datasets.Dataset | datasets.DatasetDict, folder: Path, marker: dict, before_rename=None) -> Path:
    staging = _staging(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    data.save_to_disk(str(staging))
    metadata.write_folder_marker(staging, marker)
    if before_rename is not None:
        # A staged copy with its marker is completed by the next run (_finish_interrupted): it counts from here.
        before_rename()
    os.replace(staging, folder)
    return folder


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
            raise ValueError("no split has a privacy ledger; privatize one first (squarechipo.privacy.release).")
        splits = {n: marker_record(data[n], ledger.digest) for n, ledger in ledgers.items() if ledger is not None}
        return _write(data, path, {"splits": splits})
    ledger = get_ledger(data, str(path))
    if ledger is None:
        raise ValueError("dataset has no privacy ledger; privatize it first (squarechipo.privacy.release).")
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


def release_once(
    dataset: datasets.Dataset,
    pipeline: Measurement,
    folder: str | os.PathLike,
    *,
    seed: int | None = None,
    state=None,
    part: str | None = None,
    public_columns: list[str] | tuple[str, ...] = (),
    rerelease: bool = False,
) -> datasets.Dataset:
    """Return the released version of ``dataset``: privatize and save it the first time, load it after.

    Args:
        dataset: the raw split (``chosen`` = the true preference).
        pipeline: the measurement (a label pipeline, or ``RRWithPrior`` for LP-2ST's part 2).
        folder: where the release is saved (:func:`save_release`; the ledger travels inside).
        seed: ``None`` = OS entropy (real data); an integer for simulation only.
        state: an ``accelerate.PartialState`` in distributed runs; the main process writes and the
            others wait, then load. ``None`` = a single process.
        part: the disjoint part these rows are (multi-stage training; see ``release_dataset``).
        public_columns: columns kept beside the released labels (see ``release_dataset``).
        rerelease: allow rows released before into another folder or file (see ``release_dataset``).

    One release at a time per folder (a file lock): a second run waits, then reuses it. An interrupted release is
    completed from its staged copy or refused (:func:`_finish_interrupted`); never silently drawn again.
    """
    folder = Path(folder)
    released = None
    if state is None or state.is_main_process:
        with _lock(folder):
            _finish_interrupted(folder)
            if not (folder / "dataset_info.json").exists():
                _refuse_foreign(folder)
                released, digest, register = _release(
                    dataset,
                    pipeline,
                    seed=seed,
                    compose=False,
                    part=part,
                    public_columns=public_columns,
                    rerelease=rerelease,
                )
                _write(released, folder, marker_record(released, digest), before_rename=register)
                logger.warning("released %d training rows through %s to %s", len(released), pipeline.to_dict(), folder)
    if state is not None:
        state.wait_for_everyone()
        _receive_if_unseen(folder, state)
    if released is None:  # an earlier release (or the main process's): checked before it is used
        released, ledger = _load(folder)
        _check_reuse(ledger, dataset, pipeline, folder)
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
