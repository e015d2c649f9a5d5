"""recipes/train.py as users run it: `accelerate launch` in one process, and two CPU processes (torchrun/gloo)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import datasets
import numpy as np
import pytest
import yaml

from squarechipo.data.finance import build_datasets
from squarechipo.privacy import get_ledger
from squarechipo.trust.seals import seal
from tests.helpers.launch import launch
from tests.helpers.models import make_tiny_model

#: Every test here starts a process or loads the embedded 135M model.
pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, tokenizer):
    folder = tmp_path_factory.mktemp("recipe")
    make_tiny_model(tokenizer, seed=0).save_pretrained(folder / "model")
    tokenizer.save_pretrained(folder / "model")
    build_datasets(140, seed=0, sft_rows=20, judge_rows=10)["finance_preference_conversational"].save_to_disk(
        str(folder / "data")
    )
    return folder


def write_config(folder: Path, name: str, **overrides) -> Path:
    config = {
        "model_name_or_path": str(folder / "model"),
        "dataset_name": str(folder / "data"),
        "output_dir": str(folder / name),
        "method": "square_chipo",
        "r_max": 5.0,
        "max_train_samples": 16,
        "max_steps": 2,
        "per_device_train_batch_size": 2,
        "max_length": 128,
        "learning_rate": 1.0e-3,
        "logging_steps": 1,
        "eval_strategy": "no",
        "save_strategy": "no",
        "gradient_checkpointing": False,
        "report_to": "none",
        "label_epsilon": 0.5,
        "label_corruption_rate": 0.1,
        "label_order": "ctl",
        "label_public_columns": ["id", "category"],
    }
    config.update(overrides)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def run(command: list[str], timeout: int = 300) -> subprocess.CompletedProcess:
    """A launch as users run it (a run takes 10-20 s here); a hang fails with every process's stacks."""
    # The machine is offline: nothing may wait on the Hub (telemetry included).
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "TQDM_DISABLE": "1",
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }
    return launch(command, cwd=ROOT, env=env, timeout=timeout)


def digests(output: str) -> dict[int, str]:
    return {
        int(rank): digest
        for rank, digest in re.findall(r"rank (\d+)/\d+ trains on .* \(labels digest (\w+)\)", output)
    }


def test_accelerate_launch_trains_and_a_changed_pipeline_is_refused(workspace):
    config = write_config(workspace, "single")
    first = run(
        [str(BIN / "accelerate"), "launch", "--num_processes", "1", "recipes/train.py", "--config", str(config)]
    )
    assert first.returncode == 0, first.stderr[-4000:]
    out = workspace / "single"
    assert (out / "model.safetensors").exists() and (out / "README.md").exists()
    assert (out / "squarechipo_privacy.json").exists() and (out / "train_results.json").exists()
    released = datasets.load_from_disk(str(out / "released_train"))
    ledger = get_ledger(released)
    assert ledger.total_epsilon == 0.5 and ledger.releases[0].randomness == "os_entropy"

    # A re-run reuses the release (no fresh noise): tests/test_docs.py's documented day re-runs `squarechipo train`
    # on the README's release and checks its marker stays the same. A changed pipeline is refused:
    changed = write_config(workspace, "single", label_epsilon=2.0)
    with pytest.raises(ValueError, match=r"(?s)was released with pipeline.*another folder"):
        train_in_process(changed)


