"""The release store under careless and hostile use: every saved form carries a sealed digest of its rows; a
release is drawn once, staged and renamed, shared by racing runs, composed or refused when its rows are released
again, and holds no bytes of rows it did not release; a seeded release is called what it is."""

from __future__ import annotations

import json
import multiprocessing
import shutil
from pathlib import Path

import datasets
import numpy as np
import pytest

from squarechipo.data.integrity import MARKER
from squarechipo.privacy import LabelPipeline, get_ledger, release_dataset
from squarechipo.privacy.release.saved import load_release
from squarechipo.trust.seals import IntegrityError
from tests.helpers.refusals import says
from tests.helpers.rows import distinct_pairs, plan_rows
from tests.helpers.runs import train_tiny


@pytest.mark.parametrize("name", ["release", "release.jsonl", "release.parquet"])
def test_every_saved_form_carries_and_checks_a_rows_digest(tmp_path, name):
    """Folder, JSONL and Parquet alike: edited labels under the original ledger, a deleted marker (or a JSONL sidecar
    holding the ledger alone, as before markers existed) are refused by every loader."""
    from squarechipo.data import load_preference_dataset, metadata
    from squarechipo.privacy import load_privatized, save_privatized

    released = release_dataset(plan_rows(), LabelPipeline(epsilon=0.5), seed=0)
    path = save_privatized(released, tmp_path / name)
    for load in (load_privatized, load_preference_dataset):
        assert load(path)["chosen"] == released["chosen"] and get_ledger(load(path)) == get_ledger(released)
    # Edit one label (swap a pair) in the stored rows, keeping the ledger and the marker.
    table = released.data.table.to_pydict()
    table["chosen"][0], table["rejected"][0] = table["rejected"][0], table["chosen"][0]
    edited = datasets.Dataset.from_dict(table)
    if name.endswith(".jsonl"):
        edited.to_json(str(path), lines=True, force_ascii=False)
    elif name.endswith(".parquet"):
        import pyarrow.parquet as pq

        schema = pq.read_schema(str(path))
        pq.write_table(edited.data.table.replace_schema_metadata(schema.metadata), str(path))
    else:
        shutil.copy(path / MARKER, tmp_path / "marker")
        shutil.copy(path / "dataset_info.json", tmp_path / "info")
        shutil.rmtree(path)
        edited.save_to_disk(str(path))
        shutil.copy(tmp_path / "info", path / "dataset_info.json")
        shutil.copy(tmp_path / "marker", path / MARKER)
    for load in (load_privatized, load_preference_dataset):
        with pytest.raises(IntegrityError, match="the released rows changed after the release was saved"):
            load(path)
    # Delete the marker (the ledger stays): refused, not skipped.
    save_privatized(released, tmp_path / "again" / name)
    again = tmp_path / "again" / name
    if name.endswith(".jsonl"):
        sidecar = Path(str(again) + metadata.SIDECAR_SUFFIX)
        sidecar.write_text(json.dumps(json.loads(sidecar.read_text())["ledger"]))
    elif name.endswith(".parquet"):
        import pyarrow.parquet as pq

        table = pq.read_table(str(again))
        stored = {k: v for k, v in table.schema.metadata.items() if k != metadata.PARQUET_MARKER_KEY}
        pq.write_table(table.replace_schema_metadata(stored), str(again))
    else:
        (again / MARKER).unlink()
    for load in (load_privatized, load_preference_dataset):
        with pytest.raises(IntegrityError, match="carries a privacy ledger but no release marker"):
            load(again)


def test_a_dataset_dict_is_saved_with_one_marker_record_per_released_split(tmp_path):
    from squarechipo.data import load_preference_dataset
    from squarechipo.privacy import load_privatized, save_privatized

    data = datasets.DatasetDict(
        {"train": release_dataset(plan_rows(), LabelPipeline(epsilon=0.5), seed=0), "test": plan_rows(6)}
    )
    path = save_privatized(data, tmp_path / "dict")
    assert set(json.loads((path / MARKER).read_text())["splits"]) == {"train"}
    loaded = load_privatized(path)
    assert loaded["train"]["chosen"] == data["train"]["chosen"] and get_ledger(loaded["test"]) is None
    (path / MARKER).unlink()
    with pytest.raises(IntegrityError, match=r"\[train\] carries a privacy ledger but no release marker"):
        load_preference_dataset(path)


