"""A study cell's work folder: its training, resumed where a cut-off run left it, and its measurements, kept as
each is made, so a cell cut off at any point goes on from there instead of starting again."""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from squarechipo.reproduce.launch import run_script
from squarechipo.trainer.checkpoints import complete_checkpoints, is_epoch_checkpoint, last_complete_checkpoint

__all__ = [
    "RESUME_EVERY_EPOCHS",
    "compare_per_prompt",
    "drop_weights",
    "epoch_checkpoints",
    "mean_logged_loss",
    "measure_once",
    "train_cell",
]

logger = logging.getLogger("squarechipo")
#: A cell's training saves a resume point this often: a cell cut off loses at most this much training. Not a design
#: setting: a resumed run trains exactly as one that was not cut off (tests/test_trainer.py).
RESUME_EVERY_EPOCHS = 4.0
#: In a cell folder: its training finished (the seconds it took and the step it resumed from, if any).
TRAINED = "trained.json"
#: In a checkpoint folder: its measurement, written before its weights are deleted.
MEASURED = "measured.json"
#: What a cell keeps of its models once measured: none of these (weights, optimizer and scheduler state, RNG).
_HEAVY = (".safetensors", ".pt", ".pth", ".bin")


def train_cell(folder: Path, config: dict[str, Any], python: str | None = None) -> dict[str, Any]:
    """Train the cell in ``folder``, going on from what a cut-off run left there if it trained with ``config``:
    nothing again once trained, else from its newest resume point saved whole. The seconds (of the last attempt)
    and the step resumed from."""
    resume = None
    if trained_with(folder, config):
        if (folder / TRAINED).is_file():
            return json.loads((folder / TRAINED).read_text())
        resume = last_complete_checkpoint(folder / "model")
    if resume is None:
        if folder.exists():
            shutil.rmtree(folder)  # cut off before its first resume point, or trained with other settings
        folder.mkdir(parents=True)
    else:
        logger.warning("%s: resuming its training from %s", folder.name, resume.name)
        config = {**config, "resume_from_checkpoint": str(resume)}
    start = time.time()
    run_script("train", config, folder, python)
    done = {
        "seconds": round(time.time() - start, 1),
        "resumed_from_step": None if resume is None else int(resume.name.split("-")[1]),
    }
    (folder / TRAINED).write_text(json.dumps(done))
    return done


def trained_with(folder: Path, config: dict[str, Any]) -> bool:
    """Whether ``folder`` holds a training run started with ``config`` (resumed or not)."""
    written = folder / "train.yaml"
    if not written.is_file():
        return False
    try:
        recorded = yaml.safe_load(written.read_text())
    except (OSError, yaml.YAMLError):
        return False  # unreadable: the cell starts again
    if not isinstance(recorded, dict):
        return False
    recorded.pop("resume_from_checkpoint", None)
    return recorded == config


def epoch_checkpoints(model_dir: Path, epochs: list[float]) -> list[Path]:
    """The checkpoints saved whole at the design's epochs, in the order of training (resume points aside)."""
    folders = [f for f in complete_checkpoints(model_dir) if is_epoch_checkpoint(f)]
    if len(folders) != len(epochs):
        raise RuntimeError(f"{model_dir}: {len(folders)} checkpoints, expected one at each of epochs {epochs}.")
    return folders


def measure_once(folder: Path, measure: Callable[[Path], dict[str, Any]]) -> dict[str, Any]:
    """A checkpoint's measurement: the one kept from before a cut-off, else ``measure(folder)``, kept, after which
    the checkpoint's weights go (a cell never holds more than one extra copy for long)."""
    if (folder / MEASURED).is_file():
        return json.loads((folder / MEASURED).read_text())
    measured = measure(folder)
    (folder / MEASURED).write_text(json.dumps(measured))
    drop_weights(folder)
    return measured


def mean_logged_loss(model_dir: Path) -> float | None:
    """The mean training loss over every step, from the logged window means in ``trainer_state.json`` (a resumed
    run's log holds the steps before its resume point too); None if the log does not cover the last step."""
    state = json.loads((model_dir / "trainer_state.json").read_text())
    logged = [(e["step"], e["loss"]) for e in state["log_history"] if "loss" in e]
    if not logged or logged[-1][0] != state["global_step"]:
        return None
    steps = [s for s, _ in logged]
    return sum(loss * (s - p) for (s, loss), p in zip(logged, [0, *steps[:-1]])) / steps[-1]


def drop_weights(model_dir: Path) -> None:
    """Delete a model folder's weights and training state, and its resume points, keeping its records."""
    for folder in model_dir.glob("checkpoint-*"):
        if not is_epoch_checkpoint(folder):
            shutil.rmtree(folder)
    for path in model_dir.rglob("*"):
        if path.is_file() and path.suffix in _HEAVY:
            path.unlink()


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
