"""Benchmark (not a test): a grid of 4 runs sharing one reference, with and without the reference log-prob cache.

The grid is {CTL, LTC} × 2 label seeds of Square-χPO on the same rows and the same reference model (the embedded
SmolLM2-135M-Instruct by default), each run one optimizer step with ``precompute_ref_log_probs``. Without the cache
every run computes the reference log-probs of every row; with it (``reference_logps_cache``) only the first does.
Prints the seconds of each run and the total saved.

    .venv/bin/python benchmarks/bench_reference_cache.py [--rows 64] [--model embedded]
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

import datasets
from transformers import AutoModelForCausalLM, AutoTokenizer

from squarechipo.data.finance import build_datasets
from squarechipo.models import resolve_model_path
from squarechipo.privacy import LabelPipeline, release_dataset
from squarechipo.trainer import SquareChiPOConfig, SquareChiPOTrainer


def _run(model_path: str, train, out: Path, cache: Path | None, batch_size: int) -> float:
    args = SquareChiPOConfig(
        output_dir=str(out),
        method="square_chipo",
        r_max=5.0,
        max_steps=1,
        per_device_train_batch_size=batch_size,
        precompute_ref_log_probs=True,
        reference_logps_cache=str(cache) if cache else None,
        max_length=256,
        report_to="none",
        save_strategy="no",
        gradient_checkpointing=False,
        disable_tqdm=True,
        train_labels_public=True,  # the generator's labels, public (a timing run)
    )
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path)
    start = time.perf_counter()
    SquareChiPOTrainer(model, args=args, train_dataset=train, processing_class=tokenizer).train()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    datasets.disable_progress_bars()
    model_path = resolve_model_path(args.model)
    rows = build_datasets(max(args.rows * 2, 200), seed=0)["finance_preference_conversational"]["train"]
    rows = rows.select(range(args.rows))
    grid = [
        (f"{order}-seed{seed}", release_dataset(rows, LabelPipeline(0.5, 0.1, order=order), seed=seed))
        for order in ("ctl", "ltc")
        for seed in (0, 1)
    ]
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        print(f"{len(grid)} runs of one step on {args.rows} rows, {args.model}, precompute_ref_log_probs")
        totals = {}
        for label, cache in (("without cache", None), ("with cache", folder / "reference.sqlite")):
            seconds = [
                _run(model_path, train, folder / f"{label}-{name}", cache, args.batch_size) for name, train in grid
            ]
            totals[label] = sum(seconds)
            print(f"  {label:>13}: " + ", ".join(f"{name} {s:.1f} s" for (name, _), s in zip(grid, seconds)))
        saved = totals["without cache"] - totals["with cache"]
        print(f"  total {totals['without cache']:.1f} s → {totals['with cache']:.1f} s: {saved:.1f} s saved")


if __name__ == "__main__":
    main()
