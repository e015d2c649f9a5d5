"""The privacy record: one schema, one writer and one reader for ``squarechipo_privacy.json`` and the card.

Every model squarechipo saves (an aligned policy, a reward or preference model, a self-play mixture, an
SFT model, the gold judge, a centrally selected policy) carries a :class:`PrivacyRecord`. It says which
labels the model was trained on and how they were released (the ledger, public parameters only), how the
loss treated them, what the training rows were (a label-invariant fingerprint and a prompt sketch), and
the lineage of the models the run started from (:mod:`squarechipo.privacy.provenance.lineage`). The same record
fills the card's "Privacy and robustness" section, so the file and the card cannot disagree.

The JSON is flat: the fields below plus the stage's own ``details`` (method, β, …) at the top level, and
``format`` names the schema version. Files written before the schema was versioned read as version 0.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from squarechipo.privacy.ledger.ledger import PrivacyLedger
from squarechipo.privacy.ledger.release_entry import library_version as _library_version
from squarechipo.privacy.provenance.subjects import (
    adapter_base,
    check_adapter_base,
    check_record_seal,
    check_subjects,
    model_subjects,
)
from squarechipo.trust.keys import SigningKeyError, public_key_text, signing_key, trust_anchor
from squarechipo.trust.seals import IntegrityError, seal

__all__ = [
    "EXPOSURES",
    "PRIVACY_FILE",
    "PROMPT_OVERLAP",
    "RECORDED",
    "RECORD_FORMAT",
    "SAME_DATASET",
    "UNRECORDED",
    "PrivacyRecord",
    "read_privacy_record",
    "start_sketch",
    "verify_privacy_record",
    "weights_fingerprint",
    "write_privacy_record",
]

#: What `key verify` says of a ledger with a seeded release (Release.randomness "fixed_seed").
SEEDED = (
    "a release it holds drew its noise from a fixed seed: not private (whoever knows the seed undoes the noise); a "
    "simulation, never counted by the registry or its budgets"
)

#: The privacy record written next to every model squarechipo saves.
PRIVACY_FILE = "squarechipo_privacy.json"
RECORD_FORMAT = "squarechipo.privacy_record/1"
_CARD_HEADING = "## Privacy and robustness (squarechipo)"

#: Lineage statuses (``lineage[*].status``): what the check found for one starting model.
RECORDED, UNRECORDED, SAME_DATASET, PROMPT_OVERLAP = "recorded", "unrecorded", "same_dataset", "prompt_overlap"
#: A model trained on rows that could not be recorded (streamed or pre-tokenised): they may be these rows.
UNKNOWN_TRAINING_ROWS = "unknown_training_rows"
#: The statuses under which the model's weights carry (or may carry) the run's labels.
EXPOSURES = (SAME_DATASET, PROMPT_OVERLAP, UNKNOWN_TRAINING_ROWS)
_STATUS_TEXT = {
    RECORDED: "recorded: trained on other rows",
    UNRECORDED: "unrecorded: no training record, assumed public",
    SAME_DATASET: "trained on these rows",
    PROMPT_OVERLAP: "trained on prompts of these rows",
    UNKNOWN_TRAINING_ROWS: "trained on rows it could not record (streamed or pre-tokenised)",
}


@dataclass(frozen=True)
class PrivacyRecord:
    """What a saved model records about its labels, its training rows and the models it started from.

    ``stage`` names who wrote it (``preference_optimization``, ``reward_model``, ``self_play``, ``sft``,
    ``gold_judge``, ``central_selection``). Every field is public: ε and the ledger's parameters, hashes
    of the rows (never the rows or their labels), names of models.
    """

    stage: str
    epsilon: float | None = None
    mechanism: str | None = None
    corruption_rate: float | None = None
    adversary: str | None = None
    order: str | None = None
    #: How the loss treats the released labels, in words (binary RR: the flip rate and c(ε); K-ary: the analyzer).
    debiasing: str | None = None
    debiasing_flip_rate: float | None = None
    privacy_source: str | None = None
    privacy_override: bool = False
    ledger: dict | None = None
    dataset_fingerprint: str | None = None
    prompt_sketch: list[str] | None = None
    lineage: list[dict] | None = None
    lineage_labels_private: bool | None = None
    label_exposure: list[dict] = field(default_factory=list)
    upstream: list[dict] = field(default_factory=list)
    #: The squarechipo version that wrote the record (None in files written before it was recorded).
    library_version: str | None = None
    #: The saved weights' identity (:func:`squarechipo.privacy.provenance.sketch.weights_identity`): a copy saved
    #: without this file is still recognised by the lineage guard, through the store of records on this machine.
    weights_fingerprint: str | None = None
    #: The files the record describes, as in-toto's statement subjects: ``[{"name": file, "digest": {"sha256": hex}}]``
    #: over every weight and adapter file in the model's folder (:func:`model_subjects`), filled in when it is written.
    #: None in records written before squarechipo bound records to their weights.
    subjects: list[dict] | None = None
    #: An adapter's base model, bound as its own files are: ``{"name_or_path", "subjects"}`` (the base's weight and
    #: config digests; None where the base is not a local folder). None for a full model, and in records written
    #: before squarechipo bound an adapter to its base.
    base: dict | None = None
    #: The public key (``ed25519:...``) of the process that wrote the record and signed it: who trained.
    signer: str | None = None
    #: Stage-specific public fields (method, β, R_max, candidates, …), written at the top level of the JSON.
    details: dict[str, Any] = field(default_factory=dict)
    format: str = RECORD_FORMAT

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> PrivacyRecord:
        """The record from its flat JSON form (or any mapping of fields): unknown keys become ``details``."""
        names = {f.name for f in dataclasses.fields(cls)} - {"details"}
        known = {k: v for k, v in values.items() if k in names}
        details = {**values.get("details", {}), **{k: v for k, v in values.items() if k not in names | {"details"}}}
        known.setdefault("format", "squarechipo.privacy_record/0")
        known.setdefault("stage", "unknown")
        return cls(**known, details=details)

    @classmethod
    def build(cls, values: dict[str, Any]) -> PrivacyRecord:
        """A new record in the current schema (writers use this; :meth:`from_dict` reads files of any version)."""
        return cls.from_dict({**values, "format": RECORD_FORMAT, "library_version": _library_version()})

    def to_dict(self) -> dict[str, Any]:
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "details"}
        clash = sorted(set(values) & set(self.details))
        if clash:
            raise ValueError(f"details {clash} would overwrite fields of the privacy record; rename them.")
        return {**values, **self.details}

    def get(self, key: str, default: Any = None) -> Any:
        """A field or a detail by name (the flat JSON's view)."""
        return self.to_dict().get(key, default)

    @property
    def seeded(self) -> bool:
        """Whether a release in the ledger drew its noise from a fixed seed (a simulation, not privacy)."""
        releases = (self.ledger or {}).get("releases") or []
        return any(release.get("randomness") == "fixed_seed" for release in releases)

    @property
    def exposed(self) -> bool:
        return bool(self.label_exposure)

    # ------------------------------------------------------------------ card

    def card_rows(self) -> list[tuple[str, Any]]:
        """(name, value) rows of the card's privacy section."""
        rows: list[tuple[str, Any]] = [
            (name, render(self.details[key]) if render else self.details[key])
            for key, name, render in _DETAIL_ROWS
            if key in self.details
        ]
        rows += self._central_rows() if self.mechanism == "exponential" else self._label_rows()
        rows += self._lineage_rows()
        return rows + [("written by squarechipo", self.library_version or "unknown (an older record)")]

    def _label_rows(self) -> list[tuple[str, Any]]:
        epsilon = self.epsilon if self.epsilon is not None else "none (no privacy)"
        earlier = max((r.get("earlier_epsilon", 0.0) for r in (self.ledger or {}).get("releases") or []), default=0)
        if earlier:
            epsilon = (
                f"{epsilon}: basic composition of this data's own release(s) and earlier releases of the same rows "
                f"on the releasing machine (ε {earlier:g})"
            )
        if self.epsilon is not None and self.ledger is None:
            epsilon = f"{epsilon}: asserted by the config, not backed by a ledger"
        elif self.seeded:
            epsilon = f"{epsilon}: seeded release, reproducible by anyone with the seed, not private"
        if self.exposed:
            epsilon = f"{epsilon}: does not hold for this model (labels exposed through a starting model, see below)"
        return [
            ("ε (local DP, total over releases)", epsilon),
            ("mechanism", self.mechanism or "none recorded"),
            ("corruption rate α", self.corruption_rate if self.corruption_rate is not None else "none recorded"),
            ("adversary", self.adversary or "none"),
            ("order", self.order or "n/a"),
            ("how the loss treats the released labels", self.debiasing or "none recorded"),
            ("source of the privacy parameters", self.privacy_source or "none recorded"),
            ("seal of the release's ledger", self.details.get("ledger_seal") or "no ledger"),
            ("training data fingerprint", self.dataset_fingerprint or "unknown"),
        ]

    def _central_rows(self) -> list[tuple[str, Any]]:
        epsilon = self.epsilon
        if self.exposed:
            epsilon = f"{epsilon}: does not hold for this model (labels exposed through a starting model, see below)"
        return [
            ("mechanism", "exponential mechanism, P(π) ∝ exp(−ε·L(π)/8) (Zhou et al. 2025 (Square-χPO), Algorithm 2)"),
            ("central ε (whole row: prompt, responses, label)", epsilon),
            ("private data fingerprint", self.dataset_fingerprint or "unknown"),
        ]

    def _lineage_rows(self) -> list[tuple[str, Any]]:
        if self.lineage is None:
            return []
        suffix = "" if self.lineage_labels_private in (True, None) else "; labels public"
        rows = [
            (f"{entry['role']} model", f"{entry['model']} ({_STATUS_TEXT[entry['status']]}{suffix})")
            for entry in self.lineage
        ]
        exposures = "; ".join(
            f"labels exposed through the {e['role']} model {e['model']} ({e['status']}, override)"
            for e in self.label_exposure
        )
        return rows + [("labels exposed through a starting model", exposures or "none found")]

    def card_section(self, intro: str | None = None) -> str:
        """The card's privacy section (Markdown)."""
        table = "\n".join(f"| {name} | {value} |" for name, value in self.card_rows())
        intro = intro or (
            "This model was aligned with [squarechipo](https://pypi.org/project/squarechipo/) on preference labels "
            "released through the mechanism below (Square-χPO, Zhou et al. 2025 (Square-χPO), Algorithm 1)."
        )
        return (
            f"{_CARD_HEADING}\n\n{intro} The full record is in `{PRIVACY_FILE}`.\n\n"
            f"| field | value |\n|---|---|\n{table}\n"
        )


def _overrides(overrides: list[dict]) -> str:
    return "; ".join(f"{o['candidate']} ({o['reason']})" for o in overrides) or "none"


def _seeded(seeded: bool) -> str:
    return "fixed (tests/simulation only: no guarantee)" if seeded else "OS entropy"


#: Stage details shown first in the card when present: (key, card name, renderer or None).
_DETAIL_ROWS = (
    (
        "no_update",
        "weights",
        lambda _: "unchanged: this run updated no weight (the saved model is its starting model)",
    ),
    ("method", "method", None),
    ("model_type", "model type", None),
    ("loss", "loss", None),
    ("beta", "β", None),
    ("r_max", "R_max (margin clipped to ±2·R_max)", lambda r: r if r is not None else "no clip"),
    ("eta", "η (self-play step size)", None),
    ("iterations", "self-play iterations T", None),
    ("output_policy", "returned policy", None),
    ("max_margin", "margin bound |m| ≤", None),
    ("prior_row_weight", "weight of rows released from the prior (LP-2ST)", None),
    ("link", "link of the selection score", None),
    ("num_rows", "n (private rows scored)", None),
    ("num_candidates", "number of candidates (size of Π)", None),
    ("selected", "selected candidate", None),
    ("sensitivity", "per-row loss sensitivity", None),
    ("guard_overrides", "guard overrides", _overrides),
    ("seeded", "sampling seed", _seeded),
)


def weights_fingerprint(model) -> str:
    """sha256 over every floating-point weight as float32, in the order of their names (names themselves are left
    out, so a PEFT or DDP wrapper's prefixes do not matter). The studies' set-up digests use it (exact, and slow: it
    reads every weight); the lineage guard uses :func:`squarechipo.privacy.provenance.sketch.weights_identity`."""
    import hashlib

    import torch

    state = model.state_dict()
    digest = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name]
        if torch.is_floating_point(tensor):
            digest.update(tensor.detach().to(device="cpu", dtype=torch.float32).contiguous().numpy().tobytes())
    return "sha256:" + digest.hexdigest()


