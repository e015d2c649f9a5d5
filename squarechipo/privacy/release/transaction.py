"""The release transaction, owned in one place: admit → draw → register → seal.

A release is one step: the one release call,
:func:`squarechipo.privacy.release.release_dataset.release_dataset`, runs every step
(:func:`release_in_memory`, or with a folder :func:`squarechipo.privacy.release.folder.release_into`, which stages the
drawn rows before they are registered and renames the sealed folder after) and returns nothing before the release is
registered and sealed; the steps themselves are private:

1. **admit**: the input is one split and a measurement; rows that already carry a ledger are post-processing
   (``compose``) or refused; copies of a comparison are refused (their noise would add up); the registry of releases
   is asked for earlier releases of these rows (refused unless ``rerelease``);
2. **draw**: the noise, once (:func:`squarechipo.privacy.release.rows.draw_rows`); the released rows are held
   unsealed;
3. **register**: a counted release (raw rows, OS entropy, an ε) is entered into the registry in the one transaction
   that decides (:func:`squarechipo.privacy.release.registry.register_release`);
4. **seal**: the ledger, naming the registry that took the release, is sealed and signed
   (:mod:`squarechipo.trust.seals`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import datasets

from squarechipo.data import metadata
from squarechipo.data.columns import NOT_A_UNIT
from squarechipo.data.fingerprint import _exact_row_hashes, encode_row_set, fingerprint_of
from squarechipo.data.label_roles import releases_labels
from squarechipo.data.near_duplicates import SCHEME, Sketch, describe_copies
from squarechipo.data.row_scan import row_copies, scan_rows
from squarechipo.privacy.ledger.binding import get_ledger
from squarechipo.privacy.ledger.ledger import PrivacyLedger, Release
from squarechipo.privacy.mechanisms.measurements import LabelPipeline, Measurement
from squarechipo.privacy.release.budget import BudgetAsk, check_budget, refuse_seeded_under_budget
from squarechipo.privacy.release.registry import (
    EarlierReleases,
    earlier_releases,
    register_release,
    registry_scheme,
)
from squarechipo.privacy.release.rows import draw_rows
from squarechipo.trust.keys import signing_key

__all__ = ["ReleaseOptions", "check_memory", "estimated_peak", "release_in_memory"]

logger = logging.getLogger("squarechipo")
#: Columns that hold a comparison's text or label: never a privacy unit (naming one would remove it from the rows).


def _check_not_released(existing: PrivacyLedger | None, mechanism: Measurement, compose: bool) -> None:
    if existing is None or not existing.releases:
        return
    if not isinstance(mechanism, LabelPipeline):
        raise ValueError(
            f"dataset was already privatized: its labels were already released (total epsilon "
            f"{existing.total_epsilon}). {mechanism.name} must see the "
            "raw labels, each queried once. Releasing again would spend more ε on the same labels; release the "
            "raw rows instead."
        )
    if not compose:
        raise ValueError(
            f"dataset was already privatized (ledger: total epsilon {existing.total_epsilon}, "
            f"{len(existing.releases)} release(s)): its labels are the released ones. Privatizing them again is "
            "post-processing of that release: it spends nothing on the raw labels, which keep the first "
            "release's ε, but it adds noise that cannot be removed and changes the flip rate the loss debiases "
            "for. Reuse the released data as it is. If you do want the extra noise, pass compose=True: the "
            "ledger adds the release, reports the sum of the ε (valid but loose) and the tight ε of the stored "
            "labels (stored_labels_epsilon). To release the raw labels a second time, privatize the raw rows."
        )


#: A release's peak resident memory: a fixed working set, what it keeps per row (its hash, MinHash signature and band
#: keys, about 0.7 kB, and the registry's entries) and per byte of its rows (the input as read and the released
#: columns). Fitted to benchmarks/bench_release.py (100,000 to 2,000,000 rows of 120 words: 0.36 GB + 2.69 kB a
#: row, results/benchmarks/release_scale_2026-12-05_083881f.txt) and rounded up: what :func:`check_memory` refuses
#: a release against.
MEMORY_BASE, MEMORY_PER_ROW, MEMORY_PER_BYTE = 0.5e9, 1.0e3, 2.5


def estimated_peak(n_rows: int, nbytes: float) -> float:
    """The estimated peak resident memory, in bytes, of a release of ``n_rows`` rows whose Arrow data is ``nbytes``."""
    return MEMORY_BASE + MEMORY_PER_ROW * n_rows + MEMORY_PER_BYTE * nbytes


def _data_bytes(dataset: datasets.Dataset) -> float:
    """The Arrow bytes of the rows ``dataset`` holds: a selection (``select``, ``shuffle``) keeps the whole table it
    came from underneath, whose size alone would refuse a small selection of a large set."""
    table = dataset.data
    return table.nbytes * len(dataset) / max(1, table.num_rows)


def _available_memory() -> float | None:
    """Bytes this machine can still give a process (Linux's MemAvailable), or None where it cannot say."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return float(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def check_memory(n_rows: int, nbytes: float, available: float | None = None) -> None:
    """Refuse, before any work, a release whose estimated peak memory (:func:`estimated_peak`) exceeds what the
    machine has (the kernel would kill it part-way, without a word), in one line naming the rows, the estimate and
    what to do."""
    available = _available_memory() if available is None else available
    needed = estimated_peak(n_rows, nbytes)
    if available is None or needed <= available:
        return
    fits = max(1, int((available - MEMORY_BASE) / (MEMORY_PER_ROW + MEMORY_PER_BYTE * nbytes / max(1, n_rows))))
    raise MemoryError(
        f"a release of {n_rows:,} rows ({nbytes / 1e9:.1f} GB of data) needs about {needed / 1e9:.1f} GB of memory "
        f"here, and this machine has {available / 1e9:.1f} GB available: release disjoint parts of at most {fits:,} "
        "rows (release_dataset with part=..., then combine_parts; docs/scale.md finds copies across parts first), or "
        "run it on a machine with more memory."
    )


def _dataset(table, **kwargs) -> datasets.Dataset:
    """The released rows as a Dataset, with a fingerprint of its own: ``datasets`` would otherwise hash the whole
    table to make one (a serialised copy of every row: half a gigabyte more at 250,000 rows)."""
    return datasets.Dataset(table, fingerprint=f"squarechipo-{uuid.uuid4().hex}", **kwargs)


def _refuse_copies(found: list, n_rows: int) -> None:
    """Copies of one comparison would each get their own noise, and their majority would give the label back."""
    if found:
        raise ValueError(
            f"{len(found)} of {n_rows} rows copy another row's comparison: {describe_copies(found)}. Randomized "
            "response would draw independent noise for each copy, and together the copies reveal the label (their "
            "majority), so the release refuses them (retyped copies, look-alike letters, changed punctuation and "
            "near-copies that share most of their wording count). Keep one row per comparison first, e.g. with "
            "squarechipo.data.validation.drop_duplicate_rows(dataset); or, if the rows are distinct comparisons or "
            "labellers, declare the column that says so: privacy_unit (label_privacy_unit in a config)."
        )


def _unit_value(value) -> str:
    """A unit id compared by value: 1, 1.0 and numpy's 1 are one unit (JSON of the number, integral floats as
    integers); text as it is."""
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()  # numpy scalars
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def _unit_keys(dataset: datasets.Dataset, privacy_unit: str) -> tuple[list[bytes], int]:
    """(a key per row for its declared privacy unit, the most rows one unit has)."""
    if privacy_unit in NOT_A_UNIT:
        raise ValueError(
            f"privacy_unit {privacy_unit!r} is a column of the comparison itself, not a unit of privacy (a release "
            "would remove it from the rows). Name the column that identifies the unit: a labeller id or a comparison "
            "id (add one with dataset.add_column if there is none)."
        )
    if privacy_unit not in dataset.column_names:
        raise ValueError(
            f"privacy_unit {privacy_unit!r} is not a column of the dataset (columns: {dataset.column_names}); name "
            "the column that identifies the unit of privacy (a labeller id or a comparison id)."
        )
    values = dataset[privacy_unit]
    if any(v is None or (isinstance(v, str) and not v.strip()) for v in values):
        raise ValueError(f"privacy_unit column {privacy_unit!r} has empty values: every row needs its unit.")
    keys = [hashlib.sha256(f"unit\x1f{privacy_unit}\x1f{_unit_value(v)}".encode()).digest() for v in values]
    return keys, max(Counter(keys).values())


def _earlier(units: list[bytes], marks, new_epsilon: float, rerelease: bool) -> EarlierReleases:
    """The composed ε of earlier releases of these rows (0 for none); refuses them unless ``rerelease``."""
    earlier = earlier_releases(units, marks)
    if earlier.rows and not rerelease:
        raise ValueError(
            f"{earlier.describe()}, in the registry of releases. Releasing the same rows again draws fresh noise, and "
            f"the copies together reveal the labels. Reuse the earlier release (its folder or file), or pass "
            f"rerelease=True (label_rerelease: true in a config): the ledger and the card then state ε "
            f"{earlier.epsilon + new_epsilon:g}, the basic composition of all releases of these rows."
        )
    return earlier


@dataclass(frozen=True)
class ReleaseOptions:
    """How a release is made, shared by the one release call (:func:`squarechipo.privacy.release.release_dataset.
    release_dataset`) and its steps. See that function for each field."""

    seed: int | None = None
    compose: bool = False
    part: str | None = None
    public_columns: tuple[str, ...] = ()
    rerelease: bool = False
    privacy_unit: str | None = None
    dataset: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "public_columns", tuple(self.public_columns or ()))


