"""A ledger bound to its rows: every reader checks that a dataset's rows are, column for column, rows it released.

A release records the set of rows it released (:attr:`squarechipo.privacy.ledger.records.Release.row_set`: 4-byte
prefixes of each released row's hash over every column, byte for byte,
:func:`squarechipo.data.fingerprint.exact_row_hashes`) and the columns that hash covers (``row_columns``).
:func:`get_ledger` checks every dataset it reads a ledger from.

The invariant: a ledger is valid only on rows whose every column equals what the release wrote, up to selection,
reordering and repetition of whole rows (selecting, shuffling, filtering, splitting, saving and loading). Any other
change voids it: an added, removed, renamed or edited column, an edited text (upper case and look-alike letters
included), a changed label, an added row. Nothing a caller passes in can re-bind a ledger: the only derivations
that carry one over are the library's own fixed transforms of verified rows (:func:`pairwise_rows`,
:func:`squarechipo.privacy.release.rows.combine_parts`), which check the input's ledger first.
"""

from __future__ import annotations

from dataclasses import replace

import datasets
import numpy as np

from squarechipo.data import metadata
from squarechipo.data.fingerprint import (
    encode_row_set,
    exact_row_hashes,
    preference_fingerprint,
    released_row_hashes,
    rows_outside,
)
from squarechipo.data.label_roles import label_free
from squarechipo.data.text import pairwise_row
from squarechipo.privacy.ledger.records import IntegrityError, PrivacyLedger, with_ledger

__all__ = ["check_rows", "get_ledger", "pairwise_rows"]


#: Ledgers already matched to their rows, by (the dataset's fingerprint, the ledger's digest): ``datasets`` gives a
#: dataset a new fingerprint with every operation that changes it.
_BOUND: dict[tuple[str, str], bool] = {}


@label_free("reads and checks the ledger (the rule's own test)")
def get_ledger(dataset, where: str = "dataset") -> PrivacyLedger | None:
    """The ledger a dataset carries, its seal checked and its rows matched to the rows it released; None for data
    that was never privatized here.

    Raises:
        IntegrityError: when the ledger was edited, is not valid, or does not describe these rows (rows added, edited
            or relabelled after the release, a column added, removed or changed; rows that cannot be checked: a
            streamed or pre-tokenised dataset).
    """
    block = metadata.read_block(dataset)
    if not block:
        return None
    ledger = PrivacyLedger.from_json(block, where)
    check_rows(ledger, dataset, where)
    return ledger


def _column_change(columns: list[str], bound: list[tuple[str, ...]], where: str) -> IntegrityError:
    released = min(bound, key=lambda c: len(set(c) ^ set(columns)))
    added, removed = sorted(set(columns) - set(released)), sorted(set(released) - set(columns))
    change = "; ".join(
        part for part in (added and f"added {added}", removed and f"removed or renamed {removed}") if part
    )
    return IntegrityError(
        f"{where}: its columns changed after the release ({change}); a privacy ledger covers the rows exactly as "
        f"released, with the columns {list(released)}. A column added beside released labels may carry the raw "
        "ones, so the ledger is void: keep the released columns as they are (remove the added ones with "
        "dataset.remove_columns), and compute anything else from the rows after reading the ledger."
    )


def _outside(ledger: PrivacyLedger, dataset: datasets.Dataset, where: str):
    """Indices of the rows that are in none of the ledger's row sets (an error for changed columns)."""
    sets = ledger.current_row_sets()
    if sets is None:
        if preference_fingerprint(dataset) not in {r.data_fingerprint for r in ledger.releases}:
            raise IntegrityError(
                f"{where}: its privacy ledger was written before ledgers were bound to their rows, and these rows "
                "are not the rows it released. Load the release as saved; a ledger cannot be carried to other rows."
            )
        return None
    columns = sorted(dataset.column_names)
    exact = [row_set for row_set, bound in sets if bound is not None and sorted(bound) == columns]
    legacy = [row_set for row_set, bound in sets if bound is None]
    if not exact and not legacy:
        raise _column_change(columns, [bound for _, bound in sets], where)
    outside = None
    for encoded, hashing in ((exact, exact_row_hashes), (legacy, released_row_hashes)):
        if not encoded:
            continue
        row_hashes = hashing(dataset)
        if row_hashes is None:
            raise IntegrityError(
                f"{where}: these rows hold no prompt/chosen/rejected (or responses) text, so they cannot be matched "
                "to the privacy ledger they carry. Pass the released text rows: the trainers tokenize them."
            )
        found = rows_outside(row_hashes, encoded)
        outside = found if outside is None else np.intersect1d(outside, found)
    return outside


