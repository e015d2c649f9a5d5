"""The privacy promise under careless and hostile use: the probes of a hostile user, each kept as a test.

Extra columns cannot undo randomized response; a release is tamper-evident, exclusive and atomic; duplicated rows
are refused; evaluation never touches raw private labels; checkpoints and copies keep their lineage; seeded
releases are called what they are. The attacks run on what a real run (tiny model, real tokenizer) saves.
"""

from __future__ import annotations

import itertools
import json
import multiprocessing
import shutil
from pathlib import Path

import datasets
import numpy as np
import pytest

from squarechipo.data.integrity import KEY_ENV, MARKER, IntegrityError
from squarechipo.privacy import LabelPipeline, get_ledger, release_dataset
from squarechipo.privacy.release_store import load_release, release_once


def _rows(n=40, **extra):
    data = {
        "prompt": [f"How should I spend ${100 + i} on plan {i}?" for i in range(n)],
        "chosen": [f"Save it, plan {i}." for i in range(n)],
        "rejected": [f"Bet it all, plan {i}!" for i in range(n)],
    }
    return datasets.Dataset.from_dict({**data, **{k: v(n) for k, v in extra.items()}})


def test_label_carrying_columns_are_dropped_and_named_and_undeclared_ones_refused():
    scores = {
        "id": lambda n: list(range(n)),
        "score_chosen": lambda n: [9.0] * n,
        "score_rejected": lambda n: [2.0] * n,
        "messages": lambda n: [[{"role": "assistant", "content": f"Save it, plan {i}."}] for i in range(n)],
    }
    rows = _rows(**scores)
    released = release_dataset(rows, LabelPipeline(epsilon=0.5), seed=0, public_columns=["id"])
    assert released.column_names == ["prompt", "chosen", "rejected", "id"]
    (release,) = get_ledger(released).releases
    assert sorted(release.dropped_columns) == ["messages", "score_chosen", "score_rejected"]
    assert release.public_columns == ["id"]
    # With the scores gone, nothing beside the released pair says which rows were swapped.
    swapped = np.array(released["chosen"]) != np.array(rows["chosen"])
    assert 0 < swapped.sum() < len(rows)
    with pytest.raises(ValueError, match=r"columns \['id'\] are neither prompt/chosen/rejected nor declared public"):
        release_dataset(rows, LabelPipeline(epsilon=0.5), seed=0)
    with pytest.raises(ValueError, match=r"columns \['score_chosen'\] can carry the label .* cannot be public"):
        release_dataset(rows, LabelPipeline(epsilon=0.5), seed=0, public_columns=["id", "score_chosen"])


def test_duplicated_rows_are_refused_with_their_count_and_the_helper_drops_them():
    from squarechipo.data.validation import drop_duplicate_rows

    rows = _rows(10)
    twice = datasets.concatenate_datasets([rows, rows.select([0, 3])])
    with pytest.raises(ValueError, match=r"2 of 12 rows copy another row's comparison: row 10 copies row 0"):
        release_dataset(twice, LabelPipeline(epsilon=1.0), seed=0)
    clean, dropped = drop_duplicate_rows(twice)
    assert dropped == 2 and clean["prompt"] == rows["prompt"]


#: Ways to retype a text without changing it: by accident (spaces, a line break, case, a copy from a web page with a
#: no-break space or a BOM) and on purpose (zero-width characters, full-width letters, a soft hyphen, bidi marks).
_RETYPED = {
    "trailing space": lambda t: t + " ",
    "double spaces and a line break": lambda t: t.replace(" ", "  ", 1).replace(" ", "\n", 1),
    "upper case": str.upper,
    "no-break space": lambda t: t.replace(" ", "\u00a0"),
    "byte-order mark": lambda t: "\ufeff" + t,
    "zero-width space and joiners": lambda t: "\u200b".join(t[:5]) + "\u200d" + t[5:],
    "full-width letters": lambda t: "".join(chr(ord(c) + 0xFEE0) if "a" <= c <= "z" else c for c in t),
    "soft hyphen and bidi marks": lambda t: "\u00ad\u200e" + t + "\u200f",
}


