"""Train the gold reward-model judge on public gold pairs: a linear head on frozen embedded-model features.

    python recipes/gold_judge.py --config recipes/configs/gold_judge.yaml

The judge is an evaluation instrument, never part of a private pipeline: it is fitted on the raw,
public labels of the finance generator's ``judge`` split, whose prompts appear in no train,
validation or test row. The head is the Bradley–Terry MLE over a ball on the frozen model's pooled
hidden state (:func:`squarechipo.reward.features.fit_linear_reward_model`), saved as an ordinary
one-output ``AutoModelForSequenceClassification``, so ``eval/judge.py --judge reward-model
--judge-model <output_dir>`` (and any tool that loads reward models) uses it. Its accuracy on the
gold pairs of ``dataset_test_split`` is measured and written to ``gold_judge.json`` and the card.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer
from trl import TrlParser

from squarechipo.data import load_preference_dataset
from squarechipo.evaluation.pipeline import calibrate_judge
from squarechipo.evaluation.report import format_interval, format_percent
from squarechipo.judge.reward_model import RewardModelJudge
from squarechipo.models import resolve_model_path
from squarechipo.privacy.ledger.binding import get_ledger
from squarechipo.privacy.provenance.lineage import ModelLineage, public_labels_record
from squarechipo.privacy.provenance.record import write_privacy_record
from squarechipo.reward.features import fit_linear_reward_model
from squarechipo.scripts._common import setup_logging

RESULT_FILE = "gold_judge.json"


@dataclass
class GoldJudgeArguments:
    model_name_or_path: str = field(default="embedded", metadata={"help": "Frozen base model (embedded = SmolLM2)."})
    dataset_name: str = field(
        default="data/finance_preference_conversational",
        metadata={"help": "Preference data holding the public gold split."},
    )
    dataset_train_split: str = field(default="judge", metadata={"help": "The public gold split to fit on."})
    dataset_test_split: str | None = field(default="test", metadata={"help": "Gold pairs to measure accuracy on."})
    test_labels_public: bool = field(
        default=False,
        metadata={
            "help": "The test split's labels are public (gold pairs): its accuracy may be measured on them. "
            "Otherwise it must be released (the accuracy is computed from its labels)."
        },
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "Fit on the first N gold rows."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Measure on the first N test pairs."})
    output_dir: str = field(default="outputs/gold_judge")
    radius: float = field(default=10.0, metadata={"help": "Bound B on ‖θ‖ for features scaled to median norm 1."})
    batch_size: int = field(default=16)
    max_length: int = field(default=512)
    bf16: bool = field(
        default=False,
        metadata={
            "help": "Run the frozen feature pass under bfloat16 autocast (the weights, the fit and the saved judge "
            "stay float32): the step about 2x faster on a CPU with AVX512-BF16."
        },
    )
    seed: int = field(default=0)


def _load_gold(args: GoldJudgeArguments):
    train = load_preference_dataset(args.dataset_name, split=args.dataset_train_split)
    if get_ledger(train) is not None:
        raise SystemExit(
            f"{args.dataset_name}:{args.dataset_train_split} carries a privacy ledger (released labels). The gold "
            "judge is fitted on raw public labels: use the finance generator's `judge` split."
        )
    if args.dataset_test_split == args.dataset_train_split:
        raise SystemExit(
            "dataset_test_split must differ from dataset_train_split: accuracy is measured on held-out pairs."
        )
    if args.max_train_samples is not None:
        train = train.select(range(min(args.max_train_samples, len(train))))
    test = None
    if args.dataset_test_split:
        test = load_preference_dataset(args.dataset_name, split=args.dataset_test_split)
        test = test.select(range(min(args.max_eval_samples or len(test), len(test))))
    return train, test


def _card(args: GoldJudgeArguments, result: dict) -> str:
    accuracy = result.get("test_accuracy")
    measured = (
        (
            f"Accuracy on {result['test_pairs']} held-out gold pairs ({args.dataset_test_split}): "
            f"{format_percent(accuracy)} {format_interval(result['test_accuracy_ci'])} (95% Wilson)."
        )
        if accuracy is not None
        else ""
    )
    return (
        f"# Gold reward-model judge\n\nA Bradley–Terry linear head on the frozen `{args.model_name_or_path}` "
        f"(pooled last hidden state), fitted by squarechipo's `recipes/gold_judge.py` on {result['n_rows']} public "
        f"gold pairs of `{args.dataset_name}:{args.dataset_train_split}`. {measured}\n\n"
        "It is an evaluation instrument trained on raw public labels: no private label went into it, and it must "
        "not be used as a policy, reference or prior of a private run. Use it with\n"
        f"`python eval/judge.py --judge reward-model --judge-model {args.output_dir} ...`.\n"
    )


def main(args: GoldJudgeArguments) -> dict:
    setup_logging()
    torch.manual_seed(args.seed)
    train, test = _load_gold(args)
    path = resolve_model_path(args.model_name_or_path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1, dtype=torch.float32)
    model.config.pad_token_id = tokenizer.pad_token_id
    # The gold split's labels are public by this script's contract (the docstring; the fit refuses released rows).
    with torch.autocast(model.device.type, dtype=torch.bfloat16, enabled=args.bf16):
        fit = fit_linear_reward_model(
            model, tokenizer, train, radius=args.radius, labels_public=True, batch_size=args.batch_size,
            max_length=args.max_length,
        )  # fmt: skip
    out = Path(args.output_dir)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    result = {"arguments": asdict(args), **fit}
    if test is not None:
        judge = RewardModelJudge(str(out), batch_size=args.batch_size, max_length=args.max_length)
        cal = calibrate_judge(judge, test, labels_public=args.test_labels_public)
        result.update(
            test_pairs=cal["n_pairs"], test_accuracy=cal["rule_accuracy"], test_accuracy_ci=cal["rule_accuracy_ci"]
        )
    (out / RESULT_FILE).write_text(json.dumps(result, indent=2), encoding="utf-8")
    (out / "README.md").write_text(_card(args, result), encoding="utf-8")
    # Public labels, no privacy: the record says so, and lets the lineage checks see what it was trained on.
    record = public_labels_record(
        "gold_judge",
        [("initial", ModelLineage.of_model(path))],
        train,
        context="gold judge",
        details={"labels": "raw public gold labels (evaluation instrument)"},
    )
    intro = "This reward model is an evaluation instrument fitted on raw public gold labels; no ε is claimed."
    write_privacy_record(out, record, intro=intro)
    line = f"Gold judge saved to {out.resolve()}: fitted on {fit['n_rows']} public gold pairs"
    if test is not None:
        line += (
            f"; accuracy on {result['test_pairs']} held-out gold pairs {format_percent(result['test_accuracy'])} "
            f"{format_interval(result['test_accuracy_ci'])}"
        )
    print(line)
    return result


def make_parser(prog: str | None = None) -> TrlParser:
    from squarechipo.scripts._common import training_parser

    return training_parser((GoldJudgeArguments,), prog)


if __name__ == "__main__":
    from squarechipo.scripts._common import script_main

    script_main(main, make_parser, "gold-judge")
