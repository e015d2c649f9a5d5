"""recipes/train.py as users run it: `accelerate launch` in one process, and two CPU processes (torchrun/gloo)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import datasets
import pytest
import yaml

from data_gen.finance import build_datasets
from squarechipo.privacy import get_ledger
from tests.conftest import make_tiny_model

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, tokenizer):
    folder = tmp_path_factory.mktemp("recipe")
    make_tiny_model(tokenizer, seed=0).save_pretrained(folder / "model")
    tokenizer.save_pretrained(folder / "model")
    build_datasets(140, seed=0)["finance_preference_conversational"].save_to_disk(str(folder / "data"))
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
    }
    config.update(overrides)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def run(command: list[str], timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TQDM_DISABLE": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)


def digests(output: str) -> dict[int, str]:
    return {int(rank): digest for rank, digest in re.findall(r"rank (\d+)/\d+ trains on .* \(labels digest (\w+)\)", output)}


def test_accelerate_launch_trains_and_rerun_reuses_the_release(workspace):
    config = write_config(workspace, "single")
    first = run([str(BIN / "accelerate"), "launch", "--num_processes", "1", "recipes/train.py", "--config", str(config)])
    assert first.returncode == 0, first.stderr[-4000:]
    out = workspace / "single"
    assert (out / "model.safetensors").exists() and (out / "README.md").exists()
    assert (out / "squarechipo_privacy.json").exists() and (out / "train_results.json").exists()
    released = datasets.load_from_disk(str(out / "released_train"))
    ledger = get_ledger(released)
    assert ledger.total_epsilon == 0.5 and ledger.releases[0].randomness == "os_entropy"

    second = run([str(BIN / "accelerate"), "launch", "--num_processes", "1", "recipes/train.py", "--config", str(config)])
    assert second.returncode == 0, second.stderr[-4000:]
    assert "released 16 training rows" not in second.stderr  # no fresh noise on a re-run
    assert digests(first.stderr) == digests(second.stderr)
    assert get_ledger(datasets.load_from_disk(str(out / "released_train"))) == ledger

    changed = write_config(workspace, "single", label_epsilon=2.0)
    third = run([sys.executable, "recipes/train.py", "--config", str(changed)])
    assert third.returncode != 0
    assert "was released with pipeline" in third.stderr and "another folder" in third.stderr


@pytest.mark.slow
def test_two_cpu_processes_train_on_identical_privatized_labels(workspace):
    config = write_config(workspace, "ddp")
    result = run([str(BIN / "torchrun"), "--nproc_per_node", "2", "recipes/train.py", "--config", str(config)])
    assert result.returncode == 0, result.stderr[-4000:]
    seen = digests(result.stderr)
    assert set(seen) == {0, 1}, result.stderr[-3000:]
    assert seen[0] == seen[1]
    assert result.stderr.count("released 16 training rows") == 1  # only the main process drew the noise
    assert re.search(r"rank 1/2 trains on 16 released rows", result.stderr)  # a real 2-process (gloo) world
    assert (workspace / "ddp" / "model.safetensors").exists()