@pytest.mark.parametrize("name", list(_RETYPED))
def test_near_duplicates_are_duplicates(name):
    """Released together, k retyped copies of a row get k independent RR draws, whose majority is the raw label:
    each variant counts as a copy of its row, in the release's refusal and in drop_duplicate_rows."""
    from squarechipo.data.validation import drop_duplicate_rows

    rows = _rows(10)
    retype = _RETYPED[name]
    variants = rows.select(range(4)).map(lambda r: {k: retype(v) for k, v in r.items()})
    assert variants["prompt"] != rows["prompt"][:4]  # the bytes differ
    both = datasets.concatenate_datasets([rows, variants])
    with pytest.raises(ValueError, match=r"4 of 14 rows copy another row's comparison: row 10 copies row 0 \(the"):
        release_dataset(both, LabelPipeline(epsilon=0.5), seed=0)
    clean, dropped = drop_duplicate_rows(both)
    assert dropped == 4 and clean["prompt"] == rows["prompt"]


def _edit_ledger(folder: Path, change) -> None:
    """Edit the ledger inside a saved release as a hand with a text editor would (``change`` mutates its JSON)."""
    from squarechipo.data.metadata import BLOCK_MARKER

    info = json.loads((folder / "dataset_info.json").read_text())
    head, _, block = info["description"].partition(BLOCK_MARKER)
    ledger = json.loads(block)
    change(ledger)
    info["description"] = head + BLOCK_MARKER + "\n" + json.dumps(ledger)
    (folder / "dataset_info.json").write_text(json.dumps(info))


def test_an_edited_ledger_edited_labels_or_a_deleted_ledger_are_refused(tmp_path):
    rows = _rows()
    folder = tmp_path / "release"
    release_once(rows, LabelPipeline(epsilon=0.5, corruption_rate=0.1), folder, seed=0)
    clean = tmp_path / "clean"

    def fresh() -> Path:
        if clean.exists():
            shutil.rmtree(clean)
        shutil.copytree(folder, clean)
        return clean

    assert load_release(fresh()).num_rows == 40

    def epsilon_to_five(ledger):
        ledger["releases"][0]["epsilon"] = 5.0
        ledger["total_epsilon"] = 5.0

    for change, message in (
        (epsilon_to_five, "does not match its digest"),
        (lambda ledger: ledger["releases"][0].update(mechanism="none"), "does not match its digest"),
    ):
        _edit_ledger(fresh(), change)
        with pytest.raises(IntegrityError, match=message):
            load_release(clean)

    # A forger who recomputes the digest still has to keep the release consistent with its own pipeline.
    from squarechipo.data.integrity import seal

    def consistent_forgery(ledger):
        ledger["releases"][0]["mechanism"] = "none"
        ledger.update(seal(ledger))

    _edit_ledger(fresh(), consistent_forgery)
    with pytest.raises(IntegrityError, match="the privacy ledger is not the one this release was saved with"):
        load_release(clean)  # the marker names the original ledger's digest
    marker = json.loads((clean / MARKER).read_text())
    marker["ledger_digest"] = json.loads(
        json.loads((clean / "dataset_info.json").read_text())["description"].split("\n", 1)[1]
    )["digest"]
    (clean / MARKER).write_text(json.dumps(seal(marker)))  # ... so the forger re-seals the marker too
    with pytest.raises(IntegrityError, match="disagrees with itself: mechanism 'none' for a pipeline of ε 0.5"):
        load_release(clean)

    # Edited labels: swap one row's chosen and rejected and save the table back.
    edited = datasets.load_from_disk(str(fresh()))
    table = edited.data.table.to_pydict()
    table["chosen"][0], table["rejected"][0] = table["rejected"][0], table["chosen"][0]
    tampered = datasets.Dataset.from_dict(table, info=edited.info)
    shutil.rmtree(clean)
    tampered.save_to_disk(str(clean))
    (clean / MARKER).write_text((folder / MARKER).read_text())
    with pytest.raises(IntegrityError, match="the released rows changed after the release was saved"):
        load_release(clean)

    # A deleted ledger beside released labels.
    fresh()
    info = json.loads((clean / "dataset_info.json").read_text())
    info["description"] = ""
    (clean / "dataset_info.json").write_text(json.dumps(info))
    with pytest.raises(IntegrityError, match="holds released labels .* but no privacy ledger"):
        load_release(clean)


