"""Apply a label pipeline to a preference :class:`datasets.Dataset` by swapping chosen/rejected.

The stored orientation *is* the label (DESIGN.md §1): after privatization every row reads
"chosen ≻ rejected" as observed, so no label column exists that could leak the raw one. The
returned dataset is built from fresh Arrow arrays — no index column, no cache file of the input,
no record of which rows were swapped — and carries a :class:`~squarechipo.privacy.ledger.PrivacyLedger`.
"""

from __future__ import annotations

import dataclasses
import logging

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from squarechipo.data.fingerprint import preference_fingerprint
from squarechipo.data.validation import validate_preference_dataset
from squarechipo.privacy.ledger import PrivacyLedger, Release, _info_with_ledger, get_ledger
from squarechipo.privacy.pipeline import FIXED_PREFERENCES, LabelPipeline

__all__ = ["privatize_dataset"]

logger = logging.getLogger("squarechipo")


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


def privatize_dataset(
    dataset: datasets.Dataset,
    pipeline: LabelPipeline,
    *,
    seed: int | None = None,
    compose: bool = False,
    part: str | None = None,
) -> datasets.Dataset:
    """Release a dataset's labels through ``pipeline`` once, and record it in the ledger.

    Args:
        dataset: preference rows whose ``chosen`` is the true preferred response, in any TRL
            format (validated first; invalid rows raise — drop them explicitly with
            ``validate_preference_dataset(..., drop_invalid=True)``).
        pipeline: the mechanism (ε, α, adversary, order).
        seed: ``None`` (default) draws from OS entropy: use this for real labels. An integer is
            for simulation and makes the noise reproducible by anyone who knows it; the ledger
            records that a fixed seed was used, never the seed.
        compose: the dataset already carries a ledger and you mean to add noise to its released
            labels. That is post-processing of the earlier release (the raw labels keep its ε); the
            ledger records the new release, sums the ε (a valid, loose bound) and gives the tight ε
            of the stored labels (``stored_labels_epsilon``).
        part: the name of the disjoint part of a larger dataset these rows are (multi-stage
            training, 001); releases on disjoint parts compose in parallel in the ledger.

    Returns:
        A new dataset with every other column unchanged and the ledger attached.
    """
    if isinstance(dataset, datasets.DatasetDict):
        raise ValueError(
            "got a DatasetDict; privatize the split you train on, e.g. privatize_dataset(ds['train'], ...)."
        )
    if not isinstance(pipeline, LabelPipeline):
        raise TypeError(f"pipeline must be a LabelPipeline (got {type(pipeline).__name__}).")
    existing = get_ledger(dataset)
    if existing is not None and existing.releases and not compose:
        raise ValueError(
            f"dataset was already privatized (ledger: total epsilon {existing.total_epsilon}, "
            f"{len(existing.releases)} release(s)): its labels are the released ones. Privatizing them again is "
            "post-processing of that release: it spends nothing on the raw labels, which keep the first "
            "release's ε, but it adds noise that cannot be removed and changes the flip rate the loss debiases "
            "for. Reuse the released data as it is. If you do want the extra noise, pass compose=True: the "
            "ledger adds the release, reports the sum of the ε (valid but loose) and the tight ε of the stored "
            "labels (stored_labels_epsilon). To release the raw labels a second time, privatize the raw rows."
        )
    _, report = validate_preference_dataset(dataset)
    table = dataset.with_format("arrow")[:]
    n = table.num_rows
    rng = np.random.default_rng(seed)
    target = _target_mask(table, pipeline) if pipeline.is_corrupted and pipeline.adversary == "targeted" else None
    fixed = (
        _fixed_labels(table, pipeline, report.format.conversational)
        if pipeline.is_corrupted and pipeline.adversary == "fixed"
        else None
    )
    swap = pa.array(pipeline.apply(np.zeros(n, dtype=bool), rng, target=target, fixed_labels=fixed))
    chosen, rejected = table["chosen"], table["rejected"]
    table = table.set_column(table.schema.get_field_index("chosen"), "chosen", pc.if_else(swap, rejected, chosen))
    table = table.set_column(table.schema.get_field_index("rejected"), "rejected", pc.if_else(swap, chosen, rejected))
    del swap, chosen, rejected, rng
    release = Release.from_pipeline(
        pipeline, n, fixed_seed=seed is not None, data_fingerprint=preference_fingerprint(dataset)
    )
    ledger = (existing or PrivacyLedger()).with_release(dataclasses.replace(release, part=part))
    info = _info_with_ledger(dataset.info, ledger)
    released = datasets.Dataset(table, info=info, split=dataset.split)
    logger.info("released %d rows through %s (total epsilon %s)", n, pipeline.to_dict(), ledger.total_epsilon)
    return released
