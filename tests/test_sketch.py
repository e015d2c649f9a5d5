"""squarechipo.privacy.provenance.sketch: copies of a private run's weights are recognised however they were saved.

The probes: a private LoRA run stored no weight sketch, so its merged model passed as "unrecorded, assumed public";
a copy with one added embedding row, or a padded vocabulary, gave identical outputs and passed; and the record store
was consulted only when no record file lay beside the weights (another model's record put there hid it).
"""

from __future__ import annotations

import copy
import json
import shutil

import pytest
import torch

from squarechipo.privacy import LabelPipeline, release_dataset
from squarechipo.privacy.provenance.lineage import ModelLineage, check_lineage
from squarechipo.privacy.provenance.record import PRIVACY_FILE
from squarechipo.privacy.provenance.sketch import recorded_by_weights, sketch_model, weights_identity
from squarechipo.trainer import SquareChiPOConfig, SquareChiPOTrainer
from tests.helpers.rows import distinct_pairs


def _config(tmp_path, name: str) -> SquareChiPOConfig:
    return SquareChiPOConfig(
        output_dir=str(tmp_path / name),
        per_device_train_batch_size=4,
        max_length=64,
        learning_rate=5e-3,
        max_steps=3,
        report_to="none",
        precompute_ref_log_probs=True,
        save_strategy="no",
    )


@pytest.fixture(scope="module")
def private_rows():
    return release_dataset(distinct_pairs(12), LabelPipeline(epsilon=1.0), seed=3)


def _refused(model, rows) -> None:
    lineage = ModelLineage.of_model(model)
    assert lineage.recorded, lineage.name
    with pytest.raises(ValueError, match="labels of these rows are private"):
        check_lineage([("policy", lineage)], rows, private=True, override=False, override_field="x", context="test")


def test_a_private_lora_runs_merged_model_is_recognised(tmp_path, tokenizer, tiny_model_factory, private_rows):
    from peft import LoraConfig

    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    trainer = SquareChiPOTrainer(
        tiny_model_factory(seed=1),
        args=_config(tmp_path, "lora"),
        train_dataset=private_rows,
        processing_class=tokenizer,
        peft_config=lora,
    )
    trainer.train()
    trainer.save_model()
    merged = trainer.model.merge_and_unload()
    assert recorded_by_weights(merged) is not None
    merged.save_pretrained(tmp_path / "merged")  # no record beside it
    from transformers import AutoModelForCausalLM

    _refused(AutoModelForCausalLM.from_pretrained(tmp_path / "merged"), private_rows)
    # The public model the run started from is not a copy.
    assert not ModelLineage.of_model(tiny_model_factory(seed=1)).recorded


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tokenizer, private_rows):
    from tests.helpers.models import make_tiny_model

    tmp_path = tmp_path_factory.mktemp("full")
    trainer = SquareChiPOTrainer(
        make_tiny_model(tokenizer, seed=2), args=_config(tmp_path, "full"), train_dataset=private_rows,
        processing_class=tokenizer,
    )  # fmt: skip
    trainer.train()
    trainer.save_model()
    return trainer.model, tmp_path / "full"


def test_copies_with_added_or_padded_vocabulary_rows_are_recognised(trained, private_rows, tokenizer):
    model, _ = trained
    vocabulary = model.get_input_embeddings().weight.shape[0]
    for grow in ({"new_num_tokens": vocabulary + 1}, {"new_num_tokens": vocabulary + 1, "pad_to_multiple_of": 1024}):
        clone = copy.deepcopy(model)
        clone.resize_token_embeddings(**grow, mean_resizing=False)
        assert clone.get_input_embeddings().weight.shape[0] > vocabulary
        ids = torch.tensor([[1, 2, 3, 4]])
        with torch.no_grad():  # the same outputs on the original vocabulary
            assert torch.allclose(clone(ids).logits[..., :vocabulary], model(ids).logits, atol=1e-5)
        _refused(clone, private_rows)
        _refused(clone.to(torch.bfloat16), private_rows)


def test_the_store_is_consulted_even_when_a_record_file_lies_beside_the_weights(
    trained, private_rows, tmp_path, tiny_model_factory
):
    from squarechipo.privacy.provenance.lineage import mark_source

    model, folder = trained
    public = tmp_path / "public"
    public_model = tiny_model_factory(seed=9)
    public_model.save_pretrained(public)
    from squarechipo.privacy.provenance.record import PrivacyRecord, write_privacy_record

    record = PrivacyRecord.build({"stage": "sft", "dataset_fingerprint": "sha256:public", "prompt_sketch": []})
    write_privacy_record(public, record, model=public_model)  # a genuine record of another, public model
    disguised = tmp_path / "disguised"
    shutil.copytree(folder, disguised)
    shutil.copy(public / PRIVACY_FILE, disguised / PRIVACY_FILE)  # the private weights under the public record
    assert json.loads((disguised / PRIVACY_FILE).read_text())["dataset_fingerprint"] == "sha256:public"
    from transformers import AutoModelForCausalLM

    from squarechipo.trust.seals import IntegrityError

    loaded = mark_source(AutoModelForCausalLM.from_pretrained(disguised), disguised)
    with pytest.raises(IntegrityError, match=r"not the ones it describes \(changed \['config.json', 'model.safet"):
        ModelLineage.of_model(loaded)  # the record names the public model's files, whose digests differ
    (disguised / PRIVACY_FILE).unlink()  # no record at all: the weights are still found in the store
    lineage = ModelLineage.of_model(loaded)
    assert "weights are those of a recorded model" in lineage.name
    _refused(loaded, private_rows)