def start_sketch(model, private: bool):
    """The :class:`~squarechipo.privacy.provenance.sketch.Sketch` of the model a private run starts from (None for a
    public run or a model given by name), kept until the trained model's record is written."""
    import torch

    from squarechipo.privacy.provenance.sketch import sketch_model

    return sketch_model(model)[0] if private and isinstance(model, torch.nn.Module) else None


def write_privacy_record(
    folder: str | os.PathLike,
    record: PrivacyRecord,
    *,
    intro: str | None = None,
    card_header: str | None = None,
    model=None,
    start_sketch=None,
    start_identity: str | None = None,
) -> Path:
    """Write ``squarechipo_privacy.json`` (sealed, as ledgers are) and the card's privacy section (replacing an older
    section).

    ``card_header`` starts a new card (front matter and title) for folders that have none from TRL (the
    central selector's copy of a candidate); otherwise the section is appended to the existing card. With the
    saved ``model``, the record carries its weights' identity and enters this machine's record store
    (:mod:`squarechipo.privacy.provenance.sketch`), so a copy of the weights saved without this file is recognised by
    the lineage guard; with ``start_sketch`` (the sketch of the model training started from) a cast, perturbed, merged
    or reshaped copy is recognised too. With ``start_identity`` (the starting weights' identity), a model equal to its
    starting model records "no update" and enters nothing into the store.
    """
    if model is not None:
        from squarechipo.privacy.provenance.sketch import remember_record, weights_identity

        identity = weights_identity(model)
        if identity == start_identity:
            run = Path(folder).parent if Path(folder).name.startswith("checkpoint-") else Path(folder)
            record = _no_update(record, (identity, str(run.resolve())))  # not recorded as trained on these rows
        else:
            record = dataclasses.replace(record, weights_fingerprint=identity)
            remember_record(record.to_dict(), model, start_sketch)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    key = signing_key()
    record = dataclasses.replace(
        record,
        subjects=model_subjects(folder),
        base=adapter_base(folder),
        signer=None if key is None else public_key_text(key.public),
    )
    path = folder / PRIVACY_FILE
    path.write_text(json.dumps(seal(record.to_dict()), indent=2, sort_keys=True), encoding="utf-8")
    readme = folder / "README.md"
    text = card_header if card_header is not None else (readme.read_text(encoding="utf-8") if readme.exists() else "")
    readme.write_text(_with_section(text, record.card_section(intro)), encoding="utf-8")
    return path


