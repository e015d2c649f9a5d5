"""Near-copies of a comparison: rows whose canonical text shares most of its word shingles.

Retyping is folded by the canonical form (:func:`squarechipo.data.fingerprint.canonical_text`). What it cannot fold
is an edit: a sentence repeated, a word added or changed. Randomized response draws fresh noise for every copy, so
such copies, released together or apart, still give the label back by a majority. Two rows are **near-copies** when
the Jaccard similarity of their sets of :data:`SHINGLE_WORDS`-word shingles (over the prompt and both responses, in
canonical form) is at least :data:`NEAR_COPY_JACCARD`.

The threshold: on the finance generator's 1,442 train rows, each template-made row's most similar *other* row shares
at most 0.61 of its shingles (median 0.42); repeating one sentence of a 60-word row, or changing one word, keeps
about 0.9. The comparison uses MinHash signatures (:data:`NUM_PERM` affine permutations of 32-bit shingle hashes, as
``datasketch`` 2's default ``affine32`` scheme draws them, computed for a chunk of rows at once) and banded
locality-sensitive hashing (:data:`BANDS` bands of :data:`ROWS_PER_BAND`), so it scales to large releases and to the
registry of earlier releases; within one release the candidate pairs are confirmed on the exact shingle sets.
A pair at J = 0.8 becomes a candidate with probability 0.998, at J = 0.5 with 0.27.

How a shingle is hashed is the **scheme** (:data:`SCHEME`), recorded in each registry of releases: signatures of two
schemes are not comparable. :data:`SCHEME` hashes each distinct word once (SHA-1) and a shingle from its words' hashes
(the MurmurHash3 64-bit finaliser, in numpy over Arrow's word split): about 8x faster than :data:`LEGACY_SCHEME`, which
hashes every shingle's text with SHA-1 in Python (``datasketch``'s own values) and which registries started before
squarechipo 0.5 keep. Both estimate the same Jaccard similarity, so both find the same near-copies
(``tests/test_near_duplicates.py`` checks each against ``datasketch`` and the two against each other).

What it does not catch: paraphrases (other words, the same comparison), and copies that differ in more than about a
fifth of their shingles.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import groupby

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "BANDS",
    "LEGACY_SCHEME",
    "NEAR_COPY_JACCARD",
    "NUM_PERM",
    "ROWS_PER_BAND",
    "SCHEME",
    "SHINGLE_WORDS",
    "Copy",
    "Sketch",
    "band_key_table",
    "band_keys",
    "copies",
    "describe_copies",
    "estimated_jaccard",
    "confirm_near_copies",
    "exact_copies",
    "find_copies",
    "merge_copies",
    "shingle_hash",
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
#: Shingle hashes per block of the vectorised MinHash (× NUM_PERM × 4 bytes: 8 MB, which stays in cache: 4x faster
#: than 64 MB blocks, measured here).
_BLOCK = 1 << 14
#: The shingle hash of registries started by squarechipo 0.5 and later: SHA-1 of each word, shingles from words.
SCHEME = "squarechipo.words-fmix64/1"
#: The shingle hash before (and ``datasketch``'s): SHA-1 of each shingle's text, first 4 bytes.
LEGACY_SCHEME = "datasketch.sha1-32/1"
#: What Python's ``str.split()`` splits on (the words of :func:`shingles`), in RE2 syntax for Arrow's kernels.
_SPACE_RUN = r"[\t-\r\x{1C}-\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}]+"
#: Whitespace other than the space and the row separator: a chunk holding none is split on those two alone (faster).
_OTHER_SPACE = r"[\t-\r\x{1C}-\x{1E}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}]"
_GOLDEN = 0x9E3779B97F4A7C15


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
_CHUNK = 8192


def _legacy_shingle_hashes(rows: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """:data:`LEGACY_SCHEME`: (each row's shingles hashed: the first 4 bytes of SHA-1, little-endian; where each
    row's hashes start). A shingle repeated in a row is hashed each time: a
    signature is a minimum, which a repeat cannot change, so no set of each row's shingles is built."""
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
    return np.frombuffer(b"".join(digests), dtype="<u4").copy(), np.concatenate([[0], np.cumsum(counts)])


def _word_hash(word: str) -> int:
    """A word's 64-bit hash in :data:`SCHEME`: the first 8 bytes of its UTF-8 SHA-1, little-endian."""
    return int.from_bytes(hashlib.sha1(word.encode("utf-8")).digest()[:8], "little")


def shingle_hash(words: Sequence[str]) -> int:
    """A shingle's 32-bit hash in :data:`SCHEME`, from its definition (Python integers; :func:`_word_shingle_hashes`
    computes the same in numpy): h = fmix64(len(words) + φ), then h = fmix64(h xor word hash) for each word; the low
    32 bits. A shingle is :data:`SHINGLE_WORDS` words, or a short row's fewer."""
    mask = (1 << 64) - 1
    h = int(_fmix64(np.array([(len(words) + _GOLDEN) & mask], dtype=np.uint64))[0])
    for word in words:
        h = int(_fmix64(np.array([h ^ _word_hash(word)], dtype=np.uint64))[0])
    return h & 0xFFFFFFFF


def _words(rows: list[str]) -> tuple[pa.Array, np.ndarray]:
    """(every row's words, as ``str.split()`` makes them, in order; the row each word is from)."""
    text = pa.array(rows, pa.large_string())
    if pc.any(pc.match_substring_regex(text, _OTHER_SPACE)).as_py():
        lists = pc.split_pattern_regex(text, _SPACE_RUN)
    else:
        lists = pc.split_pattern(pc.replace_substring(text, "\x1f", " "), " ")
    flat = pc.list_flatten(lists)
    parent = pc.list_parent_indices(lists).to_numpy(zero_copy_only=False)
    keep = pc.greater(pc.binary_length(flat), 0).to_numpy(zero_copy_only=False)
    return flat.filter(pa.array(keep)), parent[keep]


def _word_shingle_hashes(rows: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """:data:`SCHEME`: (each row's shingle hashes, :func:`shingle_hash`, in row order; where each row's start), each
    distinct word of the chunk hashed once."""
    words, parent = _words(rows)
    encoded = pc.dictionary_encode(words)
    table = np.array([_word_hash(w) for w in encoded.dictionary.to_pylist()], dtype=np.uint64)
    hashed = table[encoded.indices.to_numpy(zero_copy_only=False)] if len(words) else np.empty(0, np.uint64)
    counts = np.bincount(parent, minlength=len(rows))
    whole = parent[:-2] == parent[2:] if len(parent) >= SHINGLE_WORDS else np.zeros(0, dtype=bool)
    h = _fmix64(np.full(int(whole.sum()), SHINGLE_WORDS + _GOLDEN, dtype=np.uint64))
    for offset in range(SHINGLE_WORDS):
        h = _fmix64(h ^ hashed[offset : len(hashed) - SHINGLE_WORDS + 1 + offset][whole])
    values, owners = [h & np.uint64(0xFFFFFFFF)], [parent[: len(whole)][whole]]
    short = np.flatnonzero(counts < SHINGLE_WORDS)
    if len(short):  # a row of fewer words is one shingle of them all (rare: hashed here one by one)
        starts = np.concatenate([[0], np.cumsum(counts)])
        listed = words.to_pylist() if len(words) else []
        values.append(np.array([shingle_hash(listed[starts[i] : starts[i + 1]]) for i in short], dtype=np.uint64))
        owners.append(short)
    owner = np.concatenate(owners)
    order = np.argsort(owner, kind="stable")
    per_row = np.bincount(owner, minlength=len(rows))
    return np.concatenate(values)[order].astype(np.uint32), np.concatenate([[0], np.cumsum(per_row)])


_HASHERS = {SCHEME: _word_shingle_hashes, LEGACY_SCHEME: _legacy_shingle_hashes}


def signatures(canonical_rows: list[str], scheme: str = SCHEME) -> np.ndarray:
    """MinHash signatures, one row of :data:`NUM_PERM` uint32 values per canonical row: the least a·h + b over the
    row's shingle hashes h (in ``scheme``), for each permutation; rows are taken :data:`_CHUNK` at a time (memory
    flat in the rows)."""
    hasher = _HASHERS[scheme]
    out = np.empty((len(canonical_rows), NUM_PERM), dtype=np.uint32)
    for first in range(0, len(canonical_rows), _CHUNK):
        chunk = canonical_rows[first : first + _CHUNK]
        out[first : first + len(chunk)] = _chunk_signatures(*hasher(list(chunk)))
    return out


def _chunk_signatures(hv: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The signatures of one chunk's rows from their shingle hashes (rows × :data:`NUM_PERM`)."""
    a, b = _permutations()
    hv = hv.copy()  # datasketch's affine32 scheme finalises each 32-bit hash (MurmurHash3's fmix32) first
    hv ^= hv >> np.uint32(16)
    hv *= np.uint32(0x85EBCA6B)
    hv ^= hv >> np.uint32(13)
    hv *= np.uint32(0xC2B2AE35)
    hv ^= hv >> np.uint32(16)
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
    scheme: str = SCHEME  # how its shingles were hashed: signatures of two schemes are not comparable

    def __len__(self) -> int:
        return len(self.signatures)


def sketch(canonical_rows: list[str], scheme: str = SCHEME) -> Sketch:
    """The :class:`Sketch` of canonical rows, their shingles hashed as ``scheme`` says."""
    marks = signatures(canonical_rows, scheme)
    return Sketch(marks, band_key_table(marks), scheme)


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


#: The canonical text of the rows asked for, by index (a release reads only the candidates' rows again).
RowsOf = Callable[[list[int]], dict[int, str]]


def confirm_near_copies(pairs, rows_of: RowsOf) -> list[tuple[int, int, float]]:
    """(a, b, Jaccard) of the candidate pairs (a < b, not exact copies) whose exact shingle sets share at least
    :data:`NEAR_COPY_JACCARD`, in order; only the candidates' text is read (``rows_of``)."""
    pairs = sorted(pairs)
    text = rows_of(sorted({i for pair in pairs for i in pair}))
    sets = {i: shingles(row) for i, row in text.items()}
    found = []
    for a, b in pairs:
        similarity = _exact_jaccard(sets[a], sets[b])
        if similarity >= NEAR_COPY_JACCARD:
            found.append((a, b, round(similarity, 3)))
    return found


def _confirmed(pairs: set[tuple[int, int]], hashes: Sequence[bytes], rows_of: RowsOf) -> list[tuple[int, int, float]]:
    """:func:`confirm_near_copies` of the pairs that are not exact copies (equal ``hashes``: the exact check's)."""
    return confirm_near_copies({(a, b) for a, b in pairs if hashes[a] != hashes[b]}, rows_of)


def _content_hashes(rows: Sequence[str]) -> list[bytes]:
    return [hashlib.sha256(row.encode("utf-8")).digest() for row in rows]


def near_copy_pairs(canonical_rows: list[str], sketched: Sketch | None = None) -> list[tuple[int, int, float]]:
    """(i, j, Jaccard) for every pair of distinct rows i < j that are near-copies (exact copies are not listed: they
    share their canonical form, which the exact check counts). ``sketched``: the rows' :class:`Sketch`, if made."""
    rows = list(canonical_rows)
    sketched = sketch(rows) if sketched is None else sketched
    return _confirmed(_candidates(sketched.keys), _content_hashes(rows), lambda wanted: {i: rows[i] for i in wanted})


class Copy(tuple):
    """(first row, later row, why): a later row that is a copy of an earlier one."""

    __slots__ = ()

    def __new__(cls, first: int, later: int, why: str):
        return super().__new__(cls, (first, later, why))

    @property
    def later(self) -> int:
        return self[1]


def exact_copies(hashes: Sequence[bytes]) -> list[Copy]:
    """Every row whose content hash (the same text once retyping is folded) an earlier row has, naming the first."""
    first_of: dict[bytes, int] = {}
    found = []
    for index, digest in enumerate(hashes):
        first = first_of.setdefault(digest, index)
        if first != index:
            found.append(Copy(first, index, "the same text once retyping is folded"))
    return found


def merge_copies(exact: list[Copy], near: list[tuple[int, int, float]]) -> list[Copy]:
    """The copies of a set of rows: the exact ones, then each near-copy (a, b, J) whose later row b is not a copy
    already, listed in the order of their later row (one decision rule, wherever the pairs were found)."""
    found = list(exact)
    later = {c.later for c in found}
    for a, b, similarity in near:
        if b not in later:
            later.add(b)
            found.append(Copy(a, b, f"{similarity:.0%} of their {SHINGLE_WORDS}-word shingles shared"))
    return sorted(found, key=lambda c: c.later)


def find_copies(hashes: Sequence[bytes], sketched: Sketch, rows_of: RowsOf) -> list[Copy]:
    """Every row that copies an earlier row, from the rows' content hashes (sha256 of the canonical form: equal is
    the same text once retyping is folded) and :class:`Sketch`, reading again only the near-copy candidates' text
    (``rows_of``): what a release of any size keeps per row is its hash and sketch, never its text."""
    return merge_copies(exact_copies(hashes), _confirmed(_candidates(sketched.keys), hashes, rows_of))


def copies(canonical_rows: list[str], sketched: Sketch | None = None) -> list[Copy]:
    """Every row that copies an earlier row: the same canonical text, or a near-copy (:func:`near_copy_pairs`).
    ``sketched``: the rows' :class:`Sketch`, if made."""
    rows = list(canonical_rows)
    sketched = sketch(rows) if sketched is None else sketched
    return find_copies(_content_hashes(rows), sketched, lambda wanted: {i: rows[i] for i in wanted})


def describe_copies(found: list[Copy], limit: int = 3) -> str:
    """The first few copies in words, e.g. ``row 7 copies row 2 (93% of their 3-word shingles shared)``."""
    shown = "; ".join(f"row {c[1]} copies row {c[0]} ({c[2]})" for c in found[:limit])
    return shown + ("; ..." if len(found) > limit else "")
