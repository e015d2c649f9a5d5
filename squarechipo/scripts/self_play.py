"""Iterative Square-χPO for general (non-transitive) preferences (Zhou et al. 2025 (Square-χPO), Algorithm 3).

    accelerate launch recipes/reward_model.py --config recipes/configs/preference_model.yaml   # ℓ̂ on private labels
    accelerate launch recipes/self_play.py --config recipes/configs/self_play.yaml            # T rounds of self-play

The policy starts at π_ref (``model_name_or_path``); ``preference_model`` is a folder written by the first command. By
default the output folder is the uniform mixture of π¹..π^T (``mixture.json`` + iterates; ``eval/judge.py`` and
``generate_responses`` sample one iterate per prompt), as Zhou et al. 2025 (Square-χPO) returns; ``output_policy:
last`` saves the last iterate as a plain model instead. With ``push_to_hub`` the whole output folder (card, privacy
record, mixture and iterates) is uploaded at the end; the Hub is checked before anything is trained.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from accelerate import PartialState
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import ModelConfig, ScriptArguments, TrlParser

from squarechipo.data import load_preference_dataset
from squarechipo.models import resolve_model_path
from squarechipo.privacy.provenance.lineage import mark_source
from squarechipo.privacy.provenance.record import read_privacy_record
from squarechipo.reward import PreferenceModel
from squarechipo.scripts._common import setup_logging
from squarechipo.trainer import check_hub_reachable
from squarechipo.trainer.iterative import iterative_square_chipo
from squarechipo.trainer.self_play import SelfPlayConfig


@dataclass
class SelfPlayScriptArguments(ScriptArguments):
    """Where the prompts of D_x come from, and the preference model."""

    preference_model: str | None = field(default=None, metadata={"help": "Folder of the trained preference model."})
    max_prompts: int | None = field(default=None, metadata={"help": "Use the first N prompts of the split."})


def main(script_args: SelfPlayScriptArguments, training_args: SelfPlayConfig, model_args: ModelConfig) -> Path:
    setup_logging()
    _ = training_args.device
    state = PartialState()
    if training_args.push_to_hub:
        check_hub_reachable(training_args)  # before anything is trained, as the trainers do
    if not script_args.preference_model or not Path(script_args.preference_model).is_dir():
        raise ValueError(
            f"preference_model must be the folder of a trained preference model (got "
            f"{script_args.preference_model!r}); train one with recipes/reward_model.py first."
        )
    record = read_privacy_record(script_args.preference_model)
    if record is not None and record.get("model_type") != "preference":
        raise ValueError(
            f"{script_args.preference_model} is a {record.get('model_type')} model; self-play needs a "
            "pairwise preference model (model_type: preference)."
        )
    with state.main_process_first():
        model_path = resolve_model_path(model_args.model_name_or_path)
    data = load_preference_dataset(script_args.dataset_name, config=script_args.dataset_config)
    split = data[script_args.dataset_train_split] if hasattr(data, "keys") else data
    prompts = split["prompt"] if "prompt" in split.column_names else None
    if prompts is None:
        raise ValueError(f"{script_args.dataset_name} has no prompt column; D_x needs prompts.")
    if script_args.max_prompts is not None:
        prompts = prompts[: script_args.max_prompts]
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    policy = mark_source(AutoModelForCausalLM.from_pretrained(model_path), model_path)
    preference = PreferenceModel.from_pretrained(
        script_args.preference_model, batch_size=training_args.responses_batch_size, device=str(state.device)
    )
    reference = model_args.model_name_or_path
    reference = (
        reference if reference == "embedded" or not Path(reference).exists() else str(Path(reference).resolve())
    )
    out = iterative_square_chipo(
        policy, tokenizer, prompts, preference, training_args, reference_name=reference, preference_record=record
    )
    if training_args.push_to_hub and state.is_main_process:
        _push(out, training_args)
    state.print(
        f"Done. {training_args.output_policy} of iterative Square-χPO (T = {training_args.iterations}) "
        f"in {out.resolve()}"
    )
    state.wait_for_everyone()
    return out


def _push(out: Path, args: SelfPlayConfig) -> None:
    """Upload the output folder as one model repository (its card and privacy record included)."""
    from huggingface_hub import HfApi

    api = HfApi(token=args.hub_token)
    repo = api.create_repo(args.hub_model_id or out.resolve().name, private=args.hub_private_repo, exist_ok=True)
    api.upload_folder(
        repo_id=repo.repo_id, folder_path=str(out), commit_message=f"iterative Square-χPO ({args.output_policy})"
    )
    print(f"Pushed to {repo}")


def make_parser(prog: str | None = None) -> TrlParser:
    from squarechipo.scripts._common import training_parser

    return training_parser((SelfPlayScriptArguments, SelfPlayConfig, ModelConfig), prog)


if __name__ == "__main__":
    from squarechipo.scripts._common import script_main

    script_main(main, make_parser, "self-play")
