"""The controlled study as one resumable run: SFT, the gold reward, labels per seed, and every (arm, seed) cell.

Set-up (once): SFT of the base model on finance_sft rows (disjoint from the preference rows), the gold judge r*
on public gold rows, and the SFT policy's record on the test prompts (its samples are also the extra candidates
of every policy's fixed pool). Per seed: ``train_rows`` rows drawn from the train split and labelled by r*
(Bradley–Terry draws by default, :mod:`squarechipo.evaluation.gold`). Per cell: the arm's release of those
labels (shared by the arms of the seed with the same label setting, so the comparisons are paired), training
with ``recipes/train.py`` in its own process, and the gold evaluation against the SFT policy
(:mod:`squarechipo.evaluation.policy`).

Resuming: a cell is done when its record is in the results folder; a cut-off cell is cleared and redone on the
saved release, so no fresh noise is drawn. The weights of a cell are deleted once it is measured. On a fresh work
folder beside committed records (another machine, a deleted ``out``) the set-up is rebuilt and its SFT samples are
used only if they reproduce the committed ``sft.json``, against which every cell is paired.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import torch

from squarechipo.data import load_preference_dataset
from squarechipo.evaluation.gold import label_with_gold
from squarechipo.evaluation.policy import GoldEvaluator, SamplingSettings, compare
from squarechipo.judge.reward_model import RewardModelJudge
from squarechipo.reproduce.study_design import Arm, StudyDesign
from squarechipo.scripts.launch import run_script

__all__ = ["Study", "cell_name", "library_versions", "reproduction_differences"]

logger = logging.getLogger("squarechipo")
DONE = "done.json"
_PREFERENCE = "finance_preference_conversational"


def cell_name(arm: Arm, seed: int) -> str:
    return f"{arm.key}_seed{seed}"


def _once(folder: Path, build, marker: str = DONE) -> dict[str, Any]:
    """Run ``build`` unless ``folder`` holds its marker; a folder without one was cut off: cleared first."""
    record = folder / marker
    if record.exists():
        return json.loads(record.read_text())
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    result = build()
    record.write_text(json.dumps(result, indent=2, default=str))
    return result


def _timed(step) -> dict[str, Any]:
    start = time.time()
    step()
    return {"seconds": round(time.time() - start, 1)}


class Study:
    """The study in ``out`` (models, releases, samples: not for committing) and ``results`` (small records)."""

    def __init__(self, design: StudyDesign, out: str | Path, results: str | Path, *, python=sys.executable):
        self.design, self.out, self.results = design, Path(out), Path(results)
        self.python, self.data = python, Path(design.data_dir)
        self._evaluator: GoldEvaluator | None = None
        self._sft_samples: list[list[str]] | None = None

    # ------------------------------------------------------------------ set-up

    def _ensure_data(self) -> None:
        if not (self.data / _PREFERENCE / "judge").is_dir():
            subprocess.run(
                [self.python, "-m", "squarechipo.data.finance", "--out", str(self.data), "--seed", "0"], check=True
            )

    def _sft(self) -> dict[str, Any]:
        d, folder = self.design, self.out / "sft"
        config = {
            "model_name_or_path": d.base_model,
            "dataset_name": str(self.data / d.sft_data),
            "dataset_train_split": "train",
            "max_train_samples": d.sft_rows,
            "output_dir": str(folder),
            "learning_rate": d.sft_learning_rate,
            "num_train_epochs": d.sft_epochs,
            "per_device_train_batch_size": d.batch_size,
            "max_length": d.max_length,
            "bf16": d.bf16,
            "logging_steps": 8,
            "eval_strategy": "no",
            "save_strategy": "no",
            "report_to": "none",
            "gradient_checkpointing": False,
            "seed": 0,
        }
        return _once(folder, lambda: _timed(lambda: run_script("sft", config, folder, self.python)))

    def _gold(self) -> dict[str, Any]:
        folder = self.out / "gold_judge"
        config = {
            "model_name_or_path": self.design.base_model,
            "dataset_name": str(self.data / _PREFERENCE),
            "dataset_train_split": "judge",
            "dataset_test_split": "test",
            "max_train_samples": self.design.judge_rows,
            "output_dir": str(folder),
        }
        build = lambda: _timed(lambda: run_script("gold_judge", config, folder, self.python))  # noqa: E731
        return _once(folder, build)

    def setup(self) -> dict[str, Any]:
        """Data, SFT, the gold judge and the SFT policy's record; each done once."""
        self._ensure_data()
        return {"sft": self._sft(), "gold_judge": self._gold(), "sft_record": self.sft_record()["seconds"]}

    def _load(self, path: Path):
        from transformers import AutoModelForCausalLM

        dtype = getattr(torch, self.design.eval_dtype)
        return AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval()

    def evaluator(self) -> GoldEvaluator:
        if self._evaluator is None:
            from transformers import AutoTokenizer

            d = self.design
            test = load_preference_dataset(str(self.data / _PREFERENCE), split="test")
            test = test.select(range(min(d.test_prompts, len(test))))
            gold = RewardModelJudge(str(self.out / "gold_judge"), batch_size=32, dtype=getattr(torch, d.eval_dtype))
            settings = SamplingSettings(samples_per_prompt=d.samples_per_prompt, max_new_tokens=d.max_new_tokens)
            tokenizer = AutoTokenizer.from_pretrained(self.out / "sft")
            self._evaluator = GoldEvaluator(self._load(self.out / "sft"), tokenizer, gold, test, settings)
        return self._evaluator

    def sft_record(self) -> dict[str, Any]:
        """The SFT policy's per-prompt record and the constants every comparison shares (results/sft.json)."""
        path = self.results / "sft.json"
        if path.exists():
            return json.loads(path.read_text())
        start = time.time()
        evaluator = self.evaluator()
        samples = evaluator.sample(evaluator.reference)
        (self.out / "sft_samples.json").write_text(json.dumps(samples))
        record = evaluator.measure_samples(evaluator.reference, samples)
        result = {
            "record": record,
            "constants": evaluator.constants(samples),
            "seconds": round(time.time() - start, 1),
            "versions": library_versions(),
        }
        self.results.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result))
        return result

    def sft_samples(self) -> list[list[str]]:
        """The SFT policy's samples: the extra candidates of every pool (``out/sft_samples.json``)."""
        if self._sft_samples is None:
            path = self.out / "sft_samples.json"
            committed = self.sft_record()  # on a first run this also writes the samples
            if not path.exists():
                self._restore_sft_samples(committed, path)
            self._sft_samples = json.loads(path.read_text())
        return self._sft_samples

    def _restore_sft_samples(self, committed: dict[str, Any], path: Path) -> None:
        """Regenerate the SFT samples of a rebuilt work folder with their fixed seeds, and keep them only if they
        reproduce the committed record: a retrained SFT policy need not be bit-exact on another processor or
        library version, and a cell measured against other SFT samples would not be paired with the others."""
        evaluator = self.evaluator()
        samples = evaluator.sample(evaluator.reference)
        rebuilt = evaluator.measure_samples(evaluator.reference, samples)
        differs = reproduction_differences(rebuilt, committed["record"])
        if differs:
            raise RuntimeError(
                f"{self.results / 'sft.json'}: the work folder {self.out} was rebuilt, and its SFT policy and gold "
                f"judge do not reproduce this record ({'; '.join(differs)}), so new cells would not be paired with "
                f"the committed ones. Libraries then: {committed.get('versions', 'not recorded')}; now: "
                f"{library_versions()}. Restore {self.out} from the machine that wrote the records, rebuild it with "
                "the libraries it used, or start the study afresh in another --results folder."
            )
        path.write_text(json.dumps(samples))

    # ------------------------------------------------------------------ labels and cells

    def labels(self, seed: int) -> Path:
        """This seed's training rows, drawn from the train split and labelled by r* (raw, private labels)."""
        folder = self.out / "labels" / f"seed{seed}"

        def build() -> dict[str, Any]:
            d, start = self.design, time.time()
            train = load_preference_dataset(str(self.data / _PREFERENCE), split="train")
            rng = np.random.default_rng([seed, 28])
            rows = train.select(np.sort(rng.permutation(len(train))[: d.train_rows]).tolist())
            labelled, summary = label_with_gold(rows, self.evaluator().gold, d.label_source, rng)
            datasets.DatasetDict({"train": labelled}).save_to_disk(str(folder / "data"))
            return {**summary, "seconds": round(time.time() - start, 1)}

        _once(folder, build)
        return folder / "data"

    def _cell_config(self, arm: Arm, seed: int, folder: Path) -> dict[str, Any]:
        d = self.design
        private = arm.setting != "clean"
        config = {
            "model_name_or_path": str(self.out / "sft"),
            "dataset_name": str(self.labels(seed)),
            "dataset_train_split": "train",
            "output_dir": str(folder / "model"),
            "privatized_dir": str(self.out / "releases" / arm.release(seed, d.corruption_rate)),
            "method": arm.method,
            "beta": d.beta,
            "r_max": d.r_max,
            "learning_rate": d.learning_rate,
            "num_train_epochs": d.epochs,
            "per_device_train_batch_size": d.batch_size,
            "max_length": d.max_length,
            "bf16": d.bf16,
            "precompute_ref_log_probs": True,
            "reference_logps_cache": str(self.out / "reference.sqlite"),
            "logging_steps": 4,
            "eval_strategy": "no",
            "save_strategy": "no",
            "report_to": "none",
            "gradient_checkpointing": False,
            "disable_tqdm": True,
            "seed": seed,
            "label_epsilon": arm.epsilon if private else None,
            "label_corruption_rate": d.corruption_rate if private else 0.0,
            "label_adversary": "flip",
            "label_order": "ltc" if arm.setting == "LTC" else "ctl",
            # A simulation of labellers: the seed makes the noise reproducible, and the ledger says so.
            "label_seed": seed,
            # The finance rows' label-free metadata; the release drops rejected_shown_first, which carries the label.
            "label_public_columns": ["id", "category"],
        }
        if not arm.debias:  # Square-χPO with c = 1 on private labels: the ablation of the c(ε) debiasing
            config.update(flip_rate=0.0, privacy_override=True)
        return config

    def cell(self, arm: Arm, seed: int, stage: str) -> dict[str, Any]:
        """Train and measure one cell, or read its record (``results/<stage>/<cell>.json``)."""
        record_path = self.results / stage / f"{cell_name(arm, seed)}.json"
        if record_path.exists():
            return json.loads(record_path.read_text())
        self.sft_samples()  # a rebuilt set-up is checked before a cell trains on it
        folder = self.out / "cells" / cell_name(arm, seed)
        if folder.exists():
            shutil.rmtree(folder)  # cut off before its record was written
        folder.mkdir(parents=True)
        start = time.time()
        run_script("train", self._cell_config(arm, seed, folder), folder, self.python)
        trained = time.time()
        record = self._measure(folder / "model")
        train = json.loads((folder / "model" / "train_results.json").read_text())
        for weights in (folder / "model").glob("*.safetensors"):
            weights.unlink()  # the card, privacy record and metrics stay
        result = {
            "cell": cell_name(arm, seed),
            "arm": arm.key,
            **{k: getattr(arm, k) for k in ("method", "setting", "epsilon", "debias")},
            "seed": seed,
            "train_loss": train.get("train_loss"),
            "train_seconds": round(trained - start, 1),
            "eval_seconds": round(time.time() - trained, 1),
            **record,
        }
        record_path.parent.mkdir(parents=True, exist_ok=True)
        record_path.write_text(json.dumps(result, indent=1))
        return result

    def _measure(self, model_dir: Path) -> dict[str, Any]:
        evaluator, sft = self.evaluator(), self.sft_record()
        policy = evaluator.measure(self._load(model_dir), pool=self.sft_samples())
        summary = compare(policy, sft["record"], sft["constants"])
        per_prompt = compare_per_prompt(policy, sft["record"])
        return {"summary": summary, "per_prompt": per_prompt, "examples": policy["examples"]}

    def run_cells(self, arms, seeds, stage: str, *, progress=print) -> list[dict[str, Any]]:
        """Every (arm, seed) cell, seed by seed, so that an interrupted run holds whole seeds."""
        records = []
        for seed in seeds:
            for arm in arms:
                record = self.cell(arm, seed, stage)
                records.append(record)
                win = 100 * record["summary"]["expected_win"]["mean"]
                progress(
                    f"[{stage}] {record['cell']}: expected win {win:.1f}%, "
                    f"{record['train_seconds'] + record['eval_seconds']:.0f} s"
                )
        return records


