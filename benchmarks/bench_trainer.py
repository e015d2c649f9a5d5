"""Benchmark (not a test): step time and peak memory of SquareChiPOTrainer against TRL's DPOTrainer.

Same model, data, batch and settings for both, in one run; every configuration trains in a fresh
subprocess so its peak memory (max RSS on CPU, max allocated on CUDA) is its own. TRL runs its
``sigmoid`` loss; ours runs ``dpo`` (whose losses must equal TRL's) and ``square_chipo``.

    .venv/bin/python benchmarks/bench_trainer.py                       # tiny model and SmolLM2-135M
    .venv/bin/python benchmarks/bench_trainer.py --models tiny --steps 5 --checkpointing off
    .venv/bin/python benchmarks/bench_trainer.py --models smollm2 --max-length 2048 --fill --batch 1 --steps 1
    .venv/bin/python benchmarks/bench_trainer.py --models smollm2 --dtype fp32 bf16   # both dtypes, side by side

Both checkpointing settings run by default (TRL's default is on), and the last lines compare each of ours, at its
faster setting, with TRL at its faster setting. ``--dtype``: ``fp32``; ``bf16`` is mixed precision as users train
(``bf16=True``: autocast to bfloat16 with float32 master weights and optimizer state, for both trainers);
``bf16-weights`` loads both models in bfloat16 (weights, gradients and optimizer state in bfloat16).

Targets (issue 17): our step time at most 0.4x TRL's on SmolLM2-135M on a CPU, with checkpointing off, on, and
against TRL's faster setting; losses equal to TRL's within 1e-5; peak memory at most TRL's at max_length 2048
(``--fill`` builds rows long enough to reach it).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: ``ours_dpo_packed``: ours with each prompt shared in one backbone call ([prompt, chosen, rejected] under a
#: block-causal mask, ``share_prompt_layout: packed``), on every device; the other two take the device's default.
RUNNERS = ("trl_sigmoid", "ours_dpo", "ours_square_chipo", "ours_dpo_packed")
#: Shapes of SmolLM2 built from a config with random weights (no weights travel to an offline GPU machine).
SHAPES = {
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2),  # the tests' tiny model's shape
    "135m": dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                 num_key_value_heads=3),
    "1.7b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=24, num_attention_heads=32,
                 num_key_value_heads=32),
}  # fmt: skip


def _filled_rows(source, tokenizer, max_length: int, n_rows: int):
    """``n_rows`` multi-turn conversations whose prompt and each response take about half of ``max_length`` tokens:
    earlier finance exchanges as prior turns, and several answers (chosen or rejected) joined as the response. Each
    sequence overruns ``max_length`` a little and both trainers truncate it there (TRL's ``keep_start``), so every
    sequence is ``max_length`` tokens."""
    import datasets

    budget = max_length // 2
    cursor = 0

    def take() -> dict:
        nonlocal cursor
        row = source[cursor % len(source)]
        cursor += 1
        return row

    def text_of(messages) -> str:
        return messages[-1]["content"]

    def length(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    rows = []
    for _ in range(n_rows):
        prompt, used = [], 0
        while used < budget:
            row = take()
            prompt += [{"role": "user", "content": text_of(row["prompt"])}, row["chosen"][0]]
            used += length(text_of(row["prompt"])) + length(text_of(row["chosen"]))
        last = take()
        prompt.append(last["prompt"][0])
        responses = {"chosen": [], "rejected": []}
        while sum(length(t) for t in responses["chosen"]) < budget:
            row = take()
            for key in responses:
                responses[key].append(text_of(row[key]))
        rows.append(
            {"prompt": prompt, **{k: [{"role": "assistant", "content": " ".join(v)}] for k, v in responses.items()}}
        )
    return datasets.Dataset.from_list(rows)


def _from_config(shape: str, tokenizer, dtype):
    """A SmolLM2-shaped Llama with random weights (seed 0), built on the accelerator when there is one."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer), max_position_embeddings=8192, tie_word_embeddings=True, rope_theta=100000.0,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        **SHAPES[shape],
    )  # fmt: skip
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        return LlamaForCausalLM(config).to(dtype)


