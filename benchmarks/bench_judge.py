"""Benchmark (not a test): judgments per second for the local and the server judge backends.

    .venv/bin/python benchmarks/bench_judge.py [--pairs 32]

Local: the embedded SmolLM2 read through transformers (next-token probabilities, batched).
Server: llama.cpp's OpenAI-compatible server on localhost serving the same model's GGUF, through
OpenAICompatibleJudge, with 1 and 4 concurrent requests (no cache).
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402

from data_gen.finance import build_datasets  # noqa: E402
from squarechipo.judge.local import TransformersJudge  # noqa: E402
from squarechipo.judge.openai_compatible import OpenAICompatibleJudge  # noqa: E402
from squarechipo.models.embedded import embedded_gguf_path  # noqa: E402


def _rate(judge, prompts, a, b) -> tuple[float, int]:
    start = time.perf_counter()
    verdicts = judge.verdicts(prompts, a, b)
    elapsed = time.perf_counter() - start
    return len(verdicts) / elapsed, sum(v.choice is None for v in verdicts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=32)
    args = parser.parse_args()
    test = build_datasets(400, seed=0)["finance_preference"]["test"]
    test = test.select(range(min(args.pairs, len(test))))
    prompts, a, b = list(test["prompt"]), list(test["chosen"]), list(test["rejected"])

    local = TransformersJudge("embedded", batch_size=8)
    local.verdicts(prompts[:2], a[:2], b[:2])  # warm-up
    rate, invalid = _rate(local, prompts, a, b)
    print(f"local transformers judge (batch 8): {rate:.2f} judgments/s over {len(prompts)} pairs ({invalid} invalid)")

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(embedded_gguf_path()), "--model_alias", "smollm2",
         "--port", str(port), "--n_ctx", "2048", "--n_threads", "2", "--verbose", "False"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
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
