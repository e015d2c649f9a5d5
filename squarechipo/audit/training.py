"""``python -m squarechipo.audit training``: plant canaries, release and train as configured, guess, bound ε.

The run is the user's own training config (``recipes/train.py`` YAML). The canaries come from rows of the training
split that the run would not use (beyond ``max_train_samples``), so they are new to every model; by default their
responses are random word strings (:func:`~squarechipo.audit.canaries.random_word_responses`), the rows easiest to
detect, and ``--canary-text rows`` keeps the rows' own answers. ``--leak sft``
reproduces the leak the lineage guard exists for: the starting model is first fine-tuned on the canaries' chosen
responses (their raw labels), and the guard is overridden so that the run can go ahead and be measured.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import torch
import yaml
from transformers import AutoModelForCausalLM, AutoTokenizer

from squarechipo.audit.canaries import (
    CANARY_TEXTS,
    CanaryAudit,
    guess_counts,
    plant_canaries,
    random_word_responses,
)
from squarechipo.data import load_preference_dataset
from squarechipo.models import resolve_model_path
from squarechipo.models.logprobs import model_logps, preference_collator, tokenize_preferences
from squarechipo.privacy.door import rows_without_labels
from squarechipo.privacy.ledger.ledger import PrivacyLedger
from squarechipo.reproduce.launch import run_script

__all__ = ["audit_training_run"]


def _split_rows(config: dict[str, Any], canaries: int) -> tuple[datasets.Dataset, datasets.Dataset]:
    """(the run's training rows, canary source rows after them): disjoint by construction."""
    train = load_preference_dataset(config["dataset_name"], split=config.get("dataset_train_split", "train"))
    used = config.get("max_train_samples") or len(train) - canaries
    if used + canaries > len(train):
        raise ValueError(
            f"{config['dataset_name']} has {len(train)} training rows: too few for {used} training rows and "
            f"{canaries} canaries after them. Lower max_train_samples or --canaries."
        )
    return train.select(range(used)), train.select(range(used, used + canaries))


def _leaky_sft(config: dict[str, Any], canary_rows: datasets.Dataset, out: Path) -> str:
    """Fine-tune the starting model on the canaries' chosen responses: the leak the lineage guard refuses."""
    sft_rows = canary_rows.map(lambda row: {"completion": row["chosen"]}, remove_columns=["chosen", "rejected"])
    datasets.DatasetDict({"train": sft_rows}).save_to_disk(str(out / "leak_data"))
    sft = {
        "model_name_or_path": config["model_name_or_path"],
        "dataset_name": str(out / "leak_data"),
        "output_dir": str(out / "leaky_sft"),
        "num_train_epochs": 3,
        # The run's own step size (5e-5 when it has none): a leak as strong as the run's training would make it.
        "learning_rate": config.get("learning_rate", 5e-5),
        "per_device_train_batch_size": config.get("per_device_train_batch_size", 8),
        "max_length": config.get("max_length", 256),
        "eval_strategy": "no",
        "save_strategy": "no",
        "report_to": "none",
        "gradient_checkpointing": False,
    }
    run_script("sft", sft, out)
    return str(out / "leaky_sft")


def _preference(model_dir: str | Path, rows: list[dict], collator, batch_size: int = 8) -> np.ndarray:
    """Per token, log π(a⁰)/|a⁰| − log π(a¹)/|a¹| of one model for each tokenized canary, a⁰ the source row's
    original chosen response."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    logps = model_logps(model, rows, collator, batch_size, "canaries").numpy()
    lengths = np.array([[len(row["chosen_ids"]), len(row["rejected_ids"])] for row in rows], dtype=np.float64).T
    return logps[0] / np.maximum(lengths[0], 1) - logps[1] / np.maximum(lengths[1], 1)


def _scores(trained: Path, start: str, source: datasets.Dataset) -> np.ndarray:
    """The trained model's implied preference for a⁰ over a¹ against the model the config starts from, per token.

    Subtracting the starting model's own preference removes what every model already prefers (the better response, the
    shorter one), which does not depend on the canary's label and would swamp what training added. The start is the
    config's model, before any ``--leak``: a leak is part of what is audited. Both models score the same tokens (the
    start's tokenizer, tokenized once). Per token, because fine-tuning on a text raises the log-probability of every
    token of both responses, and summed over tokens that common rise favours the longer response whatever the label.
    """
    start = resolve_model_path(start)
    tokenizer = AutoTokenizer.from_pretrained(start)
    pairs = rows_without_labels(source, "each canary's pair in its fixed order (a⁰, a¹), which is not its label")
    rows, collator = tokenize_preferences(pairs, tokenizer), preference_collator(tokenizer)
    return _preference(trained, rows, collator) - _preference(start, rows, collator)


def _own_epsilon(record: dict[str, Any]) -> float | None:
    """The ε this run's release claims for its labels (earlier releases of the same rows, which the record's total
    adds, are other runs' noise)."""
    ledger = record.get("ledger")
    return PrivacyLedger.from_dict(ledger).own_epsilon if ledger else record.get("epsilon")


def audit_training_run(
    config_path: str | Path,
    out: str | Path,
    *,
    canaries: int = 300,
    leak: str | None = None,
    canary_text: str = "random",
    seed: int = 0,
    alpha: float = 0.05,
) -> CanaryAudit:
    """Plant ``canaries`` random-label pairs, train with the config (:mod:`squarechipo.scripts.train`), guess
    each canary's label from the trained model and bound ε (:mod:`squarechipo.audit.canaries`)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    config = yaml.safe_load(Path(config_path).read_text())
    if canary_text not in CANARY_TEXTS:
        raise ValueError(f"canary_text must be one of {CANARY_TEXTS}, not {canary_text!r}")
    training_rows, source = _split_rows(config, canaries)
    rng = np.random.default_rng(seed)
    if canary_text == "random":
        source = random_word_responses(source, rng)
    canary_rows, labels = plant_canaries(source, rng)
    combined = datasets.concatenate_datasets([training_rows, canary_rows.cast(training_rows.features)])
    datasets.DatasetDict({"train": combined}).save_to_disk(str(out / "data"))
    run = {**config, "dataset_name": str(out / "data"), "dataset_train_split": "train", "max_train_samples": None}
    run.update(output_dir=str(out / "model"), privatized_dir=str(out / "model" / "released_train"), eval_strategy="no")
    # An audit trains on rows the user's own runs may have released already: this run's release composes with them
    # (its ledger states the sum), and the audit measures this run's own ε below.
    run.update(save_strategy="no", report_to="none", label_rerelease=True)
    if leak == "sft":
        run.update(model_name_or_path=_leaky_sft(config, canary_rows, out), override_lineage_guard=True)
    run_script("train", run, out)
    counts = guess_counts(_scores(out / "model", config["model_name_or_path"], source), labels)
    claimed = _own_epsilon(json.loads((out / "model" / "squarechipo_privacy.json").read_text()))
    correct, guesses = (tuple(column) for column in zip(*counts))
    return CanaryAudit(canaries, guesses, correct, claimed, alpha)
