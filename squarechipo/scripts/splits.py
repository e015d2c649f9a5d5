"""Load the splits a training recipe names, subset them, and release the training split once.

The training split goes through the label pipeline on the main process, is saved with its ledger under
``privatized_dir`` (default ``<output_dir>/released_train``) and reused by every rank and every re-run, so no
fresh noise is drawn (:func:`squarechipo.privacy.release.release_dataset.release_dataset` with a folder).
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import datasets

from squarechipo.data import load_preference_dataset
from squarechipo.privacy.door import reads_labels
from squarechipo.privacy.release.release_dataset import release_dataset
from squarechipo.scripts.script_args import TrainScriptArguments

__all__ = ["labels_digest", "load_training_splits"]

logger = logging.getLogger("squarechipo")


def _splits(args: TrainScriptArguments) -> datasets.DatasetDict:
    """The named dataset as splits; a single data file is the ``train`` split, as in TRL's scripts."""
    # A saved release (folder or file) is checked against its marker by the loader before anything reads it.
    data = load_preference_dataset(args.dataset_name, config=args.dataset_config)
    if isinstance(data, datasets.Dataset):
        data = datasets.DatasetDict({"train": data})
    if args.dataset_train_split not in data:
        raise ValueError(
            f"{args.dataset_name} has no split {args.dataset_train_split!r} (splits: {list(data)}); set "
            "dataset_train_split to one of them (a single data file is the 'train' split)."
        )
    return data


def _release_folder(args: TrainScriptArguments, output_dir: str, split: str) -> Path:
    """Where a split's release lives: ``privatized_dir`` (train) or beside it (other splits)."""
    base = Path(args.privatized_dir or Path(output_dir) / "released_train")
    return base if split == args.dataset_train_split else base.with_name(f"{base.name}_{split}")


def _release(args: TrainScriptArguments, pipeline, rows, split: str, output_dir: str, state, offset: int = 0):
    """One split released through the run's pipeline once (its own folder and ledger), reused after."""
    seed = None if args.label_seed is None else args.label_seed + offset
    folder = _release_folder(args, output_dir, split)
    released = release_dataset(
        rows,
        pipeline,
        folder,
        seed=seed,
        state=state,
        public_columns=args.label_public_columns or (),
        rerelease=args.label_rerelease,
        privacy_unit=args.label_privacy_unit,
        dataset_name=Path(str(args.dataset_name).rstrip("/")).name,  # what a per-dataset budget names
    )
    logger.info(
        "rank %d/%d %s %d released rows from %s (labels digest %s)",
        state.process_index,
        state.num_processes,
        "trains on" if split == args.dataset_train_split else f"evaluates ({split}) on",
        len(released),
        folder,
        labels_digest(released),
    )
    return released


def _eval_split(args: TrainScriptArguments, data) -> datasets.Dataset | None:
    if args.dataset_test_split not in data:
        logger.warning(
            "%s has no %r split (splits: %s): evaluation is skipped. Set dataset_test_split to one of them, or "
            "eval_strategy: 'no'.",
            args.dataset_name,
            args.dataset_test_split,
            list(data),
        )
        return None
    rows = data[args.dataset_test_split]
    return rows if args.max_eval_samples is None else rows.select(range(min(args.max_eval_samples, len(rows))))


def load_training_splits(args: TrainScriptArguments, output_dir: str, state, *, with_eval: bool, release: bool = True):
    """(released train split, eval split or None): loaded, subset, and released once through the pipeline.

    The training split goes through the label pipeline on the main process, is saved with its ledger under
    ``privatized_dir`` (default ``<output_dir>/released_train``) and reused by every rank and every re-run, so no
    fresh noise is drawn. An evaluation split that carries private labels goes through the same pipeline into a
    folder of its own (``released_train_<split>``) unless it is listed in ``public_splits``: no metric is ever
    computed on raw private labels. ``release=False`` returns the raw splits (for callers that release parts of
    them themselves, e.g. LP-2ST).
    """
    data = _splits(args)
    train = data[args.dataset_train_split]
    start = args.train_rows_from
    if start < 0 or (start and start >= len(train)):
        raise ValueError(
            f"train_rows_from={start}: the training split {args.dataset_train_split!r} has {len(train)} rows; give a "
            "row index below that (or 0)."
        )
    end = len(train) if args.max_train_samples is None else min(start + args.max_train_samples, len(train))
    if start or end < len(train):
        train = train.select(range(start, end))
    eval_dataset = _eval_split(args, data) if with_eval else None
    pipeline = args.label_pipeline()
    if release and (pipeline.is_private or pipeline.is_corrupted):
        train = _release(args, pipeline, train, args.dataset_train_split, output_dir, state)
        if eval_dataset is not None and args.dataset_test_split not in (args.public_splits or []):
            eval_dataset = _release(args, pipeline, eval_dataset, args.dataset_test_split, output_dir, state, offset=1)
    return train, eval_dataset


@reads_labels("dataset", reader="labels_digest (a hash of the labels, logged)", declare="release the rows first")
def labels_digest(dataset) -> str:
    """Hash of the released rows as stored (labels included): equal on every rank iff the labels are."""
    digest = hashlib.sha256()
    for chosen, rejected in zip(dataset["chosen"], dataset["rejected"]):
        digest.update(json.dumps([chosen, rejected], sort_keys=True).encode("utf-8"))
    return digest.hexdigest()[:16]
