"""Validate preference datasets in TRL's formats before anything touches their labels.

Accepted forms (TRL's dataset formats, https://huggingface.co/docs/trl/dataset_formats):

- standard, explicit prompt: ``prompt``, ``chosen``, ``rejected`` are strings;
- standard, implicit prompt: ``chosen``, ``rejected`` strings that each contain the prompt;
- conversational, explicit or implicit prompt: the same columns as lists of ``{role, content}``
  messages.

Every column must use the same form. Row checks: no missing (null) value, no empty or
whitespace-only text, no empty conversation, ``chosen != rejected``. Invalid rows raise a
``ValueError`` naming the rows, the field and the fix; with ``drop_invalid=True`` they are removed
and the count is returned and logged, never dropped silently.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from squarechipo.data.columns import RESPONSE_COLUMNS
from squarechipo.data.label_roles import label_free
from squarechipo.data.near_duplicates import Copy, describe_copies
from squarechipo.data.row_scan import row_copies, scan_rows

__all__ = [
    "PreferenceFormat",
    "ValidationReport",
    "detect_format",
    "drop_duplicate_rows",
    "copied_rows",
    "duplicate_rows",
    "validate_preference_dataset",
]

logger = logging.getLogger("squarechipo")

_MAX_ROWS_IN_MESSAGE = 5


@dataclass(frozen=True)
class PreferenceFormat:
    """``conversational``: lists of messages (else strings); ``explicit_prompt``: has ``prompt``."""

    conversational: bool
    explicit_prompt: bool

    @property
    def name(self) -> str:
        kind = "conversational" if self.conversational else "standard"
        prompt = "explicit prompt" if self.explicit_prompt else "implicit prompt"
        return f"{kind}, {prompt}"


@dataclass
class ValidationReport:
    """Outcome of validation: rows read, rows dropped and why (counts only, never contents)."""

    n_rows: int
    format: PreferenceFormat
    n_dropped: int = 0
    reasons: dict[str, int] = field(default_factory=dict)


def _value_kind(value) -> str:
    if isinstance(value, str):
        return "text"
    if isinstance(value, list):
        return "a list of messages" if all(isinstance(m, dict) and "content" in m for m in value) else "a list"
    return "null" if value is None else f"a value of type {type(value).__name__} ({value!r})"[:60]


def _mixed_rows(name: str, column) -> str:
    """Where a column's rows change kind: a JSON reader gives such a column one opaque type."""
    import json

    # The JSON extension type keeps each row as JSON text.
    values = [json.loads(v) if isinstance(v, str) else v for v in column.to_pylist()]
    first = _value_kind(values[0])
    index = next((i for i, v in enumerate(values) if _value_kind(v) != first), None)
    if index is None:
        return ""
    return f" Row 0 holds {first}, row {index} holds {_value_kind(values[index])}."


def _column_kind(name: str, arrow_type: pa.DataType, column=None) -> str:
    if getattr(arrow_type, "extension_name", None) == "arrow.json" and column is not None:
        raise ValueError(
            f"column {name!r} mixes kinds of values across rows.{_mixed_rows(name, column)} Every row must hold "
            "text (the standard format) or a list of {'role', 'content'} messages (the conversational format), the "
            "same in every row and column: fix or drop the rows that differ."
        )
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return "standard"
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        value_type = arrow_type.value_type
        if pa.types.is_struct(value_type):
            names = {value_type.field(i).name for i in range(value_type.num_fields)}
            if {"role", "content"} <= names:
                return "conversational"
        raise ValueError(
            f"column {name!r} holds lists of {value_type}, not messages: a conversational column "
            f"must be a list of {{'role': str, 'content': str}} dicts."
        )
    if pa.types.is_null(arrow_type):
        raise ValueError(f"column {name!r} is entirely empty (null); fill it with response text.")
    raise ValueError(
        f"column {name!r} has type {arrow_type}; expected strings (standard format) or lists of "
        f"{{'role', 'content'}} messages (conversational format). Convert it, e.g. with "
        f"dataset.cast_column({name!r}, datasets.Value('string'))."
    )


@label_free("checks the format")
def detect_format(dataset: datasets.Dataset) -> PreferenceFormat:
    """The TRL format of a preference dataset; raises a ``ValueError`` naming the field if unusable."""
    if isinstance(dataset, datasets.DatasetDict):
        raise ValueError("got a DatasetDict; validate one split at a time, e.g. dataset['train'].")
    columns = dataset.column_names
    missing = [c for c in RESPONSE_COLUMNS if c not in columns]
    if missing:
        raise ValueError(
            f"dataset has no {', '.join(repr(c) for c in missing)} column (columns: {columns}). "
            "A preference dataset needs 'chosen' and 'rejected' (and optionally 'prompt'); rename yours "
            "with dataset.rename_column(old, 'chosen')."
        )
    schema = dataset.features.arrow_schema
    used = [c for c in ("prompt", *RESPONSE_COLUMNS) if c in columns]
    table = dataset.data.table
    kinds = {c: _column_kind(c, schema.field(c).type, table.column(c)) for c in used}
    if len(set(kinds.values())) > 1:
        detail = ", ".join(f"{c} is {k}" for c, k in kinds.items())
        raise ValueError(
            f"mixed formats in one dataset ({detail}). Use one format for every column: all strings "
            "(standard) or all lists of {'role', 'content'} messages (conversational)."
        )
    return PreferenceFormat(conversational=kinds["chosen"] == "conversational", explicit_prompt="prompt" in columns)