_TEAM_KEY = "team-secret-" + "k" * 32
_OTHER_KEY = "another-key-" + "q" * 32


def test_a_keyed_ledger_is_checked_with_the_key(tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_ENV, _TEAM_KEY)
    released = release_dataset(_rows(), LabelPipeline(epsilon=1.0), seed=0)
    assert get_ledger(released).digest.startswith("hmac-sha256:")
    # Another key: named as such (its id), with no advice to release the raw rows again (that would spend ε).
    monkeypatch.setenv(KEY_ENV, _OTHER_KEY)
    with pytest.raises(IntegrityError, match="sealed under another key") as refused:
        get_ledger(released)
    assert "Do not release the raw rows again" in str(refused.value)
    # The same key after an edit is an edit, not another key.
    monkeypatch.setenv(KEY_ENV, _TEAM_KEY)
    from squarechipo.data import metadata

    edited_record = json.loads(metadata.read_block(released))
    edited_record["total_epsilon"] = 9.0
    edited = metadata.with_block(released.select(range(len(released))), json.dumps(edited_record))
    with pytest.raises(IntegrityError, match="does not match its digest"):
        get_ledger(edited)
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(IntegrityError, match=f"sealed with a secret key \\(key id [0-9a-f]{{8}}\\); set {KEY_ENV}"):
        get_ledger(released)
    # The forger the key exists for: without the key, they edit the ledger and re-seal it with a plain digest. With
    # the key set, a plain seal is refused, however well it matches.
    from squarechipo.data import metadata
    from squarechipo.data.integrity import seal

    plain = release_dataset(_rows(), LabelPipeline(epsilon=1.0), seed=0)  # sealed with sha256 (no key now)
    record = json.loads(metadata.read_block(plain))
    record["releases"][0]["epsilon"] = record["releases"][0]["pipeline"]["epsilon"] = 8.0
    forged = metadata.with_block(plain, json.dumps(seal(record)))
    assert get_ledger(forged).total_epsilon == 8.0  # without a key, a re-sealed plain digest cannot be told apart
    monkeypatch.setenv(KEY_ENV, _TEAM_KEY)
    with pytest.raises(IntegrityError, match=f"{KEY_ENV} is set, but the privacy ledger carries a plain sha256"):
        get_ledger(forged)


@pytest.mark.parametrize("value", ["", "   ", "k", "x" * 31])
def test_an_empty_or_short_key_is_refused_not_used(monkeypatch, value):
    """An empty key fell back to plain digests; a 1-character key was recovered from one seal in under a second and a
    forged release then loaded. Both are refused wherever a seal is made or checked."""
    from squarechipo.data.integrity import MIN_KEY_BYTES, LedgerKeyError

    released = release_dataset(_rows(), LabelPipeline(epsilon=1.0), seed=0)
    monkeypatch.setenv(KEY_ENV, value)
    with pytest.raises(LedgerKeyError, match=f"{KEY_ENV} is (set but empty|{len(value)} byte)"):
        release_dataset(_rows(), LabelPipeline(epsilon=1.0), seed=0)
    with pytest.raises(LedgerKeyError, match=str(MIN_KEY_BYTES)):
        get_ledger(released)
    monkeypatch.setenv(KEY_ENV, "x" * MIN_KEY_BYTES)  # the boundary: exactly the minimum is accepted
    assert get_ledger(release_dataset(_rows(), LabelPipeline(epsilon=1.0), seed=0)).digest.startswith("hmac-sha256:")


@pytest.mark.parametrize("name", ["release", "release.jsonl", "release.parquet"])
def test_every_saved_form_carries_and_checks_a_rows_digest(tmp_path, name):
    """Folder, JSONL and Parquet alike: edited labels under the original ledger, a deleted marker (or a JSONL sidecar
    holding the ledger alone, as before markers existed) are refused by every loader."""
    from squarechipo.data import load_preference_dataset, metadata
    from squarechipo.privacy import load_privatized, save_privatized

    released = release_dataset(_rows(), LabelPipeline(epsilon=0.5), seed=0)
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
        {"train": release_dataset(_rows(), LabelPipeline(epsilon=0.5), seed=0), "test": _rows(6)}
    )
    path = save_privatized(data, tmp_path / "dict")
    assert set(json.loads((path / MARKER).read_text())["splits"]) == {"train"}
    loaded = load_privatized(path)
    assert loaded["train"]["chosen"] == data["train"]["chosen"] and get_ledger(loaded["test"]) is None
    (path / MARKER).unlink()
    with pytest.raises(IntegrityError, match=r"\[train\] carries a privacy ledger but no release marker"):
        load_preference_dataset(path)


