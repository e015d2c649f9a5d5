"""Checkpoints at chosen epochs (``checkpoint_epochs``), e.g. log-spaced ones for a study of training length, and
resume points (``resume_every_epochs``): the whole training state every few epochs, of which only the newest is
kept, so that a long run cut off resumes where it was instead of starting again."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from squarechipo.models.runtime import CHECKPOINT_COMPLETE

__all__ = [
    "COMPLETE_MARKER",
    "EpochCheckpoints",
    "complete_checkpoints",
    "is_epoch_checkpoint",
    "last_complete_checkpoint",
]

#: state.epoch is a float (epoch + steps done / steps per epoch): an epoch counts as reached within this.
_TOLERANCE = 1e-6
#: Written into a checkpoint folder by ``on_save``, which the Trainer calls once the whole checkpoint is on disk: a
#: folder without it was cut off while saving. It says whether the folder is one of ``checkpoint_epochs`` (kept).
COMPLETE_MARKER = CHECKPOINT_COMPLETE


def _step(folder: Path) -> int:
    return int(folder.name.split("-")[1])


def complete_checkpoints(output_dir: str | Path) -> list[Path]:
    """The ``checkpoint-<step>`` folders of ``output_dir`` that were saved whole (they hold the marker), by step."""
    folders = Path(output_dir).glob(f"{PREFIX_CHECKPOINT_DIR}-*")
    done = [f for f in folders if f.name.split("-")[1].isdigit() and (f / COMPLETE_MARKER).is_file()]
    return sorted(done, key=_step)


def last_complete_checkpoint(output_dir: str | Path) -> Path | None:
    """The newest checkpoint saved whole, or None."""
    done = complete_checkpoints(output_dir)
    return done[-1] if done else None


def is_epoch_checkpoint(folder: Path) -> bool:
    """Whether ``folder`` is a checkpoint saved whole at one of ``checkpoint_epochs`` (not a resume point only)."""
    marker = folder / COMPLETE_MARKER
    if not marker.is_file():
        return False
    try:
        return bool(json.loads(marker.read_text())["epoch_checkpoint"])
    except (ValueError, KeyError, TypeError) as error:  # never guess: a wrong guess deletes an epoch checkpoint
        raise ValueError(
            f"{marker}: not a checkpoint marker ({error}); restore it, or delete {folder} if it is not needed."
        ) from error


class EpochCheckpoints(TrainerCallback):
    """Ask the Trainer to save a checkpoint (``checkpoint-<step>``) when training first reaches each of ``epochs``
    and, with ``resume_every``, at each multiple of that many epochs, on top of what ``save_strategy`` saves. Each
    saved checkpoint gets :data:`COMPLETE_MARKER`; with ``resume_every`` only the newest checkpoint that is not one
    of ``epochs`` is kept (a resume point needs the optimizer's state: ``save_only_model`` off)."""

    def __init__(self, epochs: list[float] | None, resume_every: float | None = None):
        self.epochs = sorted(float(e) for e in epochs or ())
        self.pending: list[float] = list(self.epochs)
        self.resume_every = resume_every
        self.next_resume = math.inf if resume_every is None else resume_every
        self.epoch_step: int | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        # A resumed run has passed some of them already: their checkpoints were saved before the interruption.
        reached = state.epoch or 0.0
        self.pending = [e for e in self.epochs if e > reached + _TOLERANCE]
        if self.resume_every is not None:
            self.next_resume = (math.floor((reached + _TOLERANCE) / self.resume_every) + 1) * self.resume_every

    def on_step_end(self, args, state, control, **kwargs):
        epoch = state.epoch or 0.0
        if self.pending and epoch >= self.pending[0] - _TOLERANCE:
            self.pending = [e for e in self.pending if e > epoch + _TOLERANCE]
            self.epoch_step = state.global_step
            control.should_save = True
        if epoch >= self.next_resume - _TOLERANCE:
            while self.next_resume <= epoch + _TOLERANCE:
                self.next_resume += self.resume_every
            control.should_save = True
        return control

    def on_save(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        folder = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
        if not folder.is_dir():  # a save of the final model only (no checkpoint folder)
            return
        marker = {
            "step": state.global_step,
            "epoch": state.epoch,
            "epoch_checkpoint": self.epoch_step == state.global_step,
        }
        (folder / COMPLETE_MARKER).write_text(json.dumps(marker))
        if self.resume_every is None:
            return
        for other in Path(args.output_dir).glob(f"{PREFIX_CHECKPOINT_DIR}-*"):
            # Older resume points and folders cut off mid-save go; the epoch checkpoints stay.
            if other != folder and not is_epoch_checkpoint(other):
                shutil.rmtree(other, ignore_errors=True)
