"""The release transaction, owned in one place: admit → draw → stage → register → rename.

Every path that turns raw labels into released ones goes through :class:`ReleaseTransaction`:

1. **admit**: the input is one split and a measurement; rows that already carry a ledger are post-processing
   (``compose``) or refused; copies of a comparison are refused (their noise would add up); the registry of releases
   is asked for earlier releases of these rows (refused unless ``rerelease``);
2. **draw**: the noise, once (:func:`squarechipo.privacy.release.rows.draw_rows`), and the ledger extended by one
   release, bound to the released rows;
3. **stage** (a release into a folder): the rows, the keys it registers, then the sealed marker, into a staging folder;
4. **register**: the release entered into the registry in the one transaction that decides
   (:func:`squarechipo.privacy.release.registry.register_release`);
5. **rename** (a folder): the staged folder into place. Nothing is visible before it is registered; a staged release
   cut off before its rename is completed by :func:`complete_interrupted`.

:func:`release_dataset` runs admit, draw and register; :func:`squarechipo.privacy.release.store.release_once` runs all
five under a lock beside the folder.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import datasets

from squarechipo.data import metadata
from squarechipo.data.fingerprint import canonical_rows, encode_row_set, exact_row_hashes, fingerprint_of
from squarechipo.data.integrity import MARKER, marker_record
from squarechipo.data.label_roles import label_free, releases_labels, tag_role
from squarechipo.data.near_duplicates import Sketch, copies, describe_copies, sketch
from squarechipo.privacy.ledger.binding import get_ledger
from squarechipo.privacy.ledger.records import PrivacyLedger, extend_ledger
from squarechipo.privacy.mechanisms.measurements import LabelPipeline, Measurement
from squarechipo.privacy.release.registry import (
    EarlierReleases,
    RegistryError,
    earlier_releases,
    register_release,
)
from squarechipo.privacy.release.rows import draw_rows

__all__ = ["ReleaseTransaction", "complete_interrupted", "release_dataset", "staging_folder", "write_folder"]

logger = logging.getLogger("squarechipo")
#: In a staged release: the keys it enters into the registry of releases (a declared privacy unit's column may not
#: be kept in the rows), removed once it is registered.
UNITS_FILE = "squarechipo_registry_units.bin"


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


def _unit_keys(dataset: datasets.Dataset, privacy_unit: str) -> tuple[list[bytes], int]:
    """(a key per row for its declared privacy unit, the most rows one unit has)."""
    if privacy_unit not in dataset.column_names:
        raise ValueError(
            f"privacy_unit {privacy_unit!r} is not a column of the dataset (columns: {dataset.column_names}); name "
            "the column that identifies the unit of privacy (a labeller id or a comparison id)."
        )
    values = dataset[privacy_unit]
    if any(v is None or (isinstance(v, str) and not v.strip()) for v in values):
        raise ValueError(f"privacy_unit column {privacy_unit!r} has empty values: every row needs its unit.")
    keys = [hashlib.sha256(f"unit\x1f{privacy_unit}\x1f{v}".encode()).digest() for v in values]
    return keys, max(Counter(keys).values())


def _earlier(units: list[bytes], marks, new_epsilon: float, rerelease: bool) -> EarlierReleases:
    """The composed ε of earlier releases of these rows (0 for none); refuses them unless ``rerelease``."""
    earlier = earlier_releases(units, marks)
    if earlier.rows and not rerelease:
        raise ValueError(
            f"{earlier.describe()} on this machine. Releasing the same rows again draws fresh noise, and the "
            f"copies together reveal the labels. Reuse the earlier release (its folder or file), or pass "
            f"rerelease=True (label_rerelease: true in a config): the ledger and the card then state ε "
            f"{earlier.epsilon + new_epsilon:g}, the basic composition of all releases of these rows."
        )
    return earlier


@dataclass
class ReleaseTransaction:
    """One release of one split's labels, each step in order (see the module). ``released`` and ``digest`` are set
    by :meth:`draw`; a counted release (raw rows, OS entropy, an ε) registers its ``units`` and ``marks``."""

    dataset: datasets.Dataset
    mechanism: Measurement
    seed: int | None = None
    compose: bool = False
    part: str | None = None
    public_columns: list[str] | tuple[str, ...] = ()
    rerelease: bool = False
    privacy_unit: str | None = None
    existing: PrivacyLedger | None = None
    fingerprint: str = ""
    per_unit: int = 1
    counted: bool = False
    units: list[bytes] = field(default_factory=list)
    marks: Sketch | None = None
    earlier: EarlierReleases | None = None
    released: datasets.Dataset | None = None
    digest: str = ""

    def admit(self) -> None:
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
        self.existing = get_ledger(self.dataset)
        _check_not_released(self.existing, self.mechanism, self.compose)
        # Raw rows released with OS entropy are what the registry counts (a fixed seed is a simulation).
        self.counted = self.existing is None and self.seed is None and self.mechanism.epsilon is not None
        rows = canonical_rows(self.dataset.with_format("arrow")[:])
        hashes = [hashlib.sha256(row.encode("utf-8")).digest() for row in rows]
        self.fingerprint, _ = fingerprint_of(hashes)
        self.units = hashes
        # One set of MinHash signatures serves the copy check and the registry.
        marks = sketch(rows) if self.counted or self.privacy_unit is None else None
        if self.privacy_unit is None:
            _refuse_copies(copies(rows, marks), len(self.dataset))
        else:
            # A unit groups rows, never splits a comparison's history: the registry counts the content too.
            unit_keys, self.per_unit = _unit_keys(self.dataset, self.privacy_unit)
            self.units = hashes + unit_keys
        if self.counted:
            self.marks = marks
            epsilon = self.mechanism.epsilon * self.per_unit
            self.earlier = _earlier(self.units, self.marks, epsilon, self.rerelease)

    def draw(self) -> datasets.Dataset:
        """The noise, once, and the ledger extended by this release and bound to the released rows."""
        dataset = self.dataset
        if self.privacy_unit is not None and self.privacy_unit not in self.public_columns:
            dataset = dataset.remove_columns([self.privacy_unit])
        table, fields = draw_rows(dataset, self.mechanism, self.seed, self.public_columns)
        if self.earlier is not None:
            fields.update(earlier_epsilon=self.earlier.epsilon, earlier_releases=len(self.earlier.releases))
        if self.privacy_unit is not None:
            fields.update(privacy_unit=self.privacy_unit, rows_per_unit=self.per_unit)
        fields.update(
            row_set=encode_row_set(exact_row_hashes(datasets.Dataset(table))), row_columns=table.column_names
        )
        info, self.digest = extend_ledger(
            dataset.info, self.existing, **fields, data_fingerprint=self.fingerprint, part=self.part
        )
        # The released columns differ for best-of-K and prior-guided rows: the features follow the new table.
        info.features = datasets.Features.from_arrow_schema(table.schema)
        self.released = datasets.Dataset(table, info=info, split=dataset.split)
        logger.info("released %d rows through %s", len(self.released), self.mechanism.to_dict())
        return self.released

    def stage(self, folder: Path) -> Path:
        """The rows, the keys this release registers, then the sealed marker, in the folder's staging copy."""
        staging = staging_folder(folder)
        folder.parent.mkdir(parents=True, exist_ok=True)
        self.released.save_to_disk(str(staging))
        if self.counted:
            (staging / UNITS_FILE).write_bytes(b"".join(self.units))
        metadata.write_folder_marker(staging, marker_record(self.released, self.digest))
        return staging

    def register(self, folder: str | None = None) -> None:
        """Enter a counted release into the registry, in the transaction that decides (a seeded or composed release
        is not counted)."""
        if not self.counted:
            return
        made = get_ledger(self.released).releases[-1].created_at
        register_release(self.digest, self.units, self.marks, self.mechanism.epsilon, made, expected=self.earlier,
                         folder=folder)  # fmt: skip

    def into(self, folder: Path) -> datasets.Dataset:
        """Every step into ``folder``: admit, draw, stage, register, rename. A release the registry refuses is
        discarded before anything read it."""
        self.admit()
        self.draw()
        staging = self.stage(folder)
        # From here a staged copy with its marker is completed, and registered, by the next run.
        try:
            self.register(str(folder))
        except RegistryError:
            shutil.rmtree(staging)
            raise
        (staging / UNITS_FILE).unlink(missing_ok=True)
        os.replace(staging, folder)
        return self.released


