"""Model lineage: no private label may reach a run through the models it starts from (issue 14 §1).

Real tiny Llama models saved to real folders with real privacy records, the real trainers.
"""

from __future__ import annotations

import json

import datasets
import numpy as np
import pytest

from squarechipo.data.fingerprint import training_data_record
from squarechipo.privacy import LabelPipeline, release_dataset
from squarechipo.privacy.provenance.lineage import PRIVACY_FILE, ModelLineage, check_lineage
from squarechipo.privacy.provenance.record import PrivacyRecord
from squarechipo.reward import PrivateRewardConfig, PrivateRewardTrainer
from squarechipo.trainer import SquareChiPOConfig, SquareChiPOTrainer
from squarechipo.trust.seals import IntegrityError, seal
from tests.helpers.models import make_tiny_classifier, make_tiny_model
from tests.helpers.rows import distinct_pairs, plan_rows, release_rows
from tests.helpers.runs import tiny_config, train_tiny


def preference_rows(n: int, offset: int = 0) -> datasets.Dataset:
    return distinct_pairs(n, offset)


def sft_rows(rows: datasets.Dataset) -> datasets.Dataset:
    """SFT data made from preference rows (prompt + chosen): what Zhou et al. 2025 (Square-χPO), App. E does and what
    leaks the labels."""
    return datasets.Dataset.from_dict({"prompt": rows["prompt"], "completion": rows["chosen"]})


def save_model(folder, tokenizer, record: dict | None, seed: int = 0, classifier: bool = False):
    model = make_tiny_classifier(tokenizer, seed) if classifier else make_tiny_model(tokenizer, seed)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    if record is not None:
        (folder / PRIVACY_FILE).write_text(json.dumps(seal(record)))  # as squarechipo writes it: sealed
    return folder


def config(tmp_path, **overrides) -> SquareChiPOConfig:
    return tiny_config(tmp_path / "out", **overrides)


def trainer(policy_dir, ref_dir, train, args, tokenizer):
    from transformers import AutoModelForCausalLM

    ref = AutoModelForCausalLM.from_pretrained(ref_dir) if ref_dir is not None else None
    return SquareChiPOTrainer(
        AutoModelForCausalLM.from_pretrained(policy_dir),
        ref_model=ref,
        args=args,
        train_dataset=train,
        processing_class=tokenizer,
    )


@pytest.fixture(scope="module")
def private(tmp_path_factory):
    raw = preference_rows(16)
    return {"raw": raw, "released": release_rows(raw, LabelPipeline(epsilon=1.0), seed=0)}


@pytest.fixture(scope="module")
def models(tmp_path_factory, tokenizer, private):
    root = tmp_path_factory.mktemp("lineage")
    public = preference_rows(16, offset=1000)
    return {
        "clean": save_model(root / "clean", tokenizer, training_data_record(sft_rows(public))),
        "bare": save_model(root / "bare", tokenizer, None),
        # SFT on prompt + chosen of the very rows whose labels are released: the Zhou et al. 2025 (Square-χPO), App. E
        # pipeline.
        "sft_leak": save_model(root / "sft_leak", tokenizer, training_data_record(sft_rows(private["raw"]))),
        "same_rows": save_model(root / "same_rows", tokenizer, training_data_record(private["raw"])),
        # Trained on public rows, but started from the leaky SFT model: caught through `upstream`.
        "grandchild": save_model(
            root / "grandchild",
            tokenizer,
            {
                **training_data_record(public),
                **check_lineage(
                    [("policy", ModelLineage.from_folder(root / "sft_leak"))],
                    public,
                    private=False,
                    override=False,
                    override_field="",
                    context="test",
                ).record(),
            },
        ),
    }


def test_trainer_refuses_a_policy_sft_trained_on_the_private_rows(models, private, tokenizer, tmp_path):
    with pytest.raises(ValueError) as error:
        trainer(models["sft_leak"], models["clean"], private["released"], config(tmp_path), tokenizer)
    message = str(error.value)
    assert f"the policy model {models['sft_leak']} was trained on prompts that occur in these rows" in message
    assert "override_lineage_guard" in message and "finance_sft" in message


def test_trainer_refuses_a_reference_trained_on_the_same_rows(models, private, tokenizer, tmp_path):
    with pytest.raises(ValueError, match=r"the reference model .*same_rows was trained on these rows \(same"):
        trainer(models["clean"], models["same_rows"], private["released"], config(tmp_path), tokenizer)


def test_trainer_checks_lineage_transitively(models, private, tokenizer, tmp_path):
    with pytest.raises(ValueError, match="grandchild was trained on prompts that occur in these rows"):
        trainer(models["grandchild"], models["clean"], private["released"], config(tmp_path), tokenizer)


def test_default_reference_is_the_policy_and_is_checked(models, private, tokenizer, tmp_path):
    with pytest.raises(ValueError, match="the policy and reference model"):
        trainer(
            models["sft_leak"], None, private["released"], config(tmp_path, precompute_ref_log_probs=True), tokenizer
        )


