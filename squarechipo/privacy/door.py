"""The one door private labels go through: every public callable that takes a dataset says what it does with labels.

Preference labels are private by default. Whatever reads them — training, evaluation, prediction, a judge's
calibration, a judge's accuracy on gold pairs — reads them through :func:`require_released_or_public`: the rows were
released through a privacy mechanism (they carry a ledger, matched to the rows by
:func:`squarechipo.privacy.ledger.binding.get_ledger`) or the caller declares their labels public. Nothing else passes:
raw rows, a streamed or pre-tokenised copy that lost its ledger, rows added to a release.

Every public callable of the package that takes a dataset carries one of three roles (a decorator, so a test can find
them by introspection and the next entry point cannot be added without one):

- :func:`reads_labels` — it reads labels; the rule above is applied to the named argument before anything else runs;
- :func:`releases_labels` — it is a privacy mechanism (or simulates labels for a study): it takes raw labels by design
  and what it returns is released, or it is itself the mechanism's output (the exponential mechanism's choice);
- :func:`label_free` — it reads no label (fingerprints, format checks, metadata), or only released ones.

The trainers apply the same rule through their shared base (:mod:`squarechipo.trainer.private_base`) to the
training split, every evaluation split, and every dataset handed to ``evaluate`` or ``predict``.

Helpers that read labels of rows held in memory (log-probabilities of chosen and rejected responses, a preference
model's texts) take :class:`CheckedRows`, which only this module makes: from a dataset, after the rule above
(:func:`checked_rows`); from pairs the library built out of model samples or a label-free canonical order, which hold
no label (:func:`rows_without_labels`); or from raw rows handed to a privacy mechanism that stands between them and
its output (:func:`mechanism_input`). A plain list of rows is refused: no reader takes rows on trust.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from squarechipo.data.label_roles import label_free, label_role, releases_labels, tag_role

__all__ = [
    "CheckedRows",
    "RawLabelsError",
    "checked_rows",
    "mechanism_input",
    "reads_checked_rows",
    "require_checked",
    "rows_without_labels",
    "label_free",
    "label_role",
    "labels_status",
    "reads_labels",
    "releases_labels",
    "require_released_or_public",
]


class RawLabelsError(ValueError):
    """Raw labels reached a reader that is not allowed to see them (neither released nor declared public)."""


@label_free("the rule's own test")
def labels_status(dataset) -> str:
    """``released`` (it carries a ledger that matches its rows), or ``raw``. Raises when a ledger is there but does
    not match (:class:`squarechipo.privacy.ledger.ledger.IntegrityError`)."""
    from squarechipo.privacy.ledger.binding import get_ledger

    return "released" if get_ledger(dataset) is not None else "raw"


@label_free("the rule itself")
def require_released_or_public(dataset, *, split: str, public: bool, reader: str, declare: str) -> None:
    """The one rule for every reader of a split's labels: the split was released through a privacy mechanism (it
    carries a ledger matched to its rows) or its labels are declared public. ``declare`` names the option that
    declares it, for the error."""
    if public or labels_status(dataset) == "released":
        return
    kind = type(dataset).__name__
    streamed = "" if kind == "Dataset" else f" (a {kind}: a streamed or converted copy loses its ledger)"
    raise RawLabelsError(
        f"{reader} reads the labels of the split {split!r}, but it holds raw labels{streamed}: it was neither "
        "released through a privacy mechanism (it has no privacy ledger) nor declared public, and what is computed "
        "from its labels (a model, metrics, calibration.jsonl, accuracy reports) would reveal them. Release it "
        "first (squarechipo.privacy.release_dataset, or label_epsilon in a training config, which releases every "
        "evaluation split not in public_splits), or, if its labels are not private (gold pairs written for "
        f"evaluation, simulated labels), declare it public: {declare}."
    )


def reads_labels(
    dataset: str,
    *,
    public: str | None = None,
    reader: str | None = None,
    split: str = "test",
    declare: str | None = None,
    when: Callable[[dict], bool] | None = None,
    trigger: dict[str, Any] | None = None,
) -> Callable:
    """Apply :func:`require_released_or_public` to the argument ``dataset`` before the function runs.

    ``public`` names the boolean argument that declares the labels public; ``when`` (given the bound arguments)
    says whether this call reads labels at all (e.g. only with calibration pairs), and ``trigger`` holds arguments
    that make it read them (for the test that calls every reader with raw labels)."""

    def decorate(function: Callable) -> Callable:
        signature = inspect.signature(function)
        name = reader or function.__qualname__

        @functools.wraps(function)
        def guarded(*args, **kwargs):
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            values = bound.arguments
            data = values.get(dataset)
            if data is not None and (when is None or when(values)):
                require_released_or_public(
                    data,
                    split=split,
                    public=bool(values.get(public)) if public else False,
                    reader=name,
                    declare=declare or (f"{public}=True" if public else "release it"),
                )
            return function(*args, **kwargs)

        return tag_role(guarded, "reads_labels", dataset=dataset, public=public, trigger=dict(trigger or {}))

    return decorate


_DOOR = object()


class CheckedRows(Sequence):
    """Rows in memory that went through the door (see the module); ``status`` says how: ``released``, ``public``,
    ``no labels`` or ``mechanism input``. Only this module makes them; :meth:`map` keeps the status through a fixed
    transform of the rows (tokenization)."""

    def __init__(self, rows, status: str, token: object) -> None:
        if token is not _DOOR:
            raise TypeError(
                "CheckedRows are made by squarechipo.privacy.door (checked_rows, rows_without_labels or "
                "mechanism_input), not by hand."
            )
        self._rows, self.status = tuple(rows), status

    def __getitem__(self, index):
        found = self._rows[index]
        return list(found) if isinstance(index, slice) else found

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self) -> Iterator:
        return iter(self._rows)

    def map(self, function: Callable[[dict], dict]) -> CheckedRows:
        """``function`` applied to each row; the result keeps this status (for the library's fixed transforms)."""
        return CheckedRows([function(row) for row in self._rows], self.status, _DOOR)


@label_free("the rule itself, applied before any row is read")
def checked_rows(dataset, *, split: str, public: bool, reader: str, declare: str) -> CheckedRows:
    """The rows of ``dataset`` as dicts, after :func:`require_released_or_public`; read from the stored rows the
    check matched (format transforms are refused by the check)."""
    require_released_or_public(dataset, split=split, public=public, reader=reader, declare=declare)
    status = "public" if public else "released"
    return CheckedRows(dataset.with_format("arrow")[:].to_pylist(), status, _DOOR)


def rows_without_labels(rows, why: str) -> CheckedRows:
    """Pairs the library built that hold no preference label (two model samples per prompt, a pair in its
    label-free canonical order); ``why`` says which, for the reader of the code."""
    if not why:
        raise ValueError("say why these rows hold no label (e.g. 'two samples of the policy per prompt').")
    return CheckedRows(rows, "no labels", _DOOR)


def mechanism_input(rows, mechanism: str) -> CheckedRows:
    """Raw rows handed to a privacy mechanism (``mechanism`` names it: the exponential mechanism of central DP), which
    stands between them and anything it returns."""
    if not mechanism:
        raise ValueError("name the privacy mechanism that stands between these raw rows and its output.")
    return CheckedRows(rows, "mechanism input", _DOOR)


def require_checked(rows, reader: str) -> CheckedRows:
    """``rows`` if they went through the door (:class:`CheckedRows`), else :class:`RawLabelsError`."""
    if isinstance(rows, CheckedRows):
        return rows
    raise RawLabelsError(
        f"{reader} reads the labels of the rows it is given, and a {type(rows).__name__} holds raw labels as far as "
        "it can tell: it carries no sign of having gone through the door (a release's ledger matched, or labels "
        "declared public). Pass squarechipo.privacy.door.checked_rows(dataset, ...) of a released or public dataset."
    )


def reads_checked_rows(argument: str) -> Callable:
    """Apply :func:`require_checked` to the argument ``argument`` before the function runs (a tag the door's test
    finds: role ``reads_checked_rows``)."""

    def decorate(function: Callable) -> Callable:
        signature = inspect.signature(function)

        @functools.wraps(function)
        def guarded(*args, **kwargs):
            require_checked(signature.bind(*args, **kwargs).arguments.get(argument), function.__qualname__)
            return function(*args, **kwargs)

        return tag_role(guarded, "reads_checked_rows", rows=argument)

    return decorate
