"""The fifth round of hostile probes, one test per class: what a ledger vouches for is what readers see; no noisy
copy escapes the registry; row sets cannot be ground; units compare by value. Each class is refused, or cannot arise
by construction (docs/privacy.md, the threat model)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import datasets
import numpy as np
import pytest

from squarechipo.privacy import LabelPipeline, get_ledger, release_dataset
from squarechipo.privacy.door import RawLabelsError
from squarechipo.privacy.ledger.binding import pairwise_rows
from squarechipo.privacy.release.saved import load_release
from squarechipo.trust.seals import IntegrityError
from tests.helpers.rows import distinct_pairs


def _truth(raw: datasets.Dataset) -> dict[str, str]:
    return dict(zip(raw["prompt"], raw["chosen"]))


def _raw_back(truth: dict[str, str]):
    """A transform of a batch that puts the raw labels back (what a hostile format transform does)."""

    def transform(batch):
        out = dict(batch)
        pairs = zip(batch["prompt"], batch["chosen"], batch["rejected"])
        out["chosen"], out["rejected"] = map(
            list, zip(*[(c, r) if truth[p] == c else (r, c) for p, c, r in pairs])
        )  # fmt: skip
        return out

    return transform


@pytest.fixture(scope="module")
def world():
    raw = distinct_pairs(24, offset=5100)
    return raw, release_dataset(raw, LabelPipeline(epsilon=0.5), seed=0)


def test_a_format_transform_that_puts_raw_labels_back_is_refused_by_every_reader(world):
    """`released.with_transform(<raw labels back>)` passed get_ledger (it hashed the stored rows) while the trainer
    tokenized what the transform returned, under a card saying ε 0.5."""
    raw, released = world
    back = _raw_back(_truth(raw))
    assert released.with_transform(back)[:]["chosen"] == raw["chosen"]  # what a reader would have seen
    for hostile in (released.with_transform(back), released.with_format("custom", transform=back)):
        with pytest.raises(IntegrityError, match=r"'custom' format .* changes what every reader sees"):
            get_ledger(hostile)
        with pytest.raises(IntegrityError, match="'custom' format"):
            pairwise_rows(hostile)
    in_place = released.select(range(len(released)))
    in_place.set_transform(back)
    with pytest.raises(IntegrityError, match="'custom' format"):
        get_ledger(in_place)
    in_place.reset_format()
    assert get_ledger(in_place).total_epsilon == 0.5  # nothing else changed: the release as it was
    assert get_ledger(released.with_format("numpy")).total_epsilon == 0.5  # formats that keep values are fine


def test_a_fingerprint_the_caller_chooses_does_not_skip_the_check(world):
    """`released.map(<raw labels back>, new_fingerprint=<the release's fingerprint>)` skipped the row check for the
    rest of the process: the cache of verified datasets was keyed by the fingerprint. No such cache exists now."""
    raw, released = world
    get_ledger(released)  # checked once
    relabelled = released.map(_raw_back(_truth(raw)), batched=True, new_fingerprint=released._fingerprint)
    assert relabelled._fingerprint == released._fingerprint and relabelled["chosen"] == raw["chosen"]
    with pytest.raises(IntegrityError, match=r"are not rows its privacy ledger released"):
        get_ledger(relabelled)


def test_pairwise_rows_takes_no_datasets_options_and_its_rows_hold_only_where_they_were_derived(world, tmp_path):
    """`pairwise_rows(released, cache_file_name=<a file of raw pairwise rows>)` loaded the file instead of
    computing, and the ledger was re-bound to the raw rows (32 of 32), through save and reload."""
    from squarechipo.privacy import load_privatized, save_privatized

    raw, released = world
    with pytest.raises(TypeError, match="unexpected keyword argument 'cache_file_name'"):
        pairwise_rows(released, cache_file_name=str(tmp_path / "raw_pairs.arrow"))
    pairs = pairwise_rows(released)
    assert get_ledger(pairs).total_epsilon == 0.5 and get_ledger(pairs.shuffle(seed=0).select(range(5)))
    raw_pairs = pairwise_rows(raw)  # the raw rows' texts: no ledger
    assert get_ledger(raw_pairs) is None
    grafted = datasets.Dataset(raw_pairs.data.table, info=pairs.info.copy())  # the derivation on other rows
    with pytest.raises(IntegrityError, match=r"\(pairwise_rows rows\): \d+ of 24 rows"):
        get_ledger(grafted)
    with pytest.raises(ValueError, match="derived .* from a release in this process: they are not a release"):
        save_privatized(pairs, tmp_path / "pairs")
    pairs.save_to_disk(str(tmp_path / "copied"))  # saved by hand and read in another process: not valid there
    code = (
        "import datasets; from squarechipo.privacy.ledger.binding import get_ledger\n"
        f"get_ledger(datasets.load_from_disk({str(tmp_path / 'copied')!r}))"
    )
    elsewhere = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "derived rows are checked only in the process that derived them" in elsewhere.stderr
    assert get_ledger(load_privatized(save_privatized(released, tmp_path / "release"))).total_epsilon == 0.5
    # A format transform on derived rows changes what readers see, as on a release: refused the same way.
    swapped = pairs.with_transform(lambda batch: {**batch, "chosen": batch["rejected"], "rejected": batch["chosen"]})
    with pytest.raises(IntegrityError, match=r"a 'custom' format \(set_format, with_transform"):
        get_ledger(swapped)


def test_a_train_dataset_assigned_after_construction_is_refused(world, tmp_path, tiny_model_factory, tokenizer):
    """`trainer.train_dataset = <other rows>` after construction trained on them under the release's ε: only the
    constructor checked the training split. Every dataloader a trainer builds now reads only what it prepared."""
    from squarechipo.trainer import SquareChiPOTrainer
    from tests.helpers.runs import tiny_config

    raw, released = world
    trainer = SquareChiPOTrainer(
        tiny_model_factory(), ref_model=tiny_model_factory(1), args=tiny_config(tmp_path / "run"),
        train_dataset=released, processing_class=tokenizer,
    )  # fmt: skip
    prepared = trainer.train_dataset
    tokenized_by_hand = raw.map(lambda row: {"prompt_ids": [1, 2], "chosen_ids": [3], "rejected_ids": [4]})
    for other in (tokenized_by_hand, raw):
        trainer.train_dataset = other
        with pytest.raises(RawLabelsError, match="train_dataset was replaced after the trainer was built"):
            trainer.train()
    trainer.train_dataset = prepared
    trainer.train()  # the rows it checked and prepared
    with pytest.raises(RawLabelsError, match="holds raw labels"):
        trainer.evaluate(eval_dataset=raw)


def test_a_row_set_keeps_128_bits_a_row_and_a_million_forged_rows_find_none(world):
    """The row set kept 4 bytes of an unkeyed sha256: appending invisible characters to a raw-labelled row found a
    colliding one in about 2^32/n tries. It keeps 16 bytes now (2^128/n tries: 2^104.7 at n = 10^7); a bounded search
    of 10^6 forgeries of every released row's raw orientation finds none. The same search against 2-byte prefixes
    finds hundreds (10^6 · 24 / 2^16 expected), so it is a search that finds a grindable set."""
    import base64
    import hashlib

    from squarechipo.data.fingerprint import ROW_SET_BYTES, _dump, _exact_row_hashes, encode_row_set

    raw, released = world
    (release,) = get_ledger(released).releases
    assert ROW_SET_BYTES * 8 >= 128 and release.row_hash_bytes == ROW_SET_BYTES
    n, tries = len(released), 1_000_000
    assert np.log2(2.0 ** (8 * ROW_SET_BYTES) / 10**7) >= 100  # the cost of one forged row at 10^7 released rows
    short = encode_row_set(_exact_row_hashes(released), width=2)
    # Each forgery is a raw row (its raw label) with invisible characters (i in binary) appended to its chosen
    # response, hashed as the ledger hashes rows: _exact_row_hashes, checked on a sample below, then one row at a time
    # with the fixed parts of each row's text joined once.
    raw_rows, names = raw.to_list(), sorted(raw.column_names)
    bits = str.maketrans("01", "\u200b\u2060")

    def forged(i: int) -> dict:
        return dict(raw_rows[i % n], chosen=raw_rows[i % n]["chosen"] + f"{i:020b}".translate(bits))

    heads, tails = [], []
    for row in raw_rows:
        text = "\x1f".join(f"{_dump(name)}:{_dump(row[name])}" for name in names)
        cut = text.index(_dump(row["chosen"])) + len(_dump(row["chosen"])) - 1  # inside the chosen text's quotes
        heads.append(text[:cut].encode())
        tails.append(text[cut:].encode())

    def forged_hash(i: int) -> bytes:
        return hashlib.sha256(heads[i % n] + f"{i:020b}".translate(bits).encode() + tails[i % n]).digest()

    sample = list(range(0, 7000, 71))
    assert _exact_row_hashes(datasets.Dataset.from_list([forged(i) for i in sample])) == [
        forged_hash(i) for i in sample
    ]
    sets = []
    for encoded, width in ((release.row_set, ROW_SET_BYTES), (short, 2)):
        blob = base64.b64decode(encoded)
        sets.append((width, {blob[j : j + width] for j in range(0, len(blob), width)}))
    found, found_short = 0, 0
    for i in range(tries):
        digest = forged_hash(i)
        found += digest[:ROW_SET_BYTES] in sets[0][1]
        found_short += digest[:2] in sets[1][1]
    assert found == 0 and found_short > 100, (found, found_short)


def test_a_privacy_unit_names_no_column_of_the_comparison_and_ids_compare_by_value():
    """`privacy_unit="prompt"` silently removed the prompt column; unit ids 1 and 1.0 counted as two units."""
    rows = distinct_pairs(6, offset=5300)
    for column in ("prompt", "chosen", "rejected"):
        with pytest.raises(ValueError, match=rf"privacy_unit '{column}' is a column of the comparison itself"):
            release_dataset(rows, LabelPipeline(epsilon=1.0), privacy_unit=column)
    assert rows.column_names == ["prompt", "chosen", "rejected"]  # nothing dropped
    as_int = rows.add_column("labeller", [1, 1, 1, 2, 2, 2])
    released = release_dataset(as_int, LabelPipeline(epsilon=1.0), privacy_unit="labeller")
    assert get_ledger(released).total_epsilon == pytest.approx(3.0)  # three rows a unit
    as_float = distinct_pairs(2, offset=5400).add_column("labeller", [1.0, 1.0])
    with pytest.raises(ValueError, match=r"were released before"):  # labeller 1 released before, as the integer 1
        release_dataset(as_float, LabelPipeline(epsilon=1.0), privacy_unit="labeller")


def test_a_release_is_one_step_and_its_private_stages_give_nothing_a_reader_accepts():
    """`ReleaseTransaction(rows, p).admit(); .draw()` without register returned datasets with valid ledgers (a
    majority over 9 such draws recovered 80% of the labels, the registry empty). The stages are private, a draw holds
    no ledger, and only a registered release is sealed."""
    import squarechipo.privacy.release.transaction as transaction
    from squarechipo.privacy.release.registry import earlier_releases

    assert not hasattr(transaction, "ReleaseTransaction")
    rows = distinct_pairs(20, offset=5500)
    stage = transaction._Release(rows, LabelPipeline(epsilon=0.5))
    stage._admit()
    stage._draw()
    drawn = stage._rows()
    assert get_ledger(drawn) is None  # rows without a ledger are raw to every reader
    with pytest.raises(RawLabelsError, match="holds raw labels"):
        from squarechipo.privacy.door import require_released_or_public

        require_released_or_public(drawn, split="train", public=False, reader="a trainer", declare="-")
    assert not earlier_releases(stage._units).rows  # nothing was registered, and nothing claims to be
    release_dataset(rows, LabelPipeline(epsilon=0.5))
    for _ in range(2):  # the public door makes no second noisy copy
        with pytest.raises(ValueError, match="20 row\\(s\\) were released before"):
            release_dataset(rows, LabelPipeline(epsilon=0.5))


def test_combine_parts_takes_only_disjoint_registered_signed_parts():
    """`combine_parts` accepted 9 draws of the same 40 rows as one dataset at ε 0.5."""
    import squarechipo.privacy.release.transaction as transaction
    from squarechipo.privacy.release.rows import combine_parts

    rows = distinct_pairs(16, offset=5600)
    first = release_dataset(rows.select(range(8)), LabelPipeline(epsilon=0.5), seed=1, part="a")
    second = release_dataset(rows.select(range(8, 16)), LabelPipeline(epsilon=0.5), seed=2, part="b")
    assert get_ledger(combine_parts(first, second)).total_epsilon == 0.5
    again = release_dataset(rows.select(range(4, 12)), LabelPipeline(epsilon=0.5), seed=3, part="c")
    with pytest.raises(ValueError, match="the two parts share 4 comparison"):
        combine_parts(first, again)
    options = transaction.ReleaseOptions(part="d")
    unregistered = transaction._Release(distinct_pairs(8, offset=5700), LabelPipeline(epsilon=0.5), options)
    unregistered._admit()
    unregistered._draw()
    signed_only, _ = unregistered._sealed()  # signed by hand, never registered
    with pytest.raises(ValueError, match="never entered in a registry of releases"):
        combine_parts(first, signed_only)


@pytest.mark.parametrize("cut", ["staged", "registered", "sealed"])
def test_a_release_cut_off_at_any_stage_is_never_readable_before_it_is_registered_and_is_completed(cut, tmp_path):
    """A release killed after its rows were staged and before its marker left a folder `datasets.load_from_disk`
    read with a valid ledger, never registered (7 kills: 7 copies). A staged folder holds no ledger until the
    release is registered; the next run completes it from whatever stage it reached, and it is counted once."""
    import squarechipo.privacy.release.folder as release_folder
    import squarechipo.privacy.release.transaction as transaction
    from squarechipo.data import metadata
    from squarechipo.data.fingerprint import canonical_rows
    from squarechipo.data.near_duplicates import sketch
    from squarechipo.privacy.release import registry_admin
    from squarechipo.privacy.release.registry import earlier_releases

    rows = distinct_pairs(12, offset=5800)
    rows = datasets.Dataset(rows.data, info=datasets.DatasetInfo(description="twelve comparisons"), split="train")
    folder = tmp_path / "new" / "nested" / "release"  # the release makes its folders
    staging = release_folder.staging_folder(folder)

    class Cut(BaseException):
        pass

    def stop(*args, **kwargs):
        raise Cut

    real_register, real_finish = transaction.register_release, release_folder._finish
    with pytest.MonkeyPatch.context() as patch:  # a cut, undone before the next run (the fixtures' own stay)
        if cut == "staged":
            patch.setattr(transaction, "register_release", stop)
        elif cut == "registered":
            patch.setattr(release_folder, "_finish", stop)
        else:

            def seal_only(staging_path, folder_path, released, digest):
                patch.setattr(release_folder.os, "replace", stop)
                real_finish(staging_path, folder_path, released, digest)

            patch.setattr(release_folder, "_finish", seal_only)
        with pytest.raises(Cut):
            release_dataset(rows, LabelPipeline(epsilon=0.5), folder)
    assert staging.is_dir() and not folder.exists()
    copy = datasets.load_from_disk(str(staging))
    if cut != "sealed":
        assert get_ledger(copy) is None  # readable only as raw rows, which every reader refuses
    else:
        assert get_ledger(copy).releases[0].registry_id is not None  # sealed only after it was registered
    assert transaction.register_release is real_register
    done = release_dataset(rows, LabelPipeline(epsilon=0.5), folder)  # the next run completes it, drawing nothing
    assert done["chosen"] == copy["chosen"] and not staging.exists()
    assert get_ledger(load_release(folder)).releases[0].registry_id is not None
    from squarechipo.data.fingerprint import row_hashes

    found = earlier_releases(row_hashes(rows))
    assert found.rows == 12 and len(found.releases) == 1  # counted once
    # Completed as an uninterrupted release is: its split and description, each row's key once, its near-copy marks,
    # and the folder, which a refused repeat names.
    for completed in (done, load_release(folder)):
        assert (
            completed.split == "train" and metadata.without_block(completed.info.description) == "twelve comparisons"
        )
    assert registry_admin.describe()["rows"] == 12
    near = rows.map(lambda row: {"chosen": row["chosen"] + " Now, please."})
    probe = earlier_releases(row_hashes(near), sketch(canonical_rows(near.with_format("arrow")[:])))
    # Each edit keeps J = 0.846 of its row's shingles; the registry compares MinHash estimates, which find all 12
    # here (the legacy shingle hash's estimates found 10: two fell below 0.8 by chance).
    assert probe.near_copies == 12
    with pytest.raises(
        ValueError, match=rf"12 row\(s\) were released before \(ε 0.5 at .* into {re.escape(str(folder))};"
    ):
        release_dataset(rows, LabelPipeline(epsilon=0.5))


def test_a_models_record_is_checked_with_the_public_key_alone(tmp_path, monkeypatch, tiny_model_factory):
    """A card's privacy record can be checked by anyone holding the custodian's public key, without the power to
    forge one: the record carries the release's signed ledger (without its row sets); an ε edited into the record,
    or a ledger edited inside it, is found."""
    from squarechipo.cli import main
    from squarechipo.privacy.ledger.debiasing import resolve_privacy
    from squarechipo.privacy.provenance.record import PRIVACY_FILE, PrivacyRecord, verify_privacy_record
    from squarechipo.privacy.provenance.record import write_privacy_record as write
    from tests.helpers.keys import roles

    keys = roles(tmp_path, monkeypatch)
    released = release_dataset(distinct_pairs(16, offset=5900), LabelPipeline(epsilon=0.5), seed=0)
    settings = resolve_privacy(get_ledger(released), epsilon=None, flip_rate=None, override=False)
    model = tmp_path / "model"
    tiny_model_factory(0).save_pretrained(model)
    write(model, PrivacyRecord.build({"stage": "preference_optimization", **settings.record(False)}))
    stored = json.loads((model / PRIVACY_FILE).read_text())
    assert '"row_set":' not in json.dumps(stored["ledger"]) and stored["ledger"]["signature"].startswith("ed25519:")
    assert len(json.dumps(stored)) < 20_000  # a summary, not 16 bytes a row
    keys.analyst()  # the public key only
    found = verify_privacy_record(model)
    assert found["epsilon_backed_by_ledger"] and found["ledger"][0].startswith(
        f"signed by key {keys.custodian_key.key_id} (Ed25519"
    )
    assert main(["key", "verify", str(model)]) == 0
    from squarechipo.trust.seals import seal

    overclaim = {**stored, "epsilon": 0.05}  # the analyst re-seals the record (unsigned: it holds no key)
    (model / PRIVACY_FILE).write_text(json.dumps(seal(overclaim)))
    found = verify_privacy_record(model)
    assert found["record"].startswith("unsigned digest") and not found["epsilon_backed_by_ledger"]
    with pytest.raises(IntegrityError, match=r"states ε 0.05, and the signed ledger it carries backs ε 0.5"):
        verify_privacy_record(model, third_party=True)  # what `key verify` runs: an overclaim is refused
    assert main(["key", "verify", str(model)]) == 1
    ledger = {**stored["ledger"], "total_epsilon": 0.05}
    (model / PRIVACY_FILE).write_text(json.dumps(seal({**overclaim, "ledger": ledger})))
    with pytest.raises(IntegrityError, match="does not match its digest"):
        verify_privacy_record(model)


class _Cut(BaseException):
    pass


def _cut_off(folder, rows, at: str, **options) -> None:
    """A release into ``folder`` cut off before it was registered (``at="register_release"``) or after it
    (``"_finish"``)."""
    import squarechipo.privacy.release.folder as release_folder
    import squarechipo.privacy.release.transaction as transaction

    def stop(*args, **kwargs):
        raise _Cut

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(release_folder if at == "_finish" else transaction, at, stop)
        with pytest.raises(_Cut):
            release_dataset(rows, LabelPipeline(epsilon=0.5), folder, **options)
    assert release_folder.staging_folder(folder).is_dir() and not folder.exists()


def test_an_interrupted_release_is_not_completed_once_the_registry_holds_more_releases_of_its_rows(tmp_path):
    """A re-release composes its ε with the earlier releases of its rows the registry held when it was drawn. Cut
    off before it was registered, it is completed while the registry still holds just those (its ledger states the
    composed ε); after another release of the rows, or of near-copies of them, its ledger would understate the ε,
    and completing it is refused. Cut off after it was registered, its ledger was decided then: later releases
    compose with it, and it is completed as drawn."""
    import squarechipo.privacy.release.folder as release_folder
    from squarechipo.privacy.release.registry import RegistryError
    from tests.helpers.refusals import says

    rows = distinct_pairs(10, offset=5900)
    release_dataset(rows, LabelPipeline(epsilon=0.5), tmp_path / "first")
    _cut_off(tmp_path / "second", rows, "register_release", rerelease=True)
    completed = release_dataset(rows, LabelPipeline(epsilon=0.5), tmp_path / "second", rerelease=True)
    assert get_ledger(completed).releases[0].earlier_epsilon == 0.5  # nothing changed: completed as drawn
    _cut_off(tmp_path / "third", rows, "register_release", rerelease=True)
    _cut_off(tmp_path / "registered", rows, "_finish", rerelease=True)
    release_dataset(rows, LabelPipeline(epsilon=0.5), tmp_path / "fourth", rerelease=True)
    with pytest.raises(RegistryError) as refused:
        release_dataset(rows, LabelPipeline(epsilon=0.5), tmp_path / "third", rerelease=True)
    third = release_folder.staging_folder(tmp_path / "third")
    says(refused.value, f"the interrupted release staged in {third} composed with 2 earlier release(s) (ε 1)",
         f"its ledger would understate the ε, so it is not completed. Delete {third} and release again (nothing "
         "read it).")  # fmt: skip
    registered = release_dataset(rows, LabelPipeline(epsilon=0.5), tmp_path / "registered", rerelease=True)
    (release,) = get_ledger(registered).releases
    assert (release.earlier_releases, release.earlier_epsilon) == (2, 1.0) and release.registry_id is not None
    fresh = distinct_pairs(10, offset=6000)
    _cut_off(tmp_path / "fresh", fresh, "register_release")
    near = fresh.map(lambda row: {"chosen": row["chosen"] + " Now, please."})
    release_dataset(near, LabelPipeline(epsilon=0.5))  # near-copies, released while the first waits
    with pytest.raises(RegistryError, match=r"composed with 0 earlier release\(s\) \(ε 0\).*as near-copies"):
        release_dataset(fresh, LabelPipeline(epsilon=0.5), tmp_path / "fresh")


def test_an_interrupted_composed_release_is_completed_with_the_ledger_it_composed(tmp_path):
    """Post-processing a release (compose=True) is not counted in the registry, but its ledger holds the first
    release: completed from its staged copy, it states both."""
    first = release_dataset(distinct_pairs(8, offset=6400), LabelPipeline(epsilon=0.5), seed=0)
    _cut_off(tmp_path / "composed", first, "_finish", compose=True)
    composed = release_dataset(first, LabelPipeline(epsilon=0.5), tmp_path / "composed", compose=True)
    ledger = get_ledger(load_release(tmp_path / "composed"))
    assert [r.release_id for r in ledger.releases][0] == get_ledger(first).releases[0].release_id
    assert len(ledger.releases) == 2 and ledger.total_epsilon == 1.0 and get_ledger(composed) == ledger


def test_an_edited_staged_release_record_is_refused_and_nothing_is_registered(tmp_path):
    """The staged copy's record is what completion seals into the ledger: an ε edited down there (or the ledger it
    composes with edited out) would be sealed as the custodian's. It is sealed like a ledger; an edit is refused."""
    import squarechipo.privacy.release.folder as release_folder
    from squarechipo.data.fingerprint import row_hashes
    from squarechipo.privacy.release.registry import earlier_releases
    from tests.helpers.refusals import refused

    rows, folder = distinct_pairs(8, offset=6500), tmp_path / "release"
    _cut_off(folder, rows, "register_release")
    staging = release_folder.staging_folder(folder)
    path = staging / release_folder.PENDING_FILE
    record = json.loads(path.read_text())
    assert record["release"]["epsilon"] == 0.5 and record["signature"].startswith("ed25519:")
    path.write_text(json.dumps({**record, "release": {**record["release"], "epsilon": 0.05}}))
    again = lambda: release_dataset(rows, LabelPipeline(epsilon=0.5), folder)  # noqa: E731
    refused(IntegrityError, again, f"{path}: the staged release record does not match its digest",
            f"Delete {staging} and release again (nothing read it).")  # fmt: skip
    assert not folder.exists() and not earlier_releases(row_hashes(rows)).rows
    # The registry keys staged beside it are bound to the record: one dropped is refused too.
    shutil.rmtree(staging)
    _cut_off(folder, rows, "register_release")
    keys = staging / release_folder.UNITS_FILE
    keys.write_bytes(keys.read_bytes()[:-32])
    refused(IntegrityError, again, f"{keys}: the registry keys of the interrupted release are not those it staged",
            f"Delete {staging} and release again")  # fmt: skip
    assert not folder.exists() and not earlier_releases(row_hashes(rows)).rows
