"""Gold gain of released policies on the first 170 test prompts (2 samples each), with the 64- and 128-prompt
readings from the same samples (generation is seeded per batch of 32 prompts, so a prefix of prompts gets the samples
a shorter run would draw). The SFT policy's samples and record are computed once and cached."""

import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from squarechipo.data import load_preference_dataset
from squarechipo.evaluation.gold_report import reading
from squarechipo.evaluation.policy import GoldEvaluator, SamplingSettings, paired_test
from squarechipo.judge.reward_model import RewardModelJudge

N = 170
root = Path("outputs")  # run from the checkout that holds outputs/ (release.sh does)
test = load_preference_dataset("data/finance_preference_conversational", split="test").select(range(N))
ref = AutoModelForCausalLM.from_pretrained(root / "quickstart/sft", dtype=torch.bfloat16).eval()
ev = GoldEvaluator(
    ref,
    AutoTokenizer.from_pretrained(root / "quickstart/sft"),
    RewardModelJudge(str(root / "quickstart/gold_judge"), batch_size=32, dtype=torch.bfloat16),
    test,
    SamplingSettings(samples_per_prompt=2, generation_free=False),
    labels_public=True,
)
cache = root / f"sft{N}.json"
if cache.exists():
    sft = json.loads(cache.read_text())
else:
    t = time.time()
    samples = ev.sample(ref)
    rec = ev.measure_samples(ref, samples)
    sft = {"samples": samples, "record": rec, "seconds": round(time.time() - t, 1)}
    cache.write_text(json.dumps(sft))
for folder in sys.argv[1:]:
    out = Path(folder) / f"gold_prefix{N}.json"
    if out.exists():
        continue
    t = time.time()
    model = AutoModelForCausalLM.from_pretrained(Path(folder) / "policy", dtype=torch.bfloat16).eval()
    rec = ev.measure(model, pool=sft["samples"])
    delta = np.asarray(rec["reward"]) - np.asarray(sft["record"]["reward"])  # (samples, prompts)
    gain = delta.mean(axis=0)
    kl = (np.asarray(rec["logp"]) - np.asarray(rec["logp_ref"])).mean(axis=0)
    result = {"seconds": round(time.time() - t, 1), "per_prompt_gain": gain.round(4).tolist()}
    for n in (64, 128, N):
        g = paired_test(gain[:n]).to_dict()
        result[str(n)] = {"gold_gain": g, "kl": float(kl[:n].mean()), "reading": reading(g)}
    out.write_text(json.dumps(result, indent=1))
    print(
        folder,
        *(
            f"{n}: {result[str(n)]['gold_gain']['mean']:+.3f} [{result[str(n)]['gold_gain']['low']:+.3f}, "
            f"{result[str(n)]['gold_gain']['high']:+.3f}]"
            for n in (64, 128, N)
        ),
        flush=True,
    )
