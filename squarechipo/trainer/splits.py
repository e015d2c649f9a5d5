"""Load the splits a training recipe names, subset them, and release the training split once.

The training split goes through the label pipeline on the main process, is saved with its ledger under
``privatized_dir`` (default ``<output_dir>/released_train``) and reused by every rank and every re-run, so no
fresh noise is drawn (:func:`squarechipo.privacy.release.release_once`).
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import datasets

from squarechipo.data import load_preference_dataset
from squarechipo.privacy.release import release_once
from squarechipo.trainer.script_args import TrainScriptArguments

__all__ = ["labels_digest", "load_training_splits", "skip_eval_when_absent"]

logger = logging.getLogger("squarechipo")


def _splits(args: TrainScriptArguments) -> datasets.DatasetDict:
    """The named dataset as splits; a single data file is the ``train`` split, as in TRL's scripts."""
    data = load_preference_dataset(args.dataset_name, config=args.dataset_config)
    if isinstance(data, datasets.Dataset):
        data = datasets.DatasetDict({"train": data})
    if args.dataset_train_split not in data:
        raise ValueError(
            f"{args.dataset_name} has no split {args.dataset_train_split!r} (splits: {list(data)}); set "
            "dataset_train_split to one of them (a single data file is the 'train' split)."
        )
    return data


def load_training_splits(args: TrainScriptArguments, output_dir: str, state, *, with_eval: bool, release: bool = True):
    """(released train split, eval split or None): loaded, subset, and released once through the pipeline.

    The training split goes through the label pipeline on the main process, is saved with its
    ledger under ``privatized_dir`` (default ``<output_dir>/released_train``) and reused by every
    rank and every re-run, so no fresh noise is drawn. ``release=False`` returns the raw split
    (for callers that release parts of it themselves, e.g. LP-2ST).
    """
    data = _splits(args)
    train = data[args.dataset_train_split]
    if args.max_train_samples is not None:
        train = train.select(range(min(args.max_train_samples, len(train))))
    eval_dataset = None
    if with_eval and args.dataset_test_split in data:
        eval_dataset = data[args.dataset_test_split]
        if args.max_eval_samples is not None:
            eval_dataset = eval_dataset.select(range(min(args.max_eval_samples, len(eval_dataset))))
    elif with_eval:
        logger.warning(
            "%s has no %r split (splits: %s): evaluation is skipped. Set dataset_test_split to one of them, or "
            "eval_strategy: 'no'.",
            args.dataset_name,
            args.dataset_test_split,
            list(data),
        )
    pipeline = args.label_pipeline()
    if release and (pipeline.is_private or pipeline.is_corrupted):
        folder = Path(args.privatized_dir or Path(output_dir) / "released_train")
        train = release_once(train, pipeline, folder, seed=args.label_seed, state=state)
        logger.info(
            "rank %d/%d trains on %d released rows from %s (labels digest %s)",
            state.process_index,
            state.num_processes,
            len(train),
            folder,
            labels_digest(train),
        )
    return train, eval_dataset


def skip_eval_when_absent(training_args, eval_dataset) -> None:
    """Turn evaluation off when the data has no eval split (the warning was logged when loading it)."""
    if eval_dataset is None and training_args.eval_strategy != "no":
        training_args.eval_strategy = "no"
        training_args.do_eval = False


def labels_digest(dataset) -> str:
    """Hash of the released rows as stored (labels included): equal on every rank iff the labels are."""
    digest = hashlib.sha256()
    for chosen, rejected in zip(dataset["chosen"], dataset["rejected"]):
        digest.update(json.dumps([chosen, rejected], sort_keys=True).encode("utf-8"))
    return digest.hexdigest()[:16]
