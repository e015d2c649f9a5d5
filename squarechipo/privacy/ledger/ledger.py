"""The privacy ledger: what was done to a dataset's labels, carried with the data.

A privatized :class:`datasets.Dataset` carries a :class:`PrivacyLedger` as the JSON block of
:mod:`squarechipo.data.metadata`, which keeps it with the data in memory, in ``save_to_disk`` folders,
Parquet files and JSONL files (saved and loaded with their release marker by :mod:`squarechipo.privacy.release.saved`).

What the ledger never holds: the seed, which rows were swapped, or anything else that is a
function of the raw labels. Only public parameters of the release.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import datasets

from squarechipo.data import metadata
from squarechipo.data.fingerprint import LEGACY_ROW_SET_BYTES, ROW_SET_BYTES
from squarechipo.data.label_roles import label_free
from squarechipo.privacy.ledger.release_entry import (
    Debiasing,
    Release,
    check_consistent,
)
from squarechipo.trust.seals import IntegrityError, Seal, check_seal, seal

__all__ = [
    "IntegrityError",
    "LEDGER_FORMAT",
    "Debiasing",
    "Release",
    "PrivacyLedger",
    "extend_ledger",
    "with_ledger",
    "parse_ledger_block",
    "read_ledger_for_path",
]


#: Format 3: 16-byte row sets, sealed through their sha256 (:func:`_sealed_view`), Ed25519 signatures. Formats 1
#: and 2 (squarechipo 0.2 and 0.3) are read as written.
LEDGER_FORMAT = "squarechipo.privacy_ledger/3"
_READ_FORMATS = ("squarechipo.privacy_ledger/1", "squarechipo.privacy_ledger/2", LEDGER_FORMAT)


def _sealed_view(body: dict[str, Any]) -> dict[str, Any]:
    """What a format-3 seal covers: the ledger with each release's row set replaced by its sha256, so the seal holds
    for the full ledger and for its :meth:`PrivacyLedger.summary` alike."""
    if body.get("format") != LEDGER_FORMAT:
        return body
    releases = []
    for release in body.get("releases") or []:
        release = dict(release)
        if release.get("row_set") is not None:
            release["row_set_sha256"] = hashlib.sha256(release.pop("row_set").encode("ascii")).hexdigest()
        else:
            release.pop("row_set", None)
        releases.append(release)
    return {**body, "releases": releases}


@dataclass(frozen=True)
class PrivacyLedger:
    """The releases a dataset's labels went through, oldest first."""

    releases: tuple[Release, ...] = ()
    #: The digest a stored ledger carried, set by :meth:`from_dict` once it is verified (so it is not recomputed).
    verified_digest: str | None = field(default=None, compare=False, repr=False)
    #: What checking the stored seal found (signed by whom, unsigned, legacy), and the stored record itself, which
    #: :meth:`to_dict` returns as it was sealed (never sealed again by another key).
    seal: Seal | None = field(default=None, compare=False, repr=False)
    stored: dict[str, Any] | None = field(default=None, compare=False, repr=False)
    #: For rows a library transform derived in this process (:mod:`squarechipo.privacy.ledger.binding`): its record.
    derivation: dict[str, Any] | None = field(default=None, compare=False, repr=False)

    def _releases_of(self, part: str | None) -> list[Release]:
        """The releases the rows of ``part`` went through (those on every row, then the part's own)."""
        return [r for r in self.releases if r.part is None or r.part == part]

    def _per_part(self, value) -> list[float]:
        """``value(releases)`` for the releases each row went through, one entry per disjoint part."""
        return [value(self._releases_of(part)) for part in self.parts]

    @property
    def total_epsilon(self) -> float | None:
        """Total ε per unit of privacy (one comparison, or a declared privacy unit whose rows compose): basic
        composition (sum) over the releases a row went through, the earlier releases of the same rows on this
        machine included (``earlier_epsilon``), and the maximum over disjoint parts (parallel composition); None if
        nothing was private.

        The sum is valid for any sequence of releases. It is loose for a re-release of labels that
        were already released (``release_dataset(..., compose=True)``): that is post-processing of
        the first release, so the raw labels keep the first release's ε, and the stored labels alone
        satisfy :attr:`stored_labels_epsilon`, which is below every ε_k."""
        if not any(r.epsilon is not None for r in self.releases):
            return None
        spent = lambda rs: sum(r.unit_epsilon + r.earlier_epsilon for r in rs if r.epsilon is not None)  # noqa: E731
        return float(max(self._per_part(spent)))

    @property
    def own_epsilon(self) -> float | None:
        """:attr:`total_epsilon` without earlier releases into other datasets: the ε of this dataset's own
        releases, which its labels' noise (and so their debiasing) follows."""
        if not any(r.epsilon is not None for r in self.releases):
            return None
        return float(max(self._per_part(lambda rs: sum(r.epsilon for r in rs if r.epsilon is not None))))

    @property
    def parts(self) -> tuple[str | None, ...]:
        """The disjoint parts of the rows, in order; ``(None,)`` when every release covers every row."""
        named = sorted({r.part for r in self.releases if r.part is not None})
        return tuple(named) if named else (None,)

    def debiasing_for(self, part: str | None = None) -> Debiasing:
        """How to debias the labels of one release part (``part=None``: rows outside every named part).

        Binary releases (RR, binary RRWithPrior, no noise) compose into one RR: 1 − 2ρ = Π(1 − 2q_k), and the loss uses
        ρ and c = 1/(1 − 2ρ) (Zhou et al. 2025 (Square-χPO), Alg. 1). A K-RR or subset release is debiased by its
        analyzer weights (``label_weights``, Chua et al. 2024 (local label DP)); a K-ary RRWithPrior label is used as
        released (Ghazi et al. 2021 (label DP), Alg. 2). Mixing a K-ary release with any other release on the same rows
        has no debiasing: raises.
        """
        if part is not None and part not in self.parts:
            raise ValueError(f"part {part!r} is not in this ledger; its parts are {list(self.parts)}.")
        releases = self._releases_of(part)
        kary = [r for r in releases if r.flip_rate is None]
        if not kary:
            rho = (1.0 - math.prod(1.0 - 2.0 * r.flip_rate for r in releases)) / 2.0
            return Debiasing("flip_rate" if rho > 0 else "none", flip_rate=rho, part=part)
        if len(releases) > 1:
            names = [r.mechanism for r in releases]
            raise ValueError(
                f"the rows of part {part!r} went through {names}: a K-ary release composed with another release "
                "has no unbiased analyzer. Release the raw rows once with one K-ary mechanism."
            )
        method = "as_released" if kary[0].mechanism == "rr_with_prior" else "analyzer_weights"
        return Debiasing(method, part=part, column="label_weights" if method == "analyzer_weights" else None)

    def debiasing(self) -> Debiasing:
        """The one debiasing that applies to every row; raises when the parts need different ones
        (debias each part with :meth:`debiasing_for`)."""
        answers = [self.debiasing_for(part) for part in self.parts]
        first = answers[0]
        if any(a.method != first.method or abs(a.flip_rate - first.flip_rate) > 1e-12 for a in answers):
            per_part = {a.part: a.describe() for a in answers}
            raise ValueError(
                f"the disjoint parts of this dataset need different debiasing ({per_part}); "
                "debias each part separately (PrivacyLedger.debiasing_for(part))."
            )
        return replace(first, part=None)

    def _binary_only(self, name: str) -> Debiasing:
        answer = self.debiasing()
        if answer.method not in ("flip_rate", "none"):
            kary = sorted({r.mechanism for r in self.releases if r.flip_rate is None})
            raise ValueError(
                f"the {name} is defined for binary randomized response, but these labels were released by {kary} "
                "over K labels. Train on the analyzer weights the release wrote (label_weights, "
                "BestOfKRewardTrainer) instead of debiasing a flip rate."
            )
        return answer

    @property
    def has_flip_rate(self) -> bool:
        """Whether every release is binary with a flip rate (RR, binary RRWithPrior, or no noise)."""
        return all(r.flip_rate is not None for r in self.releases)

    @property
    def rr_flip_rate(self) -> float:
        """Probability that the binary releases together flipped a label (:meth:`debiasing`'s ρ).

        An RRWithPrior release flips its RR rows at the same rate as RR_ε; its rows released from the
        prior are marked in the data (``label_from_prior``) and are not debiased. Raises for K-ary releases.
        """
        return self._binary_only("flip rate").flip_rate

    @property
    def stored_labels_epsilon(self) -> float | None:
        """ε of the stored labels alone for binary releases: a chain of RRs is one RR with the composed
        flip rate ρ, so ε = log((1 − ρ)/ρ) (tight; ≤ min ε_k). None without privacy or for K-ary releases."""
        if self.total_epsilon is None or not self.has_flip_rate:
            return None
        rho = self.rr_flip_rate
        return math.inf if rho == 0.0 else math.log((1.0 - rho) / rho)

    @property
    def debias_factor(self) -> float:
        """c for the labels as stored: 1/(1 − 2ρ) = Π c(ε_k) over the binary releases (Zhou et al. 2025 (Square-χPO),
        Alg. 1's c(ε))."""
        return self._binary_only("debias factor c(ε)").debias_factor

    def with_release(self, release: Release) -> PrivacyLedger:
        return replace(self, releases=self.releases + (release,), verified_digest=None, seal=None, stored=None)

    @property
    def summary_only(self) -> bool:
        """A format-3 ledger without its row sets (as a model record carries it): it states a release and verifies,
        but vouches for no rows."""
        return any(r.row_set is None and r.row_hash_bytes == ROW_SET_BYTES for r in self.releases)

    def summary(self) -> dict[str, Any]:
        """The sealed record without its row sets (each replaced by its sha256): what a model's privacy record
        carries. Its seal still verifies with the signer's public key (:func:`_sealed_view`). Derived rows give their
        sources' summaries, with their releases listed once more for readers of the record."""
        if self.derivation is not None:
            kept = {k: v for k, v in self.derivation.items() if k != "derivation"}
            answers = {str(p): self.debiasing_for(p).describe() for p in self.parts}
            releases = [asdict(r) for r in self.releases]
            return {**kept, "releases": releases, "total_epsilon": self.total_epsilon, "debiasing": answers}
        record = self.to_dict()
        return _sealed_view(record) if record.get("format") == LEDGER_FORMAT else record

    def to_dict(self) -> dict[str, Any]:
        if self.derivation is not None:
            return dict(self.derivation)
        if self.stored is not None:
            return dict(self.stored)
        # Only what applies: a flip rate and c(ε) for binary releases, the analyzer for K-ary ones; parts that
        # need different debiasing are described under "debiasing" only.
        answers = {str(p): self.debiasing_for(p).describe() for p in self.parts}
        if not self.has_flip_rate:
            summary = {"analyzer": "; ".join(r.semantics for r in self.releases)}
        elif len({json.dumps(a, sort_keys=True) for a in answers.values()}) == 1:
            summary = {"debias_factor": self.debias_factor, "stored_labels_epsilon": self.stored_labels_epsilon}
        else:
            summary = {}
        return seal(
            {
                "format": LEDGER_FORMAT,
                "total_epsilon": self.total_epsilon,
                **summary,
                "debiasing": answers,
                "releases": [asdict(r) for r in self.releases],
            },
            view=_sealed_view,
        )

    @property
    def digest(self) -> str:
        """The digest sealing this ledger's fields (:mod:`squarechipo.data.integrity`)."""
        if self.derivation is not None:
            raise ValueError(
                f"these rows were derived ({self.derivation.get('transform')}) from a release in this process: they "
                "are not a release and are not saved as one. Save the release itself, and derive again after loading."
            )
        return self.verified_digest or self.to_dict()["digest"]

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, record: dict[str, Any], where: str = "dataset") -> PrivacyLedger:
        """The ledger of a stored record, after checking its digest and that each release agrees with itself."""
        if record.get("format") not in _READ_FORMATS:
            raise ValueError(f"{where}: not a squarechipo privacy ledger (format={record.get('format')!r}).")
        found = check_seal(record, where, view=_sealed_view)
        releases = []
        for values in record["releases"]:
            values = {k: v for k, v in values.items() if k != "row_set_sha256"}
            if record["format"] != LEDGER_FORMAT:
                values.setdefault("row_hash_bytes", LEGACY_ROW_SET_BYTES)
            try:
                releases.append(Release(**values))
            except TypeError as error:
                raise IntegrityError(
                    f"{where}: a release in its privacy ledger has unknown fields ({error})."
                ) from None
        ledger = cls(releases=tuple(releases), verified_digest=record["digest"], seal=found, stored=dict(record))
        for release in ledger.releases:
            check_consistent(release, where)
        return ledger

    @classmethod
    def from_json(cls, text: str, where: str = "dataset") -> PrivacyLedger:
        return cls.from_dict(parse_ledger_block(text, where), where)

    @classmethod
    def derived_from(cls, sources: list[PrivacyLedger], record: dict[str, Any]) -> PrivacyLedger:
        """The ledger of rows a library transform derived from the ``sources`` releases (``record``: the derivation,
        :mod:`squarechipo.privacy.ledger.binding`): their releases, and the weakest of their seals."""
        seals = [source.seal for source in sources]
        weakest = next((s for s in seals if s is None or not s.signed), seals[0])
        return cls(
            releases=tuple(r for source in sources for r in source.releases), seal=weakest, derivation=dict(record)
        )

    def current_row_sets(self) -> list[tuple[str, tuple[str, ...] | None, int]] | None:
        """(row set, the columns it covers, bytes a hash) of each part's latest release, which the rows must come from
        (a later release of the same part, e.g. ``compose=True``, relabels its rows). None when a release predates
        row sets."""
        latest: dict[str | None, Release] = {}
        for release in self.releases:
            latest[release.part] = release
        if any(release.row_set is None for release in latest.values()):
            return None
        return [
            (r.row_set, None if r.row_columns is None else tuple(r.row_columns), r.row_hash_bytes)
            for r in latest.values()
        ]