def _with_section(card: str, section: str) -> str:
    """``card`` with its privacy section replaced by ``section`` (an older one dropped where it stood), placed before
    TRL's citations so that a reader meets it with the training procedure, not after the BibTeX."""
    if "\n" + _CARD_HEADING in card:
        head, rest = card.split("\n" + _CARD_HEADING, 1)
        after = rest.find("\n## ")
        card = head.rstrip() + ("\n\n" + rest[after:].lstrip("\n") if after >= 0 else "")
    card = card.rstrip()
    at = card.find("\n## Citations")
    if at < 0:
        return (card + "\n\n" if card else "") + section
    return card[:at].rstrip() + "\n\n" + section + "\n" + card[at:].lstrip("\n") + "\n"


#: The runs whose "no update" was said ((starting identity, output folder)): each says it once.
_SAID_NO_UPDATE: set = set()


def _no_update(record: PrivacyRecord, run: tuple) -> PrivacyRecord:
    """The record of a run that changed no weight (a learning rate of 0 through every step, e.g. a 1-step smoke test
    inside its warm-up): it says so, names no training rows, and is not entered into the store of records."""
    import logging

    if run not in _SAID_NO_UPDATE:  # once a run, not once per save (its checkpoints, the end)
        _SAID_NO_UPDATE.add(run)
        logging.getLogger("squarechipo").warning(
            "no weight changed in this run (a learning rate of 0 through every step, e.g. a 1-step run inside its "
            "warm-up): its record says 'no update', and the starting model is not recorded as trained on these rows."
        )
    return dataclasses.replace(
        record, dataset_fingerprint=None, prompt_sketch=None, details={**record.details, "no_update": True}
    )


