"""A release's rows: how raw rows become released ones through a measurement (the draw step of
:mod:`squarechipo.privacy.release.transaction`, which owns the release and the ledger).

:func:`draw_rows` takes rows and a measurement (:mod:`squarechipo.privacy.mechanisms.measurements`) and returns the
released rows:

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

The released dataset is built from fresh Arrow arrays (buffers of its own): no index column, no cache file of the
input, no byte of an unreleased row, no record of which rows were swapped.
"""

from __future__ import annotations

import hashlib
import json
import logging

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from squarechipo.data.columns import FROM_PRIOR_COLUMN, LABEL_CARRYING, PAIR_COLUMNS
from squarechipo.data.fingerprint import row_hashes
from squarechipo.data.kary import validate_kary
from squarechipo.data.label_roles import label_free, releases_labels
from squarechipo.data.validation import validate_preference_dataset
from squarechipo.privacy.ledger.binding import _derive, get_ledger
from squarechipo.privacy.ledger.ledger import PrivacyLedger
from squarechipo.privacy.mechanisms.measurements import FIXED_PREFERENCES, LabelPipeline, Measurement

__all__ = [
    "canonical_first_is_chosen",
    "canonical_pairs",
    "combine_parts",
    "draw_rows",
]

logger = logging.getLogger("squarechipo")


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


@releases_labels("the mechanism's own input (the raw label in the canonical order), consumed inside a release")
def canonical_first_is_chosen(dataset: datasets.Dataset) -> np.ndarray:
    """True where the canonical first response u (smaller hash) is the stored ``chosen``. Private: it is the label."""
    return np.array([_key(c) <= _key(r) for c, r in zip(dataset["chosen"], dataset["rejected"])], dtype=bool)


@label_free("puts each pair in a label-free order")
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
    released = {
        "chosen": lambda: pc.if_else(swap, rejected, chosen),
        "rejected": lambda: pc.if_else(swap, chosen, rejected),
    }
    kept = [c for c in table.column_names if c in PAIR_COLUMNS or c in public]
    # Every column written once into buffers of its own (if_else and take allocate their output): a copy of the
    # whole table on top would double the release's peak memory.
    columns = {name: released[name]() if name in released else _own_column(table[name]) for name in kept}
    if result.from_prior is not None:
        columns[FROM_PRIOR_COLUMN] = pa.array(result.from_prior)
    out = pa.table(columns).replace_schema_metadata(table.schema.metadata)
    if dropped:
        logger.warning("the release dropped %d label-carrying column(s): %s", len(dropped), sorted(dropped))
    return out, 2, {**result.outcome, "public_columns": public, "dropped_columns": dropped}


