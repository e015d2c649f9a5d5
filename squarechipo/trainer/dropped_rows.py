"""Count the rows TRL's ``_prepare_dataset`` filters out (over ``max_length``) instead of losing them silently."""

from __future__ import annotations

import logging

import datasets

__all__ = ["CountDroppedRowsMixin"]

logger = logging.getLogger("squarechipo")


class CountDroppedRowsMixin:
    """Mixin for TRL trainers: ``dropped_rows[name]`` counts filtered rows, and each drop is logged."""

    def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
        before = len(dataset) if isinstance(dataset, datasets.Dataset) else None
        prepared = super()._prepare_dataset(dataset, processing_class, args, dataset_name)
        if not hasattr(self, "dropped_rows"):
            self.dropped_rows = {}
        if before and not len(prepared):
            raise ValueError(
                f"{dataset_name}: all {before} rows are longer than max_length={args.max_length} tokens, so TRL's "
                "length filter leaves nothing to train on. Raise max_length in the config (or pass --max_length)."
            )
        if before is not None and len(prepared) < before:
            dropped = before - len(prepared)
            self.dropped_rows[dataset_name] = dropped
            logger.warning(
                "%s: %d of %d rows do not fit max_length=%s tokens and are left out by TRL's length filter. "
                "Raise max_length to keep them.",
                dataset_name,
                dropped,
                before,
                args.max_length,
            )
        return prepared
