"""The central-DP policy selector on real (tiny) causal LMs: guard, scoring, release, recipe, 2 processes."""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import datasets
import pytest
import torch
import yaml

from squarechipo.data.fingerprint import training_data_record
from squarechipo.losses import margins as policy_margins
from squarechipo.models.logprobs import tokenize_preferences
from squarechipo.privacy.door import mechanism_input
from squarechipo.select import select_policy
from squarechipo.select.candidates import Candidate, load_candidate
from squarechipo.select.exponential import row_square_losses
from squarechipo.select.scoring import _score_candidates as score_candidates
from squarechipo.trainer import PRIVACY_FILE, SquareChiPOTrainer
from squarechipo.trust.seals import seal
from tests.helpers.launch import launch
from tests.helpers.models import make_tiny_model
from tests.helpers.runs import tiny_config

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
EPSILON_LARGE = 50.0


def separable(n: int, offset: int = 0, reverse: bool = False) -> datasets.Dataset:
    good, bad = "Yes, keep an emergency fund in an insured account.", "Bet everything on lottery tickets tonight!"
    chosen, rejected = (bad, good) if reverse else (good, bad)
    return datasets.Dataset.from_dict(
        {
            "prompt": [f"Question {offset + i}: should I keep my savings safe?" for i in range(n)],
            "chosen": [chosen] * n,
            "rejected": [rejected] * n,
        }
    )


def _train(tokenizer, folder: Path, data: datasets.Dataset) -> Path:
    # The candidates train on public rows: the selector's private rows are others.
    args = tiny_config(folder, method="square_chipo", max_steps=12, learning_rate=3e-3, train_labels_public=True)
    trainer = SquareChiPOTrainer(
        make_tiny_model(tokenizer, 0),
        ref_model=make_tiny_model(tokenizer, 0),
        args=args,
        train_dataset=data,
        processing_class=tokenizer,
    )
    trainer.train()
    trainer.save_model(str(folder))
    trainer.create_model_card()
    return folder


#: One worker runs the module, so the candidate pool is trained once (under xdist each worker trained its own).
pytestmark = pytest.mark.xdist_group("select_pool")


@pytest.fixture(scope="module")
def pool(tmp_path_factory, tokenizer):
    """ref (untrained, with a record of public data), good (Square-χPO on public data), bad (reversed labels)."""
    root = tmp_path_factory.mktemp("select")
    public = separable(48)
    ref = root / "ref"
    make_tiny_model(tokenizer, 0).save_pretrained(ref)
    tokenizer.save_pretrained(ref)
    (ref / PRIVACY_FILE).write_text(json.dumps(seal({"stage": "init", **training_data_record(public)})))
    good = _train(tokenizer, root / "good", public)
    bad = _train(tokenizer, root / "bad", separable(48, reverse=True))
    private = separable(32, offset=1000)
    private.save_to_disk(str(root / "private"))
    return {"root": root, "ref": ref, "good": good, "bad": bad, "private": private}


def _direct_total(model, tokenizer, reference, data, beta=0.1, clip=10.0) -> float:
    """L(π) from an unbatched, unpadded full-logits forward per row: the definition, not the fast path."""

    def logp(net, prompt, completion):
        p = tokenizer(prompt)["input_ids"]
        full = tokenizer(prompt + completion + tokenizer.eos_token)["input_ids"]
        ids = torch.tensor([full])
        with torch.no_grad():
            logits = net(input_ids=ids).logits[0, :-1].double()
        logprobs = torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None]).squeeze(-1)
        return logprobs[len(p) - 1 :].sum()

    total = 0.0
    for row in data:
        pc, pr = logp(model, row["prompt"], row["chosen"]), logp(model, row["prompt"], row["rejected"])
        rc, rr = logp(reference, row["prompt"], row["chosen"]), logp(reference, row["prompt"], row["rejected"])
        m = policy_margins(pc[None], pr[None], rc[None], rr[None], beta=beta, link="chipo", clip=clip)
        total += float(row_square_losses(m).sum())
    return total


def _load(path):
    return lambda: load_candidate(Candidate.from_name(str(path)), dtype=torch.float32, device=torch.device("cpu"))


def test_batched_scores_equal_the_definition(pool, tokenizer):
    """The batched, padded, prompt-sharing lean-head scores equal a per-row full-logits computation."""
    data = pool["private"].select(range(10))
    rows = tokenize_preferences(mechanism_input(data, "the scores this test checks"), tokenizer)
    totals = score_candidates(
        rows,
        _load(pool["ref"]),
        [_load(pool["good"]), _load(pool["bad"])],
        pad_token_id=tokenizer.pad_token_id,
        beta=0.1,
        link="chipo",
        clip=10.0,
        max_length=None,
        batch_size=3,
    )
    reference = _load(pool["ref"])()
    for k, name in enumerate(("good", "bad")):
        expected = _direct_total(_load(pool[name])(), tokenizer, reference, data)
        assert totals[k].item() == pytest.approx(expected, abs=1e-3)
    assert totals.dtype == torch.float64
    assert (totals >= 0).all() and (totals <= 4 * len(data)).all()


