"""The private-trainer base: the one door private data goes through in the policy and reward trainers.

:class:`PrivateTrainerMixin` is the first base of :class:`~squarechipo.trainer.trainer.SquareChiPOTrainer` and
:class:`~squarechipo.reward.trainer.PrivateRewardTrainer` (and so of the self-play and best-of-K trainers). It holds
the privacy set-up that both ran in copies (which had drifted):

1. **Admission of the training split**, whatever its kind: a ``DatasetDict`` is refused (name the split); a
   ``datasets.Dataset`` must carry a ledger that matches its rows
   (:func:`squarechipo.privacy.ledger.binding.get_ledger`) or be declared public (``train_labels_public``, or a config
   ε for data released elsewhere); a streamed (``IterableDataset``) or pre-tokenised split cannot be matched to a
   ledger, so it is accepted only as public, and its model is recorded as trained on unknown rows (a later private run
   refuses to start from it).
2. **The debiasing** the ledger asks for (:func:`squarechipo.privacy.ledger.debiasing.resolve_privacy`), refused when
the
   trainer's loss cannot apply it.
3. **Every read of labels at run time**: each evaluation split at construction, every dataset TRL prepares
   (``evaluate(eval_dataset=...)``), and whatever reaches ``get_eval_dataloader`` / ``get_test_dataloader`` (an
   ``eval_dataset`` assigned by hand, ``predict``) must be released or declared public (``eval_labels_public``).
4. **The record**: training rows (fingerprint, prompt sketch), lineage of the starting models (refused when they saw
   these rows), the starting weights' sketch; written with the card and beside every saved model and checkpoint.
5. **Rows TRL's length filter drops** are counted and named, never lost silently.
"""

from __future__ import annotations

import dataclasses
import logging

import datasets
import torch

from squarechipo.data.fingerprint import training_data_record
from squarechipo.data.label_roles import tag_role
from squarechipo.models.card import fix_model_card
from squarechipo.models.runtime import readable_weights
from squarechipo.privacy.door import RawLabelsError, require_released_or_public
from squarechipo.privacy.ledger.binding import get_ledger
from squarechipo.privacy.ledger.debiasing import PrivacySettings, resolve_privacy
from squarechipo.privacy.provenance.lineage import LineageReport, ModelLineage, check_lineage
from squarechipo.privacy.provenance.record import PrivacyRecord, start_sketch, write_privacy_record
from squarechipo.privacy.provenance.sketch import weights_identity

__all__ = ["PrivateTrainerMixin"]

logger = logging.getLogger("squarechipo")


def _ledger_of(dataset):
    """The training split's ledger (matched to its rows), after refusing kinds that cannot be trained on."""
    if isinstance(dataset, (datasets.DatasetDict, datasets.IterableDatasetDict)):
        raise ValueError(
            f"train_dataset is a {type(dataset).__name__} with splits {list(dataset)}: pass the split to train on, "
            "e.g. train_dataset=data['train']."
        )
    return get_ledger(dataset) if dataset is not None else None


def _reads_at_run_time(method):
    """Tag a method of the base that reads an evaluation or test split (it applies the rule itself)."""
    return tag_role(method, "reads_labels", dataset="eval_dataset", public="eval_labels_public", trainer=True)


