"""Align a causal LM on privatized and/or corrupted preference labels.

    accelerate launch recipes/train.py --config recipes/configs/square_chipo.yaml
    torchrun --nproc_per_node 2 recipes/train.py --config ...      # two CPU processes (gloo)

Every field of ``TrainScriptArguments`` (dataset, label pipeline), ``SquareChiPOConfig`` (TRL's
``DPOConfig`` + method, r_max, ...) and TRL's ``ModelConfig`` (model, LoRA) can be set in the YAML
file or on the command line. ``model_name_or_path: embedded`` is the embedded SmolLM2-135M-Instruct.

The training split is released through the label pipeline once, on the main process, saved with
its privacy ledger under ``privatized_dir``, and reused by every rank and every re-run.
"""

from __future__ import annotations

import logging

from accelerate import PartialState
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import ModelConfig, TrlParser, get_peft_config

from squarechipo.models import resolve_model_path
from squarechipo.privacy.provenance.lineage import mark_source
from squarechipo.scripts._common import (
    check_trackers,
    declare_public_labels,
    finish_run,
    keep_earlier_model,
    model_kwargs,
    setup_logging,
)
from squarechipo.scripts.script_args import TrainScriptArguments
from squarechipo.scripts.splits import load_training_splits
from squarechipo.trainer import SquareChiPOConfig, SquareChiPOTrainer, check_hub_reachable

logger = logging.getLogger("squarechipo")


def main(
    script_args: TrainScriptArguments, training_args: SquareChiPOConfig, model_args: ModelConfig
) -> SquareChiPOTrainer:
    setup_logging()
    _ = training_args.device  # let TrainingArguments set up the (multi-CPU or GPU) distributed state first
    state = PartialState()
    init_kwargs = model_kwargs(model_args, training_args)  # refused here, before any release, if it cannot work
    check_trackers(training_args)
    check_hub_reachable(training_args)  # before the release: a push that cannot happen stops the run here
    with state.main_process_first():  # the embedded model is converted once, by the main process
        model_path = resolve_model_path(model_args.model_name_or_path)

    train, eval_dataset = load_training_splits(
        script_args, training_args.output_dir, state, with_eval=training_args.eval_strategy != "no"
    )
    declare_public_labels(script_args, training_args, eval_dataset, train)

    tokenizer = AutoTokenizer.from_pretrained(
        model_path, revision=model_args.model_revision, trust_remote_code=init_kwargs.get("trust_remote_code", False)
    )
    model = mark_source(AutoModelForCausalLM.from_pretrained(model_path, **init_kwargs), model_path)
    peft_config = get_peft_config(model_args)
    ref_model = None
    if peft_config is None and not training_args.precompute_ref_log_probs:
        ref_model = mark_source(AutoModelForCausalLM.from_pretrained(model_path, **init_kwargs), model_path)

    trainer = SquareChiPOTrainer(
        model,
        ref_model=ref_model,
        args=training_args,
        train_dataset=train,
        eval_dataset=eval_dataset,
        processing_class=tokenizer,
        peft_config=peft_config,
    )
    keep_earlier_model(training_args, state)  # every check passed: the run saves where it was
    result = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    finish_run(
        trainer,
        result,
        script_args.dataset_name,
        "Model, card (README.md), privacy record and metrics are",
        evaluate=eval_dataset is not None,
    )
    return trainer


def make_parser(prog: str | None = None) -> TrlParser:
    from squarechipo.scripts._common import training_parser

    return training_parser((TrainScriptArguments, SquareChiPOConfig, ModelConfig), prog)


if __name__ == "__main__":
    from squarechipo.scripts._common import script_main

    script_main(main, make_parser, "train")