def test_a_candidate_that_is_the_reference_is_not_loaded_and_scores_as_when_loaded(pool, tokenizer):
    """The main job's selection has the SFT policy as reference and as a candidate: its log-probs are the reference's
    (not computed again), and every candidate's loss is what scoring it separately gives."""
    rows = tokenize_preferences(mechanism_input(pool["private"].select(range(6)), "this test's scores"), tokenizer)
    loaded = []

    def counting(path):
        load = _load(path)
        return lambda: loaded.append(path.name) or load()

    common = dict(pad_token_id=tokenizer.pad_token_id, beta=0.1, link="chipo", clip=10.0, max_length=None,
                  batch_size=4)  # fmt: skip
    candidates = [counting(pool["good"]), counting(pool["ref"])]
    reused = score_candidates(rows, counting(pool["ref"]), candidates, is_reference=[False, True], **common)
    assert loaded == ["ref", "good"]  # the reference once, then only the candidate that is not it
    scored = score_candidates(rows, _load(pool["ref"]), [_load(pool["good"]), _load(pool["ref"])], **common)
    torch.testing.assert_close(reused, scored, rtol=0, atol=1e-9)
    assert scored[1].item() == pytest.approx(len(rows) * 1.0)  # π = π_ref: every margin 0, every row's loss (0 − 1)²


def test_selects_the_best_candidate_at_large_epsilon_and_saves_public_fields_only(pool, tokenizer, tmp_path):
    rows = tokenize_preferences(mechanism_input(pool["private"], "the scores this test checks"), tokenizer)
    loaders = [_load(pool[name]) for name in ("ref", "good", "bad")]
    totals = score_candidates(
        rows,
        loaders[0],
        loaders,
        pad_token_id=tokenizer.pad_token_id,
        beta=0.1,
        link="chipo",
        clip=10.0,
        max_length=128,
    )
    # The ref scores exactly n (h = 0); the trained policy generalises to the held-out prompts.
    assert totals[0].item() == pytest.approx(len(rows)) and totals[1] < totals[0] < totals[2]
    # P(not good) ≤ Σ_k exp(−ε (L_k − L_good)/8): make sure the assertion below tests the mechanism, not luck.
    p_wrong = sum(math.exp(-EPSILON_LARGE * (totals[k] - totals[1]).item() / 8) for k in (0, 2))
    assert p_wrong < 1e-6, p_wrong

    out = tmp_path / "selected"
    selection = select_policy(
        [str(pool[name]) for name in ("ref", "good", "bad")],
        str(pool["ref"]),
        pool["private"],
        epsilon=EPSILON_LARGE,
        max_length=128,
        output_dir=str(out),
        seed=None,
    )
    assert selection.index == 1 and selection.candidate == str(pool["good"])
    assert (selection.num_rows, selection.num_candidates, selection.epsilon) == (32, 3, EPSILON_LARGE)
    assert not hasattr(selection, "scores")
    record = json.loads((out / PRIVACY_FILE).read_text())
    assert record["stage"] == "central_selection" and record["epsilon"] == EPSILON_LARGE
    assert record["num_rows"] == 32 and record["num_candidates"] == 3 and record["selected_index"] == 1
    # Chosen with the private rows: the record names them, so no later run starts from it on them unchecked.
    assert record["dataset_fingerprint"] == training_data_record(pool["private"])["dataset_fingerprint"]
    assert record["guard_overrides"] == [] and record["label_exposure"] == []
    assert [{k: v for k, v in e.items() if k != "record_digest"} for e in record["lineage"]] == [
        {"role": "reference", "model": str(pool["ref"]), "status": "recorded"}
    ]
    text = json.dumps(record).lower()
    assert not any(word in text for word in ("loss", "score", "probab", "logit"))
    card = (out / "README.md").read_text()
    assert (
        "central ε" in card
        and "| n (private rows scored) | 32 |" in card
        and "| number of candidates (size of Π) | 3 |" in card
    )
    assert not (out / "released_train").exists() and not (out / "training_args.bin").exists()
    reloaded = load_candidate(Candidate.from_name(str(out)), dtype=torch.float32, device=torch.device("cpu"))
    good = _load(pool["good"])()
    assert all(torch.equal(a, b) for a, b in zip(reloaded.state_dict().values(), good.state_dict().values()))

    with pytest.raises(FileExistsError, match="another ε"):
        select_policy(
            [str(pool["ref"]), str(pool["good"])], str(pool["ref"]), pool["private"], epsilon=1.0, output_dir=str(out)
        )