def _string_problems(column: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    missing = pc.is_null(column).to_numpy(zero_copy_only=False)
    lengths = pc.utf8_length(pc.utf8_trim_whitespace(column)).fill_null(0)
    empty = (lengths.to_numpy(zero_copy_only=False) == 0) & ~missing
    return missing, empty


def _conversation_problems(values: list) -> tuple[np.ndarray, np.ndarray]:
    n = len(values)
    missing = np.zeros(n, bool)
    empty = np.zeros(n, bool)
    for i, conversation in enumerate(values):
        if conversation is None:
            missing[i] = True
        elif len(conversation) == 0:
            empty[i] = True
        else:
            for message in conversation:
                if message is None or not isinstance(message.get("role"), str) or not message.get("role"):
                    empty[i] = True  # a message without a role counts as empty
                    break
                content = message.get("content")
                if content is None or not str(content).strip():
                    empty[i] = True
                    break
    return missing, empty


def _identical(fmt: PreferenceFormat, table: pa.Table) -> np.ndarray:
    if not fmt.conversational:
        equal = pc.equal(table["chosen"], table["rejected"]).fill_null(False)
        return equal.to_numpy(zero_copy_only=False)
    chosen = table["chosen"].to_pylist()
    rejected = table["rejected"].to_pylist()
    return np.fromiter((c is not None and c == r for c, r in zip(chosen, rejected)), bool, len(chosen))


@label_free("checks the format and drops invalid rows with a count")
def validate_preference_dataset(
    dataset: datasets.Dataset, *, drop_invalid: bool = False
) -> tuple[datasets.Dataset, ValidationReport]:
    """Check a preference dataset; return it (possibly without invalid rows) and a report.

    Raises:
        ValueError: empty dataset, missing/mistyped/mixed columns, or — unless ``drop_invalid`` —
            any invalid row (the message names the first rows, the field and the fix).
    """
    fmt = detect_format(dataset)
    n = len(dataset)
    if n == 0:
        raise ValueError("dataset is empty (0 rows); there is nothing to train on or privatize.")
    table = dataset.with_format("arrow")[:]
    problems: dict[str, np.ndarray] = {}
    for name in [c for c in ("prompt", *RESPONSE_COLUMNS) if c in dataset.column_names]:
        if fmt.conversational:
            missing, empty = _conversation_problems(table[name].to_pylist())
        else:
            missing, empty = _string_problems(table[name])
        problems[f"missing {name}"] = missing
        problems[f"empty {name}"] = empty
    problems["identical chosen and rejected"] = _identical(fmt, table)
    bad = np.zeros(n, bool)
    reasons: Counter[str] = Counter()
    for reason, mask in problems.items():
        count = int(mask.sum())
        if count:
            reasons[reason] = count
            bad |= mask
    report = ValidationReport(n_rows=n, format=fmt, reasons=dict(reasons))
    if not bad.any():
        return dataset, report
    if not drop_invalid:
        lines = []
        for reason, mask in problems.items():
            rows = np.flatnonzero(mask)
            if rows.size:
                shown = ", ".join(str(r) for r in rows[:_MAX_ROWS_IN_MESSAGE])
                more = f" and {rows.size - _MAX_ROWS_IN_MESSAGE} more" if rows.size > _MAX_ROWS_IN_MESSAGE else ""
                lines.append(f"  {reason}: {rows.size} row(s) (rows {shown}{more})")
        raise ValueError(
            "invalid preference rows:\n" + "\n".join(lines) + "\nFix or remove these rows (every row needs a "
            "non-empty prompt, chosen and rejected, and chosen must differ from rejected), or pass "
            "drop_invalid=True to drop them; the dropped count is then reported."
        )
    keep = np.flatnonzero(~bad)
    report.n_dropped = int(bad.sum())
    logger.warning(
        "dropped %d of %d invalid preference rows (%s)",
        report.n_dropped,
        n,
        ", ".join(f"{k}: {v}" for k, v in sorted(reasons.items())),
    )
    return dataset.select(keep), report


@label_free("compares label-invariant canonical rows")
def copied_rows(dataset: datasets.Dataset) -> list[Copy]:
    """Every row that copies an earlier row's comparison: the same prompt and pair of responses (in either order)
    once retyping is folded, or a near-copy (:mod:`squarechipo.data.near_duplicates`), found as a release finds them
    (a chunk of rows at a time, :mod:`squarechipo.data.row_scan`)."""
    return row_copies(dataset, scan_rows(dataset, sketched=True))


@label_free("counts label-invariant copies")
def duplicate_rows(dataset: datasets.Dataset) -> int:
    """How many rows copy an earlier row (exactly or nearly, see :func:`copied_rows`)."""
    return len(copied_rows(dataset))


@label_free("drops label-invariant copies, with a count")
def drop_duplicate_rows(dataset: datasets.Dataset) -> tuple[datasets.Dataset, int]:
    """(the rows with the first copy of each comparison kept, the number dropped); the count is logged."""
    found = copied_rows(dataset)
    if not found:
        return dataset, 0
    later = {c.later for c in found}
    logger.warning(
        "dropped %d rows that copy an earlier row (the first copy is kept): %s", len(later), describe_copies(found)
    )
    return dataset.select([i for i in range(len(dataset)) if i not in later]), len(later)