def test_an_interrupted_release_is_completed_from_its_staged_copy_or_refused(tmp_path):
    rows = _rows()
    folder = tmp_path / "release"
    done = release_once(rows, LabelPipeline(epsilon=0.5), folder, seed=1)
    # Cut off after the staged copy was complete, before the rename: the next run completes it.
    staging = folder.parent / f".{folder.name}.staging"
    folder.rename(staging)
    again = release_once(rows, LabelPipeline(epsilon=0.5), folder, seed=2)  # another seed: it must not be used
    assert again["chosen"] == done["chosen"] and not staging.exists()
    # Cut off before the marker: refused, with what to do.
    (staging / "partial").mkdir(parents=True)
    with pytest.raises(ValueError, match=r"an interrupted release left .*staging unfinished .* delete"):
        release_once(rows, LabelPipeline(epsilon=0.5), tmp_path / "release", seed=3)


def test_the_release_path_draws_its_noise_once_and_a_rerun_rewrites_nothing(tmp_path):
    """What the one-way release path promises, seen from outside: the released pairs are exactly one seeded draw of
    the pipeline, the ledger and the folder's marker describe those rows, and a re-run (another seed) returns the
    same release without drawing noise or rewriting a byte of the folder."""
    from squarechipo.data.fingerprint import preference_fingerprint
    from squarechipo.data.integrity import rows_digest
    from squarechipo.privacy.mechanisms import ctl

    rows, folder = _rows(), tmp_path / "release"
    released = release_once(rows, LabelPipeline(epsilon=0.5), folder, seed=1)
    swap = ctl(np.zeros(len(rows), dtype=bool), 0.5, 0.0, np.random.default_rng(1))  # the first draw of seed 1
    assert 0 < swap.sum() < len(rows)
    assert released["chosen"] == [r if s else c for c, r, s in zip(rows["chosen"], rows["rejected"], swap)]
    ledger = get_ledger(released)
    (release,) = ledger.releases
    assert release.data_fingerprint == preference_fingerprint(rows) and release.n_rows == len(rows)
    marker = json.loads((folder / MARKER).read_text())
    assert marker["ledger_digest"] == ledger.digest and marker["rows_digest"] == rows_digest(released)

    def files():
        return {path: (path.read_bytes(), path.stat().st_mtime_ns) for path in folder.rglob("*") if path.is_file()}

    saved = files()
    again = release_once(rows, LabelPipeline(epsilon=0.5), folder, seed=2)
    assert again["chosen"] == released["chosen"] and get_ledger(again) == ledger
    assert files() == saved


def _release_in_process(folder: str, seed: int, queue) -> None:
    released = release_once(_rows(), LabelPipeline(epsilon=0.5), folder, seed=seed)
    queue.put(released["chosen"])


@pytest.mark.integration
def test_two_runs_racing_on_one_fresh_folder_release_once_and_share_it(tmp_path):
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


def test_evaluation_splits_are_released_or_declared_public_and_raw_ones_are_refused(tmp_path):
    from squarechipo.privacy.door import RawLabelsError, require_released_or_public
    from squarechipo.trainer.script_args import TrainScriptArguments
    from squarechipo.trainer.splits import load_training_splits

    data = datasets.DatasetDict(
        {"train": _rows(40), "validation": _rows(12).map(lambda r: {"prompt": "v" + r["prompt"]})}
    )
    data.save_to_disk(str(tmp_path / "data"))
    args = TrainScriptArguments(
        dataset_name=str(tmp_path / "data"), dataset_test_split="validation", label_epsilon=0.5, label_seed=0
    )
    train, validation = load_training_splits(args, str(tmp_path / "out"), _State(), with_eval=True)
    assert get_ledger(validation).total_epsilon == 0.5  # a release of its own
    assert (tmp_path / "out" / "released_train_validation" / MARKER).is_file()
    args.public_splits = ["validation"]
    _, public = load_training_splits(args, str(tmp_path / "out2"), _State(), with_eval=True)
    assert get_ledger(public) is None and public["chosen"] == data["validation"]["chosen"]
    rule = dict(split="eval", reader="SquareChiPOTrainer", declare="eval_labels_public=True")
    with pytest.raises(RawLabelsError, match=r"reads the labels of the split 'eval', but it holds raw labels"):
        require_released_or_public(public, public=False, **rule)
    require_released_or_public(public, public=True, **rule)
    require_released_or_public(validation, public=False, **rule)