tag_role(ReleaseTransaction.__init__, "releases_labels", why="the transaction that draws a release of the raw labels")


@releases_labels("randomized response (or the measurement given) stands between the raw labels and the output")
def release_dataset(
    dataset: datasets.Dataset,
    mechanism: Measurement,
    *,
    seed: int | None = None,
    compose: bool = False,
    part: str | None = None,
    public_columns: list[str] | tuple[str, ...] = (),
    rerelease: bool = False,
    privacy_unit: str | None = None,
) -> datasets.Dataset:
    """Release a dataset's labels through ``mechanism`` once, and record it in the ledger and the registry.

    Args:
        dataset: raw preference pairs whose ``chosen`` is the true preferred response, in any TRL format
            (validated first; invalid rows raise — drop them explicitly with
            ``validate_preference_dataset(..., drop_invalid=True)``), or raw best-of-K rows.
        mechanism: a :class:`~squarechipo.privacy.mechanisms.measurements.Measurement` (``LabelPipeline`` for ε, α,
            adversary and order; ``KaryRR``, ``SubsetMechanism`` or ``RRWithPrior``).
        seed: ``None`` (default) draws from OS entropy: use this for real labels. An integer is for
            simulation and makes the noise reproducible by anyone who knows it; the ledger records that
            a fixed seed was used, never the seed.
        compose: (``LabelPipeline`` only) the dataset already carries a ledger and you mean to add noise
            to its released labels. That is post-processing of the earlier release (the raw labels keep
            its ε); the ledger records the new release, sums the ε (a valid, loose bound) and gives the
            tight ε of the stored labels (``stored_labels_epsilon``).
        part: the name of the disjoint part of a larger dataset these rows are (multi-stage training,
            Ghazi et al. 2021 (label DP)); releases on disjoint parts compose in parallel in the ledger.
        public_columns: (pairs) columns besides prompt/chosen/rejected that do not depend on the label (an id, a
            category): kept. Label-carrying columns are dropped and named in the ledger; any other column raises.
        rerelease: raw rows released before on this machine (:mod:`squarechipo.privacy.release.registry`) are
            refused unless this is True; then the ledger adds the earlier releases' ε (basic composition) to its
            total.
        privacy_unit: a column that identifies the unit of privacy (a labeller or comparison id). Without it the
            unit is one comparison, and rows that copy another row's comparison (exactly, retyped or nearly) are
            refused. With it, rows of one unit compose (the ledger's ε is per unit: ε × the most rows one unit
            has), content copies across units are allowed, and the registry counts both the units and each
            comparison's content. The column is kept only if it is also in ``public_columns``.

    Returns:
        A new dataset with the kept columns and the ledger attached.
    """
    transaction = ReleaseTransaction(
        dataset, mechanism, seed=seed, compose=compose, part=part, public_columns=public_columns,
        rerelease=rerelease, privacy_unit=privacy_unit,
    )  # fmt: skip
    transaction.admit()
    released = transaction.draw()
    transaction.register()
    return released


