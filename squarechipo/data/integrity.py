"""Tamper evidence for saved releases: a seal over the ledger's fields, and a marker over the saved rows.

Every way a release is saved (a ``save_to_disk`` folder, a JSONL file, a Parquet file) writes, beside its ledger, a
sealed **marker**: the ledger's digest, the rows' digest and their count. Every loader checks it. A saved dataset that
carries a ledger but no marker, or whose marker does not match its rows or its ledger, is refused: a deleted
marker, edited labels, a swapped ledger or rows added or removed cannot pass as the original release.

What it does not detect: a forger who edits the labels or the ledger and recomputes the digests with this code.
Against that, set a secret key in ``SQUARECHIPO_LEDGER_KEY``: seals become HMAC-SHA256 under the key, which only its
holders can recompute. With the key set, only keyed seals are accepted (a plain digest is what a forger without the
key would write); a keyed seal is refused where the key is not set. A key must be at least 32 bytes (a short key is
found by brute force from one seal: a 1-character key was, in under a second), and a key that is set but empty is
refused rather than read as "no key". A keyed seal names its key by a short identifier (an HMAC of a fixed string,
which reveals nothing of the key), so a seal made under another key is reported as such.

The data layer owns this because it is about stored rows; :mod:`squarechipo.privacy.ledger.records` says what a ledger
means.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import os
import secrets
from typing import Any

import datasets

from squarechipo.data.label_roles import label_free
from squarechipo.data.metadata import FOLDER_MARKER

__all__ = [
    "KEY_ENV",
    "MARKER",
    "IntegrityError",
    "LedgerKeyError",
    "MIN_KEY_BYTES",
    "key_id",
    "key_weakness",
    "new_key",
    "check_marker",
    "check_seal",
    "marker_record",
    "rows_digest",
    "seal",
]

#: The environment variable holding the team's secret key for HMAC digests (optional).
KEY_ENV = "SQUARECHIPO_LEDGER_KEY"
#: The marker's file name in a release folder (written last).
MARKER = FOLDER_MARKER
_SEPARATOR = "\x1f"
_KEYED = "hmac-sha256:"
#: The shortest key accepted, in bytes (UTF-8): 256 bits, the HMAC-SHA256 key size.
MIN_KEY_BYTES = 32
_GENERATE = "the output of `squarechipo key new`"
#: What to do about a release that fails its checks: releasing the raw rows again is not a fix.
_RESTORE = (
    "Restore the release as it was saved (its folder or file). Releasing the raw rows again would spend their ε a "
    "second time (the registry of releases refuses it unless rerelease=True, and the ledger then adds both)."
)


class IntegrityError(ValueError):
    """A release or a ledger does not match its digest: it was changed after it was written."""


class LedgerKeyError(ValueError):
    """``SQUARECHIPO_LEDGER_KEY`` is set to a value that cannot protect a seal (empty or too short)."""


def _key() -> bytes | None:
    value = os.environ.get(KEY_ENV)
    if value is None:
        return None
    key = value.encode("utf-8")
    if not key.strip():
        raise LedgerKeyError(
            f"{KEY_ENV} is set but empty. An empty key would silently fall back to plain digests, which anyone can "
            "recompute: unset it (plain digests, no protection against a forger), or set it to a secret of at "
            f"least {MIN_KEY_BYTES} bytes, e.g. {_GENERATE}."
        )
    if len(key) < MIN_KEY_BYTES:
        raise LedgerKeyError(
            f"{KEY_ENV} is {len(key)} byte(s) long; a key must be at least {MIN_KEY_BYTES} bytes, or one seal gives "
            f"it away to a brute-force search. Use e.g. {_GENERATE}."
        )
    weakness = key_weakness(key)
    if weakness:
        raise LedgerKeyError(
            f"{KEY_ENV} is not random: {weakness}, so a search over such keys finds it from one seal. Generate one: "
            f"{_GENERATE}."
        )
    return key


#: The least empirical entropy a key must show per byte, in bits (from the frequency of each byte in the key). Random
#: hex keys show about 3.6 (32 digits; the least of 200,000 draws was 2.75) to 3.8 (64 digits); one letter repeated
#: after a short prefix shows about 1.6.
MIN_KEY_BITS_PER_BYTE = 2.5


def key_weakness(key: bytes) -> str | None:
    """Why ``key`` is not random (a repeated pattern, too few distinct characters), or None. A check, not a proof:
    it refuses keys a person types (one character 32 times, a word repeated); a random key passes by a wide margin
    (a 64-hex-digit key from :func:`new_key` shows about 3.8 bits a byte)."""
    for period in range(1, len(key) // 2 + 1):
        if key == (key[:period] * (len(key) // period + 1))[: len(key)]:
            return f"it repeats a pattern of {period} byte(s)"
    counts = [key.count(byte) for byte in set(key)]
    bits = -sum(c * math.log2(c / len(key)) for c in counts)
    if bits < MIN_KEY_BITS_PER_BYTE * len(key):
        return (
            f"its {len(key)} bytes carry about {bits / len(key):.1f} bits each (from {len(set(key))} distinct bytes), "
            f"fewer than {MIN_KEY_BITS_PER_BYTE}"
        )
    return None


def new_key() -> str:
    """A new secret key for ``SQUARECHIPO_LEDGER_KEY``: 32 random bytes from :mod:`secrets`, as 64 hex digits."""
    return secrets.token_hex(32)


def key_id(key: bytes) -> str:
    """A short public name for a key: the first 8 hex digits of HMAC(key, a fixed string). Two keys almost surely
    get different names, and the name reveals nothing usable about the key."""
    return hmac.new(key, b"squarechipo key id", hashlib.sha256).hexdigest()[:8]


def _digest(payload: bytes, key: bytes | None) -> str:
    if key is None:
        return "sha256:" + hashlib.sha256(payload).hexdigest()
    return f"{_KEYED}{key_id(key)}:" + hmac.new(key, payload, hashlib.sha256).hexdigest()


def _stated_key_id(stated: str) -> str | None:
    """The key identifier a keyed seal names (None for seals written before identifiers were added)."""
    body = stated[len(_KEYED) :]
    return body.split(":", 1)[0] if ":" in body else None


def _canonical(record: dict[str, Any]) -> bytes:
    body = {k: v for k, v in record.items() if k != "digest"}
    return json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def seal(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with a ``digest`` of its other fields (HMAC when ``SQUARECHIPO_LEDGER_KEY`` is set)."""
    return {**record, "digest": _digest(_canonical(record), _key())}


