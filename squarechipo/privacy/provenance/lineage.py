"""Model lineage: no label may leak through the models a run starts from.

The privacy promise covers the whole pipeline. A model trained on the raw rows, on their chosen
responses (SFT) or on their prompts carries their labels into every model that starts from it, and
then the ε of a later release does not hold for the result. So every model squarechipo trains
writes ``squarechipo_privacy.json`` with

- ``dataset_fingerprint``: the label-invariant fingerprint of its training rows, and
  ``prompt_sketch``: a bottom-k sketch of their prompts (:mod:`squarechipo.data.fingerprint`);
- ``upstream``: the same two fields for every model it started from (its initial policy, its
  reference), transitively, so a model two steps removed from the private rows is still caught;
- ``lineage`` and ``label_exposure``: what the check below found, and which findings were
  overridden.

:func:`check_lineage` compares the record of each model a run starts from (role: policy, reference,
prior, candidate, ...) with the rows the run is about to train on. A model whose own or upstream
training set has the same fingerprint, or whose sketched prompts occur among the rows, is refused
with an error naming the model and the fix. An explicit override lets it through, and the exposure
is written into the record and the card. A model without any record (a public base model, the
embedded SmolLM2) is accepted and recorded as ``unrecorded``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets

from squarechipo.data.fingerprint import UNKNOWN_ROWS, preference_fingerprint, prompt_hashes, training_data_record
from squarechipo.data.label_roles import label_free
from squarechipo.privacy.provenance.record import (
    EXPOSURES,
    PRIVACY_FILE,
    PROMPT_OVERLAP,
    RECORDED,
    SAME_DATASET,
    UNKNOWN_TRAINING_ROWS,
    UNRECORDED,
    PrivacyRecord,
    read_privacy_record,
)
from squarechipo.privacy.provenance.sketch import recorded_by_weights

__all__ = [
    "LineageFinding",
    "LineageReport",
    "ModelLineage",
    "check_lineage",
    "lineage_findings",
    "mark_source",
    "public_labels_record",
]

#: Statuses of a model in a lineage report.
_TRAINING_KEYS = ("dataset_fingerprint", "prompt_sketch")
#: Attribute naming the folder a model was loaded from, where ``name_or_path`` does not (adapters).
_SOURCE_ATTRIBUTE = "squarechipo_source"


def mark_source(model: Any, folder: str | os.PathLike) -> Any:
    """Record on a loaded model the folder it came from, so its lineage is read from that folder.

    ``AutoModelForCausalLM.from_pretrained(adapter_dir)`` sets ``name_or_path`` to the base model;
    the recipes call this so an adapter's own ``squarechipo_privacy.json`` is the one checked.
    """
    setattr(model, _SOURCE_ATTRIBUTE, str(folder))
    return model


def _training_set(entry: dict) -> dict:
    return {key: entry.get(key) for key in _TRAINING_KEYS}


def _is_empty(entry: dict) -> bool:
    return all(entry.get(key) is None for key in _TRAINING_KEYS)


def _same_training(found: dict, record: dict | None) -> bool:
    """Whether the record file already says what the store's record of these weights says."""
    return (
        record is not None
        and _training_set(found) == _training_set(record)
        and (found.get("upstream") or []) == (record.get("upstream") or [])
    )


def _as_upstream(record: dict) -> list[dict]:
    """A record's own and upstream training sets as upstream entries (what its weights carry)."""
    own = {"role": "weights", "model": "recorded by weights", **_training_set(record)}
    return [entry for entry in [own, *(record.get("upstream") or [])] if not _is_empty(entry)]


def _portable(folder: str | os.PathLike) -> str:
    """A folder as records and cards show it: under the home folder as ``~/...``, so a record names no user's home
    (records travel with models to other machines and into committed results)."""
    text = str(folder)
    home = os.path.expanduser("~")
    if home not in ("", "/", "~") and (text == home or text.startswith(home + os.sep)):
        return "~" + text[len(home) :]
    return text


