"""Near-copies of a comparison: rows whose canonical text shares most of its word shingles.

Retyping is folded by the canonical form (:func:`squarechipo.data.fingerprint.canonical_text`). What it cannot fold
is an edit: a sentence repeated, a word added or changed. Randomized response draws fresh noise for every copy, so
such copies, released together or apart, still give the label back by a majority. Two rows are **near-copies** when
the Jaccard similarity of their sets of :data:`SHINGLE_WORDS`-word shingles (over the prompt and both responses, in
canonical form) is at least :data:`NEAR_COPY_JACCARD`.

The threshold: on the finance generator's 1,442 train rows, each template-made row's most similar *other* row shares
at most 0.61 of its shingles (median 0.42); repeating one sentence of a 60-word row, or changing one word, keeps
about 0.9. The comparison uses MinHash signatures (``datasketch``, :data:`NUM_PERM` permutations) and banded
locality-sensitive hashing (:data:`BANDS` bands of :data:`ROWS_PER_BAND`), so it scales to large releases and to the
registry of earlier releases; within one release the candidate pairs are confirmed on the exact shingle sets.
A pair at J = 0.8 becomes a candidate with probability 0.998, at J = 0.5 with 0.27.

What it does not catch: paraphrases (other words, the same comparison), and copies that differ in more than about a
fifth of their shingles.
"""

from __future__ import annotations

import hashlib

import numpy as np

__all__ = [
    "BANDS",
    "NEAR_COPY_JACCARD",
    "NUM_PERM",
    "ROWS_PER_BAND",
    "SHINGLE_WORDS",
    "Copy",
    "band_keys",
    "copies",
    "describe_copies",
    "estimated_jaccard",
    "near_copy_pairs",
    "shingles",
    "signatures",
]

#: Words per shingle.
SHINGLE_WORDS = 3
#: Rows at or above this Jaccard similarity of their shingle sets are near-copies of one comparison.
NEAR_COPY_JACCARD = 0.8
#: MinHash permutations per row (the estimate's standard error at J = 0.8 is about 0.035).
NUM_PERM = 128
#: Locality-sensitive hashing: BANDS bands of ROWS_PER_BAND signature values (120 of the 128 are used).
BANDS, ROWS_PER_BAND = 20, 6
_SEED = 1


def shingles(canonical_row: str) -> set[bytes]:
    """The row's set of word shingles (the whole row when it has fewer words)."""
    words = canonical_row.split()
    if len(words) < SHINGLE_WORDS:
        return {" ".join(words).encode("utf-8")}
    return {" ".join(words[i : i + SHINGLE_WORDS]).encode("utf-8") for i in range(len(words) - SHINGLE_WORDS + 1)}


def signatures(canonical_rows: list[str]) -> np.ndarray:
    """MinHash signatures, one row of :data:`NUM_PERM` uint32 values per canonical row."""
    from datasketch import MinHash

    if not canonical_rows:
        return np.zeros((0, NUM_PERM), dtype=np.uint32)
    hashes = MinHash.bulk([shingles(row) for row in canonical_rows], num_perm=NUM_PERM, seed=_SEED)
    return np.stack([h.hashvalues for h in hashes]).astype(np.uint32)


def band_keys(signature: np.ndarray) -> list[bytes]:
    """The LSH keys of one signature: band number and a hash of its values (rows sharing a key are candidates)."""
    keys = []
    for band in range(BANDS):
        values = signature[band * ROWS_PER_BAND : (band + 1) * ROWS_PER_BAND]
        keys.append(bytes([band]) + hashlib.blake2b(values.astype("<u4").tobytes(), digest_size=8).digest())
    return keys


def estimated_jaccard(first: np.ndarray, second: np.ndarray) -> float:
    """The MinHash estimate of the Jaccard similarity of two rows."""
    return float(np.mean(first == second))


def _exact_jaccard(first: set[bytes], second: set[bytes]) -> float:
    return len(first & second) / max(1, len(first | second))


def near_copy_pairs(canonical_rows: list[str]) -> list[tuple[int, int, float]]:
    """(i, j, Jaccard) for every pair of distinct rows i < j that are near-copies (exact copies are not listed: they
    share their canonical form, which the exact check counts)."""
    rows = list(canonical_rows)
    marks = signatures(rows)
    buckets: dict[bytes, list[int]] = {}
    for index, signature in enumerate(marks):
        for key in band_keys(signature):
            buckets.setdefault(key, []).append(index)
    candidates = {(a, b) for members in buckets.values() for a in members for b in members if a < b}
    found, sets = [], {}
    for a, b in sorted(candidates):
        if rows[a] == rows[b]:
            continue
        for i in (a, b):
            if i not in sets:
                sets[i] = shingles(rows[i])
        similarity = _exact_jaccard(sets[a], sets[b])
        if similarity >= NEAR_COPY_JACCARD:
            found.append((a, b, round(similarity, 3)))
    return found


class Copy(tuple):
    """(first row, later row, why): a later row that is a copy of an earlier one."""

    __slots__ = ()

    def __new__(cls, first: int, later: int, why: str):
        return super().__new__(cls, (first, later, why))

    @property
    def later(self) -> int:
        return self[1]


def copies(canonical_rows: list[str]) -> list[Copy]:
    """Every row that copies an earlier row: the same canonical text, or a near-copy (:func:`near_copy_pairs`)."""
    first_of: dict[str, int] = {}
    found = []
    for index, row in enumerate(canonical_rows):
        if row in first_of:
            found.append(Copy(first_of[row], index, "the same text once retyping is folded"))
        else:
            first_of[row] = index
    later = {c.later for c in found}
    for a, b, similarity in near_copy_pairs(canonical_rows):
        if b not in later:
            later.add(b)
            found.append(Copy(a, b, f"{similarity:.0%} of their {SHINGLE_WORDS}-word shingles shared"))
    return sorted(found, key=lambda c: c.later)


def describe_copies(found: list[Copy], limit: int = 3) -> str:
    """The first few copies in words, e.g. ``row 7 copies row 2 (93% of their 3-word shingles shared)``."""
    shown = "; ".join(f"row {c[1]} copies row {c[0]} ({c[2]})" for c in found[:limit])
    return shown + ("; ..." if len(found) > limit else "")