def _breakdown(trainer, repeats: int = 2) -> dict[str, float]:
    """Seconds (best of ``repeats``) of each part of a step on one training batch, after training warmed it up:
    the reference forward, the policy forward (the loss's forward less the reference's), the backward and the
    optimizer step."""
    import torch

    batch = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
    trainer.model.train()

    def best(fn) -> float:
        return min(timeit.repeat(fn, number=1, repeat=repeats))

    def reference():
        with torch.no_grad():
            trainer.compute_ref_log_probs(trainer.ref_model, batch)

    def forward_backward():
        trainer.model.zero_grad(set_to_none=True)
        start = time.perf_counter()
        loss = trainer.compute_loss(trainer.model, batch)
        middle = time.perf_counter()
        loss.backward()
        return middle - start, time.perf_counter() - middle

    ref = best(reference)
    passes = [forward_backward() for _ in range(repeats)]
    step = best(trainer.optimizer.step)
    trainer.model.zero_grad(set_to_none=True)
    return {
        "reference forward": ref,
        "policy forward": min(f for f, _ in passes) - ref,
        "backward": min(b for _, b in passes),
        "optimizer step": step,
    }


def step_timer(times: list[float]):
    """A trainer callback that appends each optimizer step's wall time to ``times``."""
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *_, **__):
            self.start = time.perf_counter()

        def on_step_end(self, *_, **__):
            times.append(time.perf_counter() - self.start)

    return StepTimer()


@functools.cache
def _source_rows(n: int):
    """The generator's preference rows, built once per process (the dry run's sixteen configurations share them)."""
    from squarechipo.data.finance import build_datasets

    return build_datasets(n, seed=0)["finance_preference_conversational"]["train"]


def _worker(args: argparse.Namespace) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig, DPOTrainer

    from squarechipo.models import embedded_model_path
    from squarechipo.trainer import SquareChiPOConfig, SquareChiPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer or embedded_model_path())

    weights = torch.bfloat16 if args.dtype == "bf16-weights" else torch.float32

    def load():
        if args.model in SHAPES:
            return _from_config(args.model, tokenizer, weights)
        return AutoModelForCausalLM.from_pretrained(embedded_model_path(), dtype=weights)

    n_rows = args.batch * (args.steps + 1)
    source = _source_rows(max(140, 2 * n_rows))
    if args.fill:
        columns = source.select_columns(["prompt", "chosen", "rejected"])
        train = _filled_rows(columns, tokenizer, args.max_length, n_rows)
    else:
        train = source.select(range(n_rows))
    common = dict(
        output_dir=str(Path(args.tmp) / args.runner),
        per_device_train_batch_size=args.batch,
        max_steps=args.steps + 1,
        max_length=args.max_length,
        learning_rate=1e-6,
        beta=0.1,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        gradient_checkpointing=args.gradient_checkpointing,
        seed=0,
        disable_tqdm=True,
        bf16=args.dtype == "bf16",
        use_cpu=not torch.cuda.is_available(),
        precompute_ref_log_probs=args.precompute,
    )
    if args.runner == "trl_sigmoid":
        trainer = DPOTrainer(
            load(),
            ref_model=load(),
            args=DPOConfig(loss_type=["sigmoid"], **common),
            train_dataset=train,
            processing_class=tokenizer,
        )
    else:
        method = args.runner.removeprefix("ours_").removesuffix("_packed")
        packed = dict(share_prompt=True, share_prompt_layout="packed") if args.runner.endswith("_packed") else {}
        trainer = SquareChiPOTrainer(
            load(),
            ref_model=load(),
            # The benchmark's labels are the generator's (public), as TRL's run reads them: declared so.
            args=SquareChiPOConfig(method=method, train_labels_public=True, **packed, **common),
            train_dataset=train,
            processing_class=tokenizer,
        )

    times: list[float] = []
    trainer.add_callback(step_timer(times))
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    peak = (
        torch.cuda.max_memory_allocated() / 2**20
        if torch.cuda.is_available()
        else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    )
    record = {
        "times": times,
        "losses": losses,
        "peak_mib": peak,
        "device": "cuda" if torch.cuda.is_available() else "cpu",
    }
    if args.breakdown:
        record["breakdown"] = _breakdown(trainer)
    return record


