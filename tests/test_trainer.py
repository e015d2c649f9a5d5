"""SquareChiPOTrainer on a tiny random Llama with the real SmolLM2 tokenizer."""

from __future__ import annotations

import inspect
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import datasets
import pytest
import torch
import trl
from packaging.version import Version
from transformers import AutoModelForCausalLM, TrainerCallback
from trl import DPOConfig, DPOTrainer
from trl.trainer.dpo_trainer import DataCollatorForPreference
from trl.trainer.utils import add_fused_lm_head

from squarechipo.losses import METHODS
from squarechipo.models.lm_head import add_lean_lm_head
from squarechipo.privacy import LabelPipeline, get_ledger
from squarechipo.privacy.door import RawLabelsError
from squarechipo.privacy.mechanisms.calibration import flip_probability
from squarechipo.trainer import PRIVACY_FILE, TRL_INTERNALS, SquareChiPOConfig, SquareChiPOTrainer
from tests.helpers.rows import checked, release_rows
from tests.helpers.runs import tiny_config

ROOT = Path(__file__).resolve().parents[1]


def make_config(tmp_path, **overrides) -> SquareChiPOConfig:
    # The trainer mechanics are tested on the generator's simulated labels: public, and declared so.
    values = dict(per_device_eval_batch_size=8, max_steps=2, logging_steps=1, train_labels_public=True)
    return tiny_config(tmp_path / "out", **{**values, "eval_labels_public": True, **overrides})


def rows(finance_splits, n, split="train"):
    return finance_splits["finance_preference"][split].select(range(n))


def build(tiny_model_factory, tokenizer, args, train, ref=True, **kwargs):
    model = tiny_model_factory(0)
    ref_model = tiny_model_factory(0) if ref else None
    return SquareChiPOTrainer(
        model, ref_model=ref_model, args=args, train_dataset=train, processing_class=tokenizer, **kwargs
    )


def flat_params(model) -> torch.Tensor:
    return torch.cat([p.detach().flatten().float() for p in model.parameters()])


# --------------------------------------------------------------------------- TRL internals


def test_trl_internals_we_rely_on(tiny_model_factory, tokenizer, finance_splits, tmp_path):
    """Fails loudly when a TRL upgrade moves what SquareChiPOTrainer subclasses or calls."""
    assert Version("1.16") <= Version(trl.__version__) < Version("1.17"), "pyproject pins trl 1.16.x"
    assert list(inspect.signature(DPOTrainer.compute_ref_log_probs).parameters) == ["self", "model", "inputs"]
    assert list(inspect.signature(DPOTrainer._compute_loss).parameters) == [
        "self",
        "model",
        "inputs",
        "return_outputs",
    ]
    assert list(inspect.signature(DPOTrainer._precompute_ref_logps).parameters) == [
        "self",
        "dataset",
        "name",
        "batch_size",
    ]
    from trl.kernels import ChunkedLogProbFunction  # noqa: F401
    from trl.trainer.utils import FusedCausalLMOutput

    assert {"log_probs", "label_mask", "entropy", "is_top1"} <= set(FusedCausalLMOutput.__dataclass_fields__)
    batch = DataCollatorForPreference(pad_token_id=0)(
        [
            {"prompt_ids": [1, 2, 3], "chosen_ids": [4, 5], "rejected_ids": [6]},
            {"prompt_ids": [7, 8], "chosen_ids": [9], "rejected_ids": [10, 11]},
        ]
    )
    assert batch["input_ids"].tolist() == [[1, 2, 3, 4, 5], [7, 8, 9, 0, 0], [1, 2, 3, 6, 0], [7, 8, 10, 11, 0]]
    assert batch["completion_mask"].tolist()[0] == [0, 0, 0, 1, 1]
    trainer = build(tiny_model_factory, tokenizer, make_config(tmp_path), rows(finance_splits, 8))
    for name in TRL_INTERNALS:
        assert hasattr(trainer, name), f"TRL's DPOTrainer no longer has {name!r}"
    assert trainer.lean_lm_head


# --------------------------------------------------------------------------- lean LM head


def _collated_batch(tokenizer, finance_splits, tmp_path, tiny_model_factory, n=6):
    trainer = build(
        tiny_model_factory, tokenizer, make_config(tmp_path, per_device_train_batch_size=n), rows(finance_splits, n)
    )
    return next(iter(trainer.get_train_dataloader()))


@pytest.fixture(scope="module")
def collated_batch(tokenizer, finance_splits, tmp_path_factory):
    """One batch of 6 pairs as the trainer's collator lays it out, shared by the lean-head tests (read only)."""
    from tests.helpers.models import make_tiny_model

    def factory(seed=0, dtype=None):
        return make_tiny_model(tokenizer, seed, dtype)

    return _collated_batch(tokenizer, finance_splits, tmp_path_factory.mktemp("batch"), factory)


def _head_run(batch, model, patch, attention: str = "sdpa", checkpointing: bool = False):
    """Log-probs and gradients of a float64 tiny model under a head patch; and its backbone calls."""
    labels = batch["input_ids"].masked_fill(batch["completion_mask"] == 0, -100)
    model.set_attn_implementation(attention)
    if checkpointing:
        model.gradient_checkpointing_enable()
        model.train()
    patch(model)
    calls = []
    model.model.register_forward_hook(lambda *_: calls.append(1))
    out = model(
        input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=labels, fused_lm_head=True
    )
    out.log_probs.sum().backward()
    return out.log_probs.detach(), [p.grad.clone() for p in model.parameters()], len(calls)


@pytest.fixture(scope="module")
def trl_head_run(collated_batch, tokenizer):
    """TRL's fused head on the shared batch: the reference every lean-head layout is held to."""
    from tests.helpers.models import make_tiny_model

    patch = lambda m: add_fused_lm_head(m, outputs=("log_probs", "entropy", "mean_logits", "is_top1"))  # noqa: E731
    return _head_run(collated_batch, make_tiny_model(tokenizer, 3, torch.float64), patch)