def test_a_single_jsonl_file_is_the_train_split(workspace):
    """A user's own file of TRL-format pairs trains end to end: it is the train split, and the missing eval split
    turns evaluation off with a note instead of stopping the run. A missing train split names the splits."""
    import json

    rows = datasets.load_from_disk(str(workspace / "data"))["train"].select(range(12))
    path = workspace / "my_pairs.jsonl"
    with open(path, "w") as handle:
        for row in rows:
            handle.write(json.dumps({k: row[k] for k in ("prompt", "chosen", "rejected")}) + "\n")
    config = write_config(
        workspace, "own_file", dataset_name=str(path), max_train_samples=None, eval_strategy="steps", eval_steps=1
    )
    result = run([sys.executable, "recipes/train.py", "--config", str(config)])
    assert result.returncode == 0, result.stderr[-4000:]
    assert "has no 'validation' split (splits: ['train']): evaluation is skipped" in result.stderr
    assert "released 12 rows" in result.stderr
    assert (workspace / "own_file" / "model.safetensors").exists()
    card = (workspace / "own_file" / "README.md").read_text()
    assert "None" not in card and "huggingface.co/datasets/" not in card and "huggingface.co/None" not in card
    base = f"the local model `{workspace / 'model'}`"
    assert f"fine-tuned version of {base} on the local dataset `my_pairs.jsonl`" in card
    named = write_config(workspace, "own_file_split", dataset_name=str(path), dataset_train_split="training")
    with pytest.raises(ValueError, match=r"has no split 'training' \(splits: \['train'\]\)"):
        train_in_process(named)  # a refusal needs no fresh interpreter; the run above is the subprocess path


def train_in_process(config: Path):
    """recipes/train.py's main in this process (for refusals: what they check needs no fresh interpreter)."""
    from squarechipo.scripts.train import main, make_parser

    return main(*make_parser().parse_args_and_config(args=["--config", str(config)]))


@pytest.mark.slow
def test_two_cpu_processes_train_on_identical_privatized_labels_and_fsdp_on_cpu_runs_as_ddp(workspace):
    """One two-process (gloo) run with a seeded release, launched as the README writes it, `squarechipo train …
    --num_processes 2`: on a machine without an accelerator that ran one process ("rank 0/1"); it now starts two, as
    torchrun does. Then the same config through torchrun asking for FSDP2: Accelerate selects FSDP only on
    accelerators, so two CPU processes run data parallel, the trainer warns, and the losses are the DDP run's exactly
    (same released labels, same seed). One test: a fixture shared by two tests ran twice under xdist."""
    config = write_config(workspace, "ddp", label_seed=7)
    result = ddp = run([str(BIN / "squarechipo"), "train", "--config", str(config), "--num_processes", "2"])
    assert result.returncode == 0, result.stderr[-4000:]
    seen = digests(result.stderr)
    assert set(seen) == {0, 1}, result.stderr[-3000:]
    assert seen[0] == seen[1]
    assert result.stderr.count("released 16 rows") == 1  # only the main process drew the noise
    assert re.search(r"rank 1/2 trains on 16 released rows", result.stderr)  # a real 2-process (gloo) world
    assert result.stderr.count("process group closed") == 2  # both ranks shut down together
    assert (workspace / "ddp" / "model.safetensors").exists()

    fsdp_env = {"ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2", "FSDP_AUTO_WRAP_POLICY": "TRANSFORMER_BASED_WRAP"}
    os.environ.update(fsdp_env)
    try:
        fsdp = run(
            [str(BIN / "torchrun"), "--nproc_per_node", "2", "recipes/train.py", "--config"]
            + [str(write_config(workspace, "as_fsdp", label_seed=7))]
        )
    finally:
        for key in fsdp_env:
            os.environ.pop(key)
    assert ddp.returncode == 0 and fsdp.returncode == 0, fsdp.stderr[-3000:]
    assert "FSDP was requested" not in ddp.stderr
    assert fsdp.stderr.count("FSDP was requested, but Accelerate runs this job as DistributedType.MULTI_CPU") == 2
    assert len(_losses(ddp.stdout)) == 2 and _losses(fsdp.stdout) == _losses(ddp.stdout)