def _own_column(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """A copy of ``column`` in buffers of its own. The input's columns are slices of the caller's table, whose buffers
    run on into rows that are not released (the next row's id, category or prompt bytes): saved as they are, those
    bytes would be written into the release's Arrow files."""
    return column.take(pa.array(np.arange(len(column), dtype=np.int64)))


def _own_buffers(table: pa.Table) -> pa.Table:
    """``table`` copied column by column (:func:`_own_column`)."""
    own = pa.table({name: _own_column(table[name]) for name in table.column_names})
    return own.replace_schema_metadata(table.schema.metadata)


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


def _release_fields(mechanism: Measurement, n_rows: int, num_labels: int, outcome: dict, **fields) -> dict:
    """What the ledger records of this release: the measurement's description and public outcome, never a label."""
    outcome = dict(outcome)
    columns = {key: outcome.pop(key) for key in ("public_columns", "dropped_columns") if key in outcome}
    pipeline = {**mechanism.to_dict(), **({"num_labels": num_labels} if num_labels != 2 else {}), **outcome}
    return {**mechanism.ledger_fields(), "n_rows": n_rows, "pipeline": pipeline, **columns, **fields}


@releases_labels("the noise itself: the measurement stands between the raw labels and the rows it returns")
def draw_rows(
    dataset: datasets.Dataset, mechanism: Measurement, seed: int | None, public_columns
) -> tuple[pa.Table, dict]:
    """(the released rows as a table of buffers of its own, what the ledger records of the release): the noise drawn
    once, from OS entropy (``seed`` None) or a seed (simulation)."""
    rng = np.random.default_rng(seed)
    best_of_k = "responses" in dataset.column_names or "best" in dataset.column_names
    release_rows = _release_best_of_k if best_of_k else _release_pairs
    table, num_labels, outcome = release_rows(dataset, mechanism, rng, public_columns)
    del rng
    return table, _release_fields(mechanism, len(dataset), num_labels, outcome, fixed_seed=seed is not None)


def _check_part(ledger: PrivacyLedger | None, name: str) -> PrivacyLedger:
    """A part that may be combined: a release (not derived rows), signed, and entered in a registry of releases."""
    if ledger is None:
        raise ValueError(f"the {name} part carries no privacy ledger: both parts must be releases.")
    if ledger.derivation is not None:
        raise ValueError(f"the {name} part holds rows derived from a release ({ledger.derivation.get('transform')}).")
    if ledger.seal is None or not ledger.seal.signed:
        raise ValueError(
            f"the {name} part's ledger carries an {ledger.seal.describe() if ledger.seal else 'unchecked seal'}: only "
            "signed releases are combined (anyone can write an unsigned ledger). Release the part with this version."
        )
    first = ledger.releases[0]  # the release of the raw labels; later ones are post-processing (compose=True)
    if first.randomness == "os_entropy" and first.epsilon is not None and first.registry_id is None:
        raise ValueError(
            f"the {name} part's release was never entered in a registry of releases, so its rows may have been "
            "released again elsewhere. Release the part through release_dataset."
        )
    return ledger


@label_free("joins released parts (each checked: a signed, registered release; the two disjoint)")
def combine_parts(first: datasets.Dataset, second: datasets.Dataset) -> datasets.Dataset:
    """Concatenate two released disjoint parts; the ledger lists both releases (parallel composition).

    Each part must be a signed release entered in a registry of releases, and no comparison may be in both (their
    noise would add up, and parallel composition would understate ε). The combined rows are derived here, in this
    process, from the rows just checked (:func:`squarechipo.privacy.ledger.binding.derive`)."""
    ledgers = [
        _check_part(get_ledger(part, f"the {name} part"), name)
        for part, name in ((first, "first"), (second, "second"))
    ]
    parts = [r.part for ledger in ledgers for r in ledger.releases]
    if None in parts or len(set(parts)) != len(parts):
        raise ValueError(f"each part's releases must name a distinct part (got {parts}); pass part=… when releasing.")
    shared = set(row_hashes(first)) & set(row_hashes(second))
    if shared:
        raise ValueError(
            f"the two parts share {len(shared)} comparison(s): parts must be disjoint (each label released once). "
            "Release disjoint rows as the parts (split the raw rows first, e.g. with train_test_split)."
        )
    tables = [
        p.with_format("arrow")[:]
        if FROM_PRIOR_COLUMN in p.column_names
        else p.with_format("arrow")[:].append_column(FROM_PRIOR_COLUMN, pa.array([False] * len(p)))
        for p in (first, second)
    ]
    only = [sorted(set(a.column_names) - set(b.column_names)) for a, b in ((tables[0], tables[1]), tables[::-1])]
    if only[0] or only[1]:
        raise ValueError(
            f"the parts have different columns (only the first has {only[0]}, only the second {only[1]}): combining "
            "them would drop those columns. Release both parts with the same public_columns, or remove the columns "
            "from the raw rows before releasing."
        )
    joined = pa.concat_tables([tables[0].select(tables[1].column_names).cast(tables[1].schema), tables[1]])
    return _derive(ledgers, datasets.Dataset(joined), "combine_parts")
