"""The controlled study as one resumable run: SFT, the gold reward, labels per seed, and every (arm, seed) cell.

Set-up (once): SFT of the base model on finance_sft rows (disjoint from the preference rows), the gold judge r*
on public gold rows, and the SFT policy's record on the test prompts (its samples are also the extra candidates
of every policy's fixed pool). Per seed: ``train_rows`` rows drawn from the train split and labelled by r*
(Bradley–Terry draws by default, :mod:`squarechipo.evaluation.gold`). Per cell: the arm's release of those
labels (shared by the arms of the seed with the same label setting, so the comparisons are paired), training
with ``recipes/train.py`` in its own process, and the gold evaluation against the SFT policy
(:mod:`squarechipo.evaluation.policy`).

Resuming: a cell is done when its record is in the results folder; a cell cut off goes on from where it was, on the
saved release, so no fresh noise is drawn (:mod:`squarechipo.reproduce.study.cells`). The weights of a cell are
deleted once it is measured. With
``sft_lora_r`` set, the set-up is committed (the SFT adapter, the gold head, the SFT samples, the seeds' simulated
labels and the weights' digests, :mod:`squarechipo.reproduce.study.shared_setup`), so a fresh work folder (another
machine, a deleted ``out``) is rebuilt from those files exactly and every cell checks the digests before it
trains. Without it, a study continues only in the work folder that wrote its records.
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

from squarechipo.data import load_preference_dataset
from squarechipo.evaluation.degenerate import degenerate_flags
from squarechipo.evaluation.gold import label_with_gold, relabel
from squarechipo.evaluation.policy import GoldEvaluator, SamplingSettings, compare
from squarechipo.judge.reward_model import RewardModelJudge
from squarechipo.models.runtime import torch_dtype
from squarechipo.reproduce.launch import run_script
from squarechipo.reproduce.study.cells import (
    RESUME_EVERY_EPOCHS,
    compare_per_prompt,
    drop_weights,
    epoch_checkpoints,
    mean_logged_loss,
    measure_once,
    train_cell,
)
from squarechipo.reproduce.study.design import SETUP_FIELDS, Arm, StudyDesign, refuse_emulated_bf16
from squarechipo.reproduce.study.provenance import cell_provenance, read_record
from squarechipo.reproduce.study.reuse import cell_name, is_reusable, reused_record
from squarechipo.reproduce.study.shared_setup import first_prompts, labels_hold, library_versions

__all__ = ["Study", "cell_name"]

logger = logging.getLogger("squarechipo")
DONE = "done.json"
_PREFERENCE = "finance_preference_conversational"


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

    def __init__(self, design: StudyDesign, out: str | Path, results: str | Path, *, python: str | None = None,
                 allow_emulated_bf16: bool = False):  # fmt: skip
        self.design, self.out, self.results = design, Path(out), Path(results)
        self.allow_emulated_bf16 = allow_emulated_bf16
        #: Where the committed set-up lives: this study's results, or those of the study it shares a set-up with.
        self.setup_dir = Path(design.setup_from) if design.setup_from else self.results
        self.python, self.data = python or sys.executable, Path(design.data_dir)
        self._evaluator: GoldEvaluator | None = None
        #: The β the pre-registered plan chose for main arms written without one (``target_kl``), by arm key.
        self.planned_betas: dict[str, float] = {}
        self._sft_samples: list[list[str]] | None = None

    # ------------------------------------------------------------------ set-up

    def _ensure_data(self) -> None:
        if not (self.data / _PREFERENCE / "judge").is_dir():
            subprocess.run(
                [self.python, "-m", "squarechipo.scripts.data", "--out", str(self.data), "--seed", "0"], check=True
            )

    @property
    def portable(self) -> bool:
        """Whether the set-up is committed (a LoRA SFT policy and the gold head) and checked by digest."""
        return self.design.sft_lora_r is not None

    def _sft(self) -> dict[str, Any]:
        folder = self.out / "sft"
        if self.portable:
            return _once(folder, self._portable_sft)
        return _once(folder, lambda: _timed(lambda: run_script("sft", self._sft_config(folder), folder, self.python)))

    def _sft_config(self, folder: Path) -> dict[str, Any]:
        refuse_emulated_bf16(self.design, self.allow_emulated_bf16)  # the SFT policy trains in the design's bf16
        d = self.design
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
        if self.portable:
            config.update(use_peft=True, lora_r=d.sft_lora_r, lora_alpha=2 * d.sft_lora_r)
            config.update(lora_target_modules="all-linear", lora_dropout=0.0)
        return config

    def _fit(self, script: str, config: dict[str, Any]) -> Path:
        """Run ``script`` into a fresh ``config["output_dir"]`` (a committed set-up's first fit) and return it."""
        work = Path(config["output_dir"])
        if work.exists():
            shutil.rmtree(work)
        work.mkdir(parents=True)
        run_script(script, config, work, self.python)
        return work

    def _portable_sft(self) -> dict[str, Any]:
        """The SFT policy from the committed adapter (results/setup/sft_adapter), trained once if there is none."""
        from squarechipo.models import resolve_model_path
        from squarechipo.reproduce.study.shared_setup import merge_adapter

        adapter, start = self.setup_dir / "setup" / "sft_adapter", time.time()
        trained = not adapter.is_dir()
        if trained:
            work = self._fit("sft", self._sft_config(self.out / "sft_adapter"))
            # The adapter, its config, the tokenizer, card and privacy record: not the log, config or pickled args.
            keep = [f for f in work.iterdir() if f.is_file() and f.suffix not in (".log", ".yaml", ".bin")]
            adapter.mkdir(parents=True)
            for file in keep:
                shutil.copy2(file, adapter / file.name)
        digest = merge_adapter(resolve_model_path(self.design.base_model), adapter, self.out / "sft")
        return {"seconds": round(time.time() - start, 1), "trained": trained, "digest": digest}

    def _gold(self) -> dict[str, Any]:
        folder = self.out / "gold_judge"
        config = {
            "model_name_or_path": self.design.base_model,
            "dataset_name": str(self.data / _PREFERENCE),
            "dataset_train_split": "judge",
            "dataset_test_split": "test",
            "test_labels_public": True,  # the generator's test pairs are gold pairs
            "max_train_samples": self.design.judge_rows,
            "output_dir": str(folder),
        }
        build = lambda: _timed(lambda: run_script("gold_judge", config, folder, self.python))  # noqa: E731
        if self.portable:
            build = lambda: self._portable_gold(config, folder)  # noqa: E731
        return _once(folder, build)

    def _portable_gold(self, config: dict[str, Any], folder: Path) -> dict[str, Any]:
        """The gold judge from the committed head (results/setup/gold_head), fitted once if there is none."""
        from squarechipo.models import resolve_model_path
        from squarechipo.reproduce.study.shared_setup import rebuild_gold_judge, save_gold_head

        head, start = self.setup_dir / "setup" / "gold_head", time.time()
        trained = not head.is_dir()
        if trained:
            work = self._fit("gold_judge", {**config, "output_dir": str(self.out / "gold_fit")})
            save_gold_head(work, head)
            shutil.rmtree(work)
        digest = rebuild_gold_judge(resolve_model_path(self.design.base_model), head, folder)
        return {"seconds": round(time.time() - start, 1), "trained": trained, "digest": digest}

    def setup(self) -> dict[str, Any]:
        """Data, SFT, the gold judge and the SFT policy's record; each done once."""
        self._refuse_a_lost_setup()
        if self.design.setup_from and not (self.setup_dir / "setup.json").exists():
            raise FileNotFoundError(
                f"setup_from: {self.setup_dir} holds no committed set-up (setup.json); run that study's pilot first, "
                "or drop setup_from to make this study's own."
            )
        self._ensure_data()
        done = {"sft": self._sft(), "gold_judge": self._gold()}
        if self.portable:
            self._check_setup()
        return {**done, "sft_record": self.sft_record()["seconds"]}

    def _check_setup(self) -> dict[str, str]:
        """The work folder's set-up digests, checked against the results folder's setup.json (written by the first
        set-up)."""
        from squarechipo.reproduce.study.shared_setup import SETUP_FILE, check_setup, model_digest, write_setup

        found = {"sft": model_digest(self.out / "sft"), "gold_judge": model_digest(self.out / "gold_judge", "reward")}
        if not (self.setup_dir / SETUP_FILE).exists():
            fields = {k: getattr(self.design, k) for k in SETUP_FIELDS}
            write_setup(self.setup_dir, {"digests": found, "design": fields})
        check_setup(self.setup_dir, found, {k: getattr(self.design, k) for k in SETUP_FIELDS})
        return found

    def _load(self, path: Path):
        from transformers import AutoModelForCausalLM

        dtype = torch_dtype(self.design.eval_dtype)
        return AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval()

    def evaluator(self) -> GoldEvaluator:
        if self._evaluator is None:
            from transformers import AutoTokenizer

            d = self.design
            test = load_preference_dataset(str(self.data / _PREFERENCE), split="test")
            test = test.select(range(min(d.test_prompts, len(test))))
            gold = RewardModelJudge(str(self.out / "gold_judge"), batch_size=32, dtype=torch_dtype(d.eval_dtype))
            sizes = {"samples_per_prompt": d.samples_per_prompt, "max_new_tokens": d.max_new_tokens}
            settings = SamplingSettings(**sizes, batch_size=d.generation_batch_size)
            tokenizer = AutoTokenizer.from_pretrained(self.out / "sft")
            # The test pairs are the generator's gold pairs (public); the study's labels are simulated from r*.
            self._evaluator = GoldEvaluator(
                self._load(self.out / "sft"), tokenizer, gold, test, settings, labels_public=True
            )
        return self._evaluator

    def sft_record(self) -> dict[str, Any]:
        """The SFT policy's per-prompt record and the constants every comparison shares (the results folder's
        sft.json)."""
        path = self.setup_dir / "sft.json"
        if path.exists():
            result = first_prompts(json.loads(path.read_text()), self.design.test_prompts)
            if "degenerate" not in result["record"]:  # measured before the flags existed: read off its samples
                samples = json.loads(self._samples_path().read_text())
                samples = [k[: self.design.test_prompts] for k in samples]
                result["record"]["degenerate"] = degenerate_flags(self.evaluator().degenerate, samples)
            return result
        start = time.time()
        evaluator = self.evaluator()
        samples = evaluator.sample(evaluator.reference)
        self._samples_path().write_text(json.dumps(samples))
        record = evaluator.measure_samples(evaluator.reference, samples)
        result = {
            "record": record,
            "constants": evaluator.constants(samples, record),
            "seconds": round(time.time() - start, 1),
            "versions": library_versions(),
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result))
        return result

    def sft_samples(self) -> list[list[str]]:
        """The SFT policy's samples: the extra candidates of every pool, written with ``sft.json``."""
        if self._sft_samples is None:
            self.sft_record()  # on a first run this also writes the samples
            samples = json.loads(self._samples_path().read_text())
            self._sft_samples = [k[: self.design.test_prompts] for k in samples]
        return self._sft_samples

    def _samples_path(self) -> Path:
        """Where the SFT samples live: committed beside the records for a portable set-up, else the work folder."""
        if self.portable:
            self.setup_dir.mkdir(parents=True, exist_ok=True)
            return self.setup_dir / "sft_samples.json"
        return self.out / "sft_samples.json"

    def _refuse_a_lost_setup(self) -> None:
        """A study without a committed set-up (``sft_lora_r`` unset) can continue only in the work folder that made
        its records: a retrained SFT policy and gold judge are other weights on another machine or library version,
        and a cell measured against them would not be paired with the committed ones."""
        if not self.portable and (self.results / "sft.json").exists() and not (self.out / "sft" / DONE).exists():
            raise RuntimeError(
                f"{self.results / 'sft.json'} was measured with a set-up that lived only in its work folder, and "
                f"{self.out / 'sft'} is not that folder's, so new cells would not be paired with the committed ones "
                "(retraining gives other weights elsewhere; a rebuild was tried and did not reproduce the record). "
                f"Restore {self.out} from the machine that wrote the records, or start afresh in another --results "
                "folder with sft_lora_r set, whose set-up is committed and rebuilt exactly."
            )

    # ------------------------------------------------------------------ labels and cells

    def _committed_labels(self, seed: int, rows: int | None) -> Path:
        """Where a seed's simulated labels are committed: this study's results, or the study whose set-up (and
        cells) it shares, for the design's own rows."""
        name = f"seed{seed}.json" if rows is None else f"seed{seed}_n{rows}.json"
        own = self.results / "labels" / name
        shared = [Path(p) / "labels" / name for p in (self.design.cells_from, self.design.setup_from) if p]
        wanted = self.design.train_rows if rows is None else rows
        # Another study's file is this seed's draw only if it holds these rows and label source (another train_rows
        # commits other rows under the same name).
        if own.exists():
            return own
        return next((p for p in shared if p.exists() and labels_hold(p, wanted, self.design.label_source)), own)

    def labels(self, seed: int, rows: int | None = None) -> Path:
        """This seed's training rows, drawn from the train split and labelled by r* (raw, private labels).

        ``rows`` above the design's ``train_rows`` extends the seed's draw: the first rows of one permutation of the
        train split, so the design's rows (and their labels) come first and arms of one seed stay paired."""
        rows = None if rows in (None, self.design.train_rows) else rows
        folder = self.out / "labels" / (f"seed{seed}" if rows is None else f"seed{seed}_n{rows}")

        def build() -> dict[str, Any]:
            start = time.time()
            train = load_preference_dataset(str(self.data / _PREFERENCE), split="train")
            committed = self._committed_labels(seed, rows)
            if self.portable and committed.exists():
                kept = json.loads(committed.read_text())
                labelled, summary = relabel(train.select(kept["rows"]), kept["keep"]), kept["summary"]
            else:
                labelled, summary, kept = self._draw_labels(train, seed, rows)
                if self.portable:  # simulated labels, drawn from the committed r* and the seed: kept so that a
                    # rebuilt work folder trains on the same ones (r* in bf16 rounds differently elsewhere)
                    committed.parent.mkdir(parents=True, exist_ok=True)
                    committed.write_text(json.dumps({**kept, "summary": summary}))
            datasets.DatasetDict({"train": labelled}).save_to_disk(str(folder / "data"))
            return {**summary, "seconds": round(time.time() - start, 1)}

        _once(folder, build)
        return folder / "data"

    def _draw_labels(self, train, seed: int, rows: int | None):
        """(labelled rows, summary, what is committed): the design's rows labelled by BT(r*) draws; more rows keep
        those (the committed labels when the set-up is) and draw the rest from a stream of their own."""
        d = self.design
        rng = np.random.default_rng([seed, 28])
        order = rng.permutation(len(train))
        if rows is None:
            chosen = np.sort(order[: d.train_rows]).tolist()
            labelled, summary = label_with_gold(train.select(chosen), self.evaluator().gold, d.label_source, rng)
            keep = [a == b for a, b in zip(labelled["chosen"], train.select(chosen)["chosen"])]
            return labelled, summary, {"rows": chosen, "keep": keep}
        if rows > len(train):
            raise ValueError(f"an arm asks for {rows} training rows; the train split has {len(train)}.")
        if not self.portable:
            raise RuntimeError("arms with more rows than train_rows need a committed set-up (sft_lora_r).")
        if not self._committed_labels(seed, None).exists():  # the larger draw nests on the design's own rows:
            self.labels(seed)  # drawn (and committed) first, as an arm of the design's rows would
        base = json.loads(self._committed_labels(seed, None).read_text())
        extra = np.sort(np.setdiff1d(order[:rows], base["rows"])).tolist()
        more, summary = label_with_gold(
            train.select(extra), self.evaluator().gold, d.label_source, np.random.default_rng([seed, 28, rows])
        )
        keep = base["keep"] + [a == b for a, b in zip(more["chosen"], train.select(extra)["chosen"])]
        chosen = base["rows"] + extra
        summary = {**summary, "nested_on": len(base["rows"])}
        return relabel(train.select(chosen), keep), summary, {"rows": chosen, "keep": keep}

    def _cell_config(self, arm: Arm, seed: int, folder: Path) -> dict[str, Any]:
        d = self.design
        private = arm.setting != "clean"
        config = {
            "model_name_or_path": str(self.out / "sft"),
            "dataset_name": str(self.labels(seed, arm.rows)),
            "dataset_train_split": "train",
            "output_dir": str(folder / "model"),
            "privatized_dir": str(self.out / "releases" / arm.release(seed, d.corruption_rate)),
            "method": arm.method,
            "beta": self._beta(arm),
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
            # Resume points (the whole training state) so that a cell cut off goes on from where it was.
            "save_only_model": False,
            "resume_every_epochs": RESUME_EVERY_EPOCHS,
        }
        if not arm.debias:  # Square-χPO with c = 1 on private labels: the ablation of the c(ε) debiasing
            config.update(flip_rate=0.0, privacy_override=True)
        if d.checkpoints is not None:  # measured along training: a checkpoint at each of these epochs
            config["checkpoint_epochs"] = list(d.checkpoints)
        if d.lr_scheduler_type is not None:
            config["lr_scheduler_type"] = d.lr_scheduler_type
        return config

    def cell(self, arm: Arm, seed: int, stage: str) -> dict[str, Any]:
        """Train and measure one cell, or read its record (``results/<stage>/<cell>.json``)."""
        record_path = self.results / stage / f"{cell_name(arm, seed)}.json"
        if record_path.exists():
            return read_record(record_path)
        reused = self._reused(arm, seed, stage)
        if reused is not None:
            record_path.parent.mkdir(parents=True, exist_ok=True)
            record_path.write_text(json.dumps(reused, indent=1))
            return reused
        self._refuse_a_lost_setup()
        refuse_emulated_bf16(self.design, self.allow_emulated_bf16)
        self.sft_samples()
        digests = self._check_setup() if self.portable else None
        folder = self.out / "cells" / cell_name(arm, seed)
        trained = train_cell(folder, self._cell_config(arm, seed, folder), self.python)
        start = time.time()
        measure = self._measure if self.design.checkpoints is None else self._measure_checkpoints
        record = measure(folder / "model")
        train = json.loads((folder / "model" / "train_results.json").read_text())
        resumed = {k: v for k, v in trained.items() if k == "resumed_from_step" and v is not None}
        if resumed:  # the Trainer's train_loss covers only the steps after the resume point
            train["train_loss"] = mean_logged_loss(folder / "model")
        result = {
            "cell": cell_name(arm, seed),
            "arm": arm.key,
            **{k: getattr(arm, k) for k in ("method", "setting", "epsilon", "debias")},
            "rows": arm.rows or self.design.train_rows,
            "beta": self._beta(arm),
            "seed": seed,
            "train_loss": train.get("train_loss"),
            "train_seconds": trained["seconds"],
            "eval_seconds": round(time.time() - start, 1),
            **resumed,
            **cell_provenance(self.design, digests),
            **record,
        }
        record_path.parent.mkdir(parents=True, exist_ok=True)
        record_path.write_text(json.dumps(result, indent=1))
        drop_weights(folder / "model")  # after the record: a cut in between leaves weights, never a cell unmeasurable
        return result

    def _beta(self, arm: Arm) -> float:
        """The arm's own β, else the one the plan chose for it, else the design's."""
        if arm.beta is not None:
            return arm.beta
        return self.planned_betas.get(arm.key, self.design.beta)

    def _reused(self, arm: Arm, seed: int, stage: str) -> dict[str, Any] | None:
        return reused_record(self.design, self.results, arm, seed, stage, self._beta(arm))

    def reusable(self, arm: Arm, seed: int, stage: str = "main") -> bool:
        """Whether this cell would be another study's record (the plan counts it as free)."""
        return is_reusable(self.design, arm, seed, self._beta(arm), stage)

    def _measure(self, model_dir: Path) -> dict[str, Any]:
        evaluator, sft = self.evaluator(), self.sft_record()
        policy = evaluator.measure(self._load(model_dir), pool=self.sft_samples())
        summary = compare(policy, sft["record"], sft["constants"])
        per_prompt = compare_per_prompt(policy, sft["record"])
        return {"summary": summary, "per_prompt": per_prompt, "examples": policy["examples"]}

    def _measure_checkpoints(self, model_dir: Path) -> dict[str, Any]:
        """Each checkpoint measured like a final model, in the order of training; the last is the cell's result."""
        epochs = list(self.design.checkpoints)
        folders = epoch_checkpoints(model_dir, epochs)
        series = []
        for epoch, folder in zip(epochs, folders):
            measured = measure_once(folder, self._measure)
            series.append({"epoch": epoch, "step": int(folder.name.split("-")[1]), **measured})
        last = {k: series[-1][k] for k in ("summary", "per_prompt", "examples")}
        return {**last, "checkpoints": [{k: v for k, v in c.items() if k != "examples"} for c in series]}

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