@pytest.mark.slow
def test_nodes_without_shared_storage_receive_the_release(workspace):
    """Two processes as two machines (one process each, different output folders, no shared release folder):
    the main process draws the noise once; the other cannot see its folder, receives the released rows and
    ledger over the process group, keeps a copy as its record, and trains on the same labels."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = write_config(workspace, "node_a")
    common = {**os.environ, "PYTHONUNBUFFERED": "1", "TQDM_DISABLE": "1", "OMP_NUM_THREADS": "1"}
    common.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2", LOCAL_RANK="0")
    common.update(LOCAL_WORLD_SIZE="1", HF_HUB_OFFLINE="1")
    nodes = {}
    for rank, name in ((0, "node_a"), (1, "node_b")):
        command = [sys.executable, "recipes/train.py", "--config", str(config), "--output_dir", str(workspace / name)]
        env = {**common, "RANK": str(rank), "GROUP_RANK": str(rank)}
        nodes[name] = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    outputs = {name: process.communicate(timeout=600) for name, process in nodes.items()}
    for name, process in nodes.items():
        assert process.returncode == 0, outputs[name][1].decode()[-4000:]
    main_log, other_log = (outputs[name][1].decode() for name in ("node_a", "node_b"))
    assert "released 16 rows" in main_log and "released 16 rows" not in other_log
    assert f"rank 1 could not see the main process's release; received its 16 released rows into {workspace}" in (
        other_log
    )
    assert digests(main_log)[0] == digests(other_log)[1]
    a, b = (datasets.load_from_disk(str(workspace / name / "released_train")) for name in ("node_a", "node_b"))
    assert a["chosen"] == b["chosen"] and get_ledger(a) == get_ledger(b) and a.column_names == b.column_names


def _losses(stdout: str) -> list[float]:
    return [float(v) for v in re.findall(r"\{'loss': '([0-9.eE+-]+)'", stdout)]


def _yaml(folder: Path, name: str, config: dict) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


COMMON = {
    "max_steps": 2,
    "per_device_train_batch_size": 2,
    "logging_steps": 1,
    "eval_strategy": "no",
    "save_strategy": "no",
    "gradient_checkpointing": False,
    "report_to": "none",
    "learning_rate": 1.0e-3,
}


def test_preference_model_then_self_play_recipes(workspace):
    """Zhou et al. 2025 (Square-χPO), Alg. 3 from the command line: ℓ̂ on released labels, then T = 2 self-play rounds
    → a mixture."""
    pm = _yaml(
        workspace,
        "pm",
        {
            **COMMON,
            "model_name_or_path": str(workspace / "model"),
            "dataset_name": str(workspace / "data"),
            "output_dir": str(workspace / "pm"),
            "max_train_samples": 8,
            "max_steps": 12,  # three passes over the 8 rows: enough for ℓ̂ to learn their labels (asserted below)
            "model_type": "preference",
            "loss": "square_dpo",
            "max_margin": None,
            "max_length": 512,
            "label_epsilon": 1.0,
            "label_public_columns": ["id", "category"],
        },
    )
    first = run([sys.executable, "recipes/reward_model.py", "--config", str(pm)])
    assert first.returncode == 0, first.stderr[-4000:]
    # What ℓ̂ learned: on the released rows it trained on (through the library's loader, which checks the release's
    # marker), it is antisymmetric, ℓ̂(x, a, b) = −ℓ̂(x, b, a), and prefers each row's released chosen response on
    # average (eq. (10) pulls ℓ̂ towards c(ε)·z > 0 there), more than the classifier it started from (the same
    # base with a seeded random head) does.
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from squarechipo.data import load_preference_dataset
    from squarechipo.models.preference import PreferenceModel

    released = load_preference_dataset(str(workspace / "pm" / "released_train"))
    assert len(released) == 8
    rows = (released["prompt"], released["chosen"], released["rejected"])
    fitted = PreferenceModel.from_pretrained(str(workspace / "pm"))
    ell = fitted.preference(*rows)
    np.testing.assert_allclose(fitted.preference(rows[0], rows[2], rows[1]), -ell, atol=1e-6)
    torch.manual_seed(0)
    start = AutoModelForSequenceClassification.from_pretrained(str(workspace / "model"), num_labels=1)
    before = PreferenceModel(start, AutoTokenizer.from_pretrained(str(workspace / "model"))).preference(*rows)
    print(f"mean l-hat on the released rows: {ell.mean():+.4f} trained, {before.mean():+.4f} at the start")
    assert ell.mean() > max(before.mean(), 0)
    sp = _yaml(
        workspace,
        "sp",
        {
            **COMMON,
            "model_name_or_path": str(workspace / "model"),
            "dataset_name": str(workspace / "data"),
            "output_dir": str(workspace / "sp"),
            "max_prompts": 4,
            "preference_model": str(workspace / "pm"),
            "iterations": 2,
            "responses_max_new_tokens": 6,
            "max_length": 128,
            "max_steps": 1,
        },
    )
    second = run([sys.executable, "recipes/self_play.py", "--config", str(sp)])
    assert second.returncode == 0, second.stderr[-4000:]
    import json

    mixture = json.loads((workspace / "sp" / "mixture.json").read_text())
    assert mixture["members"] == [str(workspace / "model"), "iterate_2"]
    record = json.loads((workspace / "sp" / "squarechipo_privacy.json").read_text())
    assert record["epsilon"] == 1.0 and record["ledger"]["total_epsilon"] == 1.0
    wrong = _yaml(
        workspace,
        "sp_wrong",
        {
            **COMMON,
            "model_name_or_path": str(workspace / "model"),
            "dataset_name": str(workspace / "data"),
            "output_dir": str(workspace / "sp2"),
            "preference_model": str(workspace / "missing"),
        },
    )
    third = run([sys.executable, "recipes/self_play.py", "--config", str(wrong)])
    assert third.returncode != 0 and "preference_model must be the folder" in third.stderr


def test_lp2st_recipe_spends_epsilon_once(workspace):
    config = write_config(
        workspace, "lp2st", label_corruption_rate=0.0, max_train_samples=12, lp2st_split=0.5, prior_row_weight=0.5
    )
    result = run([sys.executable, "recipes/lp2st.py", "--config", str(config)])
    assert result.returncode == 0, result.stderr[-4000:]
    import json

    record = json.loads((workspace / "lp2st" / "squarechipo_privacy.json").read_text())
    assert record["ledger"]["total_epsilon"] == 0.5 and record["epsilon"] == 0.5  # ε, not 2ε
    assert [r["part"] for r in record["ledger"]["releases"]] == ["lp2st/part1", "lp2st/part2"]
    assert record["prior_row_weight"] == 0.5
    part2 = datasets.load_from_disk(str(workspace / "lp2st" / "released_part2"))
    assert len(part2) == 6 and "label_from_prior" in part2.column_names
    corrupted = write_config(workspace, "lp2st_bad", label_corruption_rate=0.1)
    bad = run([sys.executable, "recipes/lp2st.py", "--config", str(corrupted)])
    assert bad.returncode != 0 and "no corruption" in bad.stderr

    # A re-run with another prior temperature must not reuse part 2 released under the old prior.
    hotter = write_config(
        workspace,
        "lp2st",
        label_corruption_rate=0.0,
        max_train_samples=12,
        lp2st_split=0.5,
        prior_row_weight=0.5,
        lp2st_temperature=3.0,
    )
    rerun = run([sys.executable, "recipes/lp2st.py", "--config", str(hotter)])
    assert rerun.returncode != 0 and "released_part2 was released with pipeline" in rerun.stderr
    assert "'prior_temperature': 3.0" in rerun.stderr


def test_lp2st_refuses_a_prior_whose_model_saw_the_part2_rows(workspace, tokenizer):
    """Ghazi et al. 2021 (label DP)'s guarantee needs a prior independent of the part-2 labels: the start model saw
    part 2's prompts."""
    import json

    from squarechipo.data.fingerprint import training_data_record

    leaky = workspace / "part2_leaky_model"
    make_tiny_model(tokenizer, seed=0).save_pretrained(leaky)
    tokenizer.save_pretrained(leaky)
    part2 = datasets.load_from_disk(str(workspace / "data"))["train"].select(range(6, 12))
    (leaky / "squarechipo_privacy.json").write_text(json.dumps(seal(training_data_record(part2))))
    config = write_config(
        workspace,
        "lp2st_leaky",
        label_corruption_rate=0.0,
        max_train_samples=12,
        lp2st_split=0.5,
        model_name_or_path=str(leaky),
    )
    result = run([sys.executable, "recipes/lp2st.py", "--config", str(config)])
    assert result.returncode != 0
    assert "LP-2ST prior" in result.stderr and "part2_leaky_model was trained on these rows" in result.stderr
    assert not (workspace / "lp2st_leaky" / "released_part2").exists()