def read_privacy_record(folder: str | os.PathLike) -> PrivacyRecord | None:
    """The record saved in a model (or adapter) folder, its seal checked; None where there is none (a Hub id, a
    public base). A record whose seal is missing or does not match its fields is refused: blanking what a model
    was trained on must not turn it into an unrecorded, public-looking model."""
    path = Path(folder) / PRIVACY_FILE
    if not path.is_file():
        return None
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not valid JSON ({error}); restore it or delete the folder's model.") from error
    if not isinstance(values, dict):
        raise ValueError(f"{path} must hold a JSON object (a squarechipo privacy record).")
    check_record_seal(values, str(path))
    check_subjects(values, Path(folder), str(path))
    return PrivacyRecord.from_dict({k: v for k, v in values.items() if k not in ("digest", "signature")})


def _ledger_of_record(summary: dict, where: str, signed_only: bool | None = None) -> tuple[PrivacyLedger, list[str]]:
    """The ledger a record carries (a release's, or the sources of derived rows), each seal checked: (the ledger,
    what each seal says)."""
    from squarechipo.privacy.ledger.binding import DERIVED_FORMAT

    if summary.get("format") == DERIVED_FORMAT:
        sources = [PrivacyLedger.from_dict(s, f"{where} (source {i})") for i, s in enumerate(summary["sources"])]
        ledger = PrivacyLedger(releases=tuple(r for s in sources for r in s.releases))
    else:
        sources = [PrivacyLedger.from_dict(summary, where)]
        ledger = sources[0]
    if signed_only and not all(source.seal.signed for source in sources):
        raise IntegrityError(
            f"{where}: a ledger it carries has an {next(s.seal for s in sources if not s.seal.signed).describe()}; a "
            "third party accepts only a ledger signed by a trusted key (the custodian's), since anyone can write "
            "the rest."
        )
    return ledger, [source.seal.describe() for source in sources]