def parse_ledger_block(text: str, where: str = "dataset") -> dict[str, Any]:
    """The JSON object of a ledger block (a release's ledger or a derivation), or :class:`IntegrityError`."""
    try:
        record = json.loads(text)
    except json.JSONDecodeError as error:
        raise IntegrityError(
            f"{where}: its privacy ledger is not valid JSON ({error.msg} at character {error.pos}): it was "
            "edited, or rows of datasets with different ledgers were put together "
            "(datasets.concatenate_datasets joins their descriptions). Combine released parts with "
            "squarechipo.privacy.combine_parts, or use one release."
        ) from None
    if not isinstance(record, dict):
        raise IntegrityError(f"{where}: its privacy ledger must be a JSON object (got {type(record).__name__}).")
    return record


def extend_ledger(
    info: datasets.DatasetInfo, existing: PrivacyLedger | None, **release_fields: Any
) -> tuple[datasets.DatasetInfo, str]:
    """The one place a release's ledger is built: ``existing`` plus ``Release.now(**release_fields)``, sealed once
    and attached to a copy of ``info``. Returns (that info, the ledger's digest, which the release folder's marker
    records)."""
    ledger = (existing or PrivacyLedger()).with_release(Release.now(**release_fields))
    record = ledger.to_dict()
    return metadata.info_with_block(info, json.dumps(record, sort_keys=True)), record["digest"]


@label_free("attaches a ledger, which every reader matches to the rows")
def with_ledger(dataset: datasets.Dataset, ledger: PrivacyLedger) -> datasets.Dataset:
    """Attach ``ledger`` to ``dataset`` (in place on its ``info``; returns the dataset)."""
    return metadata.with_block(dataset, ledger.to_json())


def read_ledger_for_path(path: str | os.PathLike) -> PrivacyLedger | None:
    """The ledger stored with a JSONL/Parquet file (sidecar or metadata), or None."""
    block = metadata.read_block_for_path(path)
    return PrivacyLedger.from_json(block) if block else None