def test_override_is_recorded_in_the_privacy_record_and_card(models, private, tokenizer, tmp_path):
    args = config(tmp_path, override_lineage_guard=True)
    run = trainer(models["clean"], models["sft_leak"], private["released"], args, tokenizer)
    run.train()
    run.save_model(args.output_dir)
    run.create_model_card()
    record = json.loads((tmp_path / "out" / PRIVACY_FILE).read_text())
    assert [_named(e) for e in record["label_exposure"]] == [
        {"role": "reference", "model": str(models["sft_leak"]), "status": "prompt_overlap"}
    ]
    assert {"role": "policy", "model": str(models["clean"]), "status": "recorded"} in map(_named, record["lineage"])
    # The trained model's record names each starting model's record by its digest.
    started = json.loads((models["clean"] / PRIVACY_FILE).read_text())["digest"]
    assert {"role": "policy", "model": str(models["clean"]), "status": "recorded", "record_digest": started} in record[
        "lineage"
    ]
    card = (tmp_path / "out" / "README.md").read_text()
    assert f"labels exposed through the reference model {models['sft_leak']}" in card
    assert (
        "1.0: seeded release, reproducible by anyone with the seed, not private: does not hold for this model" in card
    )


def test_unrecorded_public_model_is_accepted_and_recorded(models, private, tokenizer, tmp_path):
    args = config(tmp_path)
    run = trainer(models["bare"], models["clean"], private["released"], args, tokenizer)
    assert [_named(e) for e in run.privacy_record().to_dict()["lineage"]] == [
        {"role": "policy", "model": str(models["bare"]), "status": "unrecorded"},
        {"role": "reference", "model": str(models["clean"]), "status": "recorded"},
    ]
    assert run.privacy_record().to_dict()["label_exposure"] == []
    # The clean model's own training set travels on, so a model trained from this run is checked against it.
    assert [entry["role"] for entry in run.privacy_record().to_dict()["upstream"]] == ["reference"]


def test_public_labels_are_not_refused(models, private, tokenizer, tmp_path):
    run = trainer(
        models["sft_leak"], models["clean"], private["raw"], config(tmp_path, train_labels_public=True), tokenizer
    )
    record = run.privacy_record().to_dict()
    assert record["lineage_labels_private"] is False and record["label_exposure"] == []
    assert record["lineage"][0]["status"] == "prompt_overlap"


def test_reward_trainer_refuses_an_initial_model_trained_on_the_rows(private, tokenizer, tmp_path):
    from transformers import AutoModelForSequenceClassification

    leaky = save_model(
        tmp_path / "leaky_rm", tokenizer, training_data_record(sft_rows(private["raw"])), classifier=True
    )
    args = PrivateRewardConfig(
        output_dir=str(tmp_path / "rm"),
        max_steps=1,
        per_device_train_batch_size=4,
        report_to="none",
        save_strategy="no",
        gradient_checkpointing=False,
    )
    model = AutoModelForSequenceClassification.from_pretrained(leaky, num_labels=1)
    with pytest.raises(ValueError, match="the initial model .*leaky_rm.* was trained on prompts"):
        PrivateRewardTrainer(model, args=args, train_dataset=private["released"], processing_class=tokenizer)


def test_self_play_refuses_a_reference_trained_on_the_preference_models_rows(models, private, tokenizer, tmp_path):
    from transformers import AutoModelForCausalLM

    from squarechipo.reward import PreferenceModel
    from squarechipo.trainer.iterative import iterative_square_chipo
    from squarechipo.trainer.self_play import SelfPlayConfig

    preference = PreferenceModel(make_tiny_classifier(tokenizer, seed=5), tokenizer)
    args = SelfPlayConfig(
        output_dir=str(tmp_path / "sp"),
        iterations=2,
        max_steps=1,
        report_to="none",
        save_strategy="no",
        gradient_checkpointing=False,
        max_length=128,
        disable_tqdm=True,
    )
    # ℓ̂ was trained on the released rows; self-play uses other prompts, but π_ref saw ℓ̂'s training prompts.
    pm_record = {"model_type": "preference", "epsilon": 1.0, **training_data_record(private["released"])}
    policy = AutoModelForCausalLM.from_pretrained(models["same_rows"])
    with pytest.raises(ValueError, match=r"reference \(π¹ = π_ref\) model .*same_rows was trained on prompts"):
        iterative_square_chipo(
            policy,
            tokenizer,
            [f"Other question {i}?" for i in range(4)],
            preference,
            args,
            reference_name=str(models["same_rows"]),
            preference_record=PrivacyRecord.from_dict(pm_record),
        )
    assert not (tmp_path / "sp").exists()  # refused before anything was sampled or written


