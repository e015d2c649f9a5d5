"""squarechipo as users install it: build the wheel, install it alone into a fresh virtual environment, and run
every kind of job from a folder outside the checkout with the ``squarechipo`` command."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(command: list[str], cwd: Path, env: dict, timeout: int = 900) -> str:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{command} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


#: Run in the new venv: the installed wheel's requirements (no extras) that the environment does not satisfy.
_UNMET_REQUIREMENTS = """
from importlib.metadata import PackageNotFoundError, requires, version
from packaging.requirements import Requirement
unmet = []
for line in requires("squarechipo"):
    requirement = Requirement(line)
    if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
        continue
    try:
        found = version(requirement.name)
    except PackageNotFoundError:
        found = None
    if found is None or not requirement.specifier.contains(found, prereleases=True):
        unmet.append(f"{requirement} (found {found})")
print(unmet)
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(python, squarechipo command, env) of a fresh venv holding the built wheel.

    The wheel's dependencies come from this test run's own environment (a ``.pth`` line puts its site-packages
    after the new venv's), and ``pip check`` verifies that they satisfy every requirement the wheel declares:
    resolving and installing torch and the rest again from the index takes minutes and tests pip, not us. With
    ``SQUARECHIPO_WHEEL_FRESH_VENV=1`` the venv installs everything from the index instead, as a user's would.
    """
    import sysconfig

    base = tmp_path_factory.mktemp("wheel")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(base / "dist"), str(ROOT)], base, env)
    (wheel,) = (base / "dist").glob("squarechipo-*.whl")
    fresh = os.environ.get("SQUARECHIPO_WHEEL_FRESH_VENV") == "1"
    _run([sys.executable, "-m", "venv", *([] if fresh else ["--without-pip"]), str(base / "venv")], base, env)
    python = base / "venv" / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(python), "--disable-pip-version-check"]
    if fresh:
        _run([*pip, "install", "-q", "torch==2.13.0"], base, env)  # the CPU build first, as scripts/install.sh does
        _run([*pip, "install", "-q", str(wheel)], base, env)
    else:
        site = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], base, env)
        (Path(site.strip()) / "_test_run_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
        _run([*pip, "install", "-q", "--no-deps", str(wheel)], base, env)
        unmet = _run([str(python), "-c", _UNMET_REQUIREMENTS], base, env)
        assert unmet.strip() == "[]", f"the wheel declares requirements this environment does not meet: {unmet}"
    return python, base / "venv" / "bin" / "squarechipo", env, wheel


@pytest.mark.slow
def test_the_installed_wheel_runs_every_job_outside_the_checkout(installed, tokenizer, tmp_path):
    from tests.helpers.models import make_tiny_classifier, make_tiny_model

    python, command, env, wheel = installed
    _check_the_wheel_holds_every_file_of_the_package(wheel)
    work = tmp_path / "work"
    work.mkdir()
    where = _run([str(python), "-c", "import squarechipo; print(squarechipo.__file__)"], work, env)
    assert not Path(where.strip()).resolve().is_relative_to(ROOT)
    assert "squarechipo" in _run([str(command), "--version"], work, env)
    assert "train" in _run([str(command), "--help"], work, env)

    _run(
        [str(command), "data", "finance", "--out", "d", "--rows", "140", "--sft-rows", "40", "--judge-rows", "40"],
        work,
        env,
    )
    rows = (work / "d" / "jsonl" / "finance_preference_conversational" / "train.jsonl").read_text().splitlines()
    (work / "pairs.jsonl").write_text("\n".join(rows[:16]) + "\n")  # a single JSONL file, as users bring
    make_tiny_model(tokenizer).save_pretrained(work / "tiny")
    tokenizer.save_pretrained(work / "tiny")
    config = (
        "model_name_or_path: tiny\ndataset_name: pairs.jsonl\noutput_dir: out\nmethod: square_chipo\n"
        "per_device_train_batch_size: 8\nmax_length: 96\nprecompute_ref_log_probs: true\nreport_to: none\n"
        "label_epsilon: 1.0\nlabel_seed: 0\nsave_strategy: 'no'\nlabel_public_columns: [id, category]\n"
    )
    (work / "train.yaml").write_text(config)
    _run([str(command), "train", "--config", "train.yaml", "--num_processes", "1"], work, env)
    record = json.loads((work / "out" / "squarechipo_privacy.json").read_text())
    assert record["epsilon"] == 1.0 and record["library_version"]
    # The installed package released and trained on exactly the file's 16 rows (their label-free fingerprint, computed
    # here by the checkout's code) and the saved policy is a trained one, not the starting model.
    import datasets
    import torch
    from transformers import AutoModelForCausalLM

    from squarechipo.data.fingerprint import preference_fingerprint

    rows = datasets.load_dataset("json", data_files=str(work / "pairs.jsonl"), split="train")
    assert len(rows) == 16 and record["dataset_fingerprint"] == preference_fingerprint(rows)
    assert record["ledger"]["releases"][0]["n_rows"] == 16
    trained, start = (AutoModelForCausalLM.from_pretrained(work / name) for name in ("out", "tiny"))
    assert not torch.equal(trained.model.embed_tokens.weight, start.model.embed_tokens.weight)

    judge = work / "judge_model"
    make_tiny_classifier(tokenizer).save_pretrained(judge)
    tokenizer.save_pretrained(judge)
    judge_args = (
        "--dataset_test_split test --max_eval_samples 2 --max-new-tokens 4 --judge reward-model --calibration-pairs 2 "
        "--out eval --public_splits test"
    )
    data = "d/finance_preference_conversational"
    command_line = [str(command), "judge", "--policy", "out", "--baseline", "tiny", "--dataset_name", data]
    _run([*command_line, *judge_args.split(), "--judge-model", str(judge)], work, env)
    assert json.loads((work / "eval" / "summary.json").read_text())["overall"]["n_valid"] == 2
    _run([str(command), "audit", "mechanisms", "--samples", "2000", "--out", "audit"], work, env)
    audited = [r for r in json.loads((work / "audit" / "mechanisms.json").read_text()) if not r["planted_bug"]]
    assert "binary RR" in {r["name"] for r in audited}  # every real mechanism within its claimed ε
    assert all(r["lower_bound"] <= r["claimed_epsilon"] for r in audited)
    scale = work / "tiny_scale.yaml"
    scale.write_text(f"base: tiny\ndata_dir: d\nbase_model: {work / 'tiny'}\nlearning_rate: 1.0e-3\n")
    # The plan from the installed package (tests/test_reproduce.py runs the table end to end from the checkout; every
    # module it launches is in the wheel, below).
    planned = _run([str(command), "reproduce", "--scale", str(scale), "--out", "table1", "--dry-run"], work, env)
    assert re.search(r"\d+ cells \(\d+ to run\)", planned), planned


def _check_the_wheel_holds_every_file_of_the_package(wheel: Path) -> None:
    """Every module and data file the checkout tracks under squarechipo/ and data_gen/ is in the wheel: a job that
    launches a module by name, or reads a config that ships with it, finds it installed."""
    import zipfile

    tracked = subprocess.run(
        ["git", "ls-files", "squarechipo", "data_gen"], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout.split()
    inside = set(zipfile.ZipFile(wheel).namelist())
    missing = [f for f in tracked if f not in inside]  # outside a git checkout nothing is tracked: nothing to check
    assert not missing, f"{missing}: add them to [tool.setuptools.package-data] in pyproject.toml"
