"""A content fingerprint of preference data that ignores labels, row order and how the text is typed.

Rows are compared by content, not bytes: before hashing, every text is put in one canonical form
(:func:`canonical_text`: invisible and zero-width characters removed, Unicode NFKC, lower case, runs of whitespace
as one space, trimmed). A copy of a row with an extra space, a zero-width character, full-width letters or other
case is the same row. That is what the duplicate check, the fingerprint and the release registry need: randomized
response draws independent noise per copy, so near-copies released together or apart reveal the label. Lower case
can merge two rows that differ only in case; such rows are near-copies for this purpose too.

Two datasets with the same (prompt, {response, response}) rows get the same fingerprint whether
or not their labels were privatized, corrupted or shuffled. The central-DP selector uses it to
refuse candidates trained on the private data; model cards and ledgers record it.

:func:`prompt_sketch` is a bottom-k sample of the prompt hashes of a training set (any data with a
``prompt`` or ``messages`` column, SFT included). The selector checks every sketched prompt against
the private prompts, so a candidate trained on a set that overlaps the private data — not only one
trained on exactly it — is caught: with k = 64 an overlap of 5% of the training prompts is missed
with probability ≤ 0.95^64 ≈ 4%, 10% with ≤ 0.1%.
"""

from __future__ import annotations

import functools
import hashlib
import json
import unicodedata
from importlib import resources

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from squarechipo.data.label_roles import label_free

__all__ = [
    "PROMPT_HASH_CHARS",
    "LEGACY_ROW_SET_BYTES",
    "ROW_SET_BYTES",
    "encode_row_set",
    "rows_outside",
    "canonical_rows",
    "canonical_text",
    "row_hashes",
    "skeleton",
    "fingerprint_and_repeats",
    "fingerprint_of",
    "preference_fingerprint",
    "prompt_hashes",
    "prompt_sketch",
    "training_data_record",
    "UNKNOWN_ROWS",
]

_SEPARATOR = "\x1f"
#: Hex characters kept from each prompt hash in a sketch (64 bits: collisions are negligible).
PROMPT_HASH_CHARS = 16


def _typed(value) -> dict:
    """A value JSON has no type for (bytes, dates, times, decimals), named by its type so that no two differ alike."""
    return {type(value).__name__: value.hex() if isinstance(value, (bytes, bytearray)) else str(value)}


#: One encoder for every value (``json.dumps`` with options builds a new one per call).
_ENCODER = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=_typed)


def _dump(value) -> str:
    return _ENCODER.encode(value)


#: Characters that render as nothing: Unicode format characters (zero-width space and joiners, word joiner, BOM,
#: soft hyphen, bidi marks, ...) and other invisible fillers (combining grapheme joiner, Hangul and Braille blanks,
#: variation selectors). RE2 syntax, as pyarrow's regex kernels take.
_INVISIBLE = (
    r"[\p{Cf}\x{034F}\x{115F}\x{1160}\x{17B4}\x{17B5}\x{180B}-\x{180D}\x{2800}\x{3164}\x{FE00}-\x{FE0F}"
    r"\x{FFA0}\x{E0100}-\x{E01EF}]"
)
#: Any run of whitespace (ASCII, Unicode spaces, line and paragraph separators, the C0 separators).
_WHITESPACE = r"[\s\x{0B}\x{1C}-\x{1F}\x{85}\p{Z}]+"


#: Punctuation (Unicode category P): replaced by a space, so a changed or added mark at a sentence end (or anywhere)
#: does not make a new row.
_PUNCTUATION = r"\p{P}+"


@functools.cache
def _prototypes() -> dict[int, str]:
    """The TR39 confusable prototypes (code point → prototype string), from Unicode's confusables.txt."""
    table = {}
    for line in resources.files("squarechipo.data").joinpath("confusables.txt").read_text("utf-8").splitlines():
        if line and not line.startswith("#"):
            source, target = line.split(";")
            table[int(source, 16)] = "".join(chr(int(code, 16)) for code in target.split())
    return table