def test_an_interrupted_release_is_completed_from_its_staged_copy_or_refused(tmp_path):
    rows = plan_rows()
    folder = tmp_path / "release"
    done = release_dataset(rows, LabelPipeline(epsilon=0.5), folder, seed=1)
    # Cut off after the staged copy was complete, before the rename: the next run completes it.
    staging = folder.parent / f".{folder.name}.staging"
    folder.rename(staging)
    again = release_dataset(rows, LabelPipeline(epsilon=0.5), folder, seed=2)  # another seed: it must not be used
    assert again["chosen"] == done["chosen"] and not staging.exists()
    # A staged copy left beside a release already renamed into place (sealed, or still pending) is removed.
    from squarechipo.privacy.release.folder import PENDING_FILE

    for leftover in (MARKER, PENDING_FILE):
        shutil.copytree(folder, staging)
        (staging / MARKER).rename(staging / leftover)
        assert release_dataset(rows, LabelPipeline(epsilon=0.5), folder, seed=4)["chosen"] == done["chosen"]
        assert not staging.exists() and (folder / MARKER).is_file()
    # Cut off before the marker: refused, with what to do, whether or not a release is in place.
    shutil.copytree(folder, staging)
    (staging / MARKER).unlink()
    for in_place in (True, False):
        assert folder.exists() == in_place
        with pytest.raises(ValueError) as refused:
            release_dataset(rows, LabelPipeline(epsilon=0.5), folder, seed=3)
        says(refused.value, f"an interrupted release left {staging} unfinished (its rows or keys were not all "
             f"written).", f"To release again, delete {staging} yourself; the new release draws new noise, which is "
             "sound only because nothing of the interrupted one was read.")  # fmt: skip
        shutil.rmtree(folder, ignore_errors=True)


def test_the_release_path_draws_its_noise_once_and_a_rerun_rewrites_nothing(tmp_path):
    """What the one-way release path promises, seen from outside: the released pairs are exactly one seeded draw of
    the pipeline, the ledger and the folder's marker describe those rows, and a re-run (another seed) returns the
    same release without drawing noise or rewriting a byte of the folder."""
    from squarechipo.data.fingerprint import preference_fingerprint
    from squarechipo.data.integrity import _rows_digest
    from squarechipo.privacy.mechanisms.binary import ctl

    rows, folder = plan_rows(), tmp_path / "release"
    released = release_dataset(rows, LabelPipeline(epsilon=0.5), folder, seed=1)
    swap = ctl(np.zeros(len(rows), dtype=bool), 0.5, 0.0, np.random.default_rng(1))  # the first draw of seed 1
    assert 0 < swap.sum() < len(rows)
    assert released["chosen"] == [r if s else c for c, r, s in zip(rows["chosen"], rows["rejected"], swap)]
    ledger = get_ledger(released)
    (release,) = ledger.releases
    assert release.data_fingerprint == preference_fingerprint(rows) and release.n_rows == len(rows)
    marker = json.loads((folder / MARKER).read_text())
    assert marker["ledger_digest"] == ledger.digest and marker["rows_digest"] == _rows_digest(released)

    def files():
        return {path: (path.read_bytes(), path.stat().st_mtime_ns) for path in folder.rglob("*") if path.is_file()}

    saved = files()
    again = release_dataset(rows, LabelPipeline(epsilon=0.5), folder, seed=2)
    assert again["chosen"] == released["chosen"] and get_ledger(again) == ledger
    assert files() == saved


def _release_in_process(folder: str, seed: int, queue) -> None:
    released = release_dataset(plan_rows(), LabelPipeline(epsilon=0.5), folder, seed=seed)
    queue.put(released["chosen"])


@pytest.mark.integration
def test_two_runs_racing_on_one_fresh_folder_release_it_once_and_share_it(tmp_path):
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    folder = str(tmp_path / "release")
    workers = [context.Process(target=_release_in_process, args=(folder, seed, queue)) for seed in (10, 11)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=300)
        assert worker.exitcode == 0
    first, second = queue.get(timeout=10), queue.get(timeout=10)
    assert first == second == load_release(folder)["chosen"]


