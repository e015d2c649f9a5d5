"""The privacy ledger: what was done to a dataset's labels, carried with the data.

A privatized :class:`datasets.Dataset` carries a :class:`PrivacyLedger` as the JSON block of
:mod:`squarechipo.data.metadata`, which keeps it with the data in memory, in ``save_to_disk`` folders,
Parquet files and JSONL files (:func:`save_privatized` / :func:`load_privatized`).

What the ledger never holds: the seed, which rows were swapped, or anything else that is a
function of the raw labels. Only public parameters of the release.
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import json
import math
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import datasets

from squarechipo.data import metadata
from squarechipo.privacy.calibration import debias_factor, flip_probability

__all__ = [
    "Release",
    "PrivacyLedger",
    "get_ledger",
    "info_with_ledger",
    "with_ledger",
    "save_privatized",
    "load_privatized",
    "read_ledger_for_path",
]


def _library_version() -> str:
    return importlib.metadata.version("squarechipo")


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

    @property
    def num_labels(self) -> int:
        """K, the number of values the released label takes (2 for a preference pair)."""
        return int(self.pipeline.get("num_labels", 2))

    @property
    def flip_rate(self) -> float | None:
        """The probability this release flipped a binary label; None where no flip rate exists (K-ary).

        Binary RR flips with q(ε) = 1/(1+e^ε) (003 Alg. 1); binary RRWithPrior flips its RR rows at the same
        rate, and its prior rows are marked in the data (``label_from_prior``) and not debiased (001 Alg. 2).
        K-RR and the subset mechanism have no flip rate: their analyzer is the ``label_weights`` column (002).
        """
        if self.mechanism == "none" or self.epsilon is None:
            return 0.0
        if self.mechanism in _BINARY_MECHANISMS and self.num_labels == 2:
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
                "(label_weights column, 002)"
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
            library_version=_library_version(),
            created_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            pipeline=pipeline,
            data_fingerprint=data_fingerprint,
            part=part,
        )


#: Mechanisms whose binary (K = 2) release flips the label with q(ε) = 1/(1+e^ε).
_BINARY_MECHANISMS = ("randomized_response", "rr_with_prior")


@dataclass(frozen=True)
class PrivacyLedger:
    """The releases a dataset's labels went through, oldest first."""

    releases: tuple[Release, ...] = ()

    def _per_part(self, value) -> list[float]:
        """``value(releases)`` for the releases each row went through, one entry per disjoint part."""
        shared = [r for r in self.releases if r.part is None]
        parts = sorted({r.part for r in self.releases if r.part is not None})
        if not parts:
            return [value(shared)]
        return [value(shared + [r for r in self.releases if r.part == p]) for p in parts]

    @property
    def total_epsilon(self) -> float | None:
        """Total ε per label: basic composition (sum) over the releases a row went through, and the
        maximum over disjoint parts (parallel composition); None if nothing was private.

        The sum is valid for any sequence of releases. It is loose for a re-release of labels that
        were already released (``release_dataset(..., compose=True)``): that is post-processing of
        the first release, so the raw labels keep the first release's ε, and the stored labels alone
        satisfy :attr:`stored_labels_epsilon`, which is below every ε_k."""
        if not any(r.epsilon is not None for r in self.releases):
            return None
        return float(max(self._per_part(lambda rs: sum(r.epsilon for r in rs if r.epsilon is not None))))

    def _common(self, value, name: str) -> float:
        values = self._per_part(value)
        if max(values) - min(values) > 1e-12:
            raise ValueError(
                f"the {name} differs between the disjoint parts of this dataset ({values}); "
                "debias each part separately."
            )
        return values[0]

    @property
    def has_flip_rate(self) -> bool:
        """Whether every release is binary with a flip rate (RR, binary RRWithPrior, or no noise)."""
        return all(r.flip_rate is not None for r in self.releases)

    def _binary_only(self, name: str) -> None:
        kary = sorted({r.mechanism for r in self.releases if r.flip_rate is None})
        if kary:
            raise ValueError(
                f"the {name} is defined for binary randomized response, but these labels were released by {kary} "
                "over K labels. Train on the analyzer weights the release wrote (label_weights, "
                "BestOfKRewardTrainer) instead of debiasing a flip rate."
            )

    @property
    def rr_flip_rate(self) -> float:
        """Probability that the binary releases together flipped a label: 1 − 2ρ = Π(1 − 2q_k).

        An RRWithPrior release flips its RR rows at the same rate as RR_ε; its rows released from the
        prior are marked in the data (``label_from_prior``) and are not debiased. Raises for K-ary releases.
        """
        self._binary_only("flip rate")
        return self._common(lambda rs: (1.0 - math.prod(1.0 - 2.0 * r.flip_rate for r in rs)) / 2.0, "RR flip rate")

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
        """c for the labels as stored: 1/(1 − 2ρ) = Π c(ε_k) over the binary releases (003 Alg. 1's c(ε))."""
        self._binary_only("debias factor c(ε)")
        return self._common(lambda rs: math.prod(1.0 / (1.0 - 2.0 * r.flip_rate) for r in rs), "debias factor")

    def with_release(self, release: Release) -> PrivacyLedger:
        return replace(self, releases=self.releases + (release,))

    def to_dict(self) -> dict[str, Any]:
        # Only what applies: a flip rate and c(ε) for binary releases, the analyzer for K-ary ones.
        summary = (
            {"debias_factor": self.debias_factor, "stored_labels_epsilon": self.stored_labels_epsilon}
            if self.has_flip_rate
            else {"analyzer": "; ".join(r.semantics for r in self.releases)}
        )
        return {
            "format": "squarechipo.privacy_ledger/1",
            "total_epsilon": self.total_epsilon,
            **summary,
            "releases": [asdict(r) for r in self.releases],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> PrivacyLedger:
        if record.get("format") != "squarechipo.privacy_ledger/1":
            raise ValueError(f"not a squarechipo privacy ledger (format={record.get('format')!r}).")
        return cls(releases=tuple(Release(**r) for r in record["releases"]))

    @classmethod
    def from_json(cls, text: str) -> PrivacyLedger:
        return cls.from_dict(json.loads(text))


def get_ledger(dataset: datasets.Dataset) -> PrivacyLedger | None:
    """The ledger a dataset carries, or None for data that was never privatized here."""
    block = metadata.read_block(dataset)
    return PrivacyLedger.from_json(block) if block else None


def info_with_ledger(info: datasets.DatasetInfo, ledger: PrivacyLedger) -> datasets.DatasetInfo:
    """A copy of ``info`` carrying ``ledger`` (for building a new ``Dataset`` from Arrow)."""
    return metadata.info_with_block(info, ledger.to_json())


def with_ledger(dataset: datasets.Dataset, ledger: PrivacyLedger) -> datasets.Dataset:
    """Attach ``ledger`` to ``dataset`` (in place on its ``info``; returns the dataset)."""
    return metadata.with_block(dataset, ledger.to_json())


def save_privatized(dataset: datasets.Dataset | datasets.DatasetDict, path: str | os.PathLike) -> Path:
    """Write a privatized dataset so its ledger travels with it (see :mod:`squarechipo.data.metadata`)."""
    path = Path(path)
    if metadata.file_kind(path) == "dir":
        dataset.save_to_disk(str(path))
        return path
    if isinstance(dataset, datasets.DatasetDict):
        raise ValueError("a DatasetDict can only be saved to a folder; pick a split for .jsonl/.parquet.")
    ledger = get_ledger(dataset)
    if ledger is None:
        raise ValueError("dataset has no privacy ledger; privatize it first (squarechipo.privacy.release).")
    return metadata.write_with_block(dataset, path, ledger.to_json())


def read_ledger_for_path(path: str | os.PathLike) -> PrivacyLedger | None:
    """The ledger stored with a JSONL/Parquet file (sidecar or metadata), or None."""
    block = metadata.read_block_for_path(path)
    return PrivacyLedger.from_json(block) if block else None


def load_privatized(path: str | os.PathLike) -> datasets.Dataset | datasets.DatasetDict:
    """Load what :func:`save_privatized` wrote, with its ledger attached.

    Raises:
        ValueError: when the file carries no ledger (load public data with the generic loader).
    """
    path = Path(path)
    kind = metadata.file_kind(path)
    if kind == "dir":
        loaded = datasets.load_from_disk(str(path))
        splits = loaded.values() if isinstance(loaded, datasets.DatasetDict) else [loaded]
        if not any(get_ledger(split) is not None for split in splits):
            raise ValueError(f"{path} carries no privacy ledger: it was not privatized by squarechipo.")
        return loaded
    ledger = read_ledger_for_path(path)
    if ledger is None:
        where = f"{path}{metadata.SIDECAR_SUFFIX}" if kind == "jsonl" else f"the Parquet metadata of {path}"
        raise ValueError(f"no privacy ledger found in {where}; was the file written by save_privatized?")
    loader = datasets.Dataset.from_json if kind == "jsonl" else datasets.Dataset.from_parquet
    return with_ledger(loader(str(path)), ledger)