@dataclass(frozen=True)
class ModelLineage:
    """A model a run starts from: a name for messages and the privacy record it carries (None: none)."""

    name: str
    record: dict | None
    #: The digest of the starting model's record file (its seal): what the trained model's record names it by.
    record_digest: str | None = None

    @classmethod
    def from_folder(cls, folder: str | os.PathLike, name: str | None = None) -> ModelLineage:
        """The record saved in a model (or adapter) folder, its seal and its weights' digests checked; a folder
        without one, or a Hub id, is unrecorded."""
        record = read_privacy_record(folder)
        digest = None
        if record is not None:
            digest = json.loads((Path(folder) / PRIVACY_FILE).read_text(encoding="utf-8")).get("digest")
        return cls(
            name=name or _portable(folder), record=record.to_dict() if record is not None else None,
            record_digest=digest,
        )  # fmt: skip

    @classmethod
    def of_model(cls, model: Any) -> ModelLineage:
        """The lineage of a loaded model, a path or a Hub id.

        A loaded model is found by the folder it was loaded from: :func:`mark_source`, else
        ``name_or_path`` (for a PEFT model without one, its base). An adapter loaded through
        ``AutoModelForCausalLM.from_pretrained(adapter_dir)`` reports its base model's folder unless
        marked, so mark it or pass the folder itself.
        """
        if isinstance(model, (str, os.PathLike)):
            return cls.from_folder(model)
        source = getattr(model, _SOURCE_ATTRIBUTE, None) or getattr(model, "name_or_path", None) or ""
        peft_config = getattr(model, "peft_config", None)
        if not source and isinstance(peft_config, dict) and peft_config:
            source = next(iter(peft_config.values())).base_model_name_or_path or ""
        lineage = cls.from_folder(source) if source else cls(name=f"<in-memory {type(model).__name__}>", record=None)
        if not hasattr(model, "state_dict"):
            return lineage
        # The weights are checked whatever record file lies beside them: a copy saved without its record, or with
        # another model's record put in its place, is found by its weights in this machine's record store.
        found = recorded_by_weights(model)
        if found is None or _same_training(found, lineage.record):
            return lineage
        how = (
            "a cast, perturbed, merged or reshaped copy of a recorded model's weights"
            if found.get("matched_by_sketch") is not None
            else "those of a recorded model"
        )
        record = PrivacyRecord.from_dict(found).to_dict()
        if lineage.record is not None:  # both what the file says and what the weights say
            record = {**lineage.record, "upstream": [*(lineage.record.get("upstream") or []), *_as_upstream(record)]}
        return cls(name=f"{lineage.name} (its weights are {how})", record=record, record_digest=lineage.record_digest)

    @property
    def recorded(self) -> bool:
        """Whether the record says anything about what the model was trained on."""
        return any(not _is_empty(entry) for entry in self.training_sets())

    def training_sets(self) -> list[dict]:
        """The model's own training set and those of every model upstream of it."""
        if self.record is None:
            return []
        own = [_training_set(self.record)]
        return own + [_training_set(entry) for entry in self.record.get("upstream") or []]

    def upstream_entries(self, role: str) -> list[dict]:
        """What a model trained from this one records under ``upstream`` (public: hashes only)."""
        if self.record is None:
            return []
        entries = [{"role": role, "model": self.name, **_training_set(self.record)}]
        entries += [
            {**entry, "role": f"{role} ← {entry.get('role', '?')}"} for entry in self.record.get("upstream") or []
        ]
        return [entry for entry in entries if not _is_empty(entry)]


@dataclass(frozen=True)
class LineageFinding:
    """What the check found for one model (public: names the model and the rule, never private data)."""

    role: str
    model: str
    status: str  # recorded, unrecorded, same_dataset, prompt_overlap
    #: The digest of the model's record, where it has one (the trained model's record names its start by it).
    record_digest: str | None = None

    @property
    def exposes_labels(self) -> bool:
        return self.status in EXPOSURES

    def message(self) -> str:
        what = {
            SAME_DATASET: "was trained on these rows (same label-invariant fingerprint)",
            PROMPT_OVERLAP: "was trained on prompts that occur in these rows",
            UNKNOWN_TRAINING_ROWS: "was trained on rows it could not record (streamed or pre-tokenised), which may "
            "be these",
            UNRECORDED: f"has no {PRIVACY_FILE} recording what it was trained on",
            RECORDED: "was trained on other data",
        }[self.status]
        return f"the {self.role} model {self.model} {what}"

    def to_dict(self) -> dict[str, str]:
        named = {"record_digest": self.record_digest} if self.record_digest else {}
        return {"role": self.role, "model": self.model, "status": self.status, **named}


