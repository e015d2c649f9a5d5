"""Benchmark (not a test): the CPU's matrix-product floor, and each step of the main job as a share of it (a CPU MFU).

    .venv/bin/python benchmarks/bench_mfu.py                        # this CPU as it is, and forced to AVX2 kernels
    .venv/bin/python benchmarks/bench_mfu.py --kinds avx2 --json outputs/mfu.json

For each kind of CPU (``native``: the kernels torch picks here; ``avx2``: ``ATEN_CPU_CAPABILITY=avx2`` and
``ONEDNN_MAX_CPU_ISA=AVX2``, what an AVX2-only CPU runs, where bf16 is emulated) a fresh process measures:

- **the floor**: the best float32 (and, where bf16 is native, bfloat16) matrix-product throughput over the shapes the
  job's model multiplies (tokens × 576 × 1,536, 576 × 576, the 49,152-token head, a 64-row decode step), on torch's
  threads: no step can run its products faster;
- **each step of the main job** on the embedded model, the job's rows and settings: an SFT step (LeanSFTTrainer, 8
  rows), a Square-χPO step (8 pairs, the reference precomputed), a gradient-free log-prob pass (the reference's and the
  gold report's KL), the gold judge's scoring pass, and sampling (the gold report's exact draws). One call of each is
  counted with ``torch.utils.flop_counter.FlopCounterMode`` (matrix products and attention, forward and backward); the
  others are timed. Achieved FLOP/s ÷ the floor in the step's dtype is its MFU.

The figures of a run go to ``--json``; docs/benchmarks.md's table is one such record.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KINDS = {"native": {}, "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}}
#: (rows, inner, columns) of the products the 135M model runs: projections at 1,024 tokens, the head, a decode step.
GEMM_SHAPES = [(1024, 576, 1536), (1024, 1536, 576), (1024, 576, 576), (1024, 576, 49152), (64, 576, 1536)]


def gemm_floor(dtype_name: str, seconds: float = 0.4) -> dict:
    """Best GFLOP/s of each shape (3 rounds of ``seconds``) and the best over shapes."""
    import torch

    dtype = getattr(torch, dtype_name)
    shapes = {}
    for m, k, n in GEMM_SHAPES:
        a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
        a @ b
        reps = max(1, int(seconds * 150e9 / (2 * m * k * n)))
        best = min(_timed(lambda a=a, b=b, reps=reps: [a @ b for _ in range(reps)]) for _ in range(3)) / reps
        shapes[f"{m}x{k}x{n}"] = 2 * m * k * n / best / 1e9
    return {"shapes": shapes, "best": max(shapes.values())}


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _counted(fn) -> tuple[float, float]:
    """(FLOPs of one call, as FlopCounterMode counts them; its seconds, which the counting slows: not used)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        seconds = _timed(fn)
    return float(counter.get_total_flops()), seconds


def _measure(name: str, fn, repeats: int) -> dict:
    """One counted call, then ``repeats`` timed calls: FLOPs a call, median seconds, GFLOP/s."""
    fn()  # warm: first-call allocations and lazy set-up
    flops, _ = _counted(fn)
    times = [_timed(fn) for _ in range(repeats)]
    median = statistics.median(times)
    gflops = flops / median / 1e9
    return {"step": name, "gflop": flops / 1e9, "seconds": median, "times": times, "gflops_per_s": gflops}


def _trainer_step(trainer):
    """A callable running one optimizer step of ``trainer`` on its next batch, as ``Trainer.train`` does."""
    batches = iter(trainer.get_train_dataloader())
    model = trainer.model
    model.train()

    def step():
        batch = trainer._prepare_inputs(next(batches))
        loss = trainer.compute_loss(model, batch)
        loss.backward()
        trainer.optimizer.step()
        trainer.optimizer.zero_grad(set_to_none=True)

    trainer.create_optimizer()
    return step