def test_an_adapter_is_checked_by_its_own_record_when_marked(models, private, tokenizer, tmp_path):
    """A LoRA adapter trained on the private rows, loaded as transformers does it: found through mark_source."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from squarechipo.privacy.provenance.lineage import mark_source

    base = AutoModelForCausalLM.from_pretrained(models["bare"])
    adapter_dir = tmp_path / "adapter"
    get_peft_model(base, LoraConfig(r=2, target_modules=["q_proj"])).save_pretrained(adapter_dir)
    (adapter_dir / PRIVACY_FILE).write_text(json.dumps(seal(training_data_record(private["raw"]))))
    loaded = AutoModelForCausalLM.from_pretrained(adapter_dir)
    assert ModelLineage.of_model(loaded).name == str(models["bare"])  # what transformers reports: the base
    marked = mark_source(loaded, adapter_dir)
    with pytest.raises(ValueError, match="adapter was trained on these rows"):
        SquareChiPOTrainer(
            marked,
            ref_model=AutoModelForCausalLM.from_pretrained(models["clean"]),
            args=config(tmp_path),
            train_dataset=private["released"],
            processing_class=tokenizer,
        )


def test_checkpoints_and_copies_keep_their_lineage(tmp_path, tiny_model_factory, tokenizer):
    from transformers import AutoModelForCausalLM

    from squarechipo.privacy.provenance.lineage import ModelLineage, check_lineage
    from squarechipo.privacy.provenance.record import PRIVACY_FILE

    train = release_dataset(plan_rows(16), LabelPipeline(epsilon=1.0), seed=6)
    trainer = train_tiny(
        tmp_path, tiny_model_factory, tokenizer, train, max_steps=2, save_strategy="steps", save_steps=1
    )
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
    from squarechipo.privacy.provenance.sketch import bf16_agreement, copy_projection, sketch_model

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
    from squarechipo.privacy.provenance.record import read_privacy_record

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


def test_a_run_that_changes_no_weight_records_no_update_and_does_not_poison_its_starting_model(
    tmp_path, tiny_model_factory, tokenizer, caplog
):
    """A 1-step smoke test inside the recipes' warm-up has learning rate 0 and saves weights equal to its start; the
    store then marked the *starting* model as trained on those rows, and running the same command again was refused
    ("the policy model … was trained on these rows") until records.sqlite was deleted. It records "no update" now."""
    from squarechipo.privacy import LabelPipeline, release_dataset
    from squarechipo.privacy.provenance.record import read_privacy_record
    from squarechipo.privacy.provenance.sketch import recorded_by_weights
    from squarechipo.trainer import SquareChiPOTrainer
    from tests.helpers.rows import distinct_pairs
    from tests.helpers.runs import tiny_config

    released = release_dataset(distinct_pairs(8, offset=6100), LabelPipeline(epsilon=1.0), seed=0)
    start = tiny_model_factory(4)
    args = tiny_config(tmp_path / "smoke", learning_rate=0.0)

    def run(model):
        trainer = SquareChiPOTrainer(
            model, ref_model=tiny_model_factory(5), args=args, train_dataset=released, processing_class=tokenizer
        )
        trainer.train()
        trainer.save_model()
        trainer.save_model()  # saved twice (a checkpoint, the end): "no weight changed" is said once a run
        return trainer

    import os

    mask = os.umask(0o022)
    try:
        run(start)
    finally:
        os.umask(mask)
    assert sum("no weight changed" in r.getMessage() for r in caplog.records) == 1
    # safetensors writes through a private temporary file: the weights get the umask's mode, as the card does
    assert (tmp_path / "smoke" / "model.safetensors").stat().st_mode & 0o777 == 0o644
    record = read_privacy_record(tmp_path / "smoke")
    assert record.details["no_update"] and record.dataset_fingerprint is None
    assert "unchanged: this run updated no weight" in (tmp_path / "smoke" / "README.md").read_text()
    assert recorded_by_weights(tiny_model_factory(4)) is None  # the starting model is not marked as trained
    run(tiny_model_factory(4))  # the same command again starts (it was refused)


def test_records_show_and_forget_a_models_record(tmp_path, tiny_model_factory, capsys, monkeypatch):
    """`squarechipo records show | forget`, like `registry show`: the store is listed, and a record is taken out only
    when confirmed (here --yes; without it and without a terminal, refused in one line)."""
    from squarechipo.cli import main
    from squarechipo.privacy.provenance.record import PrivacyRecord, write_privacy_record
    from squarechipo.privacy.provenance.sketch import recorded_by_weights

    # A store of this test's own: the session's holds the records of the tests this worker ran before.
    monkeypatch.setenv("SQUARECHIPO_RECORD_STORE", str(tmp_path / "records.sqlite"))
    model = tiny_model_factory(6)
    write_privacy_record(tmp_path / "m", PrivacyRecord.build({"stage": "preference_optimization", "epsilon": 1.0}),
                         model=model)  # fmt: skip
    assert main(["records", "show"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["records"] == 1 and shown["latest"][-1]["epsilon"] == 1.0
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    assert main(["records", "forget", str(tmp_path / "m")]) == 1
    assert "needs a confirmation: pass --yes" in capsys.readouterr().err
    assert recorded_by_weights(model) is not None
    assert main(["records", "forget", str(tmp_path / "m"), "--yes"]) == 0
    assert "forgot 1 entry" in capsys.readouterr().out and recorded_by_weights(model) is None


def _named(entry: dict) -> dict:
    """A lineage entry without the digest of the model's record (compared on its own where it matters)."""
    return {k: v for k, v in entry.items() if k != "record_digest"}