def skeleton(text: str) -> str:
    """The Unicode TR39 skeleton of ``text`` (UTS #39, §4): NFD, each character replaced by its confusable prototype,
    NFD again. Two strings that look alike (Latin "paypal", Cyrillic "раураl") have the same skeleton."""
    return unicodedata.normalize("NFD", unicodedata.normalize("NFD", text).translate(_prototypes()))


@functools.cache
def _capital_i() -> dict[int, str]:
    """Capitals whose prototype is l (Latin I, Greek Ι, Cyrillic І, ...): read as i, as their lower case is."""
    found = {c: "i" for c, target in _prototypes().items() if target == "l" and unicodedata.category(chr(c)) == "Lu"}
    return {ord("I"): "i", **found}


def _fold(text: str) -> str:
    """Look-alikes and case folded together. Capitals of other scripts look like Latin capitals, not like their
    lower case (Cyrillic Н is H, its н is not h), so the skeleton is taken before and after lower-casing; capital I
    and its look-alikes are lower-cased first, since their prototype l would part "I" from "i"."""
    return skeleton(skeleton(text.translate(_capital_i())).lower()).lower()


@functools.cache
def _ascii_fold() -> dict[int, str]:
    """:func:`_fold` of each ASCII character. On ASCII text every step of the fold (NFD, the prototypes, lower case)
    acts on one character at a time, so one ``str.translate`` with this table is the fold
    (``tests/test_fingerprint.py`` checks it against :func:`_fold`)."""
    return {code: _fold(chr(code)) for code in range(128)}


def fold(text: str) -> str:
    """Look-alikes and case folded together (:func:`_fold`), ASCII text in one pass."""
    return text.translate(_ascii_fold()) if text.isascii() else _fold(text)


@functools.cache
def _byte_fold() -> tuple[np.ndarray, tuple[tuple[str, str], ...]]:
    """:func:`_ascii_fold` as (a table of bytes for the characters it maps to one ASCII character, the replacements
    of the others: ``m`` → ``rn``, ...). A UTF-8 byte below 128 is always an ASCII character, so the table may be
    applied to a whole Arrow buffer."""
    table, longer = np.arange(256, dtype=np.uint8), []
    for code, target in _ascii_fold().items():
        if len(target) == 1 and ord(target) < 128:
            table[code] = ord(target)
        else:
            longer.append((chr(code), target))
    return table, tuple(longer)


def _fold_array(text: pa.Array) -> pa.Array:
    """:func:`fold` of every string of a ``large_string`` array: ASCII strings in Arrow (the replacements, then one
    table over the bytes), the others one by one in Python (TR39's skeleton depends on neighbouring characters)."""
    table, longer = _byte_fold()
    fast = text
    for char, target in longer:  # no target holds a character another replacement or the table changes
        fast = pc.replace_substring(fast, char, target)
    if isinstance(fast, pa.ChunkedArray):
        fast = fast.combine_chunks()
    validity, offsets, data = fast.buffers()
    data = pa.py_buffer(table[np.frombuffer(data, dtype=np.uint8)]) if data is not None else data
    fast = pa.Array.from_buffers(fast.type, len(fast), [validity, offsets, data], fast.null_count, fast.offset)
    other = pc.invert(pc.fill_null(pc.string_is_ascii(text), True)).to_numpy(zero_copy_only=False)
    if not other.any():
        return fast
    folded = [_fold(t) for t in text.filter(pa.array(other)).to_pylist()]
    return pc.replace_with_mask(fast, pa.array(other), pa.array(folded, pa.large_string()))