def _steps(args: argparse.Namespace, bf16: bool) -> list[dict]:
    """Each step of the main job on the model, rows and settings the job uses (sizes per ``args``)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

    from squarechipo.data.finance import build_datasets
    from squarechipo.models import embedded_model_path
    from squarechipo.models.generation import generate_with_model
    from squarechipo.models.logprobs import model_logps, preference_collator, tokenize_preferences
    from squarechipo.privacy.door import checked_rows
    from squarechipo.reward.features import reward_texts, sequence_scores
    from squarechipo.trainer import SquareChiPOConfig, SquareChiPOTrainer
    from squarechipo.trainer.config import SFTRecipeConfig
    from squarechipo.trainer.sft import LeanSFTTrainer

    path = args.model if args.model != "embedded" else embedded_model_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    n = args.batch * (args.repeats + 2)
    data = build_datasets(
        max(140, 2 * n), seed=0, sft_rows=2 * max(40, n), judge_rows=40
    )  # SFT rows: part of them train
    sft_rows = data["finance_sft_mixed_conversational"]["train"].select(range(n))
    pairs = (
        data["finance_preference_conversational"]["train"]
        .select(range(n))
        .select_columns(["prompt", "chosen", "rejected"])
    )
    common = dict(per_device_train_batch_size=args.batch, max_length=args.max_length, report_to="none",
                  save_strategy="no", gradient_checkpointing=False, seed=0, disable_tqdm=True, bf16=bf16)  # fmt: skip
    load = lambda: AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)  # noqa: E731
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        sft = LeanSFTTrainer(load(), args=SFTRecipeConfig(output_dir=f"{tmp}/sft", learning_rate=5e-5, **common),
                             train_dataset=sft_rows, processing_class=tokenizer)  # fmt: skip
        out.append(_measure(f"SFT step ({args.batch} rows)", _trainer_step(sft), args.repeats))
        del sft
        # The benchmark's labels are the generator's (public), declared so; the reference precomputed, as the job.
        config = SquareChiPOConfig(output_dir=f"{tmp}/align", method="square_chipo", beta=0.1, r_max=5.0,
                                   learning_rate=1e-5, train_labels_public=True, precompute_ref_log_probs=True,
                                   **common)  # fmt: skip
        align = SquareChiPOTrainer(load(), ref_model=load(), args=config, train_dataset=pairs,
                                   processing_class=tokenizer)  # fmt: skip
        out.append(_measure(f"Square-χPO step ({args.batch} pairs)", _trainer_step(align), args.repeats))
        del align
    model = load().eval()
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16)
    public = checked_rows(pairs.select(range(args.batch)), split="train", public=True, reader="bench_mfu.py",
                          declare="the generator's labels, public")  # fmt: skip
    rows = tokenize_preferences(public, tokenizer)
    collator = preference_collator(tokenizer)

    def logps():
        with torch.no_grad(), autocast:
            model_logps(model, rows, collator, args.batch, "log-probs")

    out.append(_measure(f"log-prob pass ({args.batch} pairs)", logps, args.repeats))
    prompts = data["finance_preference_conversational"]["train"]["prompt"][: args.generate]

    def sample():
        with autocast:
            generate_with_model(model, tokenizer, prompts, max_new_tokens=args.new_tokens,
                                batch_size=len(prompts), exact_sampling=True, seed=0)  # fmt: skip

    out.append(_measure(f"sampling ({len(prompts)} prompts × {args.new_tokens} tokens)", sample, args.repeats))
    judge = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1, dtype=torch.float32).eval()
    judge.config.pad_token_id = tokenizer.pad_token_id
    texts = reward_texts(tokenizer, pairs["prompt"][: 2 * args.batch], pairs["chosen"][: 2 * args.batch])

    def score():
        with torch.no_grad(), autocast:
            sequence_scores(judge, tokenizer, texts, batch_size=2 * args.batch, max_length=512)

    out.append(_measure(f"gold-judge scoring ({len(texts)} texts)", score, args.repeats))
    return out


def worker(args: argparse.Namespace) -> dict:
    import torch

    from squarechipo.models.runtime import cpu_runs_bf16_natively

    native_bf16 = cpu_runs_bf16_natively()
    floors = {"float32": gemm_floor("float32")}
    if native_bf16:
        floors["bfloat16"] = gemm_floor("bfloat16")
    runs = {"float32": _steps(args, bf16=False)}
    if native_bf16 and not args.float32_only:
        runs["bfloat16"] = _steps(args, bf16=True)  # autocast, float32 weights: as the main job runs there
    for dtype, steps in runs.items():
        for step in steps:
            step["mfu"] = step["gflops_per_s"] / floors[dtype]["best"]
    return {
        "capability": torch.backends.cpu.get_cpu_capability(),
        "bf16_kernels": native_bf16,
        "threads": torch.get_num_threads(),
        "floors": floors,
        "runs": runs,
    }


def _print(kind: str, result: dict) -> None:
    print(f"\n{kind}: torch capability {result['capability']}, bf16 kernels {result['bf16_kernels']}, "
          f"{result['threads']} threads")  # fmt: skip
    for dtype, floor in result["floors"].items():
        shapes = ", ".join(f"{s} {v:.0f}" for s, v in floor["shapes"].items())
        print(f"  {dtype} matrix-product floor: {floor['best']:.0f} GFLOP/s ({shapes})")
    for dtype, steps in result["runs"].items():
        print(f"  {'step (' + dtype + ')':<46}{'GFLOP':>9}{'s':>8}{'GFLOP/s':>9}{'MFU':>6}")
        for s in steps:
            print(f"  {s['step']:<46}{s['gflop']:>9.1f}{s['seconds']:>8.2f}{s['gflops_per_s']:>9.1f}"
                  f"{100 * s['mfu']:>5.0f}%")  # fmt: skip


def table(record: dict) -> list[str]:
    """The markdown table docs/benchmarks.md shows, from a record this script wrote (``--json``)."""
    lines = ["| CPU kernels | dtype | step | GFLOP a call | s a call | GFLOP/s | floor GFLOP/s | MFU |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for kind, result in record["kinds"].items():
        for dtype, steps in result["runs"].items():
            floor = result["floors"][dtype]["best"]
            for s in steps:
                lines.append(
                    f"| {kind} ({result['capability']}) | {dtype} | {s['step']} | {s['gflop']:.1f} | "
                    f"{s['seconds']:.2f} | {s['gflops_per_s']:.0f} | {floor:.0f} | {100 * s['mfu']:.0f}% |"
                )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=list(KINDS))
    parser.add_argument("--model", default="embedded", help="embedded, or a model folder (the tests' tiny model)")
    parser.add_argument("--batch", type=int, default=8, help="rows or pairs a training step (the job's 8)")
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--generate", type=int, default=64, help="prompts sampled at once")
    parser.add_argument("--new-tokens", type=int, default=32, help="tokens sampled per prompt")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls of each step after the counted one")
    parser.add_argument("--float32-only", action="store_true", help="skip the bf16 runs where bf16 is native")
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--table", help="print the markdown table of a record written with --json, and stop")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.table:
        print("\n".join(table(json.loads(Path(args.table).read_text()))))
        return
    if args.worker:
        print("BENCH " + json.dumps(worker(args)))
        return
    record = {"machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()},
              "arguments": vars(args), "kinds": {}}  # fmt: skip
    for kind in args.kinds:
        argv = [a for a in sys.argv[1:] if a not in ("--kinds", *KINDS)]
        env = {**os.environ, **KINDS[kind], "TQDM_DISABLE": "1", "PYTHONWARNINGS": "ignore"}
        done = subprocess.run([sys.executable, __file__, "--worker", *argv], env=env, capture_output=True,
                              text=True, cwd=ROOT)  # fmt: skip
        lines = [line for line in done.stdout.splitlines() if line.startswith("BENCH ")]
        if done.returncode or not lines:
            raise SystemExit(f"bench_mfu.py: the {kind} worker failed:\n{done.stderr[-3000:]}")
        record["kinds"][kind] = json.loads(lines[-1][len("BENCH ") :])
        _print(kind, record["kinds"][kind])
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
