"""Tamper evidence for saved releases: a sealed marker over the saved rows.

Every way a release is saved (a ``save_to_disk`` folder, a JSONL file, a Parquet file) writes, beside its ledger, a
sealed **marker** (:mod:`squarechipo.trust.seals`): the ledger's digest, the rows' digest and their count. Every loader
checks it. A saved dataset that carries a ledger but no marker, or whose marker does not match its rows or its ledger,
is refused: a deleted marker, edited labels, a swapped ledger or rows added or removed cannot pass as the original
release.

The data layer owns this because it is about stored rows; :mod:`squarechipo.privacy.ledger.ledger` says what a ledger
means.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import datasets

from squarechipo.data.label_roles import label_free
from squarechipo.data.metadata import FOLDER_MARKER
from squarechipo.trust.seals import RESTORE, IntegrityError, check_seal, seal

__all__ = ["MARKER", "check_marker", "marker_record"]

#: The marker's file name in a release folder (written last).
MARKER = FOLDER_MARKER
_SEPARATOR = "\x1f"


def _values_text(values: list, plain: bool) -> str:
    """Values as the rows' digest reads them: strings as they are (``plain``: the whole column is strings), anything
    else as JSON, joined by the separator."""
    if plain:
        return _SEPARATOR.join(values)
    return _SEPARATOR.join(json.dumps(v, sort_keys=True, ensure_ascii=False) for v in values)


def _all_strings(column, parts) -> bool:
    """Whether every value of ``column`` reads as a Python string: known from its type when it is a string column
    with no null (no pass over the values), else by looking at each value."""
    import pyarrow as pa

    if (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)) and column.null_count == 0:
        return True
    return all(isinstance(v, str) for part in parts for v in part.to_pylist())


#: Values of a column turned into text at a time by :func:`_rows_digest` (the whole column's text is never held).
_DIGEST_CHUNK = 65_536


def _rows_digest(dataset: datasets.Dataset) -> str:
    """sha256 over the stored rows in order, every column by name (released labels included): the bytes of ``name``,
    a zero byte, the column's values joined by the separator (:func:`_values_text`), a zero byte, for each column,
    fed a chunk of values at a time (the same bytes as one join of the whole column: memory flat in the rows)."""
    table = dataset.with_format("arrow")[:]
    digest = hashlib.sha256()
    for name in sorted(table.column_names):
        column = table.column(name)
        parts = [column.slice(start, _DIGEST_CHUNK) for start in range(0, len(column), _DIGEST_CHUNK)]
        plain = _all_strings(column, parts)
        digest.update(name.encode("utf-8") + b"\0")
        for index, part in enumerate(parts):
            digest.update(((_SEPARATOR if index else "") + _values_text(part.to_pylist(), plain)).encode("utf-8"))
        digest.update(b"\0")
    return "sha256:" + digest.hexdigest()


@label_free("seals a release's rows as saved (released labels)")
def marker_record(dataset: datasets.Dataset, ledger_digest: str) -> dict[str, Any]:
    """The sealed marker of a saved release: its ledger's digest and its rows' digest and count."""
    return seal({"ledger_digest": ledger_digest, "rows_digest": _rows_digest(dataset), "n_rows": len(dataset)})


@label_free("compares a saved release with its seal")
def check_marker(
    marker: dict[str, Any] | None, dataset: datasets.Dataset, ledger_digest: str | None, where: str
) -> None:
    """Raise :class:`IntegrityError` unless a saved release's rows and ledger are those its marker seals.

    ``marker`` None (no marker found) with a ledger present is an error: every save writes one, so its absence means
    it was deleted, or the data was saved by other means (save releases with ``save_release`` or
    ``save_privatized``). ``ledger_digest`` None with a marker present means the ledger was deleted.
    """
    if marker is None:
        if ledger_digest is None:
            return  # no ledger, no marker: not a release
        raise IntegrityError(
            f"{where} carries a privacy ledger but no release marker (the digest of its rows), so edited labels "
            "could pass under the ledger: the marker was deleted, or the data was saved without squarechipo. "
            "Restore the release as saved, or save it with squarechipo.privacy.save_release / save_privatized."
        )
    check_seal(marker, where, "release marker")
    if ledger_digest is None:
        raise IntegrityError(
            f"{where} holds released labels (its {MARKER} says so) but no privacy ledger: the ledger was deleted, so "
            f"nothing says how the labels were released. {RESTORE}"
        )
    if ledger_digest != marker["ledger_digest"]:
        raise IntegrityError(f"{where}: the privacy ledger is not the one this release was saved with.")
    if len(dataset) != marker["n_rows"] or _rows_digest(dataset) != marker["rows_digest"]:
        raise IntegrityError(
            f"{where}: the released rows changed after the release was saved ({len(dataset)} rows now, "
            f"{marker['n_rows']} then, or their labels or text differ). Restore the release, or release the raw "
            "rows again."
        )