def test_reward_model_recipe_trains_with_the_rdpo_loss(workspace):
    """The reward-model recipe (run in process through its ``main``; the preference-model test above runs it as a
    subprocess) trains with Chowdhury et al. 2024 (private reward estimation)'s RR-debiased Bradley–Terry loss: on a
    batch of the released rows, the trainer's loss is [−(1−ρ)·log σ(m) + ρ·log σ(−m)]/(1−2ρ) of the reward margins
    clipped to ±max_margin, ρ = 1/(1+e^ε), and not the plain or the square loss."""
    import math

    import torch

    from squarechipo.scripts.reward_model import main, make_parser

    config = _yaml(
        workspace,
        "rm",
        {
            **COMMON,
            "model_name_or_path": str(workspace / "model"),
            "dataset_name": str(workspace / "data"),
            "output_dir": str(workspace / "rm"),
            "max_train_samples": 8,
            "model_type": "reward",
            "loss": "rdpo",
            "max_margin": 0.25,
            "max_length": 512,
            "label_epsilon": 1.0,
            "label_seed": 0,  # the same release on every run, so the margins the check needs are fixed
            "label_public_columns": ["id", "category"],
            "per_device_train_batch_size": 4,
        },
    )
    trainer = main(*make_parser().parse_args_and_config(args=["--config", str(config)]))
    record = json.loads((workspace / "rm" / "squarechipo_privacy.json").read_text())
    assert record["model_type"] == "reward" and record["loss"] == "rdpo" and record["epsilon"] == 1.0
    assert record["dropped_rows"] == {}
    batch = next(iter(trainer.get_train_dataloader()))
    trainer.model.eval()
    with torch.no_grad():
        loss = trainer.compute_loss(trainer.model, dict(batch)).item()
        rewards = trainer.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    chosen, rejected = rewards.squeeze(-1).double().chunk(2)
    raw = chosen - rejected
    m, rho = raw.clamp(-0.25, 0.25), 1 / (1 + math.e)
    assert (raw.abs() < 0.25).any() and (raw.abs() > 0.25).any()  # the clip binds on some rows and not on others
    debiased = ((-(1 - rho) * torch.log(torch.sigmoid(m)) + rho * torch.log(torch.sigmoid(-m))) / (1 - 2 * rho)).mean()
    plain, square = -torch.log(torch.sigmoid(m)).mean(), ((2 * torch.sigmoid(m) - 1 - 1 / (1 - 2 * rho)) ** 2).mean()
    assert loss == pytest.approx(debiased.item(), rel=1e-4)
    assert abs(debiased - plain) > 1e-2 and abs(debiased - square) > 1e-2


