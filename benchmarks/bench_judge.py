"""Benchmark (not a test): judgments per second for the reward-model, local and server judge backends.

    .venv/bin/python benchmarks/bench_judge.py [--pairs 32] [--reward-model outputs/quickstart/gold_judge]

Reward model: a sequence classifier on the embedded SmolLM2 (the gold judge when given, else the
embedded model with a fresh one-output head: the speed is the same), batched; one judgment scores
two (prompt, response) texts, and the second order of a pair is free (scores are cached).
Local: the embedded SmolLM2 read through transformers (next-token probabilities, batched).
Server: each local OpenAI-compatible server installed (``transformers serve`` on the same weights; llama.cpp's
server on the model's GGUF where it is built), through OpenAICompatibleJudge, with 1 and 4 concurrent requests
(no cache).
"""

from __future__ import annotations

import argparse
import tempfile
import time

from squarechipo.data.finance import build_datasets
from squarechipo.judge.local import TransformersJudge
from squarechipo.judge.local_server import available_backends, local_judge_server
from squarechipo.judge.openai_compatible import OpenAICompatibleJudge
from squarechipo.judge.reward_model import RewardModelJudge


def _rate(judge, prompts, a, b) -> tuple[float, int]:
    start = time.perf_counter()
    verdicts = judge.verdicts(prompts, a, b)
    elapsed = time.perf_counter() - start
    return len(verdicts) / elapsed, sum(v.choice is None for v in verdicts)


def _fresh_reward_model(folder: str, model: str) -> str:
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from squarechipo.models import resolve_model_path

    path = resolve_model_path(model)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1)
    model.config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=32)
    parser.add_argument("--model", default="embedded", help="the causal LM judging (a folder; default: embedded)")
    parser.add_argument("--reward-model", default=None, help="a reward-model folder (default: --model + fresh head)")
    args = parser.parse_args()
    test = build_datasets(400, seed=0, sft_rows=2, judge_rows=1)["finance_preference"]["test"]
    test = test.select(range(min(args.pairs, len(test))))
    prompts, a, b = list(test["prompt"]), list(test["chosen"]), list(test["rejected"])

    with tempfile.TemporaryDirectory() as folder:
        path = args.reward_model or _fresh_reward_model(folder, args.model)
        for batch_size in (8, 16):
            judge = RewardModelJudge(path, batch_size=batch_size)
            judge.verdicts(prompts[:2], a[:2], b[:2])  # warm-up (these two pairs are cached, a negligible share)
            rate, invalid = _rate(judge, prompts, a, b)
            print(
                f"reward-model judge (batch {batch_size}): {rate:.2f} judgments/s over {len(prompts)} pairs "
                f"({invalid} invalid)"
            )

    local = TransformersJudge(args.model, batch_size=8)
    local.verdicts(prompts[:2], a[:2], b[:2])  # warm-up
    rate, invalid = _rate(local, prompts, a, b)
    print(f"local transformers judge (batch 8): {rate:.2f} judgments/s over {len(prompts)} pairs ({invalid} invalid)")

    for backend in available_backends():  # each local OpenAI-compatible server installed here
        if backend == "llama.cpp" and args.model != "embedded":
            continue  # llama.cpp serves the embedded model's GGUF only
        with local_judge_server(backend, model=args.model) as server:
            for concurrency in (1, 4):
                judge = OpenAICompatibleJudge(server.base_url, server.model, max_concurrency=concurrency)
                judge.verdicts(prompts[:1], a[:1], b[:1])
                rate, invalid = _rate(judge, prompts, a, b)
                speed = f"{rate:.2f} judgments/s ({invalid} unparsable)"
                print(f"{backend} server judge, {concurrency} concurrent: {speed}")


if __name__ == "__main__":
    main()
