"""A ledger bound to its rows: every reader checks the rows it actually reads.

A release records the set of rows it released (:attr:`squarechipo.privacy.ledger.ledger.Release.row_set`: the first
16 bytes of each released row's hash over every column, byte for byte, :func:`squarechipo.data.fingerprint.
_exact_row_hashes`) and the columns that hash covers (``row_columns``); the seal covers the set. :func:`get_ledger`
checks every dataset it reads a ledger from, each time: no cache of verified datasets exists, so nothing a caller sets
(a fingerprint, an attribute) can stand in for the check.

The invariant: a ledger is valid only on rows whose every column equals what the release wrote, up to selection,
reordering and repetition of whole rows (selecting, shuffling, filtering, splitting, saving and loading), and only
while readers see exactly the stored rows: a format transform (``set_format``/``with_transform``/``set_transform``
with a function) changes what a reader sees without changing the stored rows, so a dataset that carries one is
refused. Any other change voids the ledger: an added, removed, renamed or edited column, an edited text (upper case
and look-alike letters included), a changed label, an added row.

**Derived rows.** The library's fixed transforms of verified rows (:func:`pairwise_rows`, :func:`squarechipo.privacy.
release.rows.combine_parts`) compute their rows here, in memory, from the rows they just verified, and attach a
*derivation*: the sources' ledgers (sealed, without their row sets) and the rows' hashes under a key of this process,
which never leaves it. Derived rows are therefore valid only in the process that derived them, and only as derived;
handed to another process (saved and loaded there) they are refused (derive them again from the release). No function
takes a caller's computation, and none passes a caller's keyword to ``datasets`` (which could load other rows from a
cache file instead of computing them).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import uuid

import datasets
import numpy as np

from squarechipo.data import metadata
from squarechipo.data.fingerprint import (
    ROW_SET_BYTES,
    _exact_row_hashes,
    _released_row_hashes,
    preference_fingerprint,
    rows_outside,
)
from squarechipo.data.label_roles import label_free
from squarechipo.data.text import pair_text
from squarechipo.privacy.ledger.ledger import IntegrityError, PrivacyLedger, parse_ledger_block

__all__ = ["DERIVED_FORMAT", "check_readable", "check_rows", "get_ledger", "pairwise_rows"]

#: The block of rows a library transform derived in this process from verified rows.
DERIVED_FORMAT = "squarechipo.derived_rows/1"
#: Format types whose readers see the stored values (only their container changes). Anything else (a function set by
#: ``with_transform``/``set_transform``, a formatter registered under another name) may change what a reader sees.
_VALUE_PRESERVING = {None, "python", "numpy", "np", "torch", "pt", "arrow", "pa", "pandas", "pd", "polars", "pl"}
#: The key of this process's derivations: drawn at import, never stored, never shown.
_PROCESS_KEY = secrets.token_bytes(32)
#: Derivation id → (the keyed hashes of the rows it derived, the keyed digest of its block: transform and sources),
#: this process only. The block travels unsealed in the rows' metadata; its digest here is its seal.
_DERIVED: dict[str, tuple[frozenset[bytes], bytes]] = {}


@label_free("a check of how readers will see the rows; reads no label")
def check_readable(dataset, where: str) -> None:
    """Refuse a dataset whose readers would not see its stored rows (a format transform or an unknown format)."""
    kind = getattr(dataset, "format", {}).get("type") if isinstance(dataset, datasets.Dataset) else None
    if kind not in _VALUE_PRESERVING:
        raise IntegrityError(
            f"{where}: it carries a privacy ledger and a {kind!r} format (set_format, with_transform or "
            "set_transform with a function), which changes what every reader sees (a trainer's tokenization, map, "
            "iteration) without changing the stored rows, so the ledger cannot vouch for what would be read. Remove "
            "it (dataset.reset_format(), or with_format(None)) and transform the rows after a reader took them."
        )


@label_free("reads and checks the ledger (the rule's own test)")
def get_ledger(dataset, where: str = "dataset") -> PrivacyLedger | None:
    """The ledger a dataset carries, its seal checked and its rows matched to the rows it released; None for data
    that was never privatized here.

    Raises:
        IntegrityError: when the ledger was edited, is not valid, or does not describe these rows as a reader would
            see them (rows added, edited or relabelled after the release, a column added, removed or changed, a format
            transform; rows that cannot be checked: a streamed or pre-tokenised dataset).
    """
    block = metadata.read_block(dataset)
    if not block:
        return None
    record = parse_ledger_block(block, where)
    if record.get("format") == DERIVED_FORMAT:
        return _derived_ledger(record, dataset, where)
    ledger = PrivacyLedger.from_dict(record, where)
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
    usable = [(row_set, bound, width) for row_set, bound, width in sets if bound is None or sorted(bound) == columns]
    if not usable:
        raise _column_change(columns, [bound for _, bound, _ in sets], where)
    outside = None
    hashed: dict[bool, list[bytes]] = {}
    for row_set, bound, width in usable:
        exact = bound is not None
        if exact not in hashed:
            row_hashes = _exact_row_hashes(dataset) if exact else _released_row_hashes(dataset)
            if row_hashes is None:
                raise IntegrityError(
                    f"{where}: these rows hold no prompt/chosen/rejected (or responses) text, so they cannot be "
                    "matched to the privacy ledger they carry. Pass the released text rows (the trainers tokenize)."
                )
            hashed[exact] = row_hashes
        found = rows_outside(hashed[exact], [row_set], width)
        outside = found if outside is None else np.intersect1d(outside, found)
    return outside


def _not_released(outside: np.ndarray, n_rows: int, released: int, where: str) -> IntegrityError:
    shown = ", ".join(str(i) for i in outside[:5]) + (", ..." if outside.size > 5 else "")
    return IntegrityError(
        f"{where}: {outside.size} of {n_rows} rows (row {shown}) are not rows its privacy ledger released "
        f"({released} released), or their labels or text were changed after the release. A ledger covers only the "
        "rows it released, exactly as written: selecting, shuffling or splitting them keeps it; adding rows or "
        "editing any value does not. Release the added rows on their own and combine the parts "
        "(squarechipo.privacy.combine_parts), or train on the release as it is."
    )


@label_free("compares the rows with the set a ledger released (the rule's own check)")
def check_rows(ledger: PrivacyLedger, dataset, where: str) -> None:
    """Raise :class:`IntegrityError` unless every row of the dataset, column for column and as a reader sees it, is
    a row the ledger released (see the module's invariant)."""
    if not isinstance(dataset, datasets.Dataset):
        raise IntegrityError(
            f"{where}: a {type(dataset).__name__} carries this privacy ledger, but its rows cannot be read ahead to "
            "check that they are the released ones. Pass the released datasets.Dataset itself (a streamed copy of it "
            "is not checked)."
        )
    check_readable(dataset, where)
    if ledger.summary_only:
        raise IntegrityError(
            f"{where}: its privacy ledger has no row sets (it is the copy a model's privacy record keeps): it states "
            "a release but vouches for no rows. Load the release as saved (its folder or file)."
        )
    outside = _outside(ledger, dataset, where)
    if outside is not None and outside.size:
        raise _not_released(outside, len(dataset), sum(r.n_rows for r in ledger.releases), where)


# ---------------------------------------------------------------------------------------------- derived rows


def _keyed_hashes(rows: datasets.Dataset) -> list[bytes]:
    return [hmac.new(_PROCESS_KEY, h, hashlib.sha256).digest()[:ROW_SET_BYTES] for h in _exact_row_hashes(rows)]


def _derive(sources: list[PrivacyLedger], rows: datasets.Dataset, transform: str) -> datasets.Dataset:
    """``rows``, computed in this process by the library transform ``transform`` from rows whose ledgers
    (``sources``) were just verified, with a derivation attached (see the module). Never for rows a caller computed."""
    derivation = uuid.uuid4().hex
    block = {
        "format": DERIVED_FORMAT,
        "transform": transform,
        "derivation": derivation,
        "sources": [source.summary() for source in sources],
    }
    _DERIVED[derivation] = (frozenset(_keyed_hashes(rows)), _block_seal(block))
    return metadata.with_block(rows, json.dumps(block, sort_keys=True))


def _block_seal(block: dict) -> bytes:
    """The derivation block's seal under this process's key: its sources cannot be swapped for another release's."""
    return hmac.new(_PROCESS_KEY, json.dumps(block, sort_keys=True).encode("utf-8"), hashlib.sha256).digest()


def _derived_ledger(record: dict, dataset, where: str) -> PrivacyLedger:
    transform = record.get("transform")
    if not isinstance(dataset, datasets.Dataset):
        raise IntegrityError(f"{where}: a {type(dataset).__name__} of {transform} rows cannot be checked.")
    check_readable(dataset, where)
    summaries = record.get("sources")
    if not isinstance(summaries, list) or not summaries:
        raise IntegrityError(f"{where}: its derivation ({transform}) names no source release.")
    sources = [PrivacyLedger.from_dict(s, f"{where} (a source release of its {transform} rows)") for s in summaries]
    found = _DERIVED.get(str(record.get("derivation")))
    if found is not None and not hmac.compare_digest(found[1], _block_seal(record)):
        raise IntegrityError(
            f"{where}: the derivation of these {transform} rows was changed after they were derived (its sources, "
            "the releases whose ε they carry, are not the ones they were derived from). Derive them again from the "
            "release."
        )
    known = found[0] if found is not None else None
    if known is None:
        raise IntegrityError(
            f"{where}: these rows were derived from a release by {transform} in another process, or saved and loaded "
            "since: derived rows are checked only in the process that derived them. Derive them again from the "
            f"release ({transform} of the loaded release)."
        )
    outside = np.flatnonzero([h not in known for h in _keyed_hashes(dataset)])
    if outside.size:
        raise _not_released(outside, len(dataset), len(known), f"{where} ({transform} rows)")
    return PrivacyLedger.derived_from(sources, record)


def _pairwise_row(row: dict) -> dict:
    """A preference row (x, a⁺, a⁻) as the pair of texts chosen = text(x, a⁺, a⁻), rejected = text(x, a⁻, a⁺)."""
    return {
        "chosen": pair_text(row["prompt"], row["chosen"], row["rejected"]),
        "rejected": pair_text(row["prompt"], row["rejected"], row["chosen"]),
    }


@label_free("a fixed text transform of released rows (their ledger checked first); raw rows stay raw")
def pairwise_rows(dataset: datasets.Dataset) -> datasets.Dataset:
    """prompt/chosen/rejected rows → the texts of a pairwise preference model (:func:`squarechipo.data.text.
    pair_text` of each order), row by row, in order. A release's ledger is checked, then the derived rows are
    computed here from the rows it checked and carry a derivation (see the module): post-processing of the release,
    valid in this process. It takes no ``datasets.map`` options: one of them (``cache_file_name``) loads rows from a
    file instead of computing them."""
    missing = {"prompt", "chosen", "rejected"} - set(dataset.column_names)
    if missing:
        raise ValueError(
            f"a preference-model dataset needs prompt/chosen/rejected columns; missing {sorted(missing)}. "
            "Implicit-prompt rows: apply trl.extract_prompt first."
        )
    ledger = get_ledger(dataset)
    table = dataset.with_format("arrow")[:]
    empty = sorted({i for name in ("prompt", "chosen", "rejected") for i in np.flatnonzero(table[name].is_null())})
    if empty:
        raise ValueError(
            f"{len(empty)} row(s) (row {', '.join(map(str, empty[:5]))}) have no prompt, chosen or rejected value: a "
            "preference-model row needs all three. Drop them first (dataset.filter)."
        )
    pairs = [_pairwise_row(row) for row in table.select(["prompt", "chosen", "rejected"]).to_pylist()]
    features = datasets.Features({"chosen": datasets.Value("string"), "rejected": datasets.Value("string")})
    derived = datasets.Dataset.from_list(pairs, features=features)
    return derived if ledger is None else _derive([ledger], derived, "pairwise_rows")