class _State:
    """A single process (what Accelerate's PartialState reports without a launcher)."""

    is_main_process, process_index, num_processes = True, 0, 1

    def wait_for_everyone(self):
        return None


def _train(tmp_path, tiny_model_factory, tokenizer, train, eval_dataset=None, **config):
    """A real SquareChiPOTrainer run on the tiny model (reference log-probs precomputed from the start model)."""
    from squarechipo.trainer import SquareChiPOConfig, SquareChiPOTrainer

    args = SquareChiPOConfig(
        output_dir=str(tmp_path / "run"),
        per_device_train_batch_size=4,
        per_device_eval_batch_size=len(eval_dataset) if eval_dataset is not None else 8,
        max_length=64,
        learning_rate=1e-3,
        report_to="none",
        precompute_ref_log_probs=True,
        **config,
    )
    trainer = SquareChiPOTrainer(
        tiny_model_factory(), args=args, train_dataset=train, eval_dataset=eval_dataset, processing_class=tokenizer
    )
    trainer.train()
    return trainer


def test_what_a_run_saves_gives_back_the_released_eval_labels_at_best_never_the_raw_ones(
    tmp_path, tiny_model_factory, tokenizer
):
    """The probe's attack: from the saved eval metric (the mean margin over a small validation split), the saved
    model and the public reference, try every labelling of the split and keep the one that reproduces the saved
    figure. On released eval labels it finds the released labelling, wrong wherever randomized response flipped."""
    from squarechipo.models.logprobs import model_logps, preference_collator, tokenize_preferences

    raw_validation = _rows(8).map(lambda r: {"prompt": "v: " + r["prompt"]})
    train = release_dataset(_rows(16), LabelPipeline(epsilon=0.5), seed=4)
    validation = release_dataset(raw_validation, LabelPipeline(epsilon=0.5), seed=5)
    trainer = _train(tmp_path, tiny_model_factory, tokenizer, train, validation, max_steps=20, method="dpo")
    saved = trainer.evaluate()["eval_rewards/margins"]
    flipped = np.array(validation["chosen"]) != np.array(raw_validation["chosen"])
    assert flipped.any() and not flipped.all()
    rows, collator = tokenize_preferences(raw_validation, tokenizer), preference_collator(tokenizer)
    policy = model_logps(trainer.model, rows, collator, 8, "policy")
    reference = model_logps(tiny_model_factory(), rows, collator, 8, "reference")  # the public starting model
    margins = (trainer.beta * ((policy[0] - reference[0]) - (policy[1] - reference[1]))).numpy()
    best = min(itertools.product([1, -1], repeat=8), key=lambda signs: abs(float(np.mean(margins * signs)) - saved))
    guessed_raw_chosen_preferred = np.array(best) == 1
    assert np.array_equal(guessed_raw_chosen_preferred, ~flipped)
    # The same attack on raw labels, through evaluate(eval_dataset=...) after construction: refused, naming the fix.
    with pytest.raises(ValueError, match=r"reads the labels of the split 'eval', but it holds raw labels.*public"):
        trainer.evaluate(eval_dataset=raw_validation)