def staging_folder(folder: Path) -> Path:
    """Where a release into ``folder`` is staged before its rename."""
    return folder.parent / f".{folder.name}.staging"


@label_free("writes rows whose ledger its callers checked (save_release, save_privatized)")
def write_folder(data: datasets.Dataset | datasets.DatasetDict, folder: Path, marker: dict) -> Path:
    """Stage, seal (the marker last) and rename a release that is already registered or not counted (a saved
    release, a received copy): a reader never sees half a release."""
    staging = staging_folder(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    data.save_to_disk(str(staging))
    metadata.write_folder_marker(staging, marker)
    os.replace(staging, folder)
    return folder


def complete_interrupted(folder: Path, load) -> None:
    """Complete a release cut off between its stage and its rename (registered now, then renamed), or refuse one cut
    off earlier. ``load(folder)`` gives (rows, ledger) of a saved release, checked."""
    staging = staging_folder(folder)
    if not staging.exists():
        return
    if (staging / MARKER).is_file():
        if folder.exists():
            shutil.rmtree(staging)  # the rename happened after all: the staged copy is a leftover
        else:
            _register_staged(staging, folder, *load(staging))
            os.replace(staging, folder)
            logger.warning("completed an interrupted release from its staged copy: %s", folder)
        return
    raise ValueError(
        f"an interrupted release left {staging} unfinished (it has no {MARKER}). No run trained on it, but its noise "
        f"was drawn from the raw labels, and squarechipo never draws fresh noise silently. To release again, delete "
        f"{staging} yourself; the new release draws new noise, which is sound only because nothing of the "
        "interrupted one was read."
    )


def _register_staged(staging: Path, folder: Path, released: datasets.Dataset, ledger: PrivacyLedger) -> None:
    """Enter a complete staged release that was cut off before it was registered (idempotent: a registered one is
    left as it is). Its rows give the keys, unless it wrote them (a declared privacy unit). The registry must still
    hold exactly the earlier releases its ledger composed with; otherwise it is refused, never made visible."""
    last = ledger.releases[-1]
    counted = len(ledger.releases) == 1 and last.randomness == "os_entropy" and last.epsilon is not None
    if not counted:
        return
    rows = canonical_rows(released.with_format("arrow")[:])
    units_file = staging / UNITS_FILE
    if units_file.is_file():
        blob = units_file.read_bytes()
        units = [blob[i : i + 32] for i in range(0, len(blob), 32)]
    else:
        units = [hashlib.sha256(row.encode("utf-8")).digest() for row in rows]
    marks = sketch(rows)
    now = earlier_releases(units, marks)
    now_ids = now.ids - {ledger.digest}
    if ledger.digest not in now.ids and (
        abs(now.epsilon - last.earlier_epsilon) > 1e-12 or len(now_ids) != last.earlier_releases
    ):
        raise RegistryError(
            f"the interrupted release staged in {staging} composed with {last.earlier_releases} earlier release(s) "
            f"(ε {last.earlier_epsilon:g}), but the registry now holds {now.describe()}: its ledger would understate "
            f"the ε, so it is not completed. Delete {staging} and release again (nothing read it)."
        )
    register_release(ledger.digest, units, marks, last.epsilon, last.created_at, expected=now, folder=str(folder))
    units_file.unlink(missing_ok=True)
