"""Zhou et al. 2025 (Square-χPO)'s Table 1 as one resumable run: SFT, every (seed, labels, method) cell, win rates
against SFT.

The plan (Zhou et al. 2025 (Square-χPO), App. E): SFT once on finance_sft rows (disjoint from the preference rows),
then per seed χPO and Square-χPO under CTL and LTC with ε = 0.5, α = 0.1, plus DPO and rDPO on the same released
labels, Square-χPO on clean labels (the upper reference) and Square-χPO under CTL at more ε (the cost of privacy). Each
cell trains with ``recipes/train.py`` in its own process, then its responses to the test prompts are judged against the
SFT policy's by the gold reward-model judge and, as a second opinion, the debiased local judge.

Resuming: every step writes its marker last (``done.json``, a cell's ``cell.json``); a step with its marker is
skipped and one without is cleared and redone. The released labels live apart from the cells
(``releases/<labels>``) and are reused, so a redone cell draws no fresh noise. The methods of one seed and one
label setting train on the same released labels, which makes the method comparisons paired.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from squarechipo.data import load_preference_dataset
from squarechipo.evaluation.pipeline import GenerationSettings, calibrate_judge, evaluate_win_rate
from squarechipo.judge.base import PairwiseJudge
from squarechipo.judge.local import TransformersJudge
from squarechipo.judge.reward_model import RewardModelJudge
from squarechipo.judge.templates import FINANCE_TEMPLATE
from squarechipo.models.generation import generate_responses
from squarechipo.reproduce.aggregate import write_table1
from squarechipo.reproduce.launch import run_script
from squarechipo.reproduce.scales import Scale

__all__ = ["Cell", "Table1Run", "plan_cells"]

logger = logging.getLogger("squarechipo")
DONE = "done.json"
CELL_RECORD = "cell.json"
_PREFERENCE = "finance_preference_conversational"
_SFT = "finance_sft_conversational"
#: Scale fields that only feed the printed estimate: changing them does not change the experiment.
_ESTIMATE_ONLY = {"cell_minutes", "setup_minutes", "notes"}


def _eps_name(epsilon: float | None) -> str:
    return "inf" if epsilon is None else f"{epsilon:g}"


@dataclass(frozen=True)
class Cell:
    """One trained and judged policy: a seed, a label setting (CTL, LTC or clean), ε, α and a method."""

    seed: int
    setting: str
    method: str
    epsilon: float | None
    corruption_rate: float

    @property
    def labels(self) -> str:
        """The released labels this cell trains on; shared by the methods of one seed and setting."""
        return f"{self.setting.lower()}_eps{_eps_name(self.epsilon)}_alpha{self.corruption_rate:g}_seed{self.seed}"

    @property
    def name(self) -> str:
        return f"{self.labels}_{self.method}"


def plan_cells(scale: Scale) -> list[Cell]:
    """Every cell of a scale, seed by seed (an interrupted run then holds whole seeds)."""
    cells = []
    for seed in scale.seeds:
        for setting in scale.settings:
            cells += [Cell(seed, setting, m, scale.epsilon, scale.corruption_rate) for m in scale.methods]
        if scale.clean_reference:
            cells.append(Cell(seed, "clean", "square_chipo", None, 0.0))
        if "CTL" in scale.settings:
            cells += [
                Cell(seed, "CTL", "square_chipo", e, scale.corruption_rate)
                for e in scale.sweep_epsilons
                if e != scale.epsilon
            ]
    return cells


def _once(folder: Path, build: Callable[[], dict[str, Any]], marker: str = DONE) -> dict[str, Any]:
    """Run ``build`` unless ``folder`` holds its marker; a folder without one is a cut-off step: cleared first."""
    record = folder / marker
    if record.exists():
        return json.loads(record.read_text())
    if folder.exists():
        logger.info("redoing %s: it was cut off before it finished", folder)
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    result = build()
    record.write_text(json.dumps(result, indent=2, default=str))
    return result


class Table1Run:
    """One reproduction in ``out`` at ``scale``; its steps run the installed package's scripts."""

    def __init__(self, scale: Scale, out: str | Path, *, python: str | None = None):
        self.scale, self.out, self.python = scale, Path(out), python or sys.executable
        self.data = Path(scale.data_dir)

    # ------------------------------------------------------------------ steps

    def _recipe(self, script: str, config: dict[str, Any], folder: Path) -> None:
        run_script(script, config, folder, self.python)

    def _ensure_data(self) -> None:
        if (self.data / _PREFERENCE / "judge").is_dir():
            return
        if self.data.exists() and any(self.data.iterdir()):
            raise FileNotFoundError(
                f"{self.data / _PREFERENCE} has no judge split: {self.data} was written by an older generator. "
                "Move it away and run again (squarechipo data finance --out data regenerates it)."
            )
        subprocess.run(
            [self.python, "-m", "squarechipo.scripts.data", "--out", str(self.data), "--seed", "0"], check=True
        )

    def _sft(self) -> dict[str, Any]:
        folder = self.out / "sft"
        config = {
            "model_name_or_path": self.scale.base_model,
            "dataset_name": str(self.data / _SFT),
            "dataset_train_split": "train",
            "max_train_samples": self.scale.sft_rows,
            "output_dir": str(folder),
            "learning_rate": self.scale.sft_learning_rate,
            "num_train_epochs": self.scale.sft_epochs,
            "per_device_train_batch_size": self.scale.batch_size,
            "max_length": self.scale.max_length,
            "logging_steps": 2,
            "eval_strategy": "no",
            "save_strategy": "no",
            "report_to": "none",
            "gradient_checkpointing": False,
            "seed": 0,
        }
        return _once(folder, lambda: self._timed(lambda: self._recipe("sft", config, folder)))

    def _gold_judge(self) -> dict[str, Any]:
        folder = self.out / "gold_judge"
        config = {
            "model_name_or_path": self.scale.base_model,
            "dataset_name": str(self.data / _PREFERENCE),
            "dataset_train_split": "judge",
            "dataset_test_split": None,
            "max_train_samples": self.scale.judge_rows,
            "output_dir": str(folder),
        }
        return _once(folder, lambda: self._timed(lambda: self._recipe("gold_judge", config, folder)))

    def _cell_config(self, cell: Cell, folder: Path) -> dict[str, Any]:
        s = self.scale
        return {
            "model_name_or_path": str(self.out / "sft"),
            "dataset_name": str(self.data / _PREFERENCE),
            "dataset_train_split": "train",
            "max_train_samples": s.train_rows,
            "output_dir": str(folder / "model"),
            "privatized_dir": str(self.out / "releases" / cell.labels),
            "method": cell.method,
            "beta": s.beta,
            "r_max": s.r_max,
            "learning_rate": s.learning_rate,
            "num_train_epochs": s.epochs,
            "per_device_train_batch_size": s.batch_size,
            "max_length": s.max_length,
            "precompute_ref_log_probs": True,
            "logging_steps": 2,
            "eval_strategy": "no",
            "save_strategy": "no",
            "report_to": "none",
            "gradient_checkpointing": False,
            "disable_tqdm": True,
            "seed": cell.seed,
            "label_epsilon": cell.epsilon,
            "label_corruption_rate": cell.corruption_rate,
            "label_adversary": "flip",
            "label_order": "ltc" if cell.setting == "LTC" else "ctl",
            # A simulation of labellers: the seed makes the noise reproducible and the ledger says so.
            "label_seed": cell.seed,
            # The finance rows' label-free metadata; the release drops rejected_shown_first, which carries the label.
            "label_public_columns": ["id", "category"],
        }

    @staticmethod
    def _timed(step: Callable[[], Any]) -> dict[str, Any]:
        start = time.time()
        step()
        return {"seconds": round(time.time() - start, 1)}

    # ------------------------------------------------------------------ evaluation

    def _generation(self) -> GenerationSettings:
        return GenerationSettings(max_new_tokens=self.scale.max_new_tokens, batch_size=8, seed=0)

    def _test(self):
        test = load_preference_dataset(str(self.data / _PREFERENCE), split="test")
        n = self.scale.test_prompts
        return test if n is None else test.select(range(min(n, len(test))))

    def _judges(self) -> dict[str, PairwiseJudge]:
        """The gold reward-model judge (the table's), and the debiased local judge as a second opinion."""
        judges: dict[str, PairwiseJudge] = {"gold": RewardModelJudge(str(self.out / "gold_judge"), batch_size=16)}
        if self.scale.second_opinion:
            judges["local"] = TransformersJudge(self.scale.second_opinion, FINANCE_TEMPLATE, batch_size=8)
        return judges

    def _calibration(self, judges: dict[str, PairwiseJudge]) -> dict[str, Any]:
        """Each judge's gold accuracy on the test split's (chosen, rejected) pairs, measured once."""
        gold = load_preference_dataset(str(self.data / _PREFERENCE), split="test")
        pairs = self.scale.calibration_pairs
        # The generator's test pairs are gold pairs (labels from its templates, as in the evaluation of
        # Zhou et al. 2025 (Square-χPO)): public.
        return _once(
            self.out / "judges",
            lambda: {n: calibrate_judge(j, gold, pairs, labels_public=True) for n, j in judges.items()},
        )

    def _baseline(self, test) -> list[str]:
        """The SFT policy's responses to the test prompts, generated once for every cell."""
        settings = asdict(self._generation())
        prompts = list(test["prompt"])

        def build() -> dict[str, Any]:
            return {"responses": generate_responses(str(self.out / "sft"), prompts, desc="SFT", **settings)}

        return _once(self.out / "sft_responses", build)["responses"]

    def _judge_cell(self, cell: Cell, folder: Path, test, judges, baseline: list[str]) -> dict[str, Any]:
        model = str(folder / "model")
        generation = self._generation()
        policy = generate_responses(model, list(test["prompt"]), desc=cell.name, **asdict(generation))
        wins = {}
        for name, judge in judges.items():
            result = evaluate_win_rate(
                model,
                str(self.out / "sft"),
                test,
                judge,
                folder / f"eval_{name}",
                generation=generation,
                calibration_pairs=0,
                label={"setting": cell.setting, "method": cell.method, "seed": str(cell.seed)},
                responses={"policy": policy, "baseline": baseline},
            )
            overall = result.summary["overall"]
            wins[name] = {
                k: overall[k] for k in ("win_rate_half_ties", "win_rate", "loss_rate", "identical", "n_valid")
            }
        return wins

    def _cell(self, cell: Cell, test, judges, baseline: list[str]) -> dict[str, Any]:
        folder = self.out / "cells" / cell.name

        def build() -> dict[str, Any]:
            start = time.time()
            self._recipe("train", self._cell_config(cell, folder), folder)
            wins = self._judge_cell(cell, folder, test, judges, baseline)
            train = json.loads((folder / "model" / "train_results.json").read_text())
            if not self.scale.keep_models:
                for weights in (folder / "model").glob("*.safetensors"):
                    weights.unlink()  # the card, privacy record and metrics stay
            return {
                "name": cell.name,
                **asdict(cell),
                "labels": cell.labels,
                "win": wins,
                "train_loss": train.get("train_loss"),
                "seconds": round(time.time() - start, 1),
            }

        return _once(folder, build, marker=CELL_RECORD)

    # ------------------------------------------------------------------ the run

    def _check_scale(self) -> None:
        """An output folder holds one scale: resuming with another would mix two experiments in one table."""
        path = self.out / "scale.json"
        current = self.scale.to_dict()
        if path.exists():
            saved = json.loads(path.read_text())
            fields = (set(saved) | set(current)) - _ESTIMATE_ONLY
            changed = sorted(k for k in fields if saved.get(k) != current.get(k))
            if changed:
                raise ValueError(
                    f"{self.out} holds a run at another scale (fields {changed} differ): use another --out, or "
                    "delete the folder to start over."
                )
        self.out.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(current, indent=2))

    def estimate(self, cells: list[Cell]) -> tuple[int, float]:
        """(pending cells, expected minutes): measured cell times where this run has some, else the scale's."""
        records = [self.out / "cells" / c.name / CELL_RECORD for c in cells]
        seconds = [json.loads(r.read_text())["seconds"] for r in records if r.exists()]
        pending = len(cells) - len(seconds)
        per_cell = sum(seconds) / len(seconds) / 60 if seconds else self.scale.cell_minutes
        setup = 0.0 if (self.out / "gold_judge" / DONE).exists() else self.scale.setup_minutes
        return pending, setup + pending * per_cell

    def run(self) -> list[dict[str, Any]]:
        """Every step not done yet, then the table (:func:`squarechipo.reproduce.aggregate.write_table1`)."""
        cells = plan_cells(self.scale)
        self._check_scale()
        pending, minutes = self.estimate(cells)
        print(
            f"Table 1 at scale {self.scale.name!r}: {len(cells)} cells ({len(cells) - pending} done, "
            f"{pending} to run), "
            f"seeds {list(self.scale.seeds)}, {self.scale.train_rows or 'all'} training rows, "
            f"{self.scale.test_prompts or 'all'} test prompts. Expected time: about {minutes:.0f} min.",
            flush=True,
        )
        self._ensure_data()
        self._sft()
        self._gold_judge()
        judges = self._judges()
        calibration = self._calibration(judges)
        test = self._test()
        baseline = self._baseline(test)
        records = [self._cell(cell, test, judges, baseline) for cell in tqdm(cells, desc="Table 1 cells")]
        write_table1(records, calibration, self.scale, self.out)
        return records
