"""What a public callable that takes a dataset does with its labels: a tag, so a test finds every entry point.

The roles (:mod:`squarechipo.privacy.door` adds the third, which applies the rule on raw labels):

- :func:`label_free` — it reads no label (fingerprints, format checks, metadata), or only released ones;
- :func:`releases_labels` — it is a privacy mechanism, or simulates labels for a study: it takes raw labels by design
  and what comes out is released (or is the mechanism's output);
- ``reads_labels`` (:func:`squarechipo.privacy.door.reads_labels`) — it reads labels, and raw ones are refused unless
  declared public;
- ``reads_checked_rows`` (:func:`squarechipo.privacy.door.reads_checked_rows`) — it reads the labels of rows held in
  memory, and takes only rows the door made (:class:`squarechipo.privacy.door.CheckedRows`).

A callable takes rows when it takes a dataset, a table or a list of row dicts, or reads a row's ``chosen``,
``rejected`` or ``best``: what it reads decides, not a parameter's name (the door's test finds them all).

They live in the data layer so that every layer can tag its callables.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

__all__ = ["label_free", "label_role", "releases_labels", "tag_role"]

_ROLE = "__squarechipo_label_role__"


def tag_role(function: Callable, role: str, **details: Any) -> Callable:
    """Tag ``function`` with its role (and the details a test needs)."""
    setattr(function, _ROLE, {"role": role, **details})
    return function


def label_role(function: Callable) -> dict | None:
    """The role a callable (or a class, through its ``__init__``) declares, or None."""
    target = function.__init__ if inspect.isclass(function) else function
    return getattr(target, _ROLE, None)


def releases_labels(why: str) -> Callable:
    """Mark a privacy mechanism (or a label simulator): it takes raw labels by design; ``why`` says what stands
    between them and its output."""
    return lambda function: tag_role(function, "releases_labels", why=why)


def label_free(why: str) -> Callable:
    """Mark a callable that reads no label (or only released ones); ``why`` says so."""
    return lambda function: tag_role(function, "label_free", why=why)
