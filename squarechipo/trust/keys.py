"""Ed25519 signatures: a custodian signs, anyone with the public key verifies, nobody else can sign.

A ledger, a release marker and a model record are *sealed*: a ``digest`` (sha256 of their canonical fields) and, where
the process holds a signing key, a ``signature`` of that digest (Ed25519, RFC 8032, from the ``cryptography``
package). Verifying needs the public key only, so an analyst who checks a release cannot make one.

Keys:

- **The signing key** is a private key file written by ``squarechipo key new`` (PKCS #8 PEM, mode 0600), named by
  ``$SQUARECHIPO_SIGNING_KEY``. Keys are generated, never typed: a file that is not an Ed25519 key, or that others may
  read, is refused.
- **Trusted keys** are named by ``$SQUARECHIPO_TRUSTED_KEYS``: a file with one public key a line
  (``ed25519:<base64> comment``, as ``squarechipo key new`` prints), or the keys themselves (``ed25519:...``, several
  separated by commas). A seal by any other key is refused, naming the key's id.
- **One person, one machine** (neither variable set): this machine's own key pair signs and is the only one trusted.
  It is generated at its first use in :func:`squarechipo.trust.machine.machine_dir` and logged. Such a process holds
  both roles, so its guarantees are against mistakes, not against itself (docs/privacy.md, the two roles).
- **An analyst** sets only ``$SQUARECHIPO_TRUSTED_KEYS``: nothing it writes is signed, and what it reads must be
  signed by a trusted key.
"""

from __future__ import annotations

import base64
import getpass
import hashlib
import logging
import os
import socket
import stat
import threading
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from squarechipo.trust import machine

__all__ = [
    "SIGNING_KEY_ENV",
    "TRUSTED_KEYS_ENV",
    "SigningKeyError",
    "SigningKey",
    "generate_key_pair",
    "key_id_of",
    "parse_public_key",
    "public_key_text",
    "signing_key",
    "trusted_keys",
    "check_public_point",
    "trust_anchor",
    "trust_is_explicit",
    "verify",
    "verify_with",
]

logger = logging.getLogger("squarechipo")

SIGNING_KEY_ENV = "SQUARECHIPO_SIGNING_KEY"
TRUSTED_KEYS_ENV = "SQUARECHIPO_TRUSTED_KEYS"
_PREFIX = "ed25519:"
_MACHINE_KEY = "signing_key.pem"


class SigningKeyError(ValueError):
    """A signing key or a trusted key cannot be used (missing, not a key, readable by others, unknown)."""


def key_id_of(public: Ed25519PublicKey) -> str:
    """A public key's id: the first 16 hex digits of sha256 over its 32 raw bytes."""
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def public_key_text(public: Ed25519PublicKey) -> str:
    """``ed25519:<base64 of the raw key>``, the form trusted-keys files and the variable hold."""
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return _PREFIX + base64.b64encode(raw).decode("ascii")


@dataclass(frozen=True)
class SigningKey:
    """A private key read from its file, and where from."""

    private: Ed25519PrivateKey
    path: Path

    @property
    def public(self) -> Ed25519PublicKey:
        return self.private.public_key()

    @property
    def key_id(self) -> str:
        return key_id_of(self.public)

    def sign(self, digest: str) -> str:
        """``ed25519:<key id>:<base64 signature>`` of ``digest`` (a string such as ``sha256:<hex>``)."""
        signature = self.private.sign(digest.encode("utf-8"))
        return f"{_PREFIX}{self.key_id}:{base64.b64encode(signature).decode('ascii')}"


