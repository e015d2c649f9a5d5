"""Tamper evidence for releases: a digest over the ledger's fields and over the released rows.

What it detects: an accident or a naive edit after the release was written, such as a changed ε or mechanism in
the ledger, edited labels, a deleted ledger beside released labels, or rows added or removed. A ledger whose digest
does not match its fields, or a release folder whose rows or ledger do not match its marker
(``squarechipo_release.json``), is refused when it is loaded.

What it does not detect: a forger who edits the labels or the ledger and recomputes the digests with this code.
Against that, set a secret key in ``SQUARECHIPO_LEDGER_KEY``: the digests become HMAC-SHA256 under the key,
which only its holders can recompute, and a ledger sealed with a key is refused where the key is not set.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from pathlib import Path
from typing import Any

import datasets

__all__ = [
    "KEY_ENV",
    "MARKER",
    "IntegrityError",
    "check_marker",
    "check_seal",
    "rows_digest",
    "seal",
    "write_marker",
]

#: The environment variable holding the team's secret key for HMAC digests (optional).
KEY_ENV = "SQUARECHIPO_LEDGER_KEY"
#: Written last into every release folder: the digests of its ledger and its rows.
MARKER = "squarechipo_release.json"
_SEPARATOR = "\x1f"


class IntegrityError(ValueError):
    """A release or a ledger does not match its digest: it was changed after it was written."""


def _key() -> bytes | None:
    value = os.environ.get(KEY_ENV)
    return value.encode("utf-8") if value else None


def _digest(payload: bytes, key: bytes | None) -> str:
    if key is None:
        return "sha256:" + hashlib.sha256(payload).hexdigest()
    return "hmac-sha256:" + hmac.new(key, payload, hashlib.sha256).hexdigest()


def _canonical(record: dict[str, Any]) -> bytes:
    body = {k: v for k, v in record.items() if k != "digest"}
    return json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def seal(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with a ``digest`` of its other fields (HMAC when ``SQUARECHIPO_LEDGER_KEY`` is set)."""
    return {**record, "digest": _digest(_canonical(record), _key())}


def check_seal(record: dict[str, Any], where: str) -> None:
    """Raise :class:`IntegrityError` unless ``record``'s digest matches its fields."""
    stated = record.get("digest")
    if not stated:
        raise IntegrityError(
            f"{where}: the privacy ledger has no digest, so an edit to it cannot be ruled out (it was written by "
            "squarechipo < 0.2, or edited). Release the raw rows again with this version."
        )
    keyed = stated.startswith("hmac-sha256:")
    key = _key()
    if keyed and key is None:
        raise IntegrityError(
            f"{where}: the privacy ledger was sealed with a secret key; set {KEY_ENV} to that key to check it."
        )
    if not hmac.compare_digest(stated, _digest(_canonical(record), key if keyed else None)):
        raise IntegrityError(
            f"{where}: the privacy ledger does not match its digest: it was changed after it was written, so its ε, "
            "mechanism and releases cannot be trusted. Restore the original release, or release the raw rows again."
        )


def _column_text(column) -> str:
    values = column.to_pylist()
    if all(isinstance(v, str) for v in values):
        return _SEPARATOR.join(values)
    return _SEPARATOR.join(json.dumps(v, sort_keys=True, ensure_ascii=False) for v in values)


def rows_digest(dataset: datasets.Dataset) -> str:
    """sha256 over the stored rows in order, every column by name (released labels included)."""
    table = dataset.with_format("arrow")[:]
    digest = hashlib.sha256()
    for name in sorted(table.column_names):
        digest.update(name.encode("utf-8") + b"\0" + _column_text(table.column(name)).encode("utf-8") + b"\0")
    return "sha256:" + digest.hexdigest()


def write_marker(folder: Path, dataset: datasets.Dataset, ledger_digest: str) -> None:
    """The folder's marker (written last): the ledger's digest and the rows' digest, sealed."""
    record = seal({"ledger_digest": ledger_digest, "rows_digest": rows_digest(dataset), "n_rows": len(dataset)})
    (folder / MARKER).write_text(json.dumps(record, indent=2), encoding="utf-8")


def check_marker(folder: Path, dataset: datasets.Dataset, ledger_digest: str | None) -> None:
    """Raise :class:`IntegrityError` when a release folder's rows or ledger differ from its marker."""
    path = folder / MARKER
    if not path.is_file():
        return
    record = json.loads(path.read_text(encoding="utf-8"))
    check_seal(record, str(path))
    if ledger_digest is None:
        raise IntegrityError(
            f"{folder} holds released labels (its {MARKER} says so) but no privacy ledger: the ledger was deleted, so "
            "nothing says how the labels were released. Restore the release folder, or release the raw rows again."
        )
    if ledger_digest != record["ledger_digest"]:
        raise IntegrityError(f"{folder}: the privacy ledger is not the one this release was saved with.")
    if len(dataset) != record["n_rows"] or rows_digest(dataset) != record["rows_digest"]:
        raise IntegrityError(
            f"{folder}: the released rows changed after the release was saved ({len(dataset)} rows now, "
            f"{record['n_rows']} then, or their labels or text differ). Restore the release, or release the raw "
            "rows again."
        )
