"""Every evaluation a trainer runs goes through the rule on raw labels, not only the split given at construction."""

from __future__ import annotations

import datasets

from squarechipo.privacy.debiasing import check_eval_labels
from squarechipo.privacy.ledger import get_ledger

__all__ = ["EvalLabelGuardMixin"]


class EvalLabelGuardMixin:
    """Mixin for TRL trainers whose config has ``eval_labels_public``: ``trainer.evaluate(eval_dataset=raw)`` after a
    run on released labels is refused as the ``eval_dataset`` of the constructor is
    (:func:`squarechipo.privacy.debiasing.check_eval_labels`)."""

    def _guard_evaluation(self, train_dataset, eval_dataset, args) -> None:
        """Call before TRL tokenizes the data: remember whether the training labels were released, check the eval
        split."""
        self._labels_released = isinstance(train_dataset, datasets.Dataset) and get_ledger(train_dataset) is not None
        check_eval_labels(
            None,
            eval_dataset,
            public=args.eval_labels_public,
            trainer=type(self).__name__,
            released=self._labels_released,
        )

    def evaluate(self, eval_dataset=None, *args, **kwargs):
        if eval_dataset is not None:
            check_eval_labels(
                None,
                eval_dataset,
                public=self.args.eval_labels_public,
                trainer=type(self).__name__,
                released=getattr(self, "_labels_released", False),
            )
        return super().evaluate(eval_dataset, *args, **kwargs)