def _run(model: str, runner: str, args: argparse.Namespace, checkpointing: bool, dtype: str, precompute=False) -> dict:
    if args.dry_run:  # in this process: checks every configuration quickly, measures nothing that counts
        worker = {"runner": runner, "model": model, "dtype": dtype, "precompute": precompute}
        return _worker(argparse.Namespace(**{**vars(args), **worker, "gradient_checkpointing": checkpointing}))
    command = [sys.executable, __file__, "--worker", runner, "--model", model, "--steps", str(args.steps)]
    command += ["--dtype", dtype]
    if precompute:
        command.append("--precompute")
    if args.tokenizer:
        command += ["--tokenizer", args.tokenizer]
    command += ["--batch", str(args.batch), "--max-length", str(args.max_length), "--tmp", args.tmp]
    if checkpointing:
        command.append("--gradient-checkpointing")
    if args.fill:
        command.append("--fill")
    if args.breakdown:
        command.append("--breakdown")
    env = {**os.environ, "TQDM_DISABLE": "1", "PYTHONWARNINGS": "ignore"}
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT)
    lines = [line for line in result.stdout.splitlines() if line.startswith("BENCH ")]
    if result.returncode != 0 or not lines:
        raise RuntimeError(f"{runner} on {model} failed:\n{result.stderr[-3000:]}")
    return json.loads(lines[-1][len("BENCH ") :])


def _median_step(result: dict) -> float:
    return statistics.median(result["times"][1:])


def _setting_name(setting: tuple[bool, bool]) -> str:
    checkpointing, precompute = setting
    reference = "precomputed reference" if precompute else "separate reference model"
    return f"gradient checkpointing {'on' if checkpointing else 'off'}, {reference}"


