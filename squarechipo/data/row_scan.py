"""One pass over a dataset's rows, a chunk at a time: canonical form, content hashes, MinHash sketch; then copies.

A release keeps, per row, what deciding it needs and nothing more: the sha256 of the row's canonical form (32
bytes), and for a sketched release its MinHash signature (:data:`~squarechipo.data.near_duplicates.NUM_PERM` × 4
bytes) and LSH keys (:data:`~squarechipo.data.near_duplicates.BANDS` × 8 bytes). The canonical text itself lives
one chunk at a time (:data:`CHUNK_ROWS` rows), and is read again only for the few rows that are near-copy
candidates. So the memory a release's admission needs grows by about 0.7 kB a row, whatever the length of its texts.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import datasets
import numpy as np

from squarechipo.data.fingerprint import canonical_rows
from squarechipo.data.label_roles import label_free
from squarechipo.data.near_duplicates import (
    BANDS,
    NUM_PERM,
    SCHEME,
    Copy,
    Sketch,
    band_key_table,
    find_copies,
    signatures,
)

__all__ = ["CHUNK_ROWS", "Scan", "row_copies", "scan_rows"]

#: Rows put in canonical form at a time (about 16,000 rows of 120 words: some 15 MB of text).
CHUNK_ROWS = 1 << 14


@dataclass(frozen=True)
class Scan:
    """What one pass over the rows keeps: each row's content hash, and the rows' sketch (None if not asked for)."""

    hashes: list[bytes]
    sketch: Sketch | None


@label_free("hashes and sketches of each row's canonical content (the responses sorted)")
def scan_rows(dataset: datasets.Dataset, *, sketched: bool, scheme: str = SCHEME, chunk: int = CHUNK_ROWS) -> Scan:
    """The content hash (sha256 of :func:`~squarechipo.data.fingerprint.canonical_rows`) of every row, and with
    ``sketched`` their MinHash signatures and LSH keys in ``scheme``, ``chunk`` rows at a time."""
    n = len(dataset)
    arrow = dataset.with_format("arrow")
    hashes: list[bytes] = []
    marks = np.empty((n, NUM_PERM), dtype=np.uint32) if sketched else None
    keys = np.empty((n, BANDS), dtype=np.int64) if sketched else None
    for start in range(0, n, chunk):
        rows = canonical_rows(arrow[start : start + chunk])
        hashes.extend(hashlib.sha256(row.encode("utf-8")).digest() for row in rows)
        if sketched:
            end = start + len(rows)
            marks[start:end] = signatures(rows, scheme)
            keys[start:end] = band_key_table(marks[start:end])
    return Scan(hashes, Sketch(marks, keys, scheme) if sketched else None)


@label_free("copies are found from label-free hashes and canonical text")
def row_copies(dataset: datasets.Dataset, scan: Scan) -> list[Copy]:
    """Every row of ``dataset`` that copies an earlier one (:func:`~squarechipo.data.near_duplicates.find_copies`),
    from its :class:`Scan` (which must hold a sketch); near-copy candidates' text is read again from the rows."""
    if scan.sketch is None:
        raise ValueError("row_copies needs the rows' sketch: scan_rows(dataset, sketched=True).")

    def rows_of(wanted: list[int]) -> dict[int, str]:
        if not wanted:
            return {}
        return dict(zip(wanted, canonical_rows(dataset.select(wanted).with_format("arrow")[:])))

    return find_copies(scan.hashes, scan.sketch, rows_of)
