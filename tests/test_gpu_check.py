"""The GPU check (benchmarks/gpu_check.sh) and what it carries (benchmarks/gpu_bundle.sh), run here: the script that a
lent GPU machine runs is the one the suite runs, on the CPU with the tests' tiny model (docs/benchmarks.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[1]
#: Every step of the check, in order (the GPU run adds install-wheels first).
STEPS = [
    *(f"import {p}" for p in ("torch", "transformers", "accelerate", "peft", "datasets", "trl", "cryptography", "nacl",
                               "scipy", "squarechipo")),
    "cuda", "bench_trainer", "model from its config", "data", "key and registry", "release (validation split)", "sft",
    "square-chipo", "gold judge", "gold report", "judged win rate", "central-DP selection", "accelerate ddp",
    "accelerate fsdp2",
]  # fmt: skip


#: What the check exports before anything runs (benchmarks/gpu_check.sh): set here too, so that its Python commands
#: find a warm interpreter for exactly their environment (tests/helpers/warm.py) instead of importing torch each time.
_CHECK_ENV = {
    "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
    "DO_NOT_TRACK": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1", "TOKENIZERS_PARALLELISM": "false",
    "WANDB_MODE": "disabled",
}  # fmt: skip


def _check(out: Path, embedded_path, *options: str, timeout: float = 600) -> subprocess.CompletedProcess:
    from tests.helpers import warm

    env = {**os.environ, **_CHECK_ENV, "OUT": str(out)}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    for own in ("SQUARECHIPO_RELEASE_REGISTRY", "SQUARECHIPO_RECORD_STORE", "SQUARECHIPO_SIGNING_KEY"):
        env.pop(own, None)  # the check sets its own
    env.pop("PYTHON", None)
    address = warm._server(env)
    python = sys.executable if address is None else os.path.join(os.path.dirname(address), "python")
    if address is not None:
        env["SQUARECHIPO_TEST_WARM"] = address
    command = ["bash", "benchmarks/gpu_check.sh", "--dry-run", "--config-dir", str(embedded_path), "--python", python]
    command += options
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def test_the_dry_run_runs_every_step_under_its_limit_and_records_each(tmp_path, embedded_path):
    """Every step of the GPU check, on the CPU: each ends ok and is recorded with its exit code, seconds and limit;
    the trainer benchmark's figures are attached; the training jobs' summaries are kept; two files come back."""
    started = time.monotonic()
    done = _check(tmp_path / "out", embedded_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    record = json.loads((tmp_path / "out" / "gpu_check.json").read_text())
    assert record["mode"] == "dry-run" and [s["name"] for s in record["steps"]] == STEPS
    assert all(s["outcome"] == "ok" and s["limit_s"] > 0 and s["seconds"] <= s["limit_s"] for s in record["steps"])
    by_name = {s["name"]: s for s in record["steps"]}
    assert by_name["import torch"]["output"].startswith("torch ")
    assert (
        "train_runtime" in by_name["square-chipo"]["output"] and "train_runtime" in by_name["accelerate ddp"]["output"]
    )
    runners = {row["runner"] for row in by_name["bench_trainer"]["result"]["rows"]}
    assert runners == {"trl_sigmoid", "ours_dpo", "ours_square_chipo", "ours_dpo_packed"}
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["gpu_check.json", "gpu_check.log"]
    assert f"{len(STEPS)} of {len(STEPS)} steps ok" in done.stdout
    print(f"dry run: {time.monotonic() - started:.0f} s")


def test_a_run_past_its_budget_records_what_it_measured_and_stops(tmp_path, embedded_path):
    """With a budget too short for the whole check, the steps past it are recorded as skipped (or timed out) and the
    command ends soon after the budget, with what it measured before in its JSON."""
    started = time.monotonic()
    done = _check(tmp_path / "out", embedded_path, "--budget", "12", timeout=300)
    elapsed = time.monotonic() - started
    record = json.loads((tmp_path / "out" / "gpu_check.json").read_text())
    outcomes = [s["outcome"] for s in record["steps"]]
    assert done.returncode == 1 and elapsed < 12 + 90, (elapsed, outcomes)
    assert [s["name"] for s in record["steps"]] == STEPS and outcomes[0] == "ok"
    assert "skipped" in outcomes and outcomes[-1] == "skipped"


def test_the_bundle_holds_the_tree_without_results_and_the_config_without_weights(tmp_path):
    done = subprocess.run(
        ["bash", "benchmarks/gpu_bundle.sh", str(tmp_path / "bundle"), "--no-wheels"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    bundle = tmp_path / "bundle"
    assert (bundle / "project" / "benchmarks" / "gpu_check.sh").is_file() and not (
        bundle / "project" / "results"
    ).exists()
    assert (bundle / "smollm2" / "config.json").is_file() and (bundle / "smollm2" / "tokenizer.json").is_file()
    assert not list((bundle / "smollm2").glob("*.safetensors"))
    assert "MB (" in done.stdout.splitlines()[-1]
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "keep.txt").write_text("not a bundle")
    refused = subprocess.run(
        ["bash", "benchmarks/gpu_bundle.sh", str(tmp_path / "other"), "--no-wheels"], cwd=ROOT, capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    assert refused.returncode == 2 and "is not a GPU bundle" in refused.stderr
    assert (tmp_path / "other" / "keep.txt").exists()
    wheels = [line for line in (ROOT / "benchmarks" / "gpu_wheels.txt").read_text().splitlines() if line[:1].isalnum()]
    assert wheels and all("==" in line for line in wheels)  # one pinned version each