@label_free("compares label-invariant fingerprints and prompt sketches")
def lineage_findings(
    models: Sequence[tuple[str, ModelLineage]], rows: datasets.Dataset, *, extra_prompt_hashes: Sequence[str] = ()
) -> list[LineageFinding]:
    """One finding per (role, model): compare its own and upstream training sets with ``rows``.

    ``extra_prompt_hashes`` adds prompt hashes known only as a sketch (e.g. the private training set
    of a preference model whose rows this run does not hold).
    """
    is_preference = {"chosen", "rejected"} <= set(rows.column_names) or "responses" in rows.column_names
    fingerprint = preference_fingerprint(rows) if is_preference else None
    hashes = (prompt_hashes(rows) or set()) | set(extra_prompt_hashes)
    findings = []
    for role, lineage in models:
        if not lineage.recorded:
            findings.append(LineageFinding(role, lineage.name, UNRECORDED, lineage.record_digest))
            continue
        status = RECORDED
        for entry in lineage.training_sets():
            if fingerprint is not None and entry["dataset_fingerprint"] == fingerprint:
                status = SAME_DATASET
                break
            if hashes.intersection(entry["prompt_sketch"] or ()):
                status = PROMPT_OVERLAP
            elif str(entry["dataset_fingerprint"] or "").startswith(UNKNOWN_ROWS) and status == RECORDED:
                status = UNKNOWN_TRAINING_ROWS
        findings.append(LineageFinding(role, lineage.name, status, lineage.record_digest))
    return findings


@dataclass(frozen=True)
class LineageReport:
    """The outcome of :func:`check_lineage`, as recorded with the trained model."""

    findings: tuple[LineageFinding, ...]
    upstream: tuple[dict, ...]
    private: bool

    @property
    def exposures(self) -> list[LineageFinding]:
        """Overridden findings on private labels: the labels reached the result through these models."""
        return [finding for finding in self.findings if finding.exposes_labels] if self.private else []

    def record(self) -> dict[str, Any]:
        """Fields for ``squarechipo_privacy.json`` and the card."""
        return {
            "lineage": [finding.to_dict() for finding in self.findings],
            "lineage_labels_private": self.private,
            "label_exposure": [finding.to_dict() for finding in self.exposures],
            "upstream": list(self.upstream),
        }


@label_free("compares label-invariant fingerprints and prompt sketches")
def check_lineage(
    models: Sequence[tuple[str, ModelLineage]],
    rows: datasets.Dataset,
    *,
    private: bool,
    override: bool,
    override_field: str,
    context: str,
    extra_prompt_hashes: Sequence[str] = (),
) -> LineageReport:
    """Refuse models that saw ``rows`` (or their prompts) when the run's labels are private.

    Args: models: (role, lineage) of every model the run starts from; one model may have two roles. rows: the rows the
        run trains on or releases (raw or released: the check is label-invariant). private: whether the labels of
        ``rows`` are protected (an ε was spent). Public labels are only recorded, never refused. override: let exposed
        models through; the exposure is recorded. override_field: the config field or argument that sets ``override``
        (named in the error). context: who is checking, for the error message. extra_prompt_hashes: see
        :func:`lineage_findings`.

    Raises:
        ValueError: naming each exposed model and the fix, unless ``override``.
    """
    findings = lineage_findings(models, rows, extra_prompt_hashes=extra_prompt_hashes)
    exposed = [finding for finding in findings if finding.exposes_labels]
    if exposed and private and not override:
        lines = "\n  ".join(finding.message() for finding in exposed)
        raise ValueError(
            f"{context}: the labels of these rows are private, but\n  {lines}\n"
            "Its weights carry those labels, so the privacy guarantee would not hold for the result. Start from a "
            "model trained on disjoint rows (for the finance data: the finance_sft split, which the generator "
            "draws from rows of their own), or from a public base model. Set "
            f"{override_field}=True only if you accept that the labels are exposed through that model; the override "
            f"is written into {PRIVACY_FILE} and the model card."
        )
    upstream: list[dict] = []
    seen = set()
    for role, lineage in models:
        for entry in lineage.upstream_entries(role):
            key = (entry["dataset_fingerprint"], tuple(entry["prompt_sketch"] or ()))
            if key not in seen:
                seen.add(key)
                upstream.append(entry)
    return LineageReport(findings=tuple(findings), upstream=tuple(upstream), private=private)


@label_free("records label-invariant fingerprints of public-label training rows")
def public_labels_record(
    stage: str,
    models: Sequence[tuple[str, ModelLineage]],
    rows: datasets.Dataset,
    *,
    context: str,
    details: dict[str, Any] | None = None,
) -> PrivacyRecord:
    """The record of a model trained on public labels (SFT, the gold judge): no ε is claimed, but the record
    names its training rows and its own lineage, so a later run on private rows can refuse it (transitively)."""
    lineage = check_lineage(models, rows, private=False, override=False, override_field="", context=context)
    return PrivacyRecord.build(
        {
            "stage": stage,
            "epsilon": None,
            "ledger": None,
            **(details or {}),
            **training_data_record(rows),
            **lineage.record(),
        }
    )
