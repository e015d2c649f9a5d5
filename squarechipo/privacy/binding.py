"""A ledger bound to its rows: every reader checks that a dataset's rows, with their labels, are rows it released.

A release records the set of rows it released (:attr:`squarechipo.privacy.ledger.Release.row_set`: 4-byte prefixes of
each released row's hash, labels included, :func:`squarechipo.data.fingerprint.encode_row_set`).
:func:`squarechipo.privacy.ledger.get_ledger` calls :func:`check_rows` on every dataset it reads a ledger from. What
keeps a ledger valid is post-processing of the release: selecting, shuffling, filtering, splitting or repeating
released rows, adding label-free columns, tokenising, and rows derived one by one from released rows by
:func:`derive_rows`. What never does: adding rows, editing a row's text, changing its label.
"""

from __future__ import annotations

from dataclasses import replace

import datasets

from squarechipo.data.label_roles import label_free
from squarechipo.privacy.ledger import IntegrityError, PrivacyLedger, get_ledger, with_ledger

__all__ = ["check_rows", "derive_rows"]


#: Ledgers already matched to their rows, by (the dataset's fingerprint, the ledger's digest): ``datasets`` gives a
#: dataset a new fingerprint with every operation that changes it.
_BOUND: dict[tuple[str, str], bool] = {}


@label_free("compares the rows with the set a ledger released (the rule's own check)")
def check_rows(ledger: PrivacyLedger, dataset, where: str) -> None:
    """Raise :class:`IntegrityError` unless the dataset's rows, with their labels, are rows the ledger released.

    Selecting, shuffling, filtering or splitting released rows, adding label-free columns and tokenising keep a
    ledger valid (post-processing of the release); adding rows, editing their text or changing their labels do not.
    """
    from squarechipo.data.fingerprint import released_row_hashes, rows_outside

    if not isinstance(dataset, datasets.Dataset):
        raise IntegrityError(
            f"{where}: a {type(dataset).__name__} carries this privacy ledger, but its rows cannot be read ahead to "
            "check that they are the released ones. Pass the released datasets.Dataset itself (a streamed copy of it "
            "is not checked)."
        )
    key = (getattr(dataset, "_fingerprint", None) or "", ledger.digest)
    if key[0] and _BOUND.get(key):
        return
    hashes = released_row_hashes(dataset)
    if hashes is None:
        raise IntegrityError(
            f"{where}: these rows hold no prompt/chosen/rejected (or responses) text, so they cannot be matched to "
            "the privacy ledger they carry. Pass the released text rows: the trainers tokenize them."
        )
    sets = ledger.current_row_sets()
    if sets is None:
        fingerprints = {r.data_fingerprint for r in ledger.releases}
        from squarechipo.data.fingerprint import preference_fingerprint

        if preference_fingerprint(dataset) not in fingerprints:
            raise IntegrityError(
                f"{where}: its privacy ledger was written before ledgers were bound to their rows, and these rows are "
                "not the rows it released. Load the release as saved, or release the raw rows with this version."
            )
    else:
        outside = rows_outside(hashes, sets)
        if outside.size:
            shown = ", ".join(str(i) for i in outside[:5]) + (", ..." if outside.size > 5 else "")
            raise IntegrityError(
                f"{where}: {outside.size} of {len(dataset)} rows (row {shown}) are not rows its privacy ledger "
                f"released ({sum(r.n_rows for r in ledger.releases)} released), or their labels or text were changed "
                "after the release. A ledger covers only the rows it released: selecting, shuffling or splitting them "
                "keeps it, adding rows does not. Release the added rows on their own and combine the parts "
                "(squarechipo.privacy.combine_parts), or train on the release as it is."
            )
    if key[0]:
        if len(_BOUND) > 256:
            _BOUND.clear()
        _BOUND[key] = True


@label_free("post-processes released rows and keeps their ledger bound; raw rows stay raw")
def derive_rows(released: datasets.Dataset, function, **map_kwargs) -> datasets.Dataset:
    """``released.map(function, **map_kwargs)`` with the ledger bound to the derived rows: rows computed one by one
    from released rows (e.g. the text pairs of a preference model) are post-processing of the release, so the same
    releases describe them. The input's ledger is checked first; data without one is mapped and returned as is."""
    ledger = get_ledger(released)
    derived = released.map(function, **map_kwargs)
    if ledger is None:
        return derived
    from squarechipo.data.fingerprint import encode_row_set, released_row_hashes

    hashes = released_row_hashes(derived)
    if hashes is None:
        raise ValueError("derive_rows: the derived rows must keep prompt/chosen/rejected (or responses) text.")
    row_set = encode_row_set(hashes)
    latest = {release.part: i for i, release in enumerate(ledger.releases)}
    releases = tuple(
        replace(release, row_set=row_set) if i in latest.values() else release
        for i, release in enumerate(ledger.releases)
    )
    return with_ledger(derived, PrivacyLedger(releases=releases))