def _report(model: str, results: dict[tuple, dict], dtype: str, runners=RUNNERS) -> list[dict]:
    """One table per setting (checkpointing, reference), then ours against TRL's fastest setting; returns the rows."""
    settings = sorted({key[1:] for key in results})
    rows = []
    for setting in settings:
        base = _median_step(results[("trl_sigmoid", *setting)])
        device = results[("trl_sigmoid", *setting)]["device"]
        print(f"\n{model} ({device}, {dtype}), {_setting_name(setting)}:")
        print(f"  {'trainer':<22}{'median step (s)':>16}{'x TRL':>8}{'peak memory (MiB)':>19}")
        for runner in runners:
            result = results[(runner, *setting)]
            step = _median_step(result)
            print(f"  {runner:<22}{step:>16.2f}{step / base:>8.2f}{result['peak_mib']:>19.0f}")
            rows.append({"model": model, "dtype": dtype, "device": device, "runner": runner,
                         "checkpointing": setting[0], "precompute": setting[1], "median_step_s": step,
                         "x_trl": step / base, "peak_mib": result["peak_mib"], "times": result["times"]})  # fmt: skip
        if "ours_dpo" in runners:
            ours, trl = results[("ours_dpo", *setting)]["losses"], results[("trl_sigmoid", *setting)]["losses"]
            diffs = [abs(a - b) for a, b in zip(ours, trl)]
            print(f"  max |loss(ours dpo) - loss(TRL sigmoid)| over {len(diffs)} steps: {max(diffs):.2e}")
        if "breakdown" in results[("trl_sigmoid", *setting)]:
            parts = list(results[("trl_sigmoid", *setting)]["breakdown"])
            print(
                f"  parts of a step (s, best of 2 on one batch): {'trainer':<20}" + "".join(f"{p:>19}" for p in parts)
            )
            for runner in runners:
                part = results[(runner, *setting)]["breakdown"]
                print(f"  {'':<42}{runner:<20}" + "".join(f"{part[p]:>19.2f}" for p in parts))
    fastest = min(settings, key=lambda st: _median_step(results[("trl_sigmoid", *st)]))
    base = _median_step(results[("trl_sigmoid", *fastest)])
    print(f"\n{model}, {dtype}: against TRL's fastest setting ({_setting_name(fastest)}, {base:.2f} s/step):")
    for runner in runners[1:]:
        best = min(settings, key=lambda st: _median_step(results[(runner, *st)]))
        step = _median_step(results[(runner, *best)])
        print(f"  {runner:<22}{step:>8.2f} s/step ({_setting_name(best)}){step / base:>8.2f}x")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--models",
        nargs="+",
        default=["tiny", "smollm2"],
        choices=["smollm2", *SHAPES],
        help="smollm2 (the embedded weights), or a shape built from its config with random weights, no weights "
        "needed: tiny (the tests' model), 135m and 1.7b (SmolLM2's)",
    )
    parser.add_argument("--steps", type=int, default=3, help="timed steps (after one warm-up step)")
    parser.add_argument("--batch", type=int, default=8, help="preference pairs per step")
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument(
        "--fill",
        action="store_true",
        help="multi-turn rows that fill max_length (prompt and each response about half of it): the memory target "
        "at 2048 tokens",
    )
    parser.add_argument(
        "--checkpointing", choices=["off", "on", "both"], default="both", help="gradient checkpointing, both trainers"
    )
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="also time the parts of a step (reference forward, policy forward, backward, optimizer step)",
    )
    parser.add_argument(
        "--dtype",
        nargs="+",
        default=["fp32"],
        choices=["fp32", "bf16", "bf16-weights"],
        help="fp32; bf16 (mixed precision: autocast, float32 master weights); bf16-weights (bfloat16 weights)",
    )
    parser.add_argument(
        "--reference",
        choices=["separate", "precompute", "both"],
        default="separate",
        help="the reference model in the step (separate) or its log-probs computed once before training (precompute, "
        "TRL's precompute_ref_log_probs), both trainers",
    )
    parser.add_argument(
        "--runners",
        nargs="+",
        choices=RUNNERS,
        default=list(RUNNERS),
        help="the trainers to time (TRL's DPOTrainer, trl_sigmoid, is always timed: it is the baseline)",
    )
    parser.add_argument("--tokenizer", default=None, help="a tokenizer folder (default: the embedded model's)")
    parser.add_argument("--json", default=None, help="also write every configuration's figures to this JSON file")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="every configuration once on the tiny model, 1 step, on this machine: checks the benchmark only",
    )
    parser.add_argument("--precompute", action="store_true", help=argparse.SUPPRESS)  # the worker's flag
    parser.add_argument("--gradient-checkpointing", action="store_true", help=argparse.SUPPRESS)  # the worker's flag
    parser.add_argument("--worker", choices=RUNNERS, help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--tmp", default="/tmp/squarechipo-bench", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        record = _worker(argparse.Namespace(**{**vars(args), "runner": args.worker, "dtype": args.dtype[0]}))
        print("BENCH " + json.dumps(record))
        return
    if args.dry_run:
        args.models, args.steps, args.batch, args.max_length = ["tiny"], 1, 2, 64
        args.runners = list(RUNNERS)
        args.checkpointing, args.reference, args.dtype = "both", "both", ["bf16"]
    runners = ("trl_sigmoid", *(r for r in RUNNERS[1:] if r in args.runners))
    checkpointing = {"off": [False], "on": [True], "both": [False, True]}[args.checkpointing]
    reference = {"separate": [False], "precompute": [True], "both": [False, True]}[args.reference]
    settings = [(c, p) for c in checkpointing for p in reference]
    print(
        f"batch {args.batch} pairs, max_length {args.max_length}{' (rows filled to it)' if args.fill else ''}, "
        f"{args.steps} timed steps after 1 warm-up; "
        + (
            "a dry run: every configuration in this process, nothing timed that counts"
            if args.dry_run
            else "every configuration in its own process"
        )
    )
    rows = []
    for model in args.models:
        for dtype in args.dtype:
            results = {
                (runner, *setting): _run(model, runner, args, setting[0], dtype, precompute=setting[1])
                for setting in settings
                for runner in runners
            }
            rows += _report(model, results, dtype, runners)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"arguments": vars(args), "rows": rows}, indent=1, default=str))


if __name__ == "__main__":
    main()