def check_seal(
    record: dict[str, Any],
    where: str,
    what: str = "privacy ledger",
    fix: str = _RESTORE,
) -> None:
    """Raise :class:`IntegrityError` unless ``record``'s digest matches its fields under this machine's key setting.

    With ``SQUARECHIPO_LEDGER_KEY`` set only a keyed seal is accepted; without it a keyed seal cannot be checked.
    ``fix`` says what to do about a record without a seal.
    """
    stated = record.get("digest")
    if not stated:
        raise IntegrityError(
            f"{where}: the {what} has no digest, so an edit to it cannot be ruled out (it was written by an older "
            f"squarechipo, or edited). {fix}"
        )
    keyed, key = stated.startswith(_KEYED), _key()
    if keyed and key is None:
        named = _stated_key_id(stated)
        raise IntegrityError(
            f"{where}: the {what} was sealed with a secret key{f' (key id {named})' if named else ''}; set {KEY_ENV} "
            "to that key to check it."
        )
    if key is not None and not keyed:
        raise IntegrityError(
            f"{where}: {KEY_ENV} is set, but the {what} carries a plain sha256 digest, which anyone can recompute "
            "after an edit: only a seal under the key is accepted. Restore the original; or, if it was sealed before "
            f"the key was set, unset {KEY_ENV} to load it (a plain digest detects accidents, not a forger)."
        )
    named = _stated_key_id(stated) if keyed else None
    if named is not None and key is not None and named != key_id(key):
        raise IntegrityError(
            f"{where}: the {what} was sealed under another key (key id {named}; {KEY_ENV} here has id "
            f"{key_id(key)}). Nothing suggests it was edited: set {KEY_ENV} to the key it was sealed with to load it. "
            "Do not release the raw rows again for this: that would spend ε a second time."
        )
    expected = _digest(_canonical(record), key)
    if keyed and named is None:  # a seal written before keys were named
        expected = _KEYED + hmac.new(key, _canonical(record), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(stated, expected):
        raise IntegrityError(
            f"{where}: the {what} does not match its digest: it was changed after it was written, so what it states "
            f"cannot be trusted. {fix}"
        )


def _column_text(column) -> str:
    values = column.to_pylist()
    if all(isinstance(v, str) for v in values):
        return _SEPARATOR.join(values)
    return _SEPARATOR.join(json.dumps(v, sort_keys=True, ensure_ascii=False) for v in values)


@label_free("the digest of a release's rows as saved, whose labels are the released ones")
def rows_digest(dataset: datasets.Dataset) -> str:
    """sha256 over the stored rows in order, every column by name (released labels included)."""
    table = dataset.with_format("arrow")[:]
    digest = hashlib.sha256()
    for name in sorted(table.column_names):
        digest.update(name.encode("utf-8") + b"\0" + _column_text(table.column(name)).encode("utf-8") + b"\0")
    return "sha256:" + digest.hexdigest()


@label_free("seals a release's rows as saved (released labels)")
def marker_record(dataset: datasets.Dataset, ledger_digest: str) -> dict[str, Any]:
    """The sealed marker of a saved release: its ledger's digest and its rows' digest and count."""
    return seal({"ledger_digest": ledger_digest, "rows_digest": rows_digest(dataset), "n_rows": len(dataset)})


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
            f"nothing says how the labels were released. {_RESTORE}"
        )
    if ledger_digest != marker["ledger_digest"]:
        raise IntegrityError(f"{where}: the privacy ledger is not the one this release was saved with.")
    if len(dataset) != marker["n_rows"] or rows_digest(dataset) != marker["rows_digest"]:
        raise IntegrityError(
            f"{where}: the released rows changed after the release was saved ({len(dataset)} rows now, "
            f"{marker['n_rows']} then, or their labels or text differ). Restore the release, or release the raw "
            "rows again."
        )


def main(argv: list[str] | None = None) -> int:
    """``squarechipo key new``: print a new random key (set it as ``SQUARECHIPO_LEDGER_KEY``; keep it secret)."""
    import argparse

    parser = argparse.ArgumentParser(prog="squarechipo key", description="the secret key that seals privacy ledgers")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("new", help=f"print a new random key for {KEY_ENV} (32 bytes from the OS, hex)")
    parser.parse_args(argv)
    print(new_key())
    return 0