def test_a_seeded_release_is_called_seeded_and_is_not_pushed(tmp_path, tiny_model_factory, tokenizer):
    from squarechipo.privacy.provenance.record import read_privacy_record
    from squarechipo.trainer import SquareChiPOConfig, SquareChiPOTrainer

    train = release_dataset(plan_rows(16), LabelPipeline(epsilon=1.0), seed=7)
    trainer = train_tiny(tmp_path, tiny_model_factory, tokenizer, train, max_steps=1)
    trainer.save_model()
    card = (tmp_path / "run" / "README.md").read_text()
    assert "seeded release, reproducible by anyone with the seed, not private" in card
    assert read_privacy_record(tmp_path / "run").seeded
    args = SquareChiPOConfig(output_dir=str(tmp_path / "push"), push_to_hub=True, hub_model_id="x/y", report_to="none")
    with pytest.raises(ValueError, match="released with a fixed label_seed, so anyone with the seed can recover"):
        SquareChiPOTrainer(tiny_model_factory(), args=args, train_dataset=train, processing_class=tokenizer)


def test_a_second_release_of_the_same_rows_is_refused_or_composed(tmp_path):
    """The attack: the same rows released again into new folders, each with fresh noise and each card saying ε 0.5;
    a majority over the releases recovers the raw labels. This machine's registry refuses the second release (retyped
    or reordered copies and a superset of the rows included); opting in composes: the ledger states the summed ε,
    and the flip rate the loss debiases for stays the release's own."""
    from squarechipo.privacy.mechanisms.calibration import flip_probability

    rows = plan_rows(60)
    first = release_dataset(rows, LabelPipeline(epsilon=0.5), tmp_path / "one")
    assert get_ledger(first).total_epsilon == 0.5
    again = release_dataset(
        rows, LabelPipeline(epsilon=0.5), tmp_path / "one"
    )  # the same folder: reused, no new noise
    assert again["chosen"] == first["chosen"]
    retyped = rows.map(lambda r: {"prompt": r["prompt"].upper() + " "}).shuffle(seed=0)
    superset = datasets.concatenate_datasets([plan_rows(70).select(range(60, 70)), rows])
    for other in (rows, retyped, superset):
        with pytest.raises(ValueError, match=r"60 row\(s\) were released before \(ε 0.5 at .*rerelease=True"):
            release_dataset(other, LabelPipeline(epsilon=0.5), tmp_path / "two")
        with pytest.raises(ValueError, match=r"60 row\(s\) were released before"):
            release_dataset(other, LabelPipeline(epsilon=1.0))
    assert not (tmp_path / "two").exists()
    second = release_dataset(rows, LabelPipeline(epsilon=0.5), tmp_path / "two", rerelease=True)
    ledger = get_ledger(second)
    (release,) = ledger.releases
    assert (release.earlier_epsilon, release.earlier_releases) == (0.5, 1)
    assert ledger.total_epsilon == 1.0 and ledger.own_epsilon == 0.5
    assert ledger.rr_flip_rate == pytest.approx(flip_probability(0.5))  # debiasing follows this release's own noise
    third = release_dataset(superset, LabelPipeline(epsilon=1.0), rerelease=True)
    assert get_ledger(third).total_epsilon == 2.0  # the worst row: 0.5 + 0.5 before, 1.0 now
    # Seeded releases are simulations (their cards say not private): neither counted nor refused.
    fresh = datasets.Dataset.from_dict(
        {
            "prompt": [f"Which index fund suits a {i}-year horizon?" for i in range(5)],
            "chosen": [f"A broad, low-cost one held for {i} years." for i in range(5)],
            "rejected": [f"Whichever rose most in the last {i} weeks." for i in range(5)],
        }
    )
    for seed in (1, 2):
        assert get_ledger(release_dataset(fresh, LabelPipeline(epsilon=0.5), seed=seed)).total_epsilon == 0.5
    assert get_ledger(release_dataset(fresh, LabelPipeline(epsilon=0.5))).total_epsilon == 0.5
    # The card states the composed ε and says what it composes.
    from squarechipo.privacy.provenance.record import PrivacyRecord

    record = PrivacyRecord.build({"stage": "preference_optimization", "epsilon": 1.0, "ledger": ledger.to_dict()})
    assert "| ε (local DP, total over releases) | 1.0: basic composition of this data's own release(s) and " in (
        record.card_section()
    )