def canonical_text(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The canonical form of each string (nulls stay null), for ``string`` and ``large_string`` alike: invisible
    characters removed, NFKC, look-alike letters of other scripts and case folded (the Unicode TR39 skeleton,
    :func:`_fold`), punctuation as a space, whitespace runs as one space, trimmed."""
    text = pc.cast(values, pa.large_string())
    if isinstance(text, pa.ChunkedArray):
        text = text.combine_chunks()
    if pc.any(pc.invert(pc.string_is_ascii(text))).as_py():  # both are the identity on ASCII text
        text = pc.utf8_normalize(pc.replace_substring_regex(text, _INVISIBLE, ""), "NFKC")
    folded = _fold_array(text)
    text = pc.replace_substring_regex(folded, _PUNCTUATION, " ")
    return pc.utf8_trim_whitespace(pc.replace_substring_regex(text, _WHITESPACE, " "))


def _is_text(column: pa.ChunkedArray) -> bool:
    return pa.types.is_string(column.type) or pa.types.is_large_string(column.type)


def _is_conversation(column: pa.ChunkedArray) -> bool:
    kind = column.type
    return (
        (pa.types.is_list(kind) or pa.types.is_large_list(kind))
        and pa.types.is_struct(kind.value_type)
        and {"role", "content"} <= {kind.value_type.field(i).name for i in range(kind.value_type.num_fields)}
    )


def _canonical_column(column: pa.ChunkedArray) -> pa.Array | None:
    """One canonical string per row of a text or conversation column (turns as ``role: content``); None for any
    other type."""
    if _is_text(column):
        return canonical_text(column)
    if not _is_conversation(column):
        return None
    lists = column.combine_chunks()
    turns = pc.list_flatten(lists)
    text = pc.binary_join_element_wise(
        pc.cast(turns.field("role"), pa.large_string()), canonical_text(turns.field("content")),
        pa.scalar(": ", pa.large_string()),
        null_handling="replace",
    )  # fmt: skip
    offsets = pc.list_value_length(lists).fill_null(0).to_numpy(zero_copy_only=False).cumsum()
    rebuilt = pa.LargeListArray.from_arrays(pa.array([0, *offsets.tolist()], pa.int64()), text)
    return pc.binary_join(rebuilt, pa.scalar(_SEPARATOR, pa.large_string()))


def _dumped(column: pa.ChunkedArray) -> pa.Array:
    return pa.array([_dump(v) for v in column.to_pylist()], pa.large_string())


@label_free("sorts each pair's responses: a canonical row carries no label")
def canonical_rows(table: pa.Table) -> list:
    """One canonical value per row: prompt, then the responses in sorted order (2, or K for best-of-K rows), each text
    in its canonical form (:func:`canonical_text`)."""
    prompt = pa.array([""] * table.num_rows, pa.large_string())
    if "prompt" in table.column_names:
        prompt = _canonical_column(table["prompt"])
        prompt = prompt if prompt is not None else _dumped(table["prompt"])
    if "chosen" not in table.column_names and "responses" in table.column_names:
        # Best-of-K rows: the order of `responses` carries the label (`best`), so sort it away.
        flat = pc.list_flatten(table["responses"].combine_chunks())
        texts = _canonical_column(pa.chunked_array([flat]))
        texts = texts.to_pylist() if texts is not None else [_dump(r) for r in flat.to_pylist()]
        lengths = pc.list_value_length(table["responses"]).to_numpy(zero_copy_only=False)
        starts = np.concatenate([[0], lengths.cumsum()])
        return [
            _SEPARATOR.join([p, *sorted(texts[a:b])]) for p, a, b in zip(prompt.to_pylist(), starts[:-1], starts[1:])
        ]
    pair = [_canonical_column(table[name]) for name in ("chosen", "rejected")]
    if any(column is None for column in pair):
        pair = [
            pa.array([_dump(v) for v in table[name].to_pylist()], pa.large_string()) for name in ("chosen", "rejected")
        ]
    chosen, rejected = pair
    first = pc.less_equal(chosen, rejected)
    low, high = pc.if_else(first, chosen, rejected), pc.if_else(first, rejected, chosen)
    separator = pa.scalar(_SEPARATOR, pa.large_string())
    return pc.binary_join_element_wise(prompt, low, high, separator, null_handling="replace").to_pylist()


@label_free("label-invariant hashes of each row's canonical content (the responses sorted)")
def row_hashes(dataset: datasets.Dataset) -> list[bytes]:
    """sha256 of each row's canonical form (:func:`canonical_rows`): equal for near-copies, label-free."""
    table = dataset.with_format("arrow")[:]
    return [hashlib.sha256(row.encode("utf-8")).digest() for row in canonical_rows(table)]


@label_free("a label-invariant fingerprint")
def preference_fingerprint(dataset: datasets.Dataset) -> str:
    """``sha256:<hex>`` over the sorted per-row hashes of (prompt, sorted(chosen, rejected)), or of
    (prompt, sorted(responses)) for best-of-K rows, each text in canonical form."""
    return fingerprint_and_repeats(dataset)[0]


@label_free("a label-invariant fingerprint and a count of copies")
def fingerprint_and_repeats(dataset: datasets.Dataset) -> tuple[str, int]:
    """(:func:`preference_fingerprint`, how many rows repeat an earlier row's prompt and responses, near-copies
    included), from one pass over the canonical rows."""
    return fingerprint_of(row_hashes(dataset))


def fingerprint_of(hashes: list[bytes]) -> tuple[str, int]:
    """(the fingerprint, the number of repeated rows) of rows given by their :func:`row_hashes`: a release needs
    the hashes, the fingerprint and the repeats, and computes the canonical rows once."""
    return "sha256:" + hashlib.sha256(b"".join(sorted(hashes))).hexdigest(), len(hashes) - len(set(hashes))


def _prompts(dataset: datasets.Dataset) -> list | None:
    if "prompt" in dataset.column_names:
        return dataset["prompt"]
    if "messages" in dataset.column_names:  # conversational SFT: everything before the last turn
        return [messages[:-1] for messages in dataset["messages"]]
    return None


@label_free("hashes of prompts, which carry no label")
def prompt_hashes(dataset: datasets.Dataset) -> set[str] | None:
    """Truncated sha256 of each prompt's canonical text (:func:`canonical_text`; a conversation as the text of its
    turns, so a standard and a conversational copy of a prompt match); None without a prompt."""
    prompts = _prompts(dataset)
    if prompts is None:
        return None
    texts = [p if isinstance(p, str) else _SEPARATOR.join(str(m.get("content", "")) for m in p) for p in prompts]
    canonical = canonical_text(pa.array(texts, pa.large_string())).to_pylist()
    return {hashlib.sha256(text.encode("utf-8")).hexdigest()[:PROMPT_HASH_CHARS] for text in canonical}


@label_free("a sample of prompt hashes, which carry no label")
def prompt_sketch(dataset: datasets.Dataset, k: int = 64) -> list[str] | None:
    """The k smallest prompt hashes (a uniform sample of the distinct prompts); None if no prompt column."""
    hashes = prompt_hashes(dataset)
    return None if hashes is None else sorted(hashes)[:k]


#: The fingerprint recorded for training rows that could not be read ahead or hashed (a streamed dataset, pre-tokenised
#: rows): the lineage guard treats a model trained on them as possibly trained on any rows.
UNKNOWN_ROWS = "unknown:"


@label_free("a label-invariant fingerprint and a prompt sketch")
def training_data_record(dataset: datasets.Dataset | None) -> dict:
    """What a trained model records about its training data, for the lineage guard and the central selector's."""
    if dataset is None:
        return {"dataset_fingerprint": None, "prompt_sketch": None}
    if not isinstance(dataset, datasets.Dataset):
        return {"dataset_fingerprint": f"{UNKNOWN_ROWS}streamed ({type(dataset).__name__})", "prompt_sketch": None}
    columns = set(dataset.column_names)
    if not ({"chosen", "rejected", "responses", "prompt", "messages", "completion", "text"} & columns):
        return {"dataset_fingerprint": f"{UNKNOWN_ROWS}pre-tokenised", "prompt_sketch": None}
    is_preference = {"chosen", "rejected"} <= columns or "responses" in columns
    return {
        "dataset_fingerprint": preference_fingerprint(dataset) if is_preference else None,
        "prompt_sketch": prompt_sketch(dataset),
    }


#: Bytes kept of each released row's hash in a ledger's row set. A foreign row passes only if its hash's first
#: 16 bytes equal a released row's: for a release of n rows, finding one costs about 2^128 / n hash evaluations
#: (2^104.7 at n = 10^7), and the set costs 16 bytes a row. Ledgers written by squarechipo 0.3 kept 4 bytes
#: (:attr:`squarechipo.privacy.ledger.ledger.Release.row_hash_bytes`); they are read as they were written.
ROW_SET_BYTES = 16
#: Rows hashed at a time by :func:`_exact_row_hashes`.
_HASH_CHUNK = 1 << 14
#: What squarechipo 0.3 kept (a row outside the release passed with probability n/2^32).
LEGACY_ROW_SET_BYTES = 4


def _released_row_hashes(dataset: datasets.Dataset) -> list[bytes] | None:
    """sha256 of each row as released, in its stored order: prompt, chosen, rejected (pairs) or prompt, responses
    and the released label columns (best-of-K rows), each text in canonical form. Unlike :func:`row_hashes` this
    depends on the released labels (which are public): a ledger that holds these hashes is bound to its rows *and*
    their labels. None where the rows hold no prompt/response text (pre-tokenised rows)."""
    table = dataset.with_format("arrow")[:]
    names = table.column_names
    if {"chosen", "rejected"} <= set(names):
        parts = ["prompt", "chosen", "rejected"]
    elif "responses" in names:
        parts = ["prompt", "responses", *sorted(c for c in names if c.startswith(("released_", "label_weights")))]
    else:
        return None
    columns = []
    for name in parts:
        if name not in names:
            columns.append([""] * table.num_rows)
            continue
        text = _canonical_column(table[name])
        columns.append(text.to_pylist() if text is not None else [_dump(v) for v in table[name].to_pylist()])
    joined = (_SEPARATOR.join("" if v is None else v for v in row) for row in zip(*columns))
    return [hashlib.sha256(row.encode("utf-8")).digest() for row in joined]


def _exact_row_hashes(dataset: datasets.Dataset) -> list[bytes]:
    """sha256 of each row exactly as stored: every column, by name, each value as JSON (text byte for byte: no
    canonical form, so an upper-cased or look-alike letter is a changed row). Two rows hash alike only if every
    column holds the same value; a ledger bound to these hashes is void on any edited, added or moved value, and
    holds through selection, reordering and repetition of whole rows."""
    names = sorted(dataset.column_names)
    arrow = dataset.with_format("arrow")
    header = [_dump(name) for name in names]
    hashes: list[bytes] = []
    for start in range(0, len(dataset), _HASH_CHUNK):  # a chunk of rows as JSON at a time: memory flat in the rows
        table = arrow[start : start + _HASH_CHUNK].select(names)
        values = [_dumped(table[name]).to_pylist() for name in names]
        joined = (_SEPARATOR.join(f"{h}:{v}" for h, v in zip(header, row)) for row in zip(*values))
        hashes.extend(hashlib.sha256(row.encode("utf-8")).digest() for row in joined)
    return hashes


def encode_row_set(hashes: list[bytes], width: int = ROW_SET_BYTES) -> str:
    """The set of rows a ledger is bound to: the sorted unique ``width``-byte prefixes of their hashes, base64."""
    import base64

    return base64.b64encode(b"".join(sorted({h[:width] for h in hashes}))).decode("ascii")


def rows_outside(hashes: list[bytes], encoded: list[str], width: int = ROW_SET_BYTES) -> np.ndarray:
    """Indices of the rows whose hash (its first ``width`` bytes) is in none of the ``encoded`` row sets."""
    import base64

    allowed: set[bytes] = set()
    for text in encoded:
        blob = base64.b64decode(text)
        allowed.update(blob[i : i + width] for i in range(0, len(blob), width))
    return np.flatnonzero([h[:width] not in allowed for h in hashes]).astype(np.int64)