@label_free("compares the rows with the set a ledger released (the rule's own check)")
def check_rows(ledger: PrivacyLedger, dataset, where: str) -> None:
    """Raise :class:`IntegrityError` unless every row of the dataset, column for column, is a row the ledger
    released (see the module's invariant)."""
    if not isinstance(dataset, datasets.Dataset):
        raise IntegrityError(
            f"{where}: a {type(dataset).__name__} carries this privacy ledger, but its rows cannot be read ahead to "
            "check that they are the released ones. Pass the released datasets.Dataset itself (a streamed copy of it "
            "is not checked)."
        )
    key = (getattr(dataset, "_fingerprint", None) or "", ledger.digest)
    if key[0] and _BOUND.get(key):
        return
    outside = _outside(ledger, dataset, where)
    if outside is not None and outside.size:
        shown = ", ".join(str(i) for i in outside[:5]) + (", ..." if outside.size > 5 else "")
        raise IntegrityError(
            f"{where}: {outside.size} of {len(dataset)} rows (row {shown}) are not rows its privacy ledger "
            f"released ({sum(r.n_rows for r in ledger.releases)} released), or their labels or text were changed "
            "after the release. A ledger covers only the rows it released, exactly as written: selecting, shuffling "
            "or splitting them keeps it; adding rows or editing any value does not. Release the added rows on their "
            "own and combine the parts (squarechipo.privacy.combine_parts), or train on the release as it is."
        )
    if key[0]:
        if len(_BOUND) > 256:
            _BOUND.clear()
        _BOUND[key] = True


def _rebind(ledger: PrivacyLedger, rows: datasets.Dataset) -> datasets.Dataset:
    """``rows`` with ``ledger`` bound to them as they are. Only for the library's fixed transforms of rows whose
    ledger was just verified (:func:`pairwise_rows`, ``combine_parts``): never for rows a caller computed."""
    latest = {release.part: i for i, release in enumerate(ledger.releases)}
    row_set, columns = encode_row_set(exact_row_hashes(rows)), sorted(rows.column_names)
    releases = tuple(
        replace(release, row_set=row_set, row_columns=columns) if i in latest.values() else release
        for i, release in enumerate(ledger.releases)
    )
    return with_ledger(rows, PrivacyLedger(releases=releases))


@label_free("a fixed text transform of released rows (their ledger checked first); raw rows stay raw")
def pairwise_rows(dataset: datasets.Dataset, **map_kwargs) -> datasets.Dataset:
    """prompt/chosen/rejected rows → the texts of a pairwise preference model (:func:`squarechipo.data.text.
    pairwise_row`), row by row, in order. A release's ledger is checked, then carried to the derived rows: each is
    computed from one released row by a transform fixed in the library, which is post-processing of the release."""
    missing = {"prompt", "chosen", "rejected"} - set(dataset.column_names)
    if missing:
        raise ValueError(
            f"a preference-model dataset needs prompt/chosen/rejected columns; missing {sorted(missing)}. "
            "Implicit-prompt rows: apply trl.extract_prompt first."
        )
    table = dataset.with_format("arrow")[:]
    empty = sorted({i for name in ("prompt", "chosen", "rejected") for i in np.flatnonzero(table[name].is_null())})
    if empty:
        raise ValueError(
            f"{len(empty)} row(s) (row {', '.join(map(str, empty[:5]))}) have no prompt, chosen or rejected value: a "
            "preference-model row needs all three. Drop them first (dataset.filter)."
        )
    ledger = get_ledger(dataset)
    derived = dataset.map(pairwise_row, remove_columns=dataset.column_names, **map_kwargs)
    return derived if ledger is None else _rebind(ledger, derived)