def test_a_saved_release_holds_no_bytes_of_rows_it_did_not_release(tmp_path):
    """Released columns were slices of the input table, and a saved release then held up to 31 bytes of the next,
    unreleased row (its prompt, id and category). Every column of a release owns its buffers."""
    from squarechipo.privacy import KaryRR, save_privatized

    n = 40
    rows = plan_rows(n, category=lambda n: [f"CATEGORY-{i:03d}" for i in range(n)])
    rows = rows.map(lambda row, i: {"prompt": f"UNRELEASED-{i:03d} " + row["prompt"]}, with_indices=True)
    part = rows.select(range(10))
    released = release_dataset(part, LabelPipeline(epsilon=1.0), seed=0, public_columns=["category"])
    responses = [[c, r, r + " Or wait."] for c, r in zip(rows["chosen"], rows["rejected"])]
    kary = datasets.Dataset.from_dict({"prompt": rows["prompt"], "responses": responses, "best": [0] * n})
    kary = kary.add_column("category", rows["category"]).select(range(10))
    released_k = release_dataset(kary, KaryRR(epsilon=1.0), seed=0)
    for name, data in (("pairs", released), ("best_of_k", released_k)):
        folder = save_privatized(data, tmp_path / name)
        stored = b"".join(path.read_bytes() for path in Path(folder).glob("*.arrow"))
        assert b"CATEGORY-009" in stored and b"UNRELEASED-009" in stored  # the last released row is there ...
        for i in range(10, n):  # ... and nothing of the rows after it
            assert f"CATEGORY-{i:03d}".encode() not in stored and f"UNRELEASED-{i:03d}".encode() not in stored


# ----------------------------------------------------------------------------- units of privacy compared by value


def test_a_unit_id_is_compared_by_value_whatever_type_holds_it():
    """1, 1.0, True and NumPy's 1 are one unit; text is itself; a mapping's key order and a date's type matter not to
    the unit but to nothing else (a date is not its text)."""
    import datetime

    from squarechipo.privacy.release.transaction import _unit_value

    ones = [1, 1.0, True, np.int64(1), np.float32(1.0), np.bool_(True)]
    assert {_unit_value(v) for v in ones} == {"1"}
    assert _unit_value("labeller 7") == "labeller 7" and _unit_value(np.str_("labeller 7")) == "labeller 7"
    assert _unit_value(1.5) == "1.5" and _unit_value(np.float64(1.5)) == "1.5"
    assert _unit_value({"b": 1, "a": 2}) == _unit_value({"a": 2, "b": 1}) == '{"a": 2, "b": 1}'
    assert _unit_value(datetime.date(2026, 11, 29)) == '"2026-11-29"' != _unit_value("2026-11-29")


def test_unit_keys_give_one_key_per_unit_and_the_largest_units_row_count():
    from squarechipo.privacy.release.transaction import _unit_keys

    rows = datasets.Dataset.from_dict({"labeller": [3, 1, 3, 2, 3], "prompt": ["p"] * 5})
    keys, most = _unit_keys(rows, "labeller")
    assert most == 3 and len(keys) == 5 and len(set(keys)) == 3
    assert keys[0] == keys[2] == keys[4] != keys[1]
    floats = rows.cast_column("labeller", datasets.Value("float64"))
    assert _unit_keys(floats, "labeller") == (keys, 3)  # 3 and 3.0 are one unit
    other, _ = _unit_keys(rows.rename_column("labeller", "worker"), "worker")
    assert set(other).isdisjoint(keys)  # a key names its column: units of two columns never meet
    from tests.helpers.refusals import says

    for bad in (["a", " ", "b", "c", "d"], ["a", None, "b", "c", "d"]):
        with pytest.raises(ValueError) as refused:
            _unit_keys(datasets.Dataset.from_dict({"labeller": bad}), "labeller")
        says(refused.value, "privacy_unit column 'labeller' has empty values: every row needs its unit.")
    with pytest.raises(ValueError) as refused:
        _unit_keys(rows, "worker")
    says(
        refused.value,
        "privacy_unit 'worker' is not a column of the dataset (columns: ['labeller', 'prompt']); name the column that "
        "identifies the unit of privacy (a labeller id or a comparison id).",
    )
    with pytest.raises(ValueError) as refused:
        _unit_keys(rows, "prompt")
    says(
        refused.value,
        "privacy_unit 'prompt' is a column of the comparison itself, not a unit of privacy (a release would remove it "
        "from the rows). Name the column that identifies the unit: a labeller id or a comparison id (add one with "
        "dataset.add_column if there is none).",
    )