def test_identity_and_sketch_need_no_float32_copy_and_follow_names(trained):
    model, _ = trained
    bf16 = copy.deepcopy(model).to(torch.bfloat16)
    assert weights_identity(bf16) != weights_identity(model)  # identity is exact, in the model's own dtype
    sketch, held = sketch_model(model)
    again, held_again = sketch_model(bf16, at=sketch)
    assert held.all() and held_again.all()
    assert torch.allclose(torch.as_tensor(again.values), torch.as_tensor(sketch.values), rtol=1e-2, atol=1e-3)


def _nudged(model, scale: float, seed: int = 1):
    """``model`` with uniform noise of ``scale`` bf16 units in the last place added to every weight: it agrees with
    the original at bf16 precision on about 1 − scale/4 of the weights (below 1) or 1/scale (above), and projects on
    any update at t ≈ 1."""
    clone, generator = copy.deepcopy(model), torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in clone.parameters():
            ulp = 2.0 ** (torch.floor(torch.log2(parameter.abs().clamp_min(1e-30))) - 7)
            parameter.add_(scale * ulp * (torch.rand(parameter.shape, generator=generator) - 0.5))
    return clone


@pytest.mark.parametrize(
    ("scale", "agreement", "copy_"),
    [(0.15, (0.95, 1.0), True), (0.33, (0.9, 0.94), True), (0.5, (0.85, 0.9), False), (2.0, (0.4, 0.6), False)],
)
def test_the_copy_threshold_holds_on_both_sides_close_to_it(trained, scale, agreement, copy_):
    """A copy holds the trained weights at bf16 precision on at least 90% of the sketched positions. Models that
    project on the run's update at t ≈ 1 are recognised just above that (92%, 96%) and not just below it (87%) nor
    at about 50%, where the public ancestor of a run's start can lie: a threshold an order of magnitude off either
    way fails here."""
    from squarechipo.privacy.provenance.sketch import COPY_AGREEMENT, bf16_agreement

    model, _ = trained
    candidate = _nudged(model, scale)
    at = sketch_model(candidate)[0]
    measured = bf16_agreement(sketch_model(candidate, at=at)[0].values, sketch_model(model, at=at)[0].values)
    assert agreement[0] <= measured <= agreement[1]  # the candidate is where the case says
    assert (measured >= COPY_AGREEMENT) == copy_
    assert ModelLineage.of_model(candidate).recorded == copy_


@pytest.mark.parametrize("kept", [0.9, 0.6])
def test_copies_with_a_trimmed_vocabulary_are_recognised_down_to_the_minimum_overlap(trained, private_rows, kept):
    """Pruning a vocabulary keeps the model's outputs on the tokens it keeps and drops the sketched positions of the
    rows it cut: a copy holding 60% of the rows (and so about 60% of the positions, above the 50% minimum overlap)
    is still a copy. Only larger vocabularies were tried before, so a minimum overlap raised far enough to let such a
    copy pass as public passed every test."""
    from transformers import AutoModelForCausalLM

    from squarechipo.privacy.provenance.sketch import _MIN_OVERLAP, sketch_model

    _, folder = trained
    model = AutoModelForCausalLM.from_pretrained(folder)  # the saved weights, without the trainer's patched head
    vocabulary = model.get_input_embeddings().weight.shape[0]
    clone, rows = AutoModelForCausalLM.from_pretrained(folder), int(kept * vocabulary)
    clone.resize_token_embeddings(new_num_tokens=rows, mean_resizing=False)
    head = clone.get_output_embeddings()
    if head.weight.shape[0] != rows:  # an untied head is cut to the same rows
        trimmed = torch.nn.Linear(head.in_features, rows, bias=False)
        trimmed.weight.data.copy_(head.weight.data[:rows])
        clone.set_output_embeddings(trimmed)
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():  # the same outputs on the vocabulary it kept
        assert torch.allclose(clone(ids).logits, model(ids).logits[..., :rows], atol=1e-5)
    held = sketch_model(clone, at=sketch_model(model)[0])[1].mean()
    assert _MIN_OVERLAP <= held <= kept + 0.1  # the cut rows' positions are gone, the rest held
    _refused(clone, private_rows)
    _refused(clone.to(torch.bfloat16), private_rows)
