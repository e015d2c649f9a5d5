"""Benchmark note (not a test): would scoring in batches of similar length make a study's measurement cheaper?

    .venv/bin/python benchmarks/bench_logp_batching.py [--prompts 64] [--repeats 2]

The rows are a study's measurement pass: the first test prompts of data/finance_preference_conversational, each with
the two committed SFT samples of results/privacy_cost/sft_samples.json, scored by the embedded SmolLM2-135M in
bfloat16 at the evaluator's batch size. That batch is 16 rows (32 sequences). Prints the padded tokens and the
seconds of each order (alternated, so that a busy machine slows both alike) and the largest difference between their
log-probs.

The scorer (:func:`squarechipo.models.logprobs.model_logps`) keeps row order: in bfloat16 a row's summed log-prob
depends on the shape of the batch it is padded into, and a study compares each policy's pool and test-pair log-probs
with the committed SFT record's, scored in row order (docs/study.md, "A cheaper cell").
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from squarechipo.data.loading import load_preference_dataset
from squarechipo.models import resolve_model_path
from squarechipo.models.lm_head import add_lean_lm_head
from squarechipo.models.logprobs import completion_logps, model_logps, preference_collator, tokenize_preferences


def by_length(model, rows, collator, batch_size: int) -> torch.Tensor:
    """(2, n) log-probs in the rows' order, scored in batches of rows of similar length (longest first)."""
    lean, out = add_lean_lm_head(model, share_prompt=True), torch.zeros(2, len(rows), dtype=torch.float64)
    order = sorted(range(len(rows)), key=lambda i: -row_length(rows[i]))
    for start in range(0, len(order), batch_size):
        indices = order[start : start + batch_size]
        out[:, indices] = torch.stack(completion_logps(model, collator([rows[i] for i in indices]), lean))
    return out


def row_length(row: dict) -> int:
    """The length a row pads to: the collator stacks its chosen and rejected sequences together."""
    return len(row["prompt_ids"]) + max(len(row["chosen_ids"]), len(row["rejected_ids"]))


def padded_tokens(rows, order, batch_size: int) -> int:
    ordered = [row_length(rows[i]) for i in order]
    return sum(
        2 * len(ordered[i : i + batch_size]) * max(ordered[i : i + batch_size])
        for i in range(0, len(ordered), batch_size)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()
    path = resolve_model_path("embedded")
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).eval()
    prompts = list(load_preference_dataset("data/finance_preference_conversational", split="test")["prompt"])
    first, second = json.load(open("results/privacy_cost/sft_samples.json"))[:2]
    rows = tokenize_preferences(
        [
            {
                "prompt": p,
                "chosen": [{"role": "assistant", "content": a}],
                "rejected": [{"role": "assistant", "content": b}],
            }
            for p, a, b in list(zip(prompts, first, second))[: args.prompts]
        ],
        tokenizer,
    )
    collator, n = preference_collator(tokenizer), args.batch_size
    length_order = sorted(range(len(rows)), key=lambda i: -row_length(rows[i]))
    print(
        f"{len(rows)} rows, batch {n}: padded tokens in row order {padded_tokens(rows, range(len(rows)), n)}, "
        f"by length {padded_tokens(rows, length_order, n)}"
    )
    seconds, results = {"row order": [], "by length": []}, {}
    with torch.no_grad():
        for _ in range(args.repeats):
            for name, score in (("row order", model_logps), ("by length", by_length)):
                start = time.perf_counter()
                results[name] = score(model, rows, collator, n, *([name] if score is model_logps else []))
                seconds[name].append(time.perf_counter() - start)
    for name, values in seconds.items():
        print(f"{name}: " + ", ".join(f"{s:.1f} s" for s in values))
    diff = (results["row order"] - results["by length"]).abs()
    print(
        f"log-prob difference between the orders (bfloat16 padding shapes): mean {diff.mean().item():.4f}, "
        f"largest {diff.max().item():.4f} nats"
    )


if __name__ == "__main__":
    main()