def test_each_refusal_of_a_release_names_its_fix_and_its_figures():
    """A refused release says what to do, word for word, and the ε it would state (ε × the rows of the largest unit,
    plus the earlier releases' ε)."""
    from squarechipo.privacy import KaryRR
    from squarechipo.privacy.release.transaction import ReleaseOptions
    from tests.helpers.refusals import refused
    from tests.helpers.rows import distinct_pairs

    rows = distinct_pairs(6, offset=6100)
    whole = refused(ValueError, lambda: release_dataset(datasets.DatasetDict(train=rows), LabelPipeline(epsilon=1.0)))
    assert whole == "got a DatasetDict; release the split you train on, e.g. release_dataset(ds['train'], mechanism)."
    refused(TypeError, lambda: release_dataset(rows, {"epsilon": 1.0}), "must be a squarechipo.privacy.mechanisms."
            "measurements.Measurement, e.g. LabelPipeline(epsilon=1.0) (got dict).")  # fmt: skip
    released = release_dataset(rows, LabelPipeline(epsilon=0.5), seed=0)
    refused(ValueError, lambda: release_dataset(released, KaryRR(epsilon=1.0)), "(total epsilon 0.5)", "must see the "
            "raw labels, each queried once. Releasing again would spend more ε on the same labels; release the raw "
            "rows instead.")  # fmt: skip
    refused(ValueError, lambda: release_dataset(released, LabelPipeline(epsilon=1.0)), "(ledger: total epsilon 0.5, "
            "1 release(s))", "Reuse the released data as it is. If you do want the extra noise, pass compose=True: "
            "the ledger adds the release, reports the sum of the ε (valid but loose) and the tight ε of the stored "
            "labels (stored_labels_epsilon). To release the raw labels a second time, privatize the raw "
            "rows.")  # fmt: skip
    copied = datasets.concatenate_datasets([rows, rows.select([0])])
    refused(ValueError, lambda: release_dataset(copied, LabelPipeline(epsilon=1.0)), "1 of 7 rows copy another row's "
            "comparison", "Randomized response would draw independent noise for each copy, and together the copies "
            "reveal the label (their majority), so the release refuses them (retyped copies, look-alike letters, "
            "changed punctuation and near-copies that share most of their wording count). Keep one row per comparison "
            "first, e.g. with squarechipo.data.validation.drop_duplicate_rows(dataset); or, if the rows are distinct "
            "comparisons or labellers, declare the column that says so: privacy_unit (label_privacy_unit in a "
            "config).")  # fmt: skip
    release_dataset(rows, LabelPipeline(epsilon=0.5))
    for epsilon, total in ((0.5, "1"), (1.0, "1.5")):
        again = lambda e=epsilon: release_dataset(rows, LabelPipeline(epsilon=e))  # noqa: E731
        refused(ValueError, again, "Reuse the earlier release (its folder or file), or pass rerelease=True "
                "(label_rerelease: true in a config): the ledger and the card then state ε "
                f"{total}, the basic composition")  # fmt: skip
    units = distinct_pairs(6, offset=6200).add_column("labeller", [1, 1, 1, 2, 2, 2])
    release_dataset(units, LabelPipeline(epsilon=1.0), privacy_unit="labeller")  # ε 3 for each labeller
    refused(ValueError, lambda: release_dataset(units, LabelPipeline(epsilon=0.5), privacy_unit="labeller"),
            "the ledger and the card then state ε 4.5,")  # 3 + 0.5 × 3 rows of one labeller  # fmt: skip
    assert hash(ReleaseOptions(public_columns=["labeller"])) == hash(ReleaseOptions(public_columns=("labeller",)))


