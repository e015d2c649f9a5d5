"""Seals: a ``digest`` (sha256 over a record's canonical fields) and, where this process holds a signing key, a
``signature`` of the digest by that key (Ed25519, :mod:`squarechipo.trust.keys`). A signature verifies with the public
key alone, so whoever checks a release cannot make one. What a check found is a :class:`Seal`: ``signed`` (by a
trusted key, named), ``unsigned`` (a plain digest: it detects accidents, not a forger, who recomputes it) or
``legacy-hmac`` (an HMAC-SHA256 seal written by squarechipo 0.3 under ``$SQUARECHIPO_LEDGER_KEY``, still read with
that key: whoever holds the key can forge one). Across the trust boundary (``$SQUARECHIPO_TRUSTED_KEYS`` set) a
record must be signed by a trusted key; an unsigned or HMAC seal is refused there.

Ledgers (:mod:`squarechipo.privacy.ledger.ledger`), release markers (:mod:`squarechipo.data.integrity`), model
records and budgets are sealed here; this module knows nothing of what they mean.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from squarechipo.trust.keys import SigningKeyError, signing_key, trust_is_explicit, verify

__all__ = [
    "KEY_ENV",
    "MIN_KEY_BYTES",
    "RESTORE",
    "IntegrityError",
    "LedgerKeyError",
    "Seal",
    "check_seal",
    "file_sha256",
    "key_id",
    "key_weakness",
    "seal",
]

#: The environment variable holding the secret key of HMAC seals written by squarechipo 0.3 (read only).
KEY_ENV = "SQUARECHIPO_LEDGER_KEY"
_KEYED = "hmac-sha256:"
#: The shortest key accepted, in bytes (UTF-8): 256 bits, the HMAC-SHA256 key size.
MIN_KEY_BYTES = 32
_GENERATE = "the key the seals were written with (squarechipo 0.3 printed it with `squarechipo key new`)"
#: What to do about a release (ledger or marker) that fails its checks, the default ``fix`` of :func:`check_seal`:
#: releasing the raw rows again is not a fix.
RESTORE = (
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


def key_id(key: bytes) -> str:
    """A short public name for an HMAC key: the first 8 hex digits of HMAC(key, a fixed string). Two keys almost
    surely get different names, and the name reveals nothing usable about the key."""
    return hmac.new(key, b"squarechipo key id", hashlib.sha256).hexdigest()[:8]


def _stated_key_id(stated: str) -> str | None:
    """The key identifier a keyed seal names (None for seals written before identifiers were added)."""
    body = stated[len(_KEYED) :]
    return body.split(":", 1)[0] if ":" in body else None


_SEAL_FIELDS = ("digest", "signature")


def _canonical(record: dict[str, Any], view: Callable[[dict], dict] | None = None) -> bytes:
    """The bytes a seal covers: every field but the seal's own, through ``view`` (a ledger replaces each row set by
    its hash, so that a record may carry the ledger without its row sets and still verify)."""
    body = {k: v for k, v in record.items() if k not in _SEAL_FIELDS}
    body = view(body) if view is not None else body
    return json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


@dataclass(frozen=True)
class Seal:
    """What checking a seal found: ``signed`` (by the trusted key ``key_id``), ``self-signed`` (a model record signed
    by the untrusted key it names: who trained), ``unsigned`` (a plain digest) or ``legacy-hmac`` (squarechipo 0.3's
    HMAC under the key ``key_id``)."""

    kind: str
    key_id: str | None = None

    @property
    def signed(self) -> bool:
        return self.kind == "signed"

    def describe(self) -> str:
        """In words, for cards and ``squarechipo key verify``."""
        if self.kind == "signed":
            return f"signed by key {self.key_id} (Ed25519: only its holder can sign, anyone with it can check)"
        if self.kind == "self-signed":
            return (
                f"signed by key {self.key_id}, which the record names and this account does not trust: it says who "
                "wrote the record (who trained), never that rows were released"
            )
        if self.kind == "legacy-hmac":
            named = f" (key id {self.key_id})" if self.key_id else ""
            return f"legacy HMAC-SHA256 seal{named}, written by squarechipo 0.3: whoever holds the key can forge it"
        return "unsigned digest: it detects accidents and edits, not a forger"


def seal(record: dict[str, Any], *, view: Callable[[dict], dict] | None = None) -> dict[str, Any]:
    """``record`` with a ``digest`` of its other fields and, where this process holds a signing key, its
    ``signature`` (:func:`squarechipo.trust.keys.signing_key`)."""
    body = {k: v for k, v in record.items() if k not in _SEAL_FIELDS}
    digest = "sha256:" + hashlib.sha256(_canonical(body, view)).hexdigest()
    key = signing_key()
    return {**body, "digest": digest, **({"signature": key.sign(digest)} if key is not None else {})}


def _check_legacy_hmac(record: dict[str, Any], stated: str, where: str, what: str, fix: str) -> Seal:
    key, named = _key(), _stated_key_id(stated)
    if key is None:
        raise IntegrityError(
            f"{where}: the {what} carries a legacy HMAC seal{f' (key id {named})' if named else ''} written by "
            f"squarechipo 0.3; set {KEY_ENV} to that key to read it (such a seal is reported as legacy: whoever holds "
            "the key can forge it)."
        )
    if named is not None and named != key_id(key):
        raise IntegrityError(
            f"{where}: the {what} was sealed under another key (key id {named}; {KEY_ENV} here has id "
            f"{key_id(key)}). Nothing suggests it was edited: set {KEY_ENV} to the key it was sealed with to load it. "
            "Do not release the raw rows again for this: that would spend ε a second time."
        )
    payload = _canonical(record)
    expected = _KEYED + (f"{named}:" if named is not None else "") + hmac.new(key, payload, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(stated, expected):
        raise IntegrityError(
            f"{where}: the {what} does not match its digest: it was changed after it was written, so what it states "
            f"cannot be trusted. {fix}"
        )
    return Seal("legacy-hmac", named)


def check_seal(
    record: dict[str, Any],
    where: str,
    what: str = "privacy ledger",
    fix: str = RESTORE,
    *,
    view: Callable[[dict], dict] | None = None,
    signed_only: bool | None = None,
) -> Seal:
    """Check ``record``'s seal; return what was found (:class:`Seal`).

    ``signed_only`` (default: whether trusted keys are named, i.e. across the trust boundary) refuses an unsigned or
    legacy seal. A signature must be by a trusted key (:func:`squarechipo.trust.keys.trusted_keys`); a seal by
    another key is refused, naming it. ``fix`` says what to do about a record without a seal.

    Raises:
        IntegrityError: no seal, a digest or signature that does not match, an unknown key, or an unsigned seal where
            only signed ones are accepted.
    """
    stated = record.get("digest")
    if not stated or not isinstance(stated, str):
        raise IntegrityError(
            f"{where}: the {what} has no digest, so an edit to it cannot be ruled out (it was written by an older "
            f"squarechipo, or edited). {fix}"
        )
    signed_only = trust_is_explicit() if signed_only is None else signed_only
    if stated.startswith(_KEYED):
        found = _check_legacy_hmac(record, stated, where, what, fix)
    else:
        expected = "sha256:" + hashlib.sha256(_canonical(record, view)).hexdigest()
        if not hmac.compare_digest(stated, expected):
            raise IntegrityError(
                f"{where}: the {what} does not match its digest: it was changed after it was written, so what it "
                f"states cannot be trusted. {fix}"
            )
        signature = record.get("signature")
        if signature is None:
            found = Seal("unsigned")
        else:
            try:
                named = verify(str(signature), stated, where, what)
            except SigningKeyError as error:
                raise IntegrityError(str(error)) from None
            if named is None:
                raise IntegrityError(
                    f"{where}: the {what}'s signature does not verify: it was changed after it was signed, or the "
                    f"signature was made up. {fix}"
                )
            found = Seal("signed", named)
    if signed_only and not found.signed:
        raise IntegrityError(
            f"{where}: the {what} carries an {found.describe()}. Across the trust boundary "
            "($SQUARECHIPO_TRUSTED_KEYS is set) only a seal signed by a trusted key is accepted: anyone can write an "
            "unsigned one. Ask the custodian for the signed release; to read it as a legacy one on your own "
            "machine, unset SQUARECHIPO_TRUSTED_KEYS."
        )
    return found


def file_sha256(path) -> str:
    """The sha256 of a file's bytes (hex), read a block at a time."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()