def test_guard_refuses_a_candidate_trained_on_the_private_data(pool, tokenizer, tmp_path):
    leaked = tmp_path / "leaked"
    make_tiny_model(tokenizer, 1).save_pretrained(leaked)
    (leaked / PRIVACY_FILE).write_text(json.dumps(seal(training_data_record(pool["private"]))))
    names = [str(pool["ref"]), str(leaked)]
    with pytest.raises(ValueError, match="trained on the private dataset"):
        select_policy(names, str(pool["ref"]), pool["private"], epsilon=1.0)

    # Labels privatized or rows shuffled: still the same data.
    shuffled = pool["private"].shuffle(seed=3).map(lambda r: {"chosen": r["rejected"], "rejected": r["chosen"]})
    with pytest.raises(ValueError, match="trained on the private dataset"):
        select_policy(names, str(pool["ref"]), shuffled, epsilon=1.0)

    # Trained on a superset of the private prompts: caught by the prompt sketch.
    superset = datasets.concatenate_datasets([separable(200, offset=5000), pool["private"]])
    (leaked / PRIVACY_FILE).write_text(json.dumps(seal(training_data_record(superset))))
    with pytest.raises(ValueError, match="prompts that occur in the private dataset"):
        select_policy(names, str(pool["ref"]), pool["private"], epsilon=1.0)

    out = tmp_path / "overridden"
    selection = select_policy(
        names,
        str(pool["ref"]),
        pool["private"],
        epsilon=1.0,
        max_length=64,
        output_dir=str(out),
        override_candidate_guard=True,
    )
    assert selection.guard_overrides == [{"candidate": str(leaked), "reason": "prompt_overlap"}]
    record = json.loads((out / PRIVACY_FILE).read_text())
    assert record["guard_overrides"] == [{"candidate": str(leaked), "reason": "prompt_overlap"}]
    assert "prompt_overlap" in (out / "README.md").read_text()


def test_guard_refuses_unrecorded_candidates_unless_allowed(pool, tokenizer, tmp_path):
    bare = tmp_path / "bare"
    make_tiny_model(tokenizer, 2).save_pretrained(bare)
    names = [str(pool["ref"]), str(bare)]
    with pytest.raises(ValueError, match="no squarechipo_privacy.json records"):
        select_policy(names, str(pool["ref"]), pool["private"], epsilon=1.0)
    selection = select_policy(
        names,
        str(pool["ref"]),
        pool["private"].select(range(4)),
        epsilon=1.0,
        max_length=64,
        allow_unrecorded_candidates=True,
    )
    assert selection.guard_overrides == [{"candidate": str(bare), "reason": "no_record"}]


def test_guard_refuses_a_reference_trained_on_the_private_data(pool, tokenizer, tmp_path):
    """h depends on π_ref: a reference fit to the private rows voids the sensitivity argument
    (Zhou et al. 2025 (Square-χPO), Alg. 2)."""
    leaked_ref = tmp_path / "leaked_ref"
    make_tiny_model(tokenizer, 0).save_pretrained(leaked_ref)
    tokenizer.save_pretrained(leaked_ref)
    sft = datasets.Dataset.from_dict({"prompt": pool["private"]["prompt"], "completion": pool["private"]["chosen"]})
    (leaked_ref / PRIVACY_FILE).write_text(json.dumps(seal(training_data_record(sft))))
    names = [str(pool["ref"]), str(pool["good"])]
    with pytest.raises(
        ValueError, match=r"(?s)the reference model .*leaked_ref was trained on prompts .*override_reference_guard"
    ):
        select_policy(names, str(leaked_ref), pool["private"], epsilon=1.0)

    out = tmp_path / "overridden_ref"
    selection = select_policy(
        names,
        str(leaked_ref),
        pool["private"].select(range(4)),
        epsilon=1.0,
        max_length=64,
        output_dir=str(out),
        override_reference_guard=True,
    )
    assert {k: v for k, v in selection.reference_lineage.items() if k != "record_digest"} == {
        "role": "reference",
        "model": str(leaked_ref),
        "status": "prompt_overlap",
    }
    record = json.loads((out / PRIVACY_FILE).read_text())
    assert record["label_exposure"] == [selection.reference_lineage]
    assert f"labels exposed through the reference model {leaked_ref}" in (out / "README.md").read_text()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"epsilon": math.inf}, "finite"),
        ({"epsilon": 0.0}, "epsilon"),
        ({"epsilon": 1.0, "link": "ipo"}, "link must be one of"),
        ({"epsilon": 1.0, "beta": 0.0}, "beta must be positive"),
    ],
)
def test_bad_arguments_name_the_field(pool, kwargs, match):
    with pytest.raises(ValueError, match=match):
        select_policy([str(pool["ref"]), str(pool["good"])], str(pool["ref"]), pool["private"], **kwargs)


