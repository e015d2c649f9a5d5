"""Checkpoints at chosen epochs (``checkpoint_epochs``), e.g. log-spaced ones for a study of training length."""

from __future__ import annotations

from transformers import TrainerCallback

__all__ = ["EpochCheckpoints"]

#: state.epoch is a float (epoch + steps done / steps per epoch): an epoch counts as reached within this.
_TOLERANCE = 1e-6


class EpochCheckpoints(TrainerCallback):
    """Ask the Trainer to save a checkpoint (``checkpoint-<step>``) when training first reaches each epoch, on top of
    what ``save_strategy`` saves."""

    def __init__(self, epochs: list[float]):
        self.epochs = sorted(float(e) for e in epochs)
        self.pending: list[float] = list(self.epochs)

    def on_train_begin(self, args, state, control, **kwargs):
        # A resumed run has passed some of them already: their checkpoints were saved before the interruption.
        reached = state.epoch or 0.0
        self.pending = [e for e in self.epochs if e > reached + _TOLERANCE]

    def on_step_end(self, args, state, control, **kwargs):
        epoch = state.epoch or 0.0
        if self.pending and epoch >= self.pending[0] - _TOLERANCE:
            self.pending = [e for e in self.pending if e > epoch + _TOLERANCE]
            control.should_save = True
        return control