def generate_key_pair(path: str | os.PathLike) -> SigningKey:
    """Write a new private key to ``path`` (mode 0600, never over an existing file) and its public key beside it
    (``<path>.pub``: ``ed25519:<base64> squarechipo <user>@<host>``). The key is written whole into a file of its own
    and then linked into place, so a process that reads ``path`` never sees half a key, and of two processes making
    the first key at once exactly one wins (the other gets :class:`SigningKeyError` and reads the winner's)."""
    path = Path(path).expanduser()
    if not path.is_absolute():
        raise SigningKeyError(
            f"{path}: give the key file as an absolute path, so that every process finds the same key."
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    private = Ed25519PrivateKey.generate()
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    building = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.new")
    descriptor = os.open(building, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(pem)
            handle.flush()
            os.fsync(handle.fileno())
        os.link(building, path)  # atomic, and fails if a key is there
    except FileExistsError:
        raise SigningKeyError(
            f"{path} already exists: a key is never overwritten (what it signed would no longer verify). Choose "
            "another path (squarechipo key new --out PATH)."
        ) from None
    finally:
        building.unlink(missing_ok=True)
    key = SigningKey(private, path)
    comment = f"squarechipo {getpass.getuser()}@{socket.gethostname()}"
    Path(f"{path}.pub").write_text(f"{public_key_text(key.public)} {comment}\n", encoding="utf-8")
    return key


def _read_private(path: Path) -> SigningKey:
    if not path.is_file():
        raise SigningKeyError(
            f"{SIGNING_KEY_ENV} names {path}, which does not exist. Point it at the private key file that "
            "`squarechipo key new` wrote, or write one there."
        )
    mode = path.stat().st_mode
    if path.stat().st_uid != os.getuid():  # checked before it is read: another account's key may not be readable
        raise SigningKeyError(
            f"{path} is owned by uid {path.stat().st_uid}, not this account (uid {os.getuid()}): a signing key is "
            "its holder's own. Use your own key (squarechipo key new --out PATH)."
        )
    try:
        held = path.read_bytes()
    except OSError as error:
        raise SigningKeyError(
            f"{path} cannot be read ({error.strerror}): point {SIGNING_KEY_ENV} at your own private key file."
        ) from None
    if held[: len(_PREFIX)] == _PREFIX.encode("ascii"):
        raise SigningKeyError(
            f"{SIGNING_KEY_ENV} names {path}, which holds a public key (the .pub line), not the private key: point "
            "it at the private key file beside it (the same name without .pub). Analysts set only "
            f"{TRUSTED_KEYS_ENV} to the public key."
        )
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SigningKeyError(
            f"{path} may be read by other users (mode {stat.S_IMODE(mode):o}): whoever reads it can sign releases. "
            f"Make it private (chmod 600 {path}), and make a new key if others may have read it."
        )
    try:
        private = serialization.load_pem_private_key(held, password=None)
    except (ValueError, TypeError):
        private = None
    if not isinstance(private, Ed25519PrivateKey):
        raise SigningKeyError(
            f"{path} is not an Ed25519 private key written by `squarechipo key new` (keys are generated, never "
            "typed: a typed secret can be guessed from one signature's context). Write one: squarechipo key new."
        )
    return SigningKey(private, path)


_LOCK = threading.Lock()


def trust_is_explicit() -> bool:
    """Whether trusted keys are named (an analyst, or a custodian who lists its own key): then no key is trusted or
    generated implicitly."""
    return bool(os.environ.get(TRUSTED_KEYS_ENV))


def signing_key(*, create: bool = True) -> SigningKey | None:
    """The key this process signs with: ``$SQUARECHIPO_SIGNING_KEY``; else, where no trusted keys are named, this
    machine's own key (generated at its first use when ``create``); else None (an analyst signs nothing)."""
    named = os.environ.get(SIGNING_KEY_ENV)
    if named:
        path = Path(named).expanduser()
        if not path.is_absolute():
            raise SigningKeyError(f"{SIGNING_KEY_ENV}={named!r} is relative: give the key file as an absolute path.")
        return _read_private(path)
    if trust_is_explicit():
        return None
    path = machine.machine_dir() / _MACHINE_KEY
    with _LOCK:
        if not path.exists():
            if not create:
                return None
            try:
                key = generate_key_pair(path)
            except SigningKeyError:  # another process generated it meanwhile
                return _read_private(path)
            logger.warning(
                "generated this machine's signing key at %s (public key %s, id %s): releases and model records made "
                "here are signed with it. A team names its custodian's key instead (docs/privacy.md).",
                path,
                public_key_text(key.public),
                key.key_id,
            )
            return key
    return _read_private(path)


def parse_public_key(text: str, where: str) -> Ed25519PublicKey:
    """A public key from its text (``ed25519:<base64>``), checked as a key anyone generated would be."""
    return _parse_public(text, where)


def verify_with(public: Ed25519PublicKey, signature: str, digest: str) -> bool:
    """Whether ``signature`` (``ed25519:<key id>:<base64>``) is ``public``'s signature of ``digest``."""
    named, _, encoded = signature[len(_PREFIX) :].partition(":")
    if not signature.startswith(_PREFIX) or named != key_id_of(public):
        return False
    try:
        public.verify(base64.b64decode(encoded, validate=True), digest.encode("utf-8"))
    except (InvalidSignature, ValueError):
        return False
    return True


def _parse_public(text: str, where: str) -> Ed25519PublicKey:
    body = text.strip()
    if not body.startswith(_PREFIX):
        raise SigningKeyError(f"{where}: {body[:40]!r} is not a public key; each key reads ed25519:<base64>.")
    try:
        raw = base64.b64decode(body[len(_PREFIX) :], validate=True)
        key = Ed25519PublicKey.from_public_bytes(raw)
    except ValueError:
        raise SigningKeyError(
            f"{where}: {body[:40]!r} is not a valid Ed25519 public key (32 bytes, base64)."
        ) from None
    check_public_point(raw, where)
    return key


def check_public_point(raw: bytes, where: str) -> None:
    """Refuse a public key that is not a canonical point of the prime-order subgroup (libsodium's
    ``crypto_core_ed25519_is_valid_point``). A small-order key such as the identity point lets one forged signature
    (R = identity, S = 0) verify for every message; a non-canonical encoding gives one key two ids."""
    from nacl.bindings import crypto_core_ed25519_is_valid_point

    if len(raw) != 32 or not crypto_core_ed25519_is_valid_point(raw):
        shown = _PREFIX + base64.b64encode(raw).decode("ascii")
        raise SigningKeyError(
            f"{where}: {shown!r} is a small-order or non-canonically encoded Ed25519 point, not a key anyone "
            "generated (a signature by it can be forged for any message). Use the public key `squarechipo key new` "
            "printed."
        )


def _check_trust_file(path: Path) -> None:
    """A trusted-keys file, and the folder holding it, may be changed only by this account (or root): whoever may
    append a key there may sign releases this account accepts."""
    try:
        machine.check_own(path, "trusted-keys file")
        folder = path.parent
        info = os.stat(folder)
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not info.st_mode & stat.S_ISVTX:
            raise machine.FolderError(
                f"{folder} (the folder of the trusted-keys file {path.name}) may be written by other users (mode "
                f"{stat.S_IMODE(info.st_mode):o}), who could replace the file. Fix: keep the file in a folder only "
                f"you may write (chmod go-w {folder})."
            )
    except machine.FolderError as error:
        raise SigningKeyError(f"{TRUSTED_KEYS_ENV}: {error}") from None


def trust_anchor() -> dict[str, Ed25519PublicKey]:
    """The keys a third party's check rests on, without creating anything: the named trusted keys, else the key this
    process signs with if it exists. Refuses when there is none: a check against no key would accept anything."""
    if trust_is_explicit():
        return trusted_keys()
    own = signing_key(create=False)
    if own is None:
        raise SigningKeyError(
            f"no trusted key here ({TRUSTED_KEYS_ENV} is unset and this account has no signing key), so nothing can "
            f"be checked: set {TRUSTED_KEYS_ENV} to the custodian's public key (a file of keys, or ed25519:...)."
        )
    return {own.key_id: own.public}


def trusted_keys() -> dict[str, Ed25519PublicKey]:
    """Key id → public key of every key whose seals this process accepts."""
    named = os.environ.get(TRUSTED_KEYS_ENV)
    if not named:
        own = signing_key(create=False)  # checking never makes a key: one made now would have signed nothing
        return {} if own is None else {own.key_id: own.public}
    if named.strip().startswith(_PREFIX):
        entries, where = [e for e in named.split(",") if e.strip()], TRUSTED_KEYS_ENV
    else:
        path = Path(named).expanduser()
        if not path.is_file():
            raise SigningKeyError(
                f"{TRUSTED_KEYS_ENV} names {path}, which does not exist. Point it at a trusted-keys file (one "
                "public key a line, as `squarechipo key new` prints), or set it to the key itself (ed25519:...)."
            )
        _check_trust_file(path)
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as error:
            why = error.strerror if isinstance(error, OSError) else "not UTF-8 text"
            raise SigningKeyError(
                f"{TRUSTED_KEYS_ENV} names {path}, which cannot be read as a trusted-keys file ({why}): it holds one "
                "public key a line, as `squarechipo key new` prints (ed25519:...)."
            ) from None
        entries, where = [line.split()[0] for line in lines if line.strip() and not line.startswith("#")], str(path)
    keys = [_parse_public(entry, where) for entry in entries]
    if not keys:
        raise SigningKeyError(
            f"{where} holds no public key, so no seal could be accepted: add the custodian's public key."
        )
    return {key_id_of(key): key for key in keys}


def verify(signature: str, digest: str, where: str, what: str) -> str | None:
    """Check ``signature`` (``ed25519:<key id>:<base64>``) of ``digest`` against the trusted keys: the key id when it
    verifies, None when it does not (the sealed fields were changed, or the signature was made up).

    Raises:
        SigningKeyError: the signature is malformed, or names a key that is not trusted here (its id is named).
    """
    body = signature[len(_PREFIX) :] if signature.startswith(_PREFIX) else ""
    named, _, encoded = body.partition(":")
    if not named or not encoded:
        raise SigningKeyError(f"{where}: the {what}'s signature {signature[:40]!r} is malformed.")
    trusted = trusted_keys()
    if named not in trusted:
        source = (
            f"the keys {TRUSTED_KEYS_ENV} names ({', '.join(sorted(trusted)) or 'none'})"
            if trust_is_explicit()
            else f"this machine's own key ({', '.join(trusted) or 'none'})"
        )
        raise SigningKeyError(
            f"{where}: the {what} is signed by key {named}, which is not among {source}. If you trust whoever holds "
            f"that key (your team's custodian), add its public key to {TRUSTED_KEYS_ENV}; otherwise do not use it."
        )
    try:
        trusted[named].verify(base64.b64decode(encoded, validate=True), digest.encode("utf-8"))
    except (InvalidSignature, ValueError):
        return None
    return named