def _budgets(ledger: PrivacyLedger) -> list[dict] | str:
    """The privacy budgets the ledger's releases were made under (scope, ε, what remained after each), as signed."""
    return [r.budget for r in ledger.releases if r.budget] or "none: no privacy budget applied to these releases"


def verify_privacy_record(folder: str | os.PathLike, *, third_party: bool = False) -> dict[str, Any]:
    """Check a model's privacy record as anyone holding the custodian's public key can, in the order of Sigstore's
    verify: the record's own seal (and who signed it), each file it names against the files beside it (their sha256),
    the release ledger it carries (signed by the custodian, without its row sets), and that the ε the record and its
    card state is the one that ledger backs.

    ``third_party`` (``squarechipo key verify``): there must be a trust anchor (refused, and nothing written, where
    none is), the record must name its weights, the ledger must be signed by a trusted key, and a stated ε must be
    backed. Raises :class:`IntegrityError` on anything that does not hold."""
    if third_party:
        try:
            trust_anchor()
        except SigningKeyError as error:
            raise IntegrityError(str(error)) from None
    path = Path(folder) / PRIVACY_FILE
    values = json.loads(path.read_text(encoding="utf-8"))
    record_seal = check_record_seal(values, str(path))
    subjects = check_subjects(values, Path(folder), str(path), required=third_party)
    base = check_adapter_base(values, Path(folder), str(path), required=third_party)
    found = {"model": str(folder), "record": record_seal.describe(), "epsilon": values.get("epsilon")}
    found["weights"] = (
        [f"{s['name']} sha256:{s['digest']['sha256']} (matches)" for s in subjects]
        if subjects is not None
        else "not bound: a record written before records named their weights"
    )
    if base is not None:
        found["base"] = base
    found["trained_by"] = (
        f"key {record_seal.key_id}" + (" (trusted here)" if record_seal.kind == "signed" else " (not a trusted key)")
        if record_seal.key_id
        else "not attested (an unsigned record)"
    )
    summary = values.get("ledger")
    if not summary:
        found["ledger"] = "none: the record states no release (public labels, or ε asserted by a config)"
        found["epsilon_backed_by_ledger"] = values.get("epsilon") is None
        if third_party and values.get("epsilon") is not None:
            raise IntegrityError(f"{path}: it states ε {values.get('epsilon')} but carries no ledger that backs it.")
        return found
    ledger, seals = _ledger_of_record(summary, f"{path} [ledger]", signed_only=True if third_party else None)
    found["ledger"] = seals
    found["budget"] = _budgets(ledger)
    found["randomness"] = sorted({r.randomness for r in ledger.releases})
    if "fixed_seed" in found["randomness"]:
        found["warning"] = SEEDED
    stated, backed = values.get("epsilon"), ledger.total_epsilon
    found["epsilon_backed_by_ledger"] = stated is not None and backed is not None and abs(stated - backed) < 1e-9
    if third_party and not found["epsilon_backed_by_ledger"]:
        raise IntegrityError(
            f"{path}: it states ε {stated}, and the signed ledger it carries backs ε {backed}: the record overclaims."
        )
    found["does_not_prove"] = (
        "that these weights were trained on the ledger's rows: the record's signer says so, and only the ledger's "
        "signature is the custodian's"
    )
    return found
