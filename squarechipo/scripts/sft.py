"""Supervised fine-tuning on finance_sft (prompt + chosen) with TRL's SFTTrainer (with the lean LM head).

    accelerate launch recipes/sft.py --config recipes/configs/sft.yaml

``model_name_or_path: embedded`` is the embedded SmolLM2-135M-Instruct.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import datasets
from accelerate import PartialState
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import ModelConfig, ScriptArguments, TrlParser, get_peft_config

from squarechipo.data.loading import load_rows
from squarechipo.models import resolve_model_path
from squarechipo.models.card import fix_model_card
from squarechipo.privacy.provenance.lineage import ModelLineage, public_labels_record
from squarechipo.privacy.provenance.record import write_privacy_record
from squarechipo.privacy.provenance.sketch import weights_identity
from squarechipo.scripts._common import (
    check_trackers,
    finish_run,
    keep_earlier_model,
    model_kwargs,
    setup_logging,
)
from squarechipo.trainer.config import SFTRecipeConfig
from squarechipo.trainer.sft import LeanSFTTrainer


@dataclass
class SFTScriptArguments(ScriptArguments):
    dataset_test_split: str = field(default="validation", metadata={"help": "Evaluation split."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Train on the first N rows."})


def _train_rows(script_args: SFTScriptArguments) -> tuple[datasets.DatasetDict, datasets.Dataset]:
    """The SFT data and its (possibly truncated) train split; one data file is the train split, as `train` takes it."""
    data = load_rows(script_args.dataset_name, config=script_args.dataset_config)
    if isinstance(data, datasets.Dataset):
        data = datasets.DatasetDict({script_args.dataset_train_split: data})
    if script_args.dataset_train_split not in data:
        raise ValueError(
            f"{script_args.dataset_name} has no split {script_args.dataset_train_split!r} (splits: {list(data)}); set "
            "dataset_train_split to one of them."
        )
    train = data[script_args.dataset_train_split]
    if script_args.max_train_samples is not None:
        train = train.select(range(min(script_args.max_train_samples, len(train))))
    return data, train


def main(script_args: SFTScriptArguments, training_args: SFTRecipeConfig, model_args: ModelConfig) -> LeanSFTTrainer:
    setup_logging()
    _ = training_args.device  # let TrainingArguments set up the (multi-CPU or GPU) distributed state first
    init_kwargs = model_kwargs(model_args, training_args)
    check_trackers(training_args)
    with PartialState().main_process_first():
        model_path = resolve_model_path(model_args.model_name_or_path)
    data, train = _train_rows(script_args)
    eval_dataset = data.get(script_args.dataset_test_split) if training_args.eval_strategy != "no" else None
    tokenizer = AutoTokenizer.from_pretrained(
        model_path, trust_remote_code=init_kwargs.get("trust_remote_code", False)
    )
    model = AutoModelForCausalLM.from_pretrained(model_path, **init_kwargs)
    start_identity = weights_identity(model)  # a run that changes no weight records "no update"
    trainer = LeanSFTTrainer(
        model,
        args=training_args,
        train_dataset=train,
        eval_dataset=eval_dataset,
        processing_class=tokenizer,
        peft_config=get_peft_config(model_args),
    )
    keep_earlier_model(training_args, PartialState())  # every check passed: the run saves where it was
    result = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)

    def record_public_rows() -> None:
        if not trainer.is_world_process_zero():
            return
        fix_model_card(
            training_args.output_dir, base_model=model_path, dataset_name=script_args.dataset_name, model_name=None
        )
        # No label privacy in SFT; the record lets the central selector check this model's training data.
        # `upstream` carries the starting model's own record, so a model trained from this one is checked
        # against this SFT data too (transitive lineage).
        record = public_labels_record("sft", [("initial", ModelLineage.of_model(model_path))], train, context="sft")
        intro = (
            "This model was fine-tuned with [squarechipo](https://pypi.org/project/squarechipo/)'s SFT recipe on "
            "public rows; no label privacy is claimed for them."
        )
        write_privacy_record(
            training_args.output_dir, record, intro=intro, model=trainer.accelerator.unwrap_model(trainer.model),
            start_identity=start_identity,
        )  # fmt: skip

    # The model is saved with its tokenizer (processing_class); SFT evaluates only as its config's strategy says.
    finish_run(
        trainer,
        result,
        script_args.dataset_name,
        "SFT model and card are",
        evaluate=False,
        after_card=record_public_rows,
    )
    return trainer


def make_parser(prog: str | None = None) -> TrlParser:
    from squarechipo.scripts._common import training_parser

    return training_parser((SFTScriptArguments, SFTRecipeConfig, ModelConfig), prog)


if __name__ == "__main__":
    from squarechipo.scripts._common import script_main

    script_main(main, make_parser, "sft")