@dataclass
class _Release:
    """One release of one split's labels (see the module). Private: only :func:`release_in_memory` and
    :func:`squarechipo.privacy.release.folder.release_into` run it, every step in order."""

    dataset: datasets.Dataset
    mechanism: Measurement
    options: ReleaseOptions = field(default_factory=ReleaseOptions)
    _existing: PrivacyLedger | None = None
    _fingerprint: str = ""
    _per_unit: int = 1
    _counted: bool = False
    _units: list[bytes] = field(default_factory=list)
    _marks: Sketch | None = None
    _earlier: EarlierReleases | None = None
    _ask: BudgetAsk | None = None
    _budget: dict | None = None
    _table: object = None
    _info: datasets.DatasetInfo | None = None
    _release: Release | None = None

    def _admit(self) -> None:
        """Check the input, refuse copies of a comparison, and find earlier releases of these rows."""
        if isinstance(self.dataset, datasets.DatasetDict):
            raise ValueError(
                "got a DatasetDict; release the split you train on, e.g. release_dataset(ds['train'], mechanism)."
            )
        if not isinstance(self.mechanism, Measurement):
            raise TypeError(
                "mechanism must be a squarechipo.privacy.mechanisms.measurements.Measurement, e.g. "
                f"LabelPipeline(epsilon=1.0) (got {type(self.mechanism).__name__})."
            )
        # The key that will seal the release, read (and the machine folder checked) before any noise is drawn: a
        # wrong key found after the draw would leave a staged release that a retry refuses.
        signing_key()
        check_memory(len(self.dataset), _data_bytes(self.dataset))
        self._existing = get_ledger(self.dataset)
        _check_not_released(self._existing, self.mechanism, self.options.compose)
        # Raw rows released with OS entropy are what the registry counts (a fixed seed is a simulation).
        self._counted = self._existing is None and self.options.seed is None and self.mechanism.epsilon is not None
        # One pass over the rows, a chunk at a time; one set of MinHash signatures (in the registry's scheme) serves
        # the copy check and the registry.
        scheme = registry_scheme() if self._counted else SCHEME
        scan = scan_rows(self.dataset, sketched=self._counted or self.options.privacy_unit is None, scheme=scheme)
        hashes, marks = scan.hashes, scan.sketch
        self._fingerprint, _ = fingerprint_of(hashes)
        self._units = hashes
        if self.options.privacy_unit is None:
            _refuse_copies(row_copies(self.dataset, scan), len(self.dataset))
        else:
            # A unit groups rows, never splits a comparison's history: the registry counts the content too.
            unit_keys, self._per_unit = _unit_keys(self.dataset, self.options.privacy_unit)
            self._units = hashes + unit_keys
        if self._counted:
            self._marks = marks
            epsilon = self.mechanism.epsilon * self._per_unit
            self._earlier = _earlier(self._units, self._marks, epsilon, self.options.rerelease)
            # The budget, before any noise is drawn (the transaction that enters the release checks it again).
            self._ask = BudgetAsk(
                self.options.dataset, self.options.privacy_unit, tuple(self.dataset.column_names), len(self.dataset),
                epsilon, self.mechanism.epsilon,
            )  # fmt: skip
            self._budget = check_budget(self._ask, self._earlier)
        elif self._existing is None and self.options.seed is not None:
            refuse_seeded_under_budget(self.options.seed)

    def _draw(self) -> None:
        """The noise, once. The released rows and their release are held here, unsealed."""
        dataset = self.dataset
        if self.options.privacy_unit is not None and self.options.privacy_unit not in self.options.public_columns:
            dataset = dataset.remove_columns([self.options.privacy_unit])
        table, fields = draw_rows(dataset, self.mechanism, self.options.seed, self.options.public_columns)
        if self._earlier is not None:
            fields.update(earlier_epsilon=self._earlier.epsilon, earlier_releases=len(self._earlier.releases))
        if self._budget is not None:
            fields.update(budget=self._budget)
        if self.options.privacy_unit is not None:
            fields.update(privacy_unit=self.options.privacy_unit, rows_per_unit=self._per_unit)
        fields.update(row_set=encode_row_set(_exact_row_hashes(_dataset(table))), row_columns=table.column_names)
        self._release = Release.now(
            **fields, data_fingerprint=self._fingerprint, part=self.options.part, release_id=uuid.uuid4().hex
        )
        info = datasets.DatasetInfo(description=metadata.without_block(dataset.info.description))
        # The released columns differ for best-of-K and prior-guided rows: the features follow the new table.
        info.features = datasets.Features.from_arrow_schema(table.schema)
        self._table, self._info = table, info
        logger.info("drew a release of %d rows through %s", table.num_rows, self.mechanism.to_dict())

    def _rows(self) -> datasets.Dataset:
        """The released rows without a ledger (what a staged folder holds)."""
        return _dataset(self._table, info=self._info, split=self.dataset.split)

    def _register(self, folder: str | None = None) -> None:
        """Enter a counted release into the registry, in the transaction that decides; the release then names the
        registry (a seeded or composed release is not counted)."""
        if not self._counted:
            return
        registry_id, budget = register_release(
            self._release.release_id, self._units, self._marks, self.mechanism.epsilon, self._release.created_at,
            expected=self._earlier, folder=folder, ask=self._ask,
        )  # fmt: skip
        self._release = replace(self._release, registry_id=registry_id, budget=budget or self._release.budget)

    def _sealed(self) -> tuple[datasets.Dataset, str]:
        """(the released rows with their sealed ledger, the ledger's digest): only after :meth:`_register`."""
        ledger = (self._existing or PrivacyLedger()).with_release(self._release)
        record = ledger.to_dict()
        info = metadata.info_with_block(self._info, json.dumps(record, sort_keys=True))
        return _dataset(self._table, info=info, split=self.dataset.split), record["digest"]

    def _pending(self) -> tuple[dict, bytes]:
        """What completing this release after a cut-off needs beside its rows: the release as drawn (unsealed) and the
        registry keys it enters (empty when it is not counted)."""
        units = b"".join(self._units) if self._counted else b""
        pending = {
            "release": asdict(self._release),
            "existing": None if self._existing is None else self._existing.to_dict(),
            "counted": self._counted,
            "epsilon": self.mechanism.epsilon,
            "expected": None if self._earlier is None else sorted(self._earlier.ids),
            # The keys file is bound to the sealed record: keys dropped from it would leave rows out of the registry.
            "units_sha256": hashlib.sha256(units).hexdigest() if self._counted else None,
            # What completing it asks of the budgets in force then (it is checked again).
            "ask": None if self._ask is None else asdict(self._ask),
        }
        return pending, units


@releases_labels("the release's steps in memory, run only by the one release call (release_dataset)")
def release_in_memory(dataset: datasets.Dataset, mechanism: Measurement, options: ReleaseOptions):
    """Admit, draw, register and seal, in memory. Called only by the one release call."""
    release = _Release(dataset, mechanism, options)
    release._admit()
    release._draw()
    release._register()
    return release._sealed()[0]
