"""Near-copies of a comparison: rows whose canonical text shares most of its word shingles.

Retyping is folded by the canonical form (:func:`squarechipo.data.fingerprint.canonical_text`). What it cannot fold
is an edit: a sentence repeated, a word added or changed. Randomized response draws fresh noise for every copy, so
such copies, released together or apart, still give the label back by a majority. Two rows are **near-copies** when
the Jaccard similarity of their sets of :data:`SHINGLE_WORDS`-word shingles (over the prompt and both responses, in
canonical form) is at least :data:`NEAR_COPY_JACCARD`.

The threshold: on the finance generator's 1,442 train rows, each template-made row's most similar *other* row shares
at most 0.61 of its shingles (median 0.42); repeating one sentence of a 60-word row, or changing one word, keeps
about 0.9. The comparison uses MinHash signatures (:data:`NUM_PERM` permutations, the values ``datasketch`` 2's default
scheme gives, computed for all rows at once) and banded
locality-sensitive hashing (:data:`BANDS` bands of :data:`ROWS_PER_BAND`), so it scales to large releases and to the
registry of earlier releases; within one release the candidate pairs are confirmed on the exact shingle sets.
A pair at J = 0.8 becomes a candidate with probability 0.998, at J = 0.5 with 0.27.

What it does not catch: paraphrases (other words, the same comparison), and copies that differ in more than about a
fifth of their shingles.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from itertools import groupby

import numpy as np

__all__ = [
    "BANDS",
    "NEAR_COPY_JACCARD",
    "NUM_PERM",
    "ROWS_PER_BAND",
    "SHINGLE_WORDS",
    "Copy",
    "Sketch",
    "band_key_table",
    "band_keys",
    "copies",
    "describe_copies",
    "estimated_jaccard",
    "near_copy_pairs",
    "shingles",
    "signatures",
    "sketch",
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
#: Shingle hashes per block of the vectorised MinHash (× NUM_PERM × 4 bytes: about 64 MB).
_BLOCK = 1 << 17


def shingles(canonical_row: str) -> set[bytes]:
    """The row's set of word shingles (the whole row when it has fewer words)."""
    words = canonical_row.split()
    if len(words) < SHINGLE_WORDS:
        return {" ".join(words).encode("utf-8")}
    return {f"{a} {b} {c}".encode() for a, b, c in zip(words, words[1:], words[2:])}


@functools.cache
def _permutations() -> tuple[np.ndarray, np.ndarray]:
    """The :data:`NUM_PERM` affine permutations h → a·h + b (mod 2³², a odd), drawn as datasketch 2 draws them for
    its default ``affine32`` scheme, so a signature here equals ``datasketch.MinHash(num_perm=NUM_PERM, seed=1)``'s
    over the same shingles (a registry written with either stays comparable)."""
    gen = np.random.RandomState(_SEED)
    a = gen.randint(0, 1 << 31, NUM_PERM, dtype=np.uint32) * np.uint32(2) + np.uint32(1)
    b = gen.randint(0, 1 << 32, NUM_PERM, dtype=np.uint32)
    return a, b


#: Rows whose shingles are hashed and reduced at a time: the working set stays near ``_CHUNK`` × shingles a row × (4
#: bytes + :data:`NUM_PERM` × 4 bytes in a block), whatever the number of rows.
_CHUNK = 2048