def test_one_candidate_or_duplicates_are_refused(pool):
    with pytest.raises(ValueError, match="at least two"):
        select_policy([str(pool["good"])], str(pool["ref"]), pool["private"], epsilon=1.0)
    with pytest.raises(ValueError, match="listed twice"):
        select_policy([str(pool["good"])] * 2, str(pool["ref"]), pool["private"], epsilon=1.0)


def _run(command, timeout=300):
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TQDM_DISABLE": "1", "OMP_NUM_THREADS": "1"}
    return launch(command, cwd=ROOT, env=env, timeout=timeout)


def _config(pool, folder: Path, name: str) -> Path:
    config = {
        "candidates": [str(pool[n]) for n in ("ref", "good", "bad")],
        "ref_model": str(pool["ref"]),
        "dataset_name": str(pool["root"] / "private"),
        "output_dir": str(folder / name),
        "central_epsilon": EPSILON_LARGE,
        "max_length": 128,
        "batch_size": 4,
    }
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.slow
def test_recipe_in_two_processes_shards_scoring_and_saves_once(pool, tmp_path):
    """torchrun (gloo, 2 CPU processes): each rank scores half the rows; the selection equals one process's."""
    single = _run(
        [
            str(BIN / "accelerate"),
            "launch",
            "--num_processes",
            "1",
            "recipes/select_policy.py",
            "--config",
            str(_config(pool, tmp_path, "single")),
        ]
    )
    assert single.returncode == 0, single.stderr[-4000:]
    double = _run(
        [
            str(BIN / "torchrun"),
            "--nproc_per_node",
            "2",
            "recipes/select_policy.py",
            "--config",
            str(_config(pool, tmp_path, "double")),
        ]
    )
    assert double.returncode == 0, double.stderr[-4000:]
    for out in ("single", "double"):
        record = json.loads((tmp_path / out / PRIVACY_FILE).read_text())
        assert record["selected"] == str(pool["good"]) and record["num_rows"] == 32
    assert double.stdout.count("Selected ") == 1  # printed once, by the main process

    # The all-reduced sums over the two shards equal the one-process sums.
    sums = tmp_path / "sums.json"
    shard = _run(
        [
            str(BIN / "torchrun"),
            "--nproc_per_node",
            "2",
            str(ROOT / "tests" / "helpers" / "shard_scores.py"),
            str(pool["ref"]),
            str(pool["good"]),
            str(pool["bad"]),
            str(pool["root"] / "private"),
            str(sums),
        ]
    )
    assert shard.returncode == 0, shard.stderr[-4000:]
    result = json.loads(sums.read_text())
    assert result["world_size"] == 2 and result["local_rows"] == [16, 16]
    assert result["sharded"] == pytest.approx(result["single"], abs=1e-6)


def test_the_selector_scores_margins_at_the_trainers_clip():
    """One clip: the central selector scores a candidate on the margins its training saw, m = clip(β·h, ±2R_max).
    A selector that clipped at R_max (or at anything but the trainer's bound) scores rows with β·h between the two
    differently, and this pins it."""
    import torch

    from squarechipo.losses import margin_clip, margins
    from squarechipo.select.exponential import row_square_losses
    from squarechipo.select.selector import score_settings
    from squarechipo.trainer import SquareChiPOConfig

    for r_max in (5.0, 0.5, None):
        trainer_clip = SquareChiPOConfig(output_dir="unused", r_max=r_max, report_to="none").clip
        settings = score_settings(0.1, "dpo", r_max, 128, "keep_start", 8)
        assert settings["clip"] == trainer_clip == margin_clip(r_max)
    # β·h = 7 for a row: between R_max = 5 and 2·R_max = 10, so the clip decides its score.
    chosen, rejected = torch.tensor([-10.0]), torch.tensor([-80.0])
    ref = torch.tensor([-10.0])
    clip = score_settings(0.1, "dpo", 5.0, 128, "keep_start", 8)["clip"]
    clipped = margins(chosen, rejected, ref, ref, beta=0.1, link="dpo", clip=clip)
    assert clipped.item() == pytest.approx(7.0)
    assert row_square_losses(clipped).item() == pytest.approx((2 * torch.sigmoid(torch.tensor(7.0)).item() - 2) ** 2)