def test_a_release_keeps_the_privacy_unit_column_only_when_public_and_keeps_the_datasets_description():
    from squarechipo.data import metadata
    from tests.helpers.rows import distinct_pairs

    rows = distinct_pairs(4, offset=6300).add_column("annotator", ["a", "a", "b", "b"])
    rows = datasets.Dataset(rows.data, info=datasets.DatasetInfo(description="four test comparisons"), split="train")
    dropped = release_dataset(rows, LabelPipeline(epsilon=1.0), seed=0, privacy_unit="annotator")
    kept = release_dataset(
        rows, LabelPipeline(epsilon=1.0), seed=0, privacy_unit="annotator", public_columns=["annotator"]
    )
    assert "annotator" not in dropped.column_names and kept["annotator"] == ["a", "a", "b", "b"]
    for released in (dropped, kept):
        assert metadata.without_block(released.info.description) == "four test comparisons"
        assert released.split == "train" and get_ledger(released).total_epsilon == 2.0


def test_a_release_too_large_for_this_machines_memory_is_refused_before_any_work(monkeypatch):
    """The kernel killed a million-row release at 20.9 GB without a word: a release whose estimated peak exceeds the
    memory available is refused first, in one line naming the rows, the estimate and the fix; one that fits is not."""
    from squarechipo.privacy.release.transaction import check_memory, estimated_peak

    check_memory(1_000_000, 8e8, available=estimated_peak(1_000_000, 8e8))  # fits exactly
    with pytest.raises(MemoryError) as refused:
        check_memory(4_000_000, 3.2e9, available=4e9)
    assert str(refused.value) == (
        "a release of 4,000,000 rows (3.2 GB of data) needs about 12.5 GB of memory here, and this machine has 4.0 GB "
        "available: release disjoint parts of at most 1,166,666 rows (release_dataset with part=..., then "
        "combine_parts; docs/scale.md finds copies across parts first), or run it on a machine with more memory."
    )
    # The release asks before anything else, with its rows' own size.
    import squarechipo.privacy.release.transaction as transaction

    rows = distinct_pairs(30, offset=7100)
    monkeypatch.setattr(transaction, "_available_memory", lambda: estimated_peak(30, rows.data.nbytes) - 1)
    with pytest.raises(MemoryError, match=r"^a release of 30 rows \(0\.0 GB of data\) needs about 0\.5 GB"):
        release_dataset(rows, LabelPipeline(epsilon=1.0))
    # A few rows selected from a large set are estimated by their own share of its bytes, not the whole table's.
    large = distinct_pairs(3000, offset=7200)
    few = large.select(range(0, 3000, 100))  # every 100th row: an indices mapping over the whole table
    monkeypatch.setattr(transaction, "_available_memory", lambda: estimated_peak(30, large.data.nbytes / 50))
    assert len(release_dataset(few, LabelPipeline(epsilon=1.0))) == 30


def test_a_folder_holding_a_release_of_other_rows_or_no_release_is_refused_before_any_noise_is_drawn(tmp_path, caplog):
    """A folder that holds the release of other rows is never reused for these (its digest and theirs named), and a
    non-empty folder that holds no release is refused before the draw: nothing drawn, entered or written either
    way."""
    import logging

    from squarechipo.privacy.release.registry_admin import describe

    release_dataset(distinct_pairs(4, offset=12_000), LabelPipeline(epsilon=1.0), tmp_path / "theirs")
    before = sorted(p.name for p in (tmp_path / "theirs").iterdir())
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="squarechipo"):
        with pytest.raises(ValueError, match=r"theirs was released from different rows .*\(sha256:\w+ vs sha256:"):
            release_dataset(distinct_pairs(4, offset=12_100), LabelPipeline(epsilon=1.0), tmp_path / "theirs")
        junk = tmp_path / "notes"
        junk.mkdir()
        (junk / "todo.txt").write_text("not a release")
        with pytest.raises(ValueError, match=r"notes is not empty and holds no release: .* Nothing was written"):
            release_dataset(distinct_pairs(4, offset=12_200), LabelPipeline(epsilon=1.0), junk)
    assert "drew a release" not in caplog.text and describe()["releases"] == 1
    assert sorted(p.name for p in (tmp_path / "theirs").iterdir()) == before
    assert [p.name for p in junk.iterdir()] == ["todo.txt"]