def _shingle_hashes(rows: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(each row's shingles hashed: the first 4 bytes of SHA-1, little-endian, then the MurmurHash3 32-bit finaliser;
    where each row's hashes start). A shingle repeated in a row is hashed each time: a signature is a minimum, which
    a repeat cannot change, so no set of each row's shingles is built (it cost most of the time and memory)."""
    sha1 = hashlib.sha1
    digests, counts = [], np.empty(len(rows), dtype=np.int64)
    for index, row in enumerate(rows):
        words = row.split()
        if len(words) < SHINGLE_WORDS:
            found = [sha1(" ".join(words).encode("utf-8")).digest()[:4]]
        else:
            found = [sha1(f"{a} {b} {c}".encode()).digest()[:4] for a, b, c in zip(words, words[1:], words[2:])]
        digests.append(b"".join(found))
        counts[index] = len(found)
    hv = np.frombuffer(b"".join(digests), dtype="<u4").copy()
    hv ^= hv >> np.uint32(16)
    hv *= np.uint32(0x85EBCA6B)
    hv ^= hv >> np.uint32(13)
    hv *= np.uint32(0xC2B2AE35)
    hv ^= hv >> np.uint32(16)
    return hv, np.concatenate([[0], np.cumsum(counts)])


def signatures(canonical_rows: list[str]) -> np.ndarray:
    """MinHash signatures, one row of :data:`NUM_PERM` uint32 values per canonical row: the least a·h + b over the
    row's shingle hashes h, for each permutation; rows are taken :data:`_CHUNK` at a time (memory flat in the rows)."""
    out = np.empty((len(canonical_rows), NUM_PERM), dtype=np.uint32)
    for first in range(0, len(canonical_rows), _CHUNK):
        chunk = canonical_rows[first : first + _CHUNK]
        out[first : first + len(chunk)] = _chunk_signatures(*_shingle_hashes(list(chunk)))
    return out


def _chunk_signatures(hv: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The signatures of one chunk's rows from their shingle hashes (rows × :data:`NUM_PERM`)."""
    a, b = _permutations()
    rows = len(starts) - 1
    out = np.empty((NUM_PERM, rows), dtype=np.uint32)
    first = 0
    while first < rows:  # blocks of rows whose shingles × permutations stay near 64 MB
        last = int(np.searchsorted(starts, starts[first] + _BLOCK, side="right")) - 1
        last = min(max(last, first + 1), rows)
        # Permutations × shingles, so that each row's minimum is a reduction along memory (about 10× faster).
        block = a[:, None] * hv[None, starts[first] : starts[last]]
        block += b[:, None]
        out[:, first:last] = np.minimum.reduceat(block, starts[first:last] - starts[first], axis=1)
        first = last
    return out.T


def band_keys(signature: np.ndarray) -> list[int]:
    """The LSH keys of one signature (:func:`band_key_table`): rows sharing a key are candidates."""
    return band_key_table(signature[None, :])[0].tolist()


def _fmix64(h: np.ndarray) -> np.ndarray:
    """The MurmurHash3 64-bit finaliser (multiplications wrap modulo 2⁶⁴, as intended)."""
    h = h ^ (h >> np.uint64(33))
    h = h * np.uint64(0xFF51AFD7ED558CCD)
    h = h ^ (h >> np.uint64(33))
    h = h * np.uint64(0xC4CEB9FE1A85EC53)
    return h ^ (h >> np.uint64(33))


def band_key_table(marks: np.ndarray) -> np.ndarray:
    """Each row's :data:`BANDS` LSH keys, int64 (rows × bands): a 64-bit hash of the band's values with the band's
    number in its low 5 bits, so keys of different bands never meet. Two rows with equal values in a band share its
    key; unequal ones collide with probability about 2⁻⁵⁹ (and a candidate is confirmed on its signature anyway)."""
    values = np.asarray(marks, dtype=np.uint32)[:, : BANDS * ROWS_PER_BAND].astype(np.uint64)
    values = values.reshape(len(values), BANDS, ROWS_PER_BAND)
    band = np.arange(BANDS, dtype=np.uint64)
    h = np.broadcast_to(_fmix64(band + np.uint64(0x9E3779B97F4A7C15)), values.shape[:2])
    for j in range(ROWS_PER_BAND):
        h = _fmix64(h ^ (values[:, :, j] * np.uint64(0x100000001B3) + np.uint64(j)))
    return ((h & ~np.uint64(31)) | band).view(np.int64)


@dataclass(frozen=True)
class Sketch:
    """Rows' MinHash signatures and their LSH keys: computed once, for the copy check and the registry."""

    signatures: np.ndarray
    keys: np.ndarray  # int64, rows × BANDS (band_key_table)

    def __len__(self) -> int:
        return len(self.signatures)


def sketch(canonical_rows: list[str]) -> Sketch:
    """The :class:`Sketch` of canonical rows."""
    marks = signatures(canonical_rows)
    return Sketch(marks, band_key_table(marks))


def estimated_jaccard(first: np.ndarray, second: np.ndarray) -> float:
    """The MinHash estimate of the Jaccard similarity of two rows."""
    return float(np.mean(first == second))


def _exact_jaccard(first: set[bytes], second: set[bytes]) -> float:
    return len(first & second) / max(1, len(first | second))


def _candidates(keys: np.ndarray) -> set[tuple[int, int]]:
    """Pairs of rows i < j that share an LSH key: equal keys sit next to each other once sorted."""
    flat = keys.ravel()
    order = np.argsort(flat, kind="stable")
    ordered = flat[order]
    shared = np.flatnonzero(ordered[1:] == ordered[:-1])
    found: set[tuple[int, int]] = set()
    rows = order // BANDS
    for _, run in groupby(np.union1d(shared, shared + 1).tolist(), key=lambda at: ordered[at]):
        members = sorted(set(rows[list(run)].tolist()))
        found |= {(a, b) for i, a in enumerate(members) for b in members[i + 1 :]}
    return found


def near_copy_pairs(canonical_rows: list[str], sketched: Sketch | None = None) -> list[tuple[int, int, float]]:
    """(i, j, Jaccard) for every pair of distinct rows i < j that are near-copies (exact copies are not listed: they
    share their canonical form, which the exact check counts). ``sketched``: the rows' :class:`Sketch`, if made."""
    rows = list(canonical_rows)
    sketched = sketch(rows) if sketched is None else sketched
    found, sets = [], {}
    for a, b in sorted(_candidates(sketched.keys)):
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


def copies(canonical_rows: list[str], sketched: Sketch | None = None) -> list[Copy]:
    """Every row that copies an earlier row: the same canonical text, or a near-copy (:func:`near_copy_pairs`).
    ``sketched``: the rows' :class:`Sketch`, if made."""
    first_of: dict[str, int] = {}
    found = []
    for index, row in enumerate(canonical_rows):
        if row in first_of:
            found.append(Copy(first_of[row], index, "the same text once retyping is folded"))
        else:
            first_of[row] = index
    later = {c.later for c in found}
    for a, b, similarity in near_copy_pairs(canonical_rows, sketched):
        if b not in later:
            later.add(b)
            found.append(Copy(a, b, f"{similarity:.0%} of their {SHINGLE_WORDS}-word shingles shared"))
    return sorted(found, key=lambda c: c.later)


def describe_copies(found: list[Copy], limit: int = 3) -> str:
    """The first few copies in words, e.g. ``row 7 copies row 2 (93% of their 3-word shingles shared)``."""
    shown = "; ".join(f"row {c[1]} copies row {c[0]} ({c[2]})" for c in found[:limit])
    return shown + ("; ..." if len(found) > limit else "")
