"""Benchmark (not a test): SFT step time of squarechipo's LeanSFTTrainer against TRL's SFTTrainer, in one run.

    .venv/bin/python benchmarks/bench_sft.py                       # the embedded SmolLM2-135M, bf16 autocast
    .venv/bin/python benchmarks/bench_sft.py --model 135m --dtype fp32 --json outputs/bench_sft.json

Both trainers see the same model (each in a fresh subprocess), the main job's SFT rows (the finance generator's
mixed prompt-completion rows) and settings: 8 rows a step, max_length 256, checkpointing off. It prints the median
step time after the first step, the ratio to TRL and the first logged losses of each (equal up to bf16 rounding:
the lean head only leaves out positions without a label).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from bench_trainer import SHAPES, _from_config, step_timer

RUNNERS = ("trl", "lean")


def _worker(args: argparse.Namespace) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from squarechipo.data.finance import build_datasets
    from squarechipo.models import embedded_model_path
    from squarechipo.trainer.sft import LeanSFTTrainer

    tokenizer = AutoTokenizer.from_pretrained(embedded_model_path())
    if args.model in SHAPES:
        model = _from_config(args.model, tokenizer, torch.float32)
    else:
        model = AutoModelForCausalLM.from_pretrained(embedded_model_path(), dtype=torch.float32)
    rows = args.batch * (args.steps + 1)
    train = build_datasets(140, seed=0, sft_rows=max(rows + 8, 40))["finance_sft_mixed_conversational"]["train"]
    config = SFTConfig(
        output_dir=args.tmp, per_device_train_batch_size=args.batch, max_steps=args.steps + 1,
        max_length=args.max_length, learning_rate=5e-5, logging_steps=1, report_to="none", save_strategy="no",
        gradient_checkpointing=False, seed=0, disable_tqdm=True, bf16=args.dtype == "bf16",
        use_cpu=not torch.cuda.is_available(),
    )  # fmt: skip
    trainer_class = LeanSFTTrainer if args.worker == "lean" else SFTTrainer
    trainer = trainer_class(model, args=config, train_dataset=train.select(range(rows)), processing_class=tokenizer)
    times: list[float] = []
    trainer.add_callback(step_timer(times))
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    return {"times": times, "losses": losses, "device": "cuda" if torch.cuda.is_available() else "cpu"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="embedded", choices=["embedded", *SHAPES], help="weights or a shape")
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"], help="bf16: autocast, fp32 weights")
    parser.add_argument("--steps", type=int, default=6, help="timed steps after the first")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--tmp", default="/tmp/bench_sft")
    parser.add_argument("--worker", choices=RUNNERS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(_worker(args)))
        return
    results = {}
    for runner in RUNNERS:
        command = [sys.executable, __file__, "--worker", runner, "--model", args.model, "--dtype", args.dtype]
        command += ["--steps", str(args.steps), "--batch", str(args.batch), "--max-length", str(args.max_length)]
        command += ["--tmp", str(Path(args.tmp) / runner)]
        out = subprocess.run(command, capture_output=True, text=True, check=True)
        results[runner] = json.loads(out.stdout.strip().splitlines()[-1])
        results[runner]["median_step_s"] = statistics.median(results[runner]["times"][1:])
    trl = results["trl"]["median_step_s"]
    print(f"SFT, model {args.model}, {args.dtype}, {args.batch} rows a step, max_length {args.max_length}, "
          f"median of {args.steps} steps after the first ({results['trl']['device']}):")  # fmt: skip
    for runner, result in results.items():
        losses = ", ".join(f"{loss:.4f}" for loss in result["losses"][:3])
        ratio = result["median_step_s"] / trl
        print(f"  {runner:5s} {result['median_step_s']:7.3f} s/step ({ratio:.2f}x TRL); first losses {losses}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"arguments": vars(args), "results": results}, indent=1))


if __name__ == "__main__":
    main()