def library_versions() -> dict[str, str]:
    """The versions that decide whether a retrained set-up reproduces a record."""
    from importlib.metadata import version

    return {name: version(name) for name in ("torch", "transformers", "trl", "accelerate", "datasets")}


def reproduction_differences(rebuilt: dict, committed: dict) -> list[str]:
    """How a rebuilt SFT record differs from the committed one: the samples' lengths and loops must match exactly
    (the same texts), their gold rewards and log-probs to 0.1% (a bf16 step of r* is more). Empty when it
    reproduces."""
    differs = []
    for key in ("words", "loop", "reward", "logp"):
        new, old = np.asarray(rebuilt[key], dtype=float), np.asarray(committed[key], dtype=float)
        if new.shape != old.shape:
            differs.append(f"{key}: shape {new.shape} against {old.shape}")
        elif not np.allclose(new, old, rtol=1e-3 if key in ("reward", "logp") else 0.0, atol=0.0):
            share = float(np.mean(~np.isclose(new, old, rtol=1e-3, atol=0.0)))
            differs.append(f"{key}: {100 * share:.0f}% of samples differ, by up to {np.max(np.abs(new - old)):.3g}")
    return differs


def compare_per_prompt(policy: dict, sft: dict) -> dict[str, list[float]]:
    """The per-prompt gold gain and expected win (rounded), kept in the cell record for later analysis."""
    from scipy.special import expit

    delta = np.asarray(policy["reward"]) - np.asarray(sft["reward"])
    kl = (np.asarray(policy["logp"]) - np.asarray(policy["logp_ref"])).mean(axis=0)
    return {
        "gold_gain": np.round(delta.mean(axis=0), 4).tolist(),
        "expected_win": np.round(expit(delta).mean(axis=0), 4).tolist(),
        "kl": np.round(kl, 3).tolist(),
    }
