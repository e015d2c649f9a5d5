"""One release as a ledger records it (public parameters only), and how a learner debiases its labels.

:class:`Release` is one entry of a :class:`squarechipo.privacy.ledger.ledger.PrivacyLedger`; :class:`Debiasing` is
the ledger's answer to "how do I debias these labels" for one part of the rows.
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
from dataclasses import dataclass, field
from typing import Any

from squarechipo.data.fingerprint import LEGACY_ROW_SET_BYTES, ROW_SET_BYTES
from squarechipo.privacy.mechanisms.calibration import debias_factor, flip_probability
from squarechipo.privacy.mechanisms.measurements import MECHANISMS
from squarechipo.trust.seals import IntegrityError

__all__ = ["BINARY_MECHANISMS", "Debiasing", "Release", "check_consistent", "library_version"]


def library_version() -> str:
    """The installed squarechipo version, which ledgers, privacy records and cards record."""
    return importlib.metadata.version("squarechipo")


@dataclass(frozen=True)
class Debiasing:
    """The ledger's answer to "how do I debias these labels" for one release part.

    ``method``: ``none`` (no noise), ``flip_rate`` (binary labels flipped with probability ``flip_rate``: robust losses
    take ρ, square losses c = 1/(1 − 2ρ); Zhou et al. 2025 (Square-χPO), Alg. 1), ``analyzer_weights`` (K-RR / subset:
    train on the unbiased analyzer in ``column``, Chua et al. 2024 (local label DP)) or ``as_released`` (K-ary
    RRWithPrior: the label is used as is, Ghazi et al. 2021 (label DP), Alg. 2).
    """

    method: str
    flip_rate: float = 0.0
    part: str | None = None
    column: str | None = None

    @property
    def debias_factor(self) -> float:
        """c = 1/(1 − 2ρ) for ``flip_rate`` and ``none``; raises for the K-ary methods (they have none)."""
        if self.method not in ("flip_rate", "none"):
            raise ValueError(f"{self.method} labels have no debias factor c(ε); use {self.column or 'them as is'}.")
        return 1.0 / (1.0 - 2.0 * self.flip_rate)

    def describe(self) -> dict[str, Any]:
        """The public description the ledger, the card and errors show."""
        if self.method in ("flip_rate", "none"):
            return {"method": self.method, "flip_rate": self.flip_rate, "debias_factor": self.debias_factor}
        return {"method": self.method, "column": self.column}


@dataclass(frozen=True)
class Release:
    """One release of the labels through a pipeline (public parameters only).

    ``randomness`` is ``"os_entropy"`` (the default, for real data) or ``"fixed_seed"`` (for
    simulation: anyone who learns the seed can undo the noise). The seed itself is never stored.
    """

    mechanism: str  # "randomized_response", "none", "rr_with_prior", "k_rr" or "subset" (see :attr:`semantics`)
    epsilon: float | None
    corruption_rate: float
    adversary: str | None
    order: str | None
    n_rows: int
    randomness: str
    library_version: str
    created_at: str
    pipeline: dict[str, Any] = field(default_factory=dict)
    #: Label-invariant content hash of the rows (squarechipo.data.fingerprint): identifies the data,
    #: says nothing about the labels.
    data_fingerprint: str | None = None
    #: The disjoint part of the rows this release covers (e.g. ``lp2st/part1``); None = every row.
    #: Releases on disjoint parts compose in parallel: each label is released once.
    part: str | None = None
    #: The columns the release kept beside prompt/chosen/rejected (declared public), and the label-carrying ones
    #: it dropped (name → why).
    public_columns: list[str] = field(default_factory=list)
    dropped_columns: dict[str, str] = field(default_factory=dict)
    #: Earlier releases of these rows on this machine, into other datasets
    #: (:mod:`squarechipo.privacy.release.registry`), which the caller chose to compose with (``rerelease=True``):
    #: their composed ε (basic composition, the largest sum over one row) and how many there were. 0 for a first
    #: release.
    earlier_epsilon: float = 0.0
    earlier_releases: int = 0
    #: The rows as released (:func:`squarechipo.data.fingerprint.encode_row_set`: ``row_hash_bytes``-byte prefixes of
    #: their hashes, labels included): every reader checks that a dataset's rows are among them (:func:`get_ledger`).
    #: The seal covers it through its sha256, so a record may carry the ledger without it (:meth:`PrivacyLedger.
    #: summary`); such a ledger states a release but vouches for no rows.
    row_set: str | None = None
    #: The columns the row set's hashes cover, exactly as released (:func:`squarechipo.data.fingerprint.
    #: _exact_row_hashes`); None for a ledger written before row sets covered every column byte for byte.
    row_columns: list[str] | None = None
    #: The declared unit of privacy (a labeller or comparison id column; None: one comparison) and the most rows one
    #: unit has in this release: that unit's labels compose, so the release is ε × rows_per_unit per unit.
    privacy_unit: str | None = None
    rows_per_unit: int = 1
    #: Bytes kept of each row's hash in ``row_set``: 16 (:data:`squarechipo.data.fingerprint.ROW_SET_BYTES`); 4 in
    #: ledgers written by squarechipo 0.3.
    row_hash_bytes: int = LEGACY_ROW_SET_BYTES
    #: This release's id (random; what the registry of releases enters it under) and the id of the registry it was
    #: entered in before it was sealed (None: not counted, e.g. a seeded release). Both are under the seal.
    release_id: str | None = None
    registry_id: str | None = None
    #: The privacy budget the release was made under (:mod:`squarechipo.privacy.release.budget`): its scope, ε, the
    #: digest of its signed entry and the ε that remained for these rows after this release. None: no budget applied.
    budget: dict[str, Any] | None = None

    @property
    def unit_epsilon(self) -> float | None:
        """The ε this release spends on one unit of privacy (basic composition over the unit's rows)."""
        return None if self.epsilon is None else self.epsilon * self.rows_per_unit

    @property
    def num_labels(self) -> int:
        """K, the number of values the released label takes (2 for a preference pair)."""
        return int(self.pipeline.get("num_labels", 2))

    @property
    def flip_rate(self) -> float | None:
        """The probability this release flipped a binary label; None where no flip rate exists (K-ary).

        Binary RR flips with q(ε) = 1/(1+e^ε) (Zhou et al. 2025 (Square-χPO), Alg. 1); binary RRWithPrior flips its RR
        rows at the same rate, and its prior rows are marked in the data (``label_from_prior``) and not debiased
        (Ghazi et al. 2021 (label DP), Alg. 2). K-RR and the subset mechanism have no flip rate: their analyzer is the
        ``label_weights`` column (Chua et al. 2024 (local label DP)).
        """
        if self.mechanism == "none" or self.epsilon is None:
            return 0.0
        if self.mechanism in BINARY_MECHANISMS and self.num_labels == 2:
            return flip_probability(self.epsilon)
        return None

    @property
    def semantics(self) -> str:
        """What a learner does with the released labels, in words (for cards)."""
        if self.mechanism == "none" or self.epsilon is None:
            return "no privacy noise"
        if self.flip_rate is None:
            if self.mechanism == "rr_with_prior":
                return f"RRWithPrior over K = {self.num_labels} labels: the released label is used as is"
            return (
                f"{self.mechanism} over K = {self.num_labels} labels: unbiased analyzer weights "
                "(label_weights column, Chua et al. 2024 (local label DP))"
            )
        if self.mechanism == "rr_with_prior":
            return (
                f"RRWithPrior (K = 2): RR rows flipped with rate {self.flip_rate:.6f} and debiased by "
                f"c(ε) = {debias_factor(self.epsilon):.6f}; rows released from the prior are pseudo-labels"
            )
        return f"binary RR: flip rate {self.flip_rate:.6f}, debiased by c(ε) = {debias_factor(self.epsilon):.6f}"

    @classmethod
    def now(
        cls,
        mechanism: str,
        epsilon: float | None,
        n_rows: int,
        *,
        fixed_seed: bool,
        pipeline: dict[str, Any],
        corruption_rate: float = 0.0,
        adversary: str | None = None,
        order: str | None = None,
        data_fingerprint: str | None = None,
        part: str | None = None,
        public_columns: list[str] | None = None,
        dropped_columns: dict[str, str] | None = None,
        earlier_epsilon: float = 0.0,
        earlier_releases: int = 0,
        row_set: str | None = None,
        row_columns: list[str] | None = None,
        privacy_unit: str | None = None,
        rows_per_unit: int = 1,
        release_id: str | None = None,
        registry_id: str | None = None,
        budget: dict[str, Any] | None = None,
    ) -> Release:
        """A release made now by this library version (``randomness`` from ``fixed_seed``)."""
        return cls(
            mechanism=mechanism,
            epsilon=None if epsilon is None else float(epsilon),
            corruption_rate=corruption_rate,
            adversary=adversary,
            order=order,
            n_rows=int(n_rows),
            randomness="fixed_seed" if fixed_seed else "os_entropy",
            library_version=library_version(),
            created_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            pipeline=pipeline,
            data_fingerprint=data_fingerprint,
            part=part,
            public_columns=list(public_columns or []),
            dropped_columns=dict(dropped_columns or {}),
            earlier_epsilon=float(earlier_epsilon),
            earlier_releases=int(earlier_releases),
            row_set=row_set,
            row_columns=None if row_columns is None else sorted(row_columns),
            privacy_unit=privacy_unit,
            rows_per_unit=int(rows_per_unit),
            row_hash_bytes=ROW_SET_BYTES,
            release_id=release_id,
            registry_id=registry_id,
            budget=budget,
        )


def check_consistent(release: Release, where: str) -> None:
    """A release whose stated mechanism or ε disagrees with its own pipeline was edited by hand."""
    pipeline = release.pipeline
    problems = []
    if release.mechanism not in MECHANISMS:  # a name this version cannot debias: fail closed, never guess
        problems.append(f"mechanism {release.mechanism!r} is none of {sorted(MECHANISMS)}")
    if "epsilon" in pipeline and pipeline["epsilon"] != release.epsilon:
        problems.append(f"ε {release.epsilon} but its pipeline has ε {pipeline['epsilon']}")
    if "mechanism" in pipeline and pipeline["mechanism"] != release.mechanism:
        problems.append(f"mechanism {release.mechanism!r} but its pipeline is {pipeline['mechanism']!r}")
    if "order" in pipeline:  # a LabelPipeline: randomized response exactly when it has an ε
        expected = "none" if pipeline.get("epsilon") is None else "randomized_response"
        if release.mechanism != expected:
            problems.append(f"mechanism {release.mechanism!r} for a pipeline of ε {pipeline.get('epsilon')}")
        if "corruption_rate" in pipeline and pipeline["corruption_rate"] != release.corruption_rate:
            problems.append(f"α {release.corruption_rate} but its pipeline has α {pipeline['corruption_rate']}")
    if problems:
        raise IntegrityError(f"{where}: a release in the privacy ledger disagrees with itself: {'; '.join(problems)}.")


#: Mechanisms whose binary (K = 2) release flips the label with q(ε) = 1/(1+e^ε) (from the one table).
BINARY_MECHANISMS = tuple(name for name, kind in MECHANISMS.items() if kind.flips_binary)
