"""Benchmark (not a test): judgments per second for the reward-model, local and server judge backends.

    .venv/bin/python benchmarks/bench_judge.py [--pairs 32] [--reward-model outputs/quickstart/gold_judge]

Reward model: a sequence classifier on the embedded SmolLM2 (the gold judge when given, else the
embedded model with a fresh one-output head: the speed is the same), batched; one judgment scores
two (prompt, response) texts, and the second order of a pair is free (scores are cached).
Local: the embedded SmolLM2 read through transformers (next-token probabilities, batched).
Server: llama.cpp's OpenAI-compatible server on localhost serving the same model's GGUF, through
OpenAICompatibleJudge, with 1 and 4 concurrent requests (no cache).
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import time

import httpx

from squarechipo.data.finance import build_datasets
from squarechipo.judge.local import TransformersJudge
from squarechipo.judge.openai_compatible import OpenAICompatibleJudge
from squarechipo.judge.reward_model import RewardModelJudge
from squarechipo.models.embedded import embedded_gguf_path


def _rate(judge, prompts, a, b) -> tuple[float, int]:
    start = time.perf_counter()
    verdicts = judge.verdicts(prompts, a, b)
    elapsed = time.perf_counter() - start
    return len(verdicts) / elapsed, sum(v.choice is None for v in verdicts)


def _fresh_reward_model(folder: str) -> str:
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from squarechipo.models import resolve_model_path

    path = resolve_model_path("embedded")
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1)
    model.config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=32)
    parser.add_argument("--reward-model", default=None, help="a reward-model folder (default: embedded + fresh head)")
    args = parser.parse_args()
    test = build_datasets(400, seed=0, sft_rows=2, judge_rows=1)["finance_preference"]["test"]
    test = test.select(range(min(args.pairs, len(test))))
    prompts, a, b = list(test["prompt"]), list(test["chosen"]), list(test["rejected"])

    with tempfile.TemporaryDirectory() as folder:
        path = args.reward_model or _fresh_reward_model(folder)
        for batch_size in (8, 16):
            judge = RewardModelJudge(path, batch_size=batch_size)
            judge.verdicts(prompts[:2], a[:2], b[:2])  # warm-up (these two pairs are cached, a negligible share)
            rate, invalid = _rate(judge, prompts, a, b)
            print(
                f"reward-model judge (batch {batch_size}): {rate:.2f} judgments/s over {len(prompts)} pairs "
                f"({invalid} invalid)"
            )

    local = TransformersJudge("embedded", batch_size=8)
    local.verdicts(prompts[:2], a[:2], b[:2])  # warm-up
    rate, invalid = _rate(local, prompts, a, b)
    print(f"local transformers judge (batch 8): {rate:.2f} judgments/s over {len(prompts)} pairs ({invalid} invalid)")

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(embedded_gguf_path()),
            "--model_alias",
            "smollm2",
            "--port",
            str(port),
            "--n_ctx",
            "2048",
            "--n_threads",
            "2",
            "--verbose",
            "False",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}/v1"
    try:
        for _ in range(360):
            try:
                if httpx.get(f"{base}/models", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.5)
        for concurrency in (1, 4):
            judge = OpenAICompatibleJudge(base, "smollm2", max_concurrency=concurrency)
            judge.verdicts(prompts[:1], a[:1], b[:1])
            rate, invalid = _rate(judge, prompts, a, b)
            print(f"llama.cpp server judge, {concurrency} concurrent: {rate:.2f} judgments/s ({invalid} unparsable)")
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
