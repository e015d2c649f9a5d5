"""Multi-stage training with RRWithPrior for preferences (Ghazi et al. 2021 (label DP) LP-2ST) around Square-χPO.

    accelerate launch recipes/lp2st.py --config recipes/configs/lp2st.yaml

Stage 1 releases part 1 of the training split (``lp2st_split``) through RR_ε and trains on it.
Stage 2 queries each part-2 label once through RRWithPrior, the prior being the stage-1 policy's
σ(β·h/τ) (``lp2st_temperature``), then trains a fresh policy on both parts: RR rows get the c(ε)
debiasing, rows released from the prior are pseudo-labels weighted by ``prior_row_weight`` (0 drops
them). Each label is released once, so the ledger of the final model shows ε, not 2ε. Releases are
saved under ``<output_dir>/released_part{1,2}`` by the one release call (``release_dataset`` with a folder) and
reused on a re-run (no fresh noise); a re-run whose prior differs (another temperature, another stage-1 policy) stops.

Ghazi et al. 2021 (label DP)'s guarantee needs a prior that does not depend on the part-2 labels: the model stage 1
starts from (which is also the prior's reference) is checked against the part-2 rows before the prior is computed
(:mod:`squarechipo.privacy.provenance.lineage`; ``override_lineage_guard`` to override, recorded).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path

from accelerate import PartialState
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import ModelConfig, TrlParser

from squarechipo.models import resolve_model_path
from squarechipo.privacy.ledger.binding import get_ledger
from squarechipo.privacy.mechanisms.measurements import RRWithPrior
from squarechipo.privacy.provenance.lineage import ModelLineage, check_lineage, mark_source
from squarechipo.privacy.release.release_dataset import release_dataset
from squarechipo.privacy.release.rows import combine_parts
from squarechipo.scripts._common import finish_run, keep_earlier_model, setup_logging
from squarechipo.scripts.script_args import TrainScriptArguments
from squarechipo.scripts.splits import load_training_splits
from squarechipo.trainer import SquareChiPOConfig, SquareChiPOTrainer
from squarechipo.trainer.lp2st import policy_prior

logger = logging.getLogger("squarechipo")


@dataclass
class LP2STScriptArguments(TrainScriptArguments):
    lp2st_split: float = field(default=0.5, metadata={"help": "Fraction of the training rows in stage 1."})
    lp2st_temperature: float = field(default=1.0, metadata={"help": "Temperature τ of the prior σ(β·h/τ)."})


def _train(model_path, train, args: SquareChiPOConfig, tokenizer):
    """A Square-χPO run on ``train`` from ``model_path``: the trainer and its train output, nothing saved yet."""
    model = mark_source(AutoModelForCausalLM.from_pretrained(model_path), model_path)
    trainer = SquareChiPOTrainer(model, args=args, train_dataset=train, processing_class=tokenizer)
    return trainer, trainer.train()


def _stage1_prior(model_path, stage1, raw2, tokenizer, script_args, training_args):
    """The prior of stage 2 from the stage-1 policy, after checking that its start model never saw part 2."""
    prior_lineage = check_lineage(
        [("stage-1 initial policy and prior reference", ModelLineage.of_model(model_path))],
        raw2,
        private=True,
        override=training_args.override_lineage_guard,
        override_field="override_lineage_guard",
        context="LP-2ST prior (Ghazi et al. 2021 (label DP) needs a prior independent of the part-2 labels)",
    )
    reference = AutoModelForCausalLM.from_pretrained(model_path)
    prior = policy_prior(
        stage1.accelerator.unwrap_model(stage1.model),
        reference,
        tokenizer,
        raw2,
        method=training_args.method,
        beta=training_args.beta,
        clip=training_args.clip,
        temperature=script_args.lp2st_temperature,
        max_length=training_args.max_length,
    )
    return prior, prior_lineage


def main(script_args: LP2STScriptArguments, training_args: SquareChiPOConfig, model_args: ModelConfig):
    setup_logging()
    _ = training_args.device
    state = PartialState()
    pipeline = script_args.label_pipeline()
    if not pipeline.is_private or pipeline.is_corrupted:
        raise ValueError("LP-2ST needs label_epsilon set and no corruption (label_corruption_rate: 0).")
    if not 0 < script_args.lp2st_split < 1:
        raise ValueError(f"lp2st_split must be in (0, 1) (got {script_args.lp2st_split}).")
    with state.main_process_first():
        model_path = resolve_model_path(model_args.model_name_or_path)
    # The raw split: each part is released separately below.
    raw, _ = load_training_splits(script_args, training_args.output_dir, state, with_eval=False, release=False)
    cut = int(round(script_args.lp2st_split * len(raw)))
    if cut == 0 or cut == len(raw):
        raise ValueError(f"lp2st_split {script_args.lp2st_split} leaves a part empty with {len(raw)} rows.")
    out = Path(training_args.output_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token

    part1 = release_dataset(
        raw.select(range(cut)),
        pipeline,
        out / "released_part1",
        seed=script_args.label_seed,
        state=state,
        part="lp2st/part1",
        public_columns=script_args.label_public_columns,
    )
    stage1_args = dataclasses.replace(training_args, output_dir=str(out / "stage1"), push_to_hub=False)
    stage1, _ = _train(model_path, part1, stage1_args, tokenizer)
    stage1.save_model(stage1_args.output_dir)
    stage1.create_model_card()

    raw2 = raw.select(range(cut, len(raw)))
    prior, prior_lineage = _stage1_prior(model_path, stage1, raw2, tokenizer, script_args, training_args)
    del stage1
    part2 = release_dataset(
        raw2,
        RRWithPrior(pipeline.epsilon, prior, script_args.lp2st_temperature),
        out / "released_part2",
        seed=script_args.label_seed,
        state=state,
        part="lp2st/part2",
        public_columns=script_args.label_public_columns,
    )
    combined = combine_parts(part1, part2)
    ledger = get_ledger(combined)
    state.print(
        f"LP-2ST: {len(part1)} RR rows + {len(part2)} RRWithPrior rows "
        f"({sum(part2['label_from_prior'])} from the prior); ledger total ε = {ledger.total_epsilon}"
    )
    state.print(f"LP-2ST prior lineage: {[finding.to_dict() for finding in prior_lineage.findings]}")
    keep_earlier_model(training_args, state)  # every check passed: the run saves where it was
    final, result = _train(model_path, combined, training_args, tokenizer)
    finish_run(final, result, script_args.dataset_name, "Stage-2 model, card and privacy record are", evaluate=False)
    return final


def make_parser(prog: str | None = None) -> TrlParser:
    from squarechipo.scripts._common import training_parser

    return training_parser((LP2STScriptArguments, SquareChiPOConfig, ModelConfig), prog)


if __name__ == "__main__":
    from squarechipo.scripts._common import script_main

    script_main(main, make_parser, "lp2st")