@pytest.mark.slow
def test_an_error_inside_a_training_job_reaches_the_user_as_the_jobs_one_line(workspace):
    """An error inside a launched job was 40-126 lines with 2-4 tracebacks (the job's, Accelerate's
    CalledProcessError). The job prints its one line; the launcher adds nothing and exits with its code."""
    config = write_config(workspace, "raw_undeclared")
    values = {k: v for k, v in yaml.safe_load(config.read_text()).items() if not k.startswith("label_")}
    config.write_text(yaml.safe_dump(values))
    done = run([str(BIN / "squarechipo"), "train", "--config", str(config)])
    assert done.returncode == 1, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]  # the whole of stderr: one line
    assert len(lines) == 1 and lines[0].startswith("squarechipo train: error: "), done.stderr[-3000:]
    assert "train_labels_public: true" in lines[0]
    # Under `accelerate launch` Accelerate adds its traceback after a failed process unless told --quiet (its own
    # option, which docs/training.md gives): then a typo'd key is the project's one line, and nothing after it.
    config.write_text(yaml.safe_dump({**values, "beta_typo": 0.1}))
    quiet = run([str(BIN / "accelerate"), "launch", "--quiet", "recipes/train.py", "--config", str(config)])
    said = [line for line in quiet.stderr.splitlines() if line.strip() and "Warning" not in line]
    assert quiet.returncode == 1 and "Traceback" not in quiet.stderr, quiet.stderr[-3000:]
    assert said[-1].startswith("squarechipo train: error: ") and "beta_typo" in said[-1], quiet.stderr[-3000:]
