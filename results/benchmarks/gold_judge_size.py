"""How many public gold pairs the main job's gold judge needs, and whether int8 features would do: the record
results/benchmarks/gold_judge_size_2026-12-07.json came from this script, run from a checkout holding the main job's
data/ (squarechipo data finance --out data --seed 0) with AVX2 kernels forced:

    ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 .venv/bin/python results/benchmarks/gold_judge_size.py OUT.json
"""

import json
import sys
import time

import datasets
import numpy as np
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from squarechipo.models import embedded_model_path
from squarechipo.models.memory import keep_freed_memory
from squarechipo.reward.features import pooled_features, reward_texts
from squarechipo.reward.linear import mle


def features(model, tokenizer, rows):
    def pooled(column):
        texts = reward_texts(tokenizer, rows["prompt"], rows[column])
        return pooled_features(model, tokenizer, texts, batch_size=16, max_length=512)

    return pooled("chosen"), pooled("rejected")


def head(chosen, rejected, n):
    """The gold judge's fit (squarechipo.reward.features.fit_linear_reward_model) on the first n pairs."""
    diff = (chosen - rejected)[:n]
    scale = float(np.median(np.linalg.norm(diff, axis=1)))
    return mle(diff[None] / scale, np.ones((1, len(diff))), 10.0)[0] / scale


def main(out: str) -> None:
    keep_freed_memory()
    path = embedded_model_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    data = datasets.load_from_disk("data/finance_preference_conversational")
    judge, test = data["judge"].select(range(256)), data["test"].select(range(128))
    found, seconds = {}, {}
    for kind in ("float32", "int8"):
        model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1, dtype=torch.float32).eval()
        model.config.pad_token_id = tokenizer.pad_token_id
        if kind == "int8":
            model.model = torch.ao.quantization.quantize_dynamic(model.model, {torch.nn.Linear}, dtype=torch.qint8)
        start = time.perf_counter()
        found[kind] = (*features(model, tokenizer, judge), *features(model, tokenizer, test))
        seconds[kind] = round(time.perf_counter() - start, 1)
    jc, jr, tc, tr = found["float32"]
    reference = head(jc, jr, 256)
    rc, rr = tc @ reference, tr @ reference
    fits = []
    for kind, (jc, jr, tc, tr) in found.items():
        for n in (64, 96, 128, 192, 256):
            w = head(jc, jr, n)
            c, r = tc @ w, tr @ w
            fits.append({
                "features": kind, "pairs": n, "test_accuracy": round(float(np.mean(c > r)), 3),
                "reward_correlation": round(float(np.corrcoef(np.r_[c, r], np.r_[rc, rr])[0, 1]), 3),
                "difference_correlation": round(float(np.corrcoef(c - r, rc - rr)[0, 1]), 3),
                "difference_scale": round(float(np.std(c - r) / np.std(rc - rr)), 2),
            })  # fmt: skip
    record = {"seconds_judge_and_test_features": seconds, "fits": fits}
    with open(out, "w") as f:
        json.dump(record, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