def test_checkpoints_and_copies_keep_their_lineage(tmp_path, tiny_model_factory, tokenizer):
    from transformers import AutoModelForCausalLM

    from squarechipo.privacy.lineage import ModelLineage, check_lineage
    from squarechipo.privacy.record import PRIVACY_FILE

    train = release_dataset(_rows(16), LabelPipeline(epsilon=1.0), seed=6)
    trainer = _train(tmp_path, tiny_model_factory, tokenizer, train, max_steps=2, save_strategy="steps", save_steps=1)
    checkpoints = sorted((tmp_path / "run").glob("checkpoint-*"))
    assert checkpoints and all((c / PRIVACY_FILE).is_file() for c in checkpoints)
    copy = tmp_path / "copy"
    trainer.model.save_pretrained(copy)  # a copy saved without the trainer: no record beside it
    assert not (copy / PRIVACY_FILE).exists()
    lineage = ModelLineage.of_model(AutoModelForCausalLM.from_pretrained(copy))
    assert "weights are those of a recorded model" in lineage.name and lineage.recorded
    with pytest.raises(ValueError, match="labels of these rows are private"):
        check_lineage([("policy", lineage)], train, private=True, override=False, override_field="x", context="t")
    # Copies that are not bit-equal: cast to bf16 (and back), or nudged by 1e-6. Both are recognised by their weights'
    # projection on the run's update; the public model the run started from is not.
    import torch

    cast = AutoModelForCausalLM.from_pretrained(copy).to(torch.bfloat16)
    nudged = AutoModelForCausalLM.from_pretrained(copy)
    with torch.no_grad():
        for parameter in nudged.parameters():
            parameter.add_(1e-6)
    for changed in (cast, cast.to(torch.float32), nudged):
        found = ModelLineage.of_model(changed)
        assert "a cast, perturbed, merged or reshaped copy of a recorded model's weights" in found.name
        assert found.recorded
        with pytest.raises(ValueError, match="labels of these rows are private"):
            check_lineage([("policy", found)], train, private=True, override=False, override_field="x", context="t")
    assert not ModelLineage.of_model(tiny_model_factory()).recorded  # the starting model: public, unrecorded
    # The public base model of a two-stage pipeline (base → public SFT = this run's start → private run) whose public
    # update u points against the private one. In the docs' own flow such a base lay as close to the trained weights
    # as a bf16 cast (0.13%) and projected on the run's update at t = 1.45, so it was taken for a copy and refused. It
    # differs from the trained weights beyond bf16 precision: public. (Here base = start − u, u = −1.2·update + noise.)
    from squarechipo.privacy.sketch import bf16_agreement, copy_projection, sketch_model

    base, generator = tiny_model_factory(), torch.Generator().manual_seed(0)
    with torch.no_grad():
        for weight, trained_weight in zip(base.parameters(), trainer.model.parameters()):
            noise = torch.randn(weight.shape, generator=generator) * 3e-4 * weight.abs().mean()
            weight.add_(1.2 * (trained_weight.detach() - weight) + noise)
    at = sketch_model(tiny_model_factory())[0]
    start, trained, ancestor = (sketch_model(m, at=at)[0].values for m in (tiny_model_factory(), trainer.model, base))
    assert 0.5 <= copy_projection(ancestor, trained, start) <= 1.5  # as a copy would
    assert np.linalg.norm(ancestor - trained) <= 0.02 * np.linalg.norm(trained)  # as close as a cast
    assert bf16_agreement(ancestor, trained) < 0.5 and not ModelLineage.of_model(base).recorded
    # A record whose fields were blanked (to pass as an unrecorded, public model) no longer matches its seal.
    from squarechipo.data.integrity import IntegrityError
    from squarechipo.privacy.record import read_privacy_record

    saved = tmp_path / "run"
    trainer.save_model()
    record = json.loads((saved / PRIVACY_FILE).read_text())
    record["dataset_fingerprint"], record["prompt_sketch"], record["upstream"] = None, None, []
    (saved / PRIVACY_FILE).write_text(json.dumps(record))
    with pytest.raises(IntegrityError, match="privacy record does not match its digest"):
        read_privacy_record(saved)
    with pytest.raises(IntegrityError, match="privacy record does not match its digest"):
        ModelLineage.of_model(str(saved))
    del record["digest"]
    (saved / PRIVACY_FILE).write_text(json.dumps(record))
    with pytest.raises(IntegrityError, match="privacy record has no digest"):
        ModelLineage.of_model(str(saved))