@pytest.mark.parametrize(
    "share_prompt,attention,checkpointing",
    [
        (False, "sdpa", False),
        (True, "sdpa", False),
        ("packed", "sdpa", False),
        ("packed", "eager", False),
        ("packed", "sdpa", True),
    ],
)
def test_lean_head_equals_trl_fused_head(
    collated_batch, trl_head_run, tiny_model_factory, share_prompt, attention, checkpointing
):
    """Log-probs and gradients equal TRL's fused head: plain, each prompt on a KV cache, and packed (one call over
    [prompt, chosen, rejected] under a block-causal mask, with SDPA's boolean and eager's additive mask, and under
    gradient checkpointing, which the cache layout cannot share prompts under)."""
    assert len(set(collated_batch["completion_mask"].sum(1).tolist())) > 2  # completions of several lengths
    lean_lp, lean_grads, calls = _head_run(
        collated_batch,
        tiny_model_factory(3, torch.float64),
        lambda m: add_lean_lm_head(m, share_prompt=share_prompt),
        attention,
        checkpointing,
    )
    assert calls == (2 if share_prompt is True else 1)  # the lean head's backbone calls (packed: one)
    trl_lp, trl_grads, _ = trl_head_run
    # The kernel accumulates in float32, so float64 models agree to float32 rounding.
    torch.testing.assert_close(lean_lp, trl_lp, rtol=1e-6, atol=1e-5)
    for a, b in zip(lean_grads, trl_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_share_prompt_defaults_on_for_cpu_and_can_be_switched_off_with_equal_losses(
    tokenizer, finance_splits, tmp_path, tiny_model_factory
):
    """The policy's backbone runs twice per forward when prompts are shared on a KV cache (prompt, then both
    responses) and once when not; packed, it runs once on one row per pair (prompt, chosen, rejected), shorter than
    two rows. On CPU the default shares, packed, and all give the same loss."""
    train = rows(finance_splits, 4)
    losses = {}
    for share, layout in ((None, None), (True, "cache"), (False, "cache"), (True, "packed")):
        layouts = {} if layout is None else {"share_prompt_layout": layout}
        config = make_config(tmp_path, share_prompt=share, **layouts)
        trainer = build(tiny_model_factory, tokenizer, config, train)
        calls = []
        trainer.model.model.register_forward_hook(
            lambda _m, _a, kwargs, _o, calls=calls: calls.append(kwargs["input_ids"].shape), with_kwargs=True
        )
        batch = next(iter(trainer.get_train_dataloader()))
        losses[share, layout] = trainer.compute_loss(trainer.model, batch).item()
        rows_in, width = batch["input_ids"].shape
        if layout in ("packed", None):
            assert len(calls) == 1 and calls[0][0] == rows_in // 2 and calls[0][1] < 2 * width
        else:
            assert len(calls) == (1 if share is False else 2), share
    assert losses[None, None] == losses[True, "packed"]
    assert losses[False, "cache"] == pytest.approx(losses[True, "cache"], abs=1e-5)
    assert losses[True, "packed"] == pytest.approx(losses[True, "cache"], abs=1e-5)
    with pytest.raises(ValueError, match="share_prompt_layout"):
        make_config(tmp_path, share_prompt_layout="paged")


def test_lean_head_falls_back_when_prompts_differ(tokenizer, tiny_model_factory):
    model = tiny_model_factory(0, torch.float64)
    reference = tiny_model_factory(0, torch.float64)
    add_lean_lm_head(model)
    add_fused_lm_head(reference)
    ids = torch.tensor([[5, 6, 7, 8, 9], [5, 6, 1, 2, 0], [11, 6, 7, 3, 0], [5, 6, 4, 4, 4]])
    attention = (ids != 0).long()
    labels = ids.clone()
    labels[:, :2] = -100
    labels[attention == 0] = -100
    got = model(input_ids=ids, attention_mask=attention, labels=labels, fused_lm_head=True).log_probs
    want = reference(input_ids=ids, attention_mask=attention, labels=labels, fused_lm_head=True).log_probs
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


# --------------------------------------------------------------------------- loss parity with TRL


def test_dpo_loss_equals_trl_sigmoid_loss(tiny_model_factory, tokenizer, finance_splits, tmp_path):
    train = rows(finance_splits, 8)
    ours = build(tiny_model_factory, tokenizer, make_config(tmp_path, method="dpo", beta=0.3), train)
    trl_args = DPOConfig(
        output_dir=str(tmp_path / "trl"),
        per_device_train_batch_size=8,
        beta=0.3,
        max_length=128,
        report_to="none",
        gradient_checkpointing=False,
        bf16=False,
        loss_type=["sigmoid"],
    )
    theirs = DPOTrainer(
        tiny_model_factory(0),
        ref_model=tiny_model_factory(0),
        args=trl_args,
        train_dataset=train,
        processing_class=tokenizer,
    )
    # Make policy differ from reference so the loss is not log 2 for both trivially.
    for trainer in (ours, theirs):
        with torch.no_grad():
            for p in trainer.model.parameters():
                p.add_(0.02 * torch.sin(torch.arange(p.numel(), dtype=p.dtype)).view_as(p))
    batch = next(iter(theirs.get_train_dataloader()))
    ours.model.eval()
    theirs.model.eval()
    with torch.no_grad():
        loss_ours = ours.compute_loss(ours.model, batch)
        loss_theirs = theirs.compute_loss(theirs.model, batch)
    assert abs(loss_theirs.item() - 0.6931) > 1e-3
    assert abs(loss_ours.item() - loss_theirs.item()) < 1e-5, (loss_ours.item(), loss_theirs.item())


# --------------------------------------------------------------------------- training


@pytest.mark.parametrize("method", sorted(METHODS))
def test_each_method_trains_with_its_own_loss(method, tiny_model_factory, tokenizer, finance_splits, tmp_path):
    """The trainer's loss on a fixed batch is ``preference_loss(method, …)`` on the same log-probs (computed outside
    the trainer), and on that batch every other method's loss differs, so a trainer that trained every method with
    one loss fails here. Then one step trains: parameters move and the logged loss and metrics are finite."""
    from squarechipo.losses import preference_loss
    from squarechipo.models.logprobs import model_logps, preference_collator, tokenize_preferences

    train = release_rows(rows(finance_splits, 8), LabelPipeline(epsilon=1.0), seed=0)
    args = make_config(tmp_path, method=method, r_max=5.0, beta=0.5, max_steps=1)
    # A reference unlike the policy: at equal models every margin is 0, where DPO and χPO coincide.
    policy_model, reference_model = tiny_model_factory(0), tiny_model_factory(1)
    trainer = SquareChiPOTrainer(
        policy_model, ref_model=reference_model, args=args, train_dataset=train, processing_class=tokenizer
    )
    tokenized = tokenize_preferences(checked(train), tokenizer)
    collator = preference_collator(tokenizer, max_length=args.max_length)
    policy = model_logps(trainer.model, tokenized, collator, 8, "policy")
    reference = model_logps(trainer.ref_model, tokenized, collator, 8, "reference")
    expected = {
        name: preference_loss(name, *policy, *reference, beta=0.5, clip=2 * 5.0, flip_rate=flip_probability(1.0))
        .losses.mean()
        .item()
        for name in METHODS
    }
    others = [name for name in METHODS if name != method]
    # The check can tell the methods apart: they differ by far more than its tolerance (float32 log-probs, which
    # χPO's link e^ℓ amplifies, against float64 ones).
    assert all(abs(expected[method] - expected[o]) > 100 * 1e-4 * abs(expected[method]) for o in others), expected
    with torch.no_grad():
        loss = trainer.compute_loss(trainer.model, collator(tokenized)).item()
    assert loss == pytest.approx(expected[method], rel=1e-4), (loss, expected)

    before = flat_params(trainer.model)
    trainer.train()
    assert not torch.equal(before, flat_params(trainer.model))
    (log,) = [entry for entry in trainer.state.log_history if "loss" in entry]
    keys = ("loss", "rewards/margins", "rewards/accuracies", "implied_p_chosen")
    assert all(math.isfinite(log[key]) for key in keys)


def test_implied_p_chosen_is_the_mean_sigmoid_of_the_clipped_margins(
    tiny_model_factory, tokenizer, finance_splits, tmp_path
):
    """The logged ``implied_p_chosen`` is mean σ(m) with m the method's clipped margin (Zhou et al. 2025 (Square-χPO),
    Alg. 1), recomputed here from the trained policy's and the reference's log-probs, outside the trainer."""
    from squarechipo.losses import preference_loss
    from squarechipo.models.logprobs import model_logps, preference_collator, tokenize_preferences

    train = release_rows(rows(finance_splits, 8), LabelPipeline(epsilon=1.0), seed=0)
    args = make_config(tmp_path, method="square_chipo", r_max=0.5, beta=0.5, max_steps=2, learning_rate=1e-4)
    trainer = build(tiny_model_factory, tokenizer, args, train)
    trainer.train()
    logged = trainer.evaluate(train)["eval_implied_p_chosen"]
    tokenized = tokenize_preferences(checked(train), tokenizer)
    collator = preference_collator(tokenizer, max_length=args.max_length)
    policy = model_logps(trainer.model, tokenized, collator, 8, "policy")
    reference = model_logps(trainer.ref_model, tokenized, collator, 8, "reference")

    def implied(method, clip):
        margins = preference_loss(
            method, *policy, *reference, beta=0.5, clip=clip, flip_rate=flip_probability(1.0)
        ).margins
        return margins, torch.sigmoid(margins).mean().item()

    margins, want = implied("square_chipo", 2 * 0.5)
    assert margins.abs().max() > 1e-3  # training moved the policy, so the check is not σ(0) = 0.5
    # Some margins are inside the clip, so the link matters: DPO's margins or no clip would give another value.
    assert (margins.abs() < 2 * 0.5 - 1e-6).any()
    assert min(abs(want - implied("dpo", 2 * 0.5)[1]), abs(want - implied("square_chipo", None)[1])) > 1e-4
    assert logged == pytest.approx(want, abs=1e-5)


def _separable(n, offset=0):
    return datasets.Dataset.from_dict(
        {
            "prompt": [f"Question {offset + i}: should I keep my savings safe?" for i in range(n)],
            "chosen": ["Yes, keep an emergency fund in an insured account."] * n,
            "rejected": ["Bet everything on lottery tickets tonight!"] * n,
        }
    )


def test_observed_label_accuracy_rises_on_separable_data(tiny_model_factory, tokenizer, tmp_path):
    """Before training the margins are 0 (accuracy 0); after, held-out accuracy ≥ 0.9.

    Under the null of no learning, held-out accuracy on 32 rows is Binomial(32, 1/2)/32, and
    P(≥ 0.9) < 1e-6, so the bound tests learning, not luck.
    """
    args = make_config(tmp_path, method="square_chipo", max_steps=12, learning_rate=3e-3, eval_strategy="no")
    trainer = build(tiny_model_factory, tokenizer, args, _separable(48))
    held_out = _separable(32, offset=1000)
    before = trainer.evaluate(held_out)["eval_rewards/accuracies"]
    trainer.train()
    after = trainer.evaluate(held_out)["eval_rewards/accuracies"]
    assert before < 0.5
    assert after >= 0.9, (before, after)


def test_checkpoint_epochs_save_at_those_epochs_and_a_run_cut_off_resumes_to_the_uninterrupted_weights(
    tiny_model_factory, tokenizer, finance_splits, tmp_path
):
    """4 rows at batch 2: 2 steps an epoch, 6 over 3 epochs. checkpoint_epochs [3, 1] saves checkpoint-2 and
    checkpoint-6 (with save_strategy "no"), each the policy after that step, with its privacy record;
    resume_every_epochs 1 also saves checkpoint-4, and only the newest resume point stays beside them. A run cut off
    before step 5, with a later checkpoint cut off mid-save beside it, resumes (resume_from_checkpoint: true) from
    checkpoint-4 and ends with the uninterrupted run's weights and per-step losses."""
    from squarechipo.trainer.checkpoints import complete_checkpoints, last_complete_checkpoint

    train = release_rows(rows(finance_splits, 4), LabelPipeline(epsilon=1.0), seed=0)
    seen = {}

    class Snapshot(TrainerCallback):  # the policy's weights after each step, for comparison with the checkpoints
        def on_step_end(self, args, state, control, model=None, **kwargs):
            seen[state.global_step] = flat_params(model).clone()

    class CutOff(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            if state.global_step == 4:
                raise KeyboardInterrupt  # what Ctrl-C does, after checkpoint-4 was saved

    def run(name: str, callback, resume=None):
        args = make_config(
            tmp_path / name, max_steps=-1, num_train_epochs=3, per_device_train_batch_size=2,
            checkpoint_epochs=[3, 1], resume_every_epochs=1, save_only_model=False, resume_from_checkpoint=resume,
        )  # fmt: skip
        trainer = build(tiny_model_factory, tokenizer, args, train, callbacks=[callback])
        try:
            trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
        except KeyboardInterrupt:
            pass
        return trainer, Path(args.output_dir), {e["step"]: e["loss"] for e in trainer.state.log_history if "loss" in e}

    whole, out, whole_losses = run("whole", Snapshot())
    saved = complete_checkpoints(out)
    assert [p.name for p in saved] == [p.name for p in out.glob("checkpoint-*")] == ["checkpoint-2", "checkpoint-6"]
    for folder in saved:
        step = int(folder.name.split("-")[1])
        torch.testing.assert_close(flat_params(AutoModelForCausalLM.from_pretrained(folder)), seen[step])
        assert json.loads((folder / PRIVACY_FILE).read_text())["epsilon"] == 1.0
        assert (folder / "optimizer.pt").exists()  # a resume point: the whole training state

    _, cut, _ = run("cut", CutOff())
    assert [p.name for p in complete_checkpoints(cut)] == ["checkpoint-2", "checkpoint-4"]
    (cut / "checkpoint-5").mkdir()  # a save cut off: no marker
    (cut / "checkpoint-5" / "model.safetensors").write_bytes(b"partial")
    assert last_complete_checkpoint(cut) == cut / "checkpoint-4"
    # resume_from_checkpoint: true is the newest checkpoint saved whole, not the Trainer's newest folder
    resumed, _, losses = run("cut", TrainerCallback(), resume=True)
    assert resumed.args.resume_from_checkpoint == str(cut / "checkpoint-4")
    assert torch.equal(flat_params(resumed.model), seen[6])
    assert {s: losses[s] for s in (5, 6)} == {s: whole_losses[s] for s in (5, 6)}
    assert sorted(p.name for p in cut.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-6"]

    with pytest.raises(ValueError, match="checkpoint_epochs must be a list of positive epochs"):
        make_config(tmp_path, checkpoint_epochs=[0])
    with pytest.raises(ValueError, match="resume_every_epochs saves resume points.*save_only_model: false"):
        make_config(tmp_path, resume_every_epochs=1, save_only_model=True)


def test_save_and_reload_with_card(tiny_model_factory, tokenizer, finance_splits, tmp_path):
    train = release_rows(rows(finance_splits, 8), LabelPipeline(epsilon=0.5, corruption_rate=0.1, order="ltc"), seed=0)
    trainer = build(tiny_model_factory, tokenizer, make_config(tmp_path, r_max=2.0), train)
    trainer.train()
    trainer.save_model()
    trainer.create_model_card()
    out = tmp_path / "out"
    reloaded = AutoModelForCausalLM.from_pretrained(out)
    torch.testing.assert_close(flat_params(reloaded), flat_params(trainer.model))
    record = json.loads((out / PRIVACY_FILE).read_text())
    assert record["method"] == "square_chipo" and record["epsilon"] == 0.5 and record["corruption_rate"] == 0.1
    assert record["order"] == "ltc" and record["r_max"] == 2.0 and record["dataset_fingerprint"].startswith("sha256:")
    # What the labels were worth, read back from the sealed ledger in the record: LTC's α + q − αq.
    from squarechipo.evaluation.gold_report import label_signal
    from squarechipo.privacy.mechanisms.calibration import flip_probability

    q = flip_probability(0.5)
    wrong = 0.1 + q - 0.1 * q
    assert label_signal(out) == pytest.approx(
        {"rows": 8, "wrong_label_rate": wrong, "clean_equivalent": 8 * (1 - 2 * wrong) ** 2}
    )
    card = (out / "README.md").read_text()
    for text in (
        "Privacy and robustness",
        "| ε (local DP, total over releases) | 0.5: seeded release, reproducible by anyone with the seed, "
        "not private |",
        "| order | ltc |",
        "| β | 0.1 |",
    ):
        assert text in card
    q = flip_probability(0.5)
    assert f"| how the loss treats the released labels | binary RR: flip rate {q:.6f}, debiased by c(ε) = " in card
    # The privacy table stands before TRL's citations, once, after the card is written again
    trainer.create_model_card()
    card = (out / "README.md").read_text()
    assert card.count("Privacy and robustness") == 1 and card.count("## Citations") == 1
    assert card.index("Privacy and robustness") < card.index("## Citations")


def test_lora_adapter_uses_base_as_reference(tiny_model_factory, tokenizer, finance_splits, tmp_path):
    from peft import LoraConfig, PeftModel

    peft_config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    trainer = build(
        tiny_model_factory,
        tokenizer,
        make_config(tmp_path),
        rows(finance_splits, 8),
        ref=False,
        peft_config=peft_config,
    )
    trainer.train()
    trainable = [n for n, p in trainer.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora" in n for n in trainable)
    assert trainer.state.log_history[0]["loss"] > 0
    # The reference log-probs are the base model's (adapter off), not the trained policy's (adapter on).
    from squarechipo.models.logprobs import model_logps, preference_collator, tokenize_preferences
    from squarechipo.privacy.door import rows_without_labels

    pairs = rows_without_labels(rows(finance_splits, 8), "pairs whose log-probs under two models the test compares")
    tokenized = tokenize_preferences(pairs, tokenizer)
    collator = preference_collator(tokenizer, max_length=128)
    batch = collator(tokenized)
    reference = torch.stack(trainer.compute_ref_log_probs(trainer.model, batch)).double()
    base = model_logps(tiny_model_factory(0), tokenized, collator, 8, "base")
    trainer.save_model(str(tmp_path / "adapter"))
    trained = PeftModel.from_pretrained(tiny_model_factory(0), str(tmp_path / "adapter")).merge_and_unload()
    policy = model_logps(trained, tokenized, collator, 8, "policy")
    torch.testing.assert_close(reference, base, rtol=0, atol=1e-4)
    assert (policy - base).abs().max() > 1e-3


def test_precomputed_reference_gives_the_same_first_loss(tiny_model_factory, tokenizer, finance_splits, tmp_path):
    train = rows(finance_splits, 8)
    losses = []
    for precompute in (False, True):
        args = make_config(
            tmp_path / str(precompute), max_steps=1, precompute_ref_log_probs=precompute, per_device_train_batch_size=8
        )
        trainer = build(tiny_model_factory, tokenizer, args, train, ref=not precompute)
        trainer.train()
        losses.append(trainer.state.log_history[0]["loss"])
    assert losses[0] == pytest.approx(losses[1], abs=1e-5)


# --------------------------------------------------------------------------- privacy parameters


def test_debiasing_comes_from_the_ledger(tiny_model_factory, tokenizer, finance_splits, tmp_path):
    train = release_rows(rows(finance_splits, 8), LabelPipeline(epsilon=0.5), seed=0)
    trainer = build(tiny_model_factory, tokenizer, make_config(tmp_path), train)
    assert trainer.privacy.source == "ledger"
    assert trainer.privacy.flip_rate == pytest.approx(flip_probability(0.5))


def test_config_epsilon_disagreeing_with_ledger_raises(tiny_model_factory, tokenizer, finance_splits, tmp_path):
    train = release_rows(rows(finance_splits, 8), LabelPipeline(epsilon=0.5), seed=0)
    with pytest.raises(ValueError, match="disagrees with the dataset's privacy ledger.*privacy_override"):
        build(tiny_model_factory, tokenizer, make_config(tmp_path, debias_epsilon=2.0), train)
    trainer = build(
        tiny_model_factory, tokenizer, make_config(tmp_path, debias_epsilon=2.0, privacy_override=True), train
    )
    assert trainer.privacy.source == "config (override of ledger)"
    assert trainer.privacy.flip_rate == pytest.approx(flip_probability(2.0))
    assert trainer.privacy_record().to_dict()["privacy_override"] is True
    same = build(tiny_model_factory, tokenizer, make_config(tmp_path, debias_epsilon=0.5), train)
    assert same.privacy.source == "config"


def test_no_ledger_uses_config_or_nothing(tiny_model_factory, tokenizer, finance_splits, tmp_path):
    train = rows(finance_splits, 8)
    assert get_ledger(train) is None
    with pytest.raises(RawLabelsError, match="the training labels are raw: .* train_labels_public=True"):
        build(tiny_model_factory, tokenizer, make_config(tmp_path, train_labels_public=False), train)
    none = build(tiny_model_factory, tokenizer, make_config(tmp_path), train)
    assert none.privacy.flip_rate == 0.0 and none.privacy.source == "labels declared public (train_labels_public)"
    assert "labels declared public" in none.privacy_record().card_section(None)
    # Data released elsewhere: the config's ε is the assertion (the card says it is not backed by a ledger).
    given = build(
        tiny_model_factory, tokenizer, make_config(tmp_path, debias_epsilon=1.0, train_labels_public=False), train
    )
    assert given.privacy.flip_rate == pytest.approx(flip_probability(1.0))
    card = given.privacy_record().card_section(None)
    assert "1.0: asserted by the config, not backed by a ledger" in card
    with pytest.raises(TypeError, match="epsilon"):
        make_config(tmp_path, epsilon=1.0)  # the old name was removed after 0.2 (use debias_epsilon)


def test_unsupported_dpo_options_raise(tmp_path):
    with pytest.raises(ValueError, match="loss_type"):
        make_config(tmp_path, loss_type=["ipo"])
    with pytest.raises(ValueError, match="method must be one of"):
        make_config(tmp_path, method="kto")
    with pytest.raises(ValueError, match="r_max"):
        make_config(tmp_path, r_max=-1.0)


@pytest.mark.parametrize("name", ["SquareChiPOConfig", "SFTRecipeConfig", "PrivateRewardConfig"])
def test_trls_checkpointing_option_reaches_transformers_without_a_deprecation_warning(name, tmp_path):
    """TRL's configs default `gradient_checkpointing`, which transformers 5 renamed: every run printed a FutureWarning
    twice, so a job's error on the command line was five lines, not one. TRL's name still sets it."""
    import warnings

    from squarechipo.reward import PrivateRewardConfig
    from squarechipo.trainer.config import SFTRecipeConfig

    config_class = {"SquareChiPOConfig": SquareChiPOConfig, "SFTRecipeConfig": SFTRecipeConfig}.get(
        name, PrivateRewardConfig
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        default = config_class(output_dir=str(tmp_path))
        off = config_class(output_dir=str(tmp_path), gradient_checkpointing=False, gradient_checkpointing_kwargs={})
        new = config_class(output_dir=str(tmp_path), activation_checkpointing=False)
    assert default.activation_checkpointing is default.gradient_checkpointing is True
    assert off.activation_checkpointing is off.gradient_checkpointing is False
    assert off.activation_checkpointing_kwargs == {}
    assert new.gradient_checkpointing is False


def test_push_to_hub_unreachable_fails_before_training(
    tiny_model_factory, tokenizer, finance_splits, tmp_path, monkeypatch
):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # the discard port: nothing listens
    args = make_config(tmp_path, push_to_hub=True, hub_model_id="someone/model")
    with pytest.raises(ValueError, match="HF_HUB_OFFLINE is on: nothing can be pushed"):  # the tests' own setting
        build(tiny_model_factory, tokenizer, args, rows(finance_splits, 8))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)  # a machine that believes it is online
    with pytest.raises(ValueError, match="cannot be reached \\(ConnectError\\).*before anything was released"):
        build(tiny_model_factory, tokenizer, args, rows(finance_splits, 8))


def test_prior_rows_are_pseudo_labels_with_their_weight(tokenizer, finance_splits, tmp_path):
    """LP-2ST data: RR rows use the c(ε)-debiased square loss, prior rows the plain one with prior_row_weight."""
    import numpy as np
    from trl.trainer.dpo_trainer import DataCollatorForPreference

    from squarechipo.losses import preference_loss
    from squarechipo.models.logprobs import model_logps, tokenize_preferences
    from squarechipo.privacy.mechanisms.measurements import RRWithPrior
    from squarechipo.privacy.release.rows import combine_parts
    from tests.helpers.models import make_tiny_model

    raw = rows(finance_splits, 8)
    part1 = release_rows(raw.select(range(4)), LabelPipeline(epsilon=1.0), seed=0, part="p1")
    part2 = release_rows(
        raw.select(range(4, 8)), RRWithPrior(1.0, np.array([0.99, 0.99, 0.5, 0.5])), part="p2", seed=1
    )
    data = combine_parts(part1, part2)
    assert data["label_from_prior"] == [False] * 4 + [True, True, False, False]
    policy, reference = make_tiny_model(tokenizer, seed=1), make_tiny_model(tokenizer, seed=2)
    args = make_config(tmp_path, prior_row_weight=0.25, per_device_eval_batch_size=8)
    trainer = SquareChiPOTrainer(
        policy, ref_model=reference, args=args, train_dataset=data, eval_dataset=data, processing_class=tokenizer
    )
    loss = trainer.evaluate()["eval_loss"]
    tokenized = tokenize_preferences(checked(data), tokenizer)
    collator = DataCollatorForPreference(pad_token_id=tokenizer.pad_token_id, max_length=128)
    pol, ref = model_logps(policy, tokenized, collator, 8, "p"), model_logps(reference, tokenized, collator, 8, "r")
    debiased = preference_loss(
        "square_chipo", pol[0], pol[1], ref[0], ref[1], beta=0.1, flip_rate=flip_probability(1.0)
    ).losses
    plain = preference_loss("square_chipo", pol[0], pol[1], ref[0], ref[1], beta=0.1).losses
    prior = torch.tensor(data["label_from_prior"])
    weight = torch.where(prior, 0.25, 1.0).double()
    expected = (weight * torch.where(prior, plain, debiased)).sum() / weight.sum()
    assert loss == pytest.approx(expected.item(), rel=1e-4)
    with pytest.raises(ValueError, match="prior_row_weight"):
        make_config(tmp_path, prior_row_weight=-1.0)


def test_reference_cache_is_shared_across_releases_and_holds_no_pair(
    tiny_model_factory, tokenizer, finance_splits, tmp_path
):
    """Two releases of the same rows (other swaps) share every cached reference log-prob: the second run computes
    none and its first loss equals an uncached run's. The cache keys single sequences, so the file built from one
    release equals the file built from the other: it cannot tell which response was chosen."""
    from squarechipo.data.store import SqliteMap

    data = rows(finance_splits, 8)
    ctl = release_rows(data, LabelPipeline(epsilon=0.5), seed=0)
    ltc = release_rows(data, LabelPipeline(epsilon=0.5, corruption_rate=0.1, order="ltc"), seed=3)
    assert ctl["chosen"] != ltc["chosen"]  # the two releases swapped different rows

    def first_loss(train, name, cache):
        args = make_config(
            tmp_path / name,
            max_steps=1,
            per_device_train_batch_size=8,
            precompute_ref_log_probs=True,
            reference_logps_cache=str(cache) if cache else None,
        )
        trainer = build(tiny_model_factory, tokenizer, args, train, ref=False)
        trainer.train()
        return trainer, trainer.state.log_history[0]["loss"]

    shared = tmp_path / "reference.sqlite"
    first, _ = first_loss(ctl, "ctl", shared)
    assert (first._reference_logps_cache.hits, first._reference_logps_cache.misses) == (0, 16)
    second, cached_loss = first_loss(ltc, "ltc", shared)
    assert (second._reference_logps_cache.hits, second._reference_logps_cache.misses) == (16, 0)
    _, uncached_loss = first_loss(ltc, "ltc_plain", None)
    # Sums over ~700 tokens in float32 (an ulp of 6e-5 at -700): another batch layout sums in another order, which
    # moved the loss by 8e-7 of itself on an AVX2 CPU; a wrong or swapped cached log-prob moves it by far more.
    assert cached_loss == pytest.approx(uncached_loss, rel=1e-5)
    alone = tmp_path / "ltc_only.sqlite"
    first_loss(ltc, "ltc_alone", alone)
    from_ctl, from_ltc = (
        SqliteMap(shared, "reference_logps", "real").items(),
        SqliteMap(alone, "reference_logps", "real").items(),
    )
    assert [k for k, _ in from_ctl] == [k for k, _ in from_ltc] and len(from_ctl) == 16
    # The same sequences from two releases' batches: equal to float32's resolution of a sum near -800 (2 ulps, 1.2e-4,
    # on an AVX2 CPU); a stored pair's difference would be tens of nats.
    assert [v for _, v in from_ctl] == pytest.approx([v for _, v in from_ltc], rel=1e-6)
    with pytest.raises(ValueError, match="reference_logps_cache works with precompute_ref_log_probs"):
        make_config(tmp_path, reference_logps_cache=str(shared))


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_csv_and_large_string_parquet_files_release_and_train(suffix, tiny_model_factory, tokenizer, tmp_path):
    """A CSV file, and a Parquet file whose text columns are large_string (as pandas and polars write them), load,
    release and train one step: the fingerprint once failed on large_string with a bare Arrow error."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from squarechipo.data import load_preference_dataset

    data = _separable(8).add_column("question", [f"q{i}" for i in range(8)])  # distinct comparisons, declared
    path = tmp_path / f"pairs{suffix}"
    if suffix == ".csv":
        data.to_csv(str(path), index=False)
    else:
        table = data.data.table
        pq.write_table(table.cast(pa.schema([pa.field(n, pa.large_string()) for n in table.column_names])), path)
    loaded = load_preference_dataset(path, split="train")
    assert loaded["chosen"] == data["chosen"]
    released = release_rows(loaded, LabelPipeline(epsilon=1.0), seed=0, privacy_unit="question")
    trainer = build(tiny_model_factory, tokenizer, make_config(tmp_path, max_steps=1), released)
    trainer.train()
    assert trainer.state.global_step == 1 and trainer.privacy.source == "ledger"


def test_the_share_of_rows_at_the_clip_or_saturated_is_logged_and_a_window_of_them_warned(
    tiny_model_factory, tokenizer, finance_splits, tmp_path
):
    """Margins at the clip ±2·R_max, or so large that σ'(m) < 1e-4, pass no gradient: each logging step says what
    share of rows did, and a window where most did is flagged once."""
    from squarechipo.losses import SATURATED_MARGIN, saturation

    m = torch.tensor([0.0, 0.5, -1.0, 1.0, 0.99999999, -0.3])
    assert saturation(m, clip=1.0) == (pytest.approx(3 / 6), pytest.approx(3 / 6))
    unclipped = torch.tensor([9.0, -9.5, 12.0, 0.0])
    assert saturation(unclipped, clip=None) == (0.0, pytest.approx(2 / 4)) and 9.0 < SATURATED_MARGIN < 9.5
    train = rows(finance_splits, 8)
    # A reference unlike the policy (another seed), a large β and a tight clip: nearly every margin sits at ±0.1.
    args = make_config(tmp_path, beta=10.0, r_max=0.05, max_steps=2, method="square_chipo")
    trainer = SquareChiPOTrainer(
        tiny_model_factory(0),
        ref_model=tiny_model_factory(1),
        args=args,
        train_dataset=train,
        processing_class=tokenizer,
    )
    trainer.train()
    logged = [entry for entry in trainer.state.log_history if "margins/clipped" in entry]
    assert len(logged) == 2 and all(e["margins/clipped"] >= 0.75 and e["margins/no_gradient"] >= 0.75 for e in logged)
    assert trainer._warned_saturation
    calm = build(tiny_model_factory, tokenizer, make_config(tmp_path / "calm"), train)
    calm.train()
    assert all(e["margins/clipped"] == 0.0 for e in calm.state.log_history if "margins/clipped" in e)
    assert not getattr(calm, "_warned_saturation", False)


@pytest.mark.parametrize("lora", [False, True])
def test_reference_log_probs_stay_those_of_the_frozen_reference_after_training(
    lora, tiny_model_factory, tokenizer, finance_splits, tmp_path
):
    """After training steps, the log-probs the loss takes as the reference are a frozen copy's (the separate
    reference model, or the base with the adapter off), not the trained policy's: with and without LoRA, through the
    path the loss itself uses."""
    from peft import LoraConfig

    from squarechipo.models.logprobs import model_logps, preference_collator, tokenize_preferences

    train = rows(finance_splits, 8)
    extra = {}
    if lora:
        extra["peft_config"] = LoraConfig(
            r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"
        )
    trainer = build(
        tiny_model_factory, tokenizer, make_config(tmp_path, max_steps=3, learning_rate=1e-2), train, ref=not lora,
        **extra,
    )  # fmt: skip
    trainer.train()
    tokenized = tokenize_preferences(checked(train, public=True), tokenizer)  # the config declares them public
    collator = preference_collator(tokenizer, max_length=128)
    batch = collator(tokenized)
    trainer.model.eval()
    with torch.no_grad():
        _, _, policy_chosen, policy_rejected, ref_chosen, ref_rejected = trainer._policy_and_reference_logps(
            trainer.model, batch
        )
    frozen = model_logps(tiny_model_factory(0), tokenized, collator, 8, "frozen reference")
    torch.testing.assert_close(torch.stack([ref_chosen, ref_rejected]).double(), frozen, rtol=0, atol=1e-4)
    moved = (torch.stack([policy_chosen, policy_rejected]).double() - frozen).abs().max()
    assert moved > 1e-2  # the policy did move: a reference read from it would differ


def test_packed_layout_is_not_used_where_the_model_masks_otherwise(
    tokenizer, finance_splits, tmp_path, tiny_model_factory
):
    """A custom 4D mask would replace a sliding-window or chunked model's own mask: those models share the prompt
    on its KV cache instead (two calls, the model's own masks), with the same log-probs."""
    batch = _collated_batch(tokenizer, finance_splits, tmp_path, tiny_model_factory, n=2)
    labels = batch["input_ids"].masked_fill(batch["completion_mask"] == 0, -100)
    seen = {}
    for window in (None, 4096):
        model = tiny_model_factory(3, torch.float64)
        model.config.sliding_window = window
        add_lean_lm_head(model, share_prompt="packed")
        shapes = []
        model.model.register_forward_hook(
            lambda _m, _a, kwargs, _o, shapes=shapes: shapes.append(kwargs["input_ids"].shape), with_kwargs=True
        )
        out = model(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=labels, fused_lm_head=True
        )
        seen[window] = (len(shapes), out.log_probs)
    assert seen[None][0] == 1 and seen[4096][0] == 2  # packed: one call; the cache layout: prompt, then responses
    torch.testing.assert_close(seen[None][1], seen[4096][1], rtol=1e-6, atol=1e-6)


def test_an_edited_checkpoint_marker_is_refused_naming_it_never_guessed(tmp_path):
    """A wrong guess either way loses work: an epoch checkpoint taken for a resume point is deleted."""
    from squarechipo.trainer.checkpoints import COMPLETE_MARKER, is_epoch_checkpoint

    folder = tmp_path / "checkpoint-4"
    folder.mkdir()
    assert not is_epoch_checkpoint(folder)  # no marker: cut off mid-save
    for text in ("{not json", '{"step": 4}', "[]"):
        (folder / COMPLETE_MARKER).write_text(text)
        with pytest.raises(ValueError, match=f"{COMPLETE_MARKER}: not a checkpoint marker .*restore it"):
            is_epoch_checkpoint(folder)
    (folder / COMPLETE_MARKER).write_text('{"step": 4, "epoch": 2.0, "epoch_checkpoint": true}')
    assert is_epoch_checkpoint(folder)


def test_bf16_on_a_cpu_without_native_bf16_is_kept_and_said_once(tmp_path, caplog):
    """An explicit bf16 on a CPU whose oneDNN has no bf16 kernels (AVX2 only) is kept (it changes the figures) and
    named once in a warning with the fix; on a CPU with AVX512 nothing is said."""
    from squarechipo.models import runtime

    runtime.warn_emulated_bf16.cache_clear()
    emulated = not runtime.cpu_runs_bf16_natively()
    if torch.backends.cpu.get_cpu_capability() in ("AVX2", "DEFAULT"):  # two detections must agree
        assert emulated
    with caplog.at_level("WARNING", logger="squarechipo"):
        configs = [make_config(tmp_path, bf16=True) for _ in range(2)] + [make_config(tmp_path, bf16=False)]
    assert [c.bf16 for c in configs] == [True, True, False]
    said = [r for r in caplog.records if r.levelname == "WARNING" and r.getMessage().startswith("bf16: true")]
    assert len(said) == (1 if emulated else 0)
    assert all("bf16: false" in r.getMessage() for r in said)


_DEFAULTS = """
import sys
from squarechipo.models.runtime import cpu_runs_bf16_natively, default_dtype
from tests.helpers.runs import tiny_config
print(cpu_runs_bf16_natively())
print(default_dtype(None, "dtype"), default_dtype(None, "dtype"), default_dtype("bfloat16", "dtype"))
out = sys.argv[1]
print(tiny_config(out + "/a").bf16, tiny_config(out + "/b").bf16, tiny_config(out + "/c", bf16=True).bf16)
"""


@pytest.mark.parametrize("kernels", ["this CPU's", "AVX2 forced"])
def test_an_unset_dtype_is_bf16_only_where_native_and_float32_is_said_once_in_one_line(tmp_path, kernels):
    """On a CPU without bf16 kernels (an AVX2-only CPU, or AVX2 kernels forced) an unset dtype is float32 and an unset
    bf16 is off, each said once, in one line naming the CPU and how to ask for bf16; where bf16 is native an unset
    dtype is bfloat16 and nothing is said. A value given is kept either way."""
    forced = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"} if kernels == "AVX2 forced" else {}
    done = subprocess.run([sys.executable, "-c", _DEFAULTS, str(tmp_path)], env={**os.environ, **forced},
                          cwd=ROOT, capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    native, dtypes, bf16 = done.stdout.splitlines()
    if forced:
        assert native == "False"
    said = [line for line in done.stderr.splitlines() if line.startswith("float32: this CPU has no bf16 kernels")]
    if native == "True":
        assert dtypes == "bfloat16 bfloat16 bfloat16" and bf16 == "False False True" and not said
    else:
        assert dtypes == "float32 float32 bfloat16" and bf16 == "False False True"
        assert said == [
            "float32: this CPU has no bf16 kernels (AVX2, bf16 would be emulated, several times slower); "
            "--dtype bfloat16 asks for bf16 anyway.",
            "float32: this CPU has no bf16 kernels (AVX2, bf16 would be emulated, several times slower); bf16: true "
            "asks for bf16 anyway.",
        ], done.stderr


def test_a_card_of_a_model_trained_from_a_local_folder_names_the_hub_model_that_folder_came_from(tmp_path):
    """An aligned model trained from a local SFT folder had no base_model in its front matter: it names the Hub model
    the SFT folder's own card names (the embedded SmolLM2); a folder without a card names none."""
    from huggingface_hub import ModelCard

    from squarechipo.models.card import fix_model_card

    sft, out = tmp_path / "sft", tmp_path / "out"
    sft.mkdir()
    out.mkdir()
    (sft / "README.md").write_text(
        "---\nbase_model: HuggingFaceTB/SmolLM2-135M-Instruct\n---\n\n# Model Card for sft\n"
    )
    text = "---\nlibrary_name: transformers\n---\n\n# Model Card for x\n\nThis model is a fine-tuned version of x.\n"
    (out / "README.md").write_text(text)
    fix_model_card(out, base_model=str(sft), dataset_name=str(tmp_path / "data"), model_name="out")
    card = ModelCard.load(out / "README.md")
    assert card.data.base_model == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert f"fine-tuned version of the local model `{sft}` on the local dataset `data`." in card.text
    (out / "README.md").write_text(text)
    fix_model_card(out, base_model=str(tmp_path / "no_card"), dataset_name=None, model_name="out")
    assert ModelCard.load(out / "README.md").data.base_model is None