class PrivateTrainerMixin:
    """The privacy set-up, the label rule at every read, and the record, shared by the squarechipo trainers."""

    #: The ledger answers (:class:`squarechipo.privacy.ledger.ledger.Debiasing` methods) this trainer's loss applies.
    _debiasing_methods: tuple[str, ...] = ("flip_rate", "none")
    #: What to use instead when the loss cannot apply the ledger's debiasing.
    _debiasing_instead: str = ""
    #: ``stage`` of the privacy record this trainer writes.
    record_stage: str = "training"

    def __init_subclass__(cls, **kwargs):
        """Every trainer's constructor reads labels through this base: tagged so the door's test finds it."""
        super().__init_subclass__(**kwargs)
        if "__init__" in vars(cls):
            tag_role(cls.__init__, "reads_labels", dataset="train_dataset", public="train_labels_public", trainer=True)

    # ------------------------------------------------------------------ set-up (before TRL's __init__)

    def _set_up_privacy(self, model, ref_model, train_dataset, eval_dataset, args, *, flip_rate=None) -> None:
        ledger = _ledger_of(train_dataset)
        privacy = resolve_privacy(
            ledger, epsilon=args.debias_epsilon, flip_rate=flip_rate, override=args.privacy_override
        )
        if ledger is None and privacy.source == "none" and train_dataset is not None:
            self._refuse_raw_training(train_dataset, args)
            privacy = dataclasses.replace(privacy, source="labels declared public (train_labels_public)")
        privacy.require(self._debiasing_methods, type(self).__name__, self._debiasing_instead)
        self.privacy: PrivacySettings = privacy
        self._labels_released = ledger is not None
        self._admitted_train = train_dataset
        #: The datasets this trainer prepared (tokenized) from splits that passed the rule, by identity: a reader
        #: later finds its own objects here, and nothing a caller sets (a fingerprint) can stand in for one.
        self._prepared: list = []
        self._eval_labels_public = bool(args.eval_labels_public)
        self._check_eval_splits(eval_dataset)
        self.training_data = training_data_record(train_dataset)
        self.lineage: LineageReport | None = self._check_lineage(model, ref_model, train_dataset, args)
        #: The starting weights, sketched, so a cast, merged or reshaped copy of the trained model is recognised later.
        self._start_sketch = start_sketch(model, self.privacy.epsilon is not None)
        #: The starting weights' identity: a run that changes none of them (a learning rate of 0 through its steps)
        #: records "no update" instead of "trained on these rows" under the starting model's identity.
        self._start_identity = weights_identity(model) if isinstance(model, torch.nn.Module) else None

    def _refuse_raw_training(self, train_dataset, args) -> None:
        """Raw training labels are private by default: train on them only when declared public."""
        if args.train_labels_public:
            if not isinstance(train_dataset, datasets.Dataset) or self._pre_tokenised(train_dataset):
                logger.warning(
                    "train_dataset is a %s that cannot be fingerprinted: the model is recorded as trained on unknown "
                    "rows, and a private run will refuse to start from it (override_lineage_guard lets it).",
                    "pre-tokenised dataset" if isinstance(train_dataset, datasets.Dataset) else "streamed dataset",
                )
            return
        kind = type(train_dataset).__name__
        lost = "" if isinstance(train_dataset, datasets.Dataset) else f" (a {kind} carries no ledger)"
        raise RawLabelsError(
            f"{type(self).__name__}: the training labels are raw{lost}: they were not released through a privacy "
            "mechanism (no privacy ledger), and a model trained on them, its metrics and its checkpoints would carry "
            "them. Release them first (squarechipo.privacy.release_dataset, or label_epsilon in a training config), "
            "or, if they are not private (simulated or public labels), declare it: train_labels_public=True."
        )

    @staticmethod
    def _pre_tokenised(dataset: datasets.Dataset) -> bool:
        columns = set(dataset.column_names)
        return not ({"chosen", "rejected"} <= columns or "responses" in columns or "prompt" in columns)

    def _starting_models(self, model, ref_model) -> list[tuple[str, ModelLineage]]:
        """The models this run starts from, by role (TRL's default reference is the initial policy)."""
        policy = ModelLineage.of_model(model)
        if ref_model is None:
            return [("policy and reference", policy)]
        return [("policy", policy), ("reference", ModelLineage.of_model(ref_model))]

    def _check_lineage(self, model, ref_model, train_dataset, args) -> LineageReport | None:
        """Refuse a starting model trained on the rows whose private labels this run trains on."""
        if not isinstance(train_dataset, datasets.Dataset):
            return None
        return check_lineage(
            self._starting_models(model, ref_model),
            train_dataset,
            private=self.privacy.epsilon is not None,
            override=args.override_lineage_guard,
            override_field="override_lineage_guard",
            context=type(self).__name__,
        )

    # ------------------------------------------------------------------ every read of labels

    def _check_read(self, dataset, name: str) -> None:
        """The label rule for one evaluation or prediction split (the training split passed at construction)."""
        if dataset is None or dataset is getattr(self, "_admitted_train", None):
            return
        parts = dataset.items() if isinstance(dataset, dict) else [(name, dataset)]
        for split, part in parts:
            if self._is_prepared(part):
                continue
            require_released_or_public(
                part,
                split=split,
                public=getattr(self, "_eval_labels_public", False) or self._args_say_public(),
                reader=type(self).__name__,
                declare="eval_labels_public=True",
            )

    def _args_say_public(self) -> bool:
        """``eval_labels_public`` as the config says now (it may be set after construction)."""
        args = getattr(self, "args", None)
        return bool(getattr(args, "eval_labels_public", False))

    def _check_eval_splits(self, eval_dataset) -> None:
        self._check_read(eval_dataset, "eval")

    def _remember(self, dataset) -> None:
        """A dataset this trainer prepared from one that passed the rule: later reads of that very object pass."""
        if dataset is not None and not self._is_prepared(dataset):
            self._prepared.append(dataset)

    def _is_prepared(self, dataset) -> bool:
        return any(dataset is prepared for prepared in getattr(self, "_prepared", ()))

    def get_train_dataloader(self):
        """The training rows as TRL loads them, only if they are the rows this trainer prepared from the split it
        checked at construction: a ``train_dataset`` assigned afterwards is refused, whatever it holds."""
        if self.train_dataset is not None and not self._is_prepared(self.train_dataset):
            raise RawLabelsError(
                f"{type(self).__name__}: train_dataset was replaced after the trainer was built, so the rows it would "
                "train on were never checked (a trainer checks its training rows, and records their ledger, when it "
                "is built). Build a new trainer with these rows: SquareChiPOTrainer(..., train_dataset=rows)."
            )
        return super().get_train_dataloader()

    def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
        self._check_read(dataset, dataset_name)
        before = len(dataset) if isinstance(dataset, datasets.Dataset) else None
        prepared = super()._prepare_dataset(dataset, processing_class, args, dataset_name)
        self._count_dropped(before, prepared, dataset_name, args)
        self._remember(prepared)
        return prepared

    def _precompute_ref_logps(self, dataset, name, batch_size):
        if not self._is_prepared(dataset):  # it builds a DataLoader over the rows: only rows this trainer prepared
            self._check_read(dataset, name)
        computed = super()._precompute_ref_logps(dataset, name, batch_size)
        self._remember(computed)
        return computed

    @_reads_at_run_time
    def evaluate(self, eval_dataset=None, *args, **kwargs):
        if eval_dataset is not None and not isinstance(eval_dataset, str):
            self._check_read(eval_dataset, "eval")  # before TRL prepares it (or refuses it for other reasons)
        return super().evaluate(eval_dataset, *args, **kwargs)

    @_reads_at_run_time
    def get_eval_dataloader(self, eval_dataset=None):
        target = self.eval_dataset if eval_dataset is None else eval_dataset
        if isinstance(eval_dataset, str):
            target = self.eval_dataset[eval_dataset]
        self._check_read(target, eval_dataset if isinstance(eval_dataset, str) else "eval")
        return super().get_eval_dataloader(eval_dataset)

    @_reads_at_run_time
    def get_test_dataloader(self, test_dataset):
        self._check_read(test_dataset, "test")
        return super().get_test_dataloader(test_dataset)

    def _count_dropped(self, before: int | None, prepared, dataset_name: str, args) -> None:
        """Count the rows TRL's length filter left out (over ``max_length``) instead of losing them silently."""
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

    # ------------------------------------------------------------------ resuming

    def train(self, resume_from_checkpoint=None, *args, **kwargs):
        """TRL's ``train``, after checking the checkpoint it would resume from (:meth:`_check_resume`)."""
        if resume_from_checkpoint:
            self._check_resume(resume_from_checkpoint)
        return super().train(resume_from_checkpoint, *args, **kwargs)

    def _check_resume(self, checkpoint) -> None:
        """A checkpoint's weights enter this run as its starting point, so they must be this run's own: a
        checkpoint saved by a run on these rows under this ledger, its record's seal intact, signed by this run's own
        key (where it has one), and its weights the files that record names. Weights from any other run (raw labels,
        another ε, other rows, edited files) would be saved under this run's card."""
        from transformers.trainer_utils import get_last_checkpoint

        from squarechipo.privacy.provenance.record import read_privacy_record
        from squarechipo.trust.keys import public_key_text, signing_key

        folder = get_last_checkpoint(self.args.output_dir) if checkpoint is True else str(checkpoint)
        if folder is None:
            return  # TRL says there is nothing to resume from
        fix = "Resume only from a checkpoint of this run (same rows, same release), or start it afresh."
        try:
            record = read_privacy_record(folder)
        except ValueError as error:
            raise RawLabelsError(f"resume_from_checkpoint={folder}: {error}") from None
        if record is None:
            raise RawLabelsError(
                f"resume_from_checkpoint={folder}: the checkpoint carries no privacy record, so nothing says which "
                f"labels its weights were trained on; this run would save them under its own card. {fix}"
            )
        own = signing_key(create=False)
        if own is not None and record.signer != public_key_text(own.public):
            # A record with this run's rows, ledger and ε, signed by another key (or by none: anyone can write one),
            # would hand this run weights that another process trained, on whatever it trained them on.
            who = "no key (an unsigned record)" if record.signer is None else f"another key ({record.signer[:24]}...)"
            raise RawLabelsError(
                f"resume_from_checkpoint={folder}: its privacy record was signed by {who}, not by this run's key "
                f"{own.key_id}: another process wrote it. {fix}"
            )
        ours = self.privacy_record()
        theirs_ledger = (record.ledger or {}).get("digest")
        ours_ledger = (ours.ledger or {}).get("digest")
        differs = [
            name
            for name, a, b in (
                ("stage", record.stage, ours.stage),
                ("the release (ledger digest)", theirs_ledger, ours_ledger),
                ("ε", record.epsilon, ours.epsilon),
                ("the training rows (fingerprint)", record.dataset_fingerprint, ours.dataset_fingerprint),
            )
            if a != b
        ]
        if differs:
            raise RawLabelsError(
                f"resume_from_checkpoint={folder}: the checkpoint was saved by another run ({', '.join(differs)} "
                f"differ from this run's: ε {record.epsilon} there, {ours.epsilon} here). {fix}"
            )

    # ------------------------------------------------------------------ the record

    def record_details(self) -> dict:
        """The stage's own public fields (method, β, loss, ...)."""
        return {}

    def privacy_record(self) -> PrivacyRecord:
        """Everything the card and ``squarechipo_privacy.json`` record (public parameters only)."""
        return PrivacyRecord.build(
            {
                "stage": self.record_stage,
                **self.record_details(),
                "dropped_rows": dict(getattr(self, "dropped_rows", {})),
                **self.privacy.record(self.args.privacy_override),
                **self.training_data,
                **(self.lineage.record() if self.lineage is not None else {}),
            }
        )

    def _card_intro(self) -> str | None:
        return None

    def _saved_model(self):
        """The model whose weights were saved (unwrapped); None under FSDP/DeepSpeed, where they are sharded."""
        if getattr(self, "is_fsdp_enabled", False) or getattr(self, "is_deepspeed_enabled", False):
            return None
        return self.accelerator.unwrap_model(self.model)

    def _write_record(self, folder) -> None:
        write_privacy_record(
            folder, self.privacy_record(), intro=self._card_intro(), model=self._saved_model(),
            start_sketch=self._start_sketch, start_identity=self._start_identity,
        )  # fmt: skip

    def create_model_card(self, model_name=None, dataset_name=None, tags=None, **kwargs):
        super().create_model_card(model_name=model_name, dataset_name=dataset_name, tags=tags, **kwargs)
        if self.is_world_process_zero():
            base = getattr(self.model.config, "_name_or_path", None)
            fix_model_card(self.args.output_dir, base_model=base, dataset_name=dataset_name, model_name=model_name)
            self._write_record(self.args.output_dir)

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False):
        """TRL's save, then the privacy record beside the weights: in the output folder, in every checkpoint-N
        folder (``_save_checkpoint`` saves through here) and in any folder a user saves to."""
        super().save_model(output_dir, _internal_call=_internal_call)
        if self.is_world_process_zero():
            readable_weights(output_dir or self.args.output_dir)
            self._write_record(output_dir or self.args.output_dir)
