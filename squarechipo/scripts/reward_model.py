"""Train a reward model (Chowdhury et al. 2024 (private reward estimation)) or a pairwise preference model
(Zhou et al. 2025 (Square-χPO), §4) on privatized labels.

    accelerate launch recipes/reward_model.py --config recipes/configs/preference_model.yaml
    accelerate launch recipes/reward_model.py --config recipes/configs/reward_model.yaml

``model_type: preference`` fits ℓ(x, a⁰, a¹) ∈ [−1, 1] by the least squares of Zhou et al. 2025 (Square-χPO), eq. (10)
(the input of iterative Square-χPO, ``recipes/self_play.py``); ``model_type: reward`` fits a scalar reward with the
RR-debiased Bradley–Terry loss of Chowdhury et al. 2024 (private reward estimation). The labels go through the label
pipeline once (``label_*`` fields; saved and reused under ``privatized_dir``), exactly as in ``recipes/train.py``.
"""

from __future__ import annotations

from accelerate import PartialState
from transformers import AutoModelForSequenceClassification, AutoTokenizer
from trl import ModelConfig, TrlParser, get_peft_config

from squarechipo.models import resolve_model_path
from squarechipo.privacy.provenance.lineage import mark_source
from squarechipo.reward import PrivateRewardConfig, PrivateRewardTrainer, to_pairwise_dataset
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


def main(script_args: TrainScriptArguments, training_args: PrivateRewardConfig, model_args: ModelConfig):
    setup_logging()
    _ = training_args.device
    state = PartialState()
    init_kwargs = model_kwargs(model_args, training_args)  # refused here, before any release, if it cannot work
    check_trackers(training_args)
    with state.main_process_first():
        model_path = resolve_model_path(model_args.model_name_or_path)
    train, eval_dataset = load_training_splits(
        script_args, training_args.output_dir, state, with_eval=training_args.eval_strategy != "no"
    )
    declare_public_labels(script_args, training_args, eval_dataset, train)
    if training_args.model_type == "preference":
        train = to_pairwise_dataset(train)
        eval_dataset = to_pairwise_dataset(eval_dataset) if eval_dataset is not None else None
    tokenizer = AutoTokenizer.from_pretrained(model_path, revision=model_args.model_revision)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = mark_source(
        AutoModelForSequenceClassification.from_pretrained(model_path, num_labels=1, **init_kwargs),
        model_path,
    )
    model.config.pad_token_id = tokenizer.pad_token_id
    trainer = PrivateRewardTrainer(
        model,
        args=training_args,
        train_dataset=train,
        eval_dataset=eval_dataset,
        processing_class=tokenizer,
        peft_config=get_peft_config(model_args),
    )
    keep_earlier_model(training_args, state)  # every check passed: the run saves where it was
    result = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    finish_run(
        trainer,
        result,
        script_args.dataset_name,
        f"{training_args.model_type} model, card and privacy record are",
        evaluate=eval_dataset is not None,
    )
    return trainer


def make_parser(prog: str | None = None) -> TrlParser:
    from squarechipo.scripts._common import training_parser

    return training_parser((TrainScriptArguments, PrivateRewardConfig, ModelConfig), prog)


if __name__ == "__main__":
    from squarechipo.scripts._common import script_main

    script_main(main, make_parser, "reward-model")