def test_a_seeded_release_is_called_seeded_and_is_not_pushed(tmp_path, tiny_model_factory, tokenizer):
    from squarechipo.privacy.record import read_privacy_record
    from squarechipo.trainer import SquareChiPOConfig, SquareChiPOTrainer

    train = release_dataset(_rows(16), LabelPipeline(epsilon=1.0), seed=7)
    trainer = _train(tmp_path, tiny_model_factory, tokenizer, train, max_steps=1)
    trainer.save_model()
    card = (tmp_path / "run" / "README.md").read_text()
    assert "seeded release, reproducible by anyone with the seed, not private" in card
    assert read_privacy_record(tmp_path / "run").seeded
    args = SquareChiPOConfig(output_dir=str(tmp_path / "push"), push_to_hub=True, hub_model_id="x/y", report_to="none")
    with pytest.raises(ValueError, match="released with a fixed label_seed, so anyone with the seed can recover"):
        SquareChiPOTrainer(tiny_model_factory(), args=args, train_dataset=train, processing_class=tokenizer)


def test_training_on_a_release_folder_whose_ledger_was_deleted_is_refused(tmp_path):
    from squarechipo.trainer.script_args import TrainScriptArguments
    from squarechipo.trainer.splits import load_training_splits

    folder = tmp_path / "release"
    release_once(_rows(), LabelPipeline(epsilon=0.5), folder, seed=0)
    args = TrainScriptArguments(dataset_name=str(folder))
    train, _ = load_training_splits(args, str(tmp_path / "out"), _State(), with_eval=False)
    assert get_ledger(train).total_epsilon == 0.5
    info = json.loads((folder / "dataset_info.json").read_text())
    info["description"] = ""
    (folder / "dataset_info.json").write_text(json.dumps(info))
    with pytest.raises(IntegrityError, match="but no privacy ledger: the ledger was deleted"):
        load_training_splits(args, str(tmp_path / "out"), _State(), with_eval=False)


def test_a_second_release_of_the_same_rows_is_refused_or_composed(tmp_path):
    """The attack: the same rows released again into new folders, each with fresh noise and each card saying ε 0.5;
    a majority over the releases recovers the raw labels. This machine's registry refuses the second release (retyped
    or reordered copies and a superset of the rows included); opting in composes: the ledger states the summed ε,
    and the flip rate the loss debiases for stays the release's own."""
    from squarechipo.privacy.calibration import flip_probability

    rows = _rows(60)
    first = release_once(rows, LabelPipeline(epsilon=0.5), tmp_path / "one")
    assert get_ledger(first).total_epsilon == 0.5
    again = release_once(rows, LabelPipeline(epsilon=0.5), tmp_path / "one")  # the same folder: reused, no new noise
    assert again["chosen"] == first["chosen"]
    retyped = rows.map(lambda r: {"prompt": r["prompt"].upper() + " "}).shuffle(seed=0)
    superset = datasets.concatenate_datasets([_rows(70).select(range(60, 70)), rows])
    for other in (rows, retyped, superset):
        with pytest.raises(ValueError, match=r"60 row\(s\) were released before \(ε 0.5 at .*rerelease=True"):
            release_once(other, LabelPipeline(epsilon=0.5), tmp_path / "two")
        with pytest.raises(ValueError, match=r"60 row\(s\) were released before"):
            release_dataset(other, LabelPipeline(epsilon=1.0))
    assert not (tmp_path / "two").exists()
    second = release_once(rows, LabelPipeline(epsilon=0.5), tmp_path / "two", rerelease=True)
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
    from squarechipo.privacy.record import PrivacyRecord

    record = PrivacyRecord.build({"stage": "preference_optimization", "epsilon": 1.0, "ledger": ledger.to_dict()})
    assert "| ε (local DP, total over releases) | 1.0: basic composition of this data's own release(s) and " in (
        record.card_section()
    )


def test_a_saved_release_holds_no_bytes_of_rows_it_did_not_release(tmp_path):
    """Released columns were slices of the input table, and a saved release then held up to 31 bytes of the next,
    unreleased row (its prompt, id and category). Every column of a release owns its buffers."""
    from squarechipo.privacy import KaryRR, save_privatized

    n = 40
    rows = _rows(n, category=lambda n: [f"CATEGORY-{i:03d}" for i in range(n)])
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
