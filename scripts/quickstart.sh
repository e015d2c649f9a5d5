#!/usr/bin/env bash
# The main job: set everything up and run the default flow on the embedded model, on CPU.
#   0. install (./.venv, torch 2.13.0 CPU first)
#   1. generate finance_preference (Zhou et al. 2025 (Square-χPO), App. E/F) into ./data: preference rows (the
#      private labels), SFT rows of their own (no preference row's label leaks into the SFT policy) and public
#      gold rows for the evaluation judge
#   2. SFT of the embedded SmolLM2-135M-Instruct on 128 mixed SFT rows          -> outputs/quickstart/sft
#   3. Square-chiPO under CTL, epsilon = 4, alpha = 0.1, on 128 private rows    -> outputs/quickstart/square_chipo_ctl
#   4. the gold reward-model judge, fitted on public gold pairs (the `judge` split) -> outputs/quickstart/gold_judge
#   5. the gold-reward gain and gold expected win rate over the SFT policy, 128 test prompts x 1 sampled
#      answer, with t intervals and a plain-words reading                  -> outputs/quickstart/eval/gold.json
#   6. a judged win rate against the SFT policy (greedy answers, 16 prompts in one batch) -> outputs/quickstart/eval
#   7. central DP (Zhou et al. 2025 (Square-χPO), Alg. 2): the exponential mechanism picks one of {embedded
#      base, SFT, Square-chiPO} on 32 rows of the private validation split, epsilon = 1 -> outputs/quickstart/selected
# About 9 minutes on 2 CPU cores with bf16 kernels (AVX512-BF16) and the packages downloaded, 12-13 minutes in float32
# where bf16 would be emulated (an AVX2-only CPU): 536 s, and 698 s and 776 s with AVX2 kernels forced, fresh clones
# on 2026-12-07 (docs/testing.md). llama.cpp, which only the judge-server tests use, is not built here
# (scripts/test.sh builds it). Re-running reuses the released labels.
set -euo pipefail
cd "$(dirname "$0")/.."
STARTED=$(date +%s)
# The library and its dependencies, without the test command's tools (scripts/test.sh adds them), byte-compiling
# only what the job imports (scripts/test.sh compiles the rest).
SQUARECHIPO_EXTRAS="${SQUARECHIPO_EXTRAS-}" SQUARECHIPO_COMPILE="${SQUARECHIPO_COMPILE-imports}" bash scripts/install.sh
PY=.venv/bin/python
# The commands the README teaches: each training job goes through Accelerate, with every CPU core per process.
SQ=.venv/bin/squarechipo
export PYTHONWARNINGS="${PYTHONWARNINGS:-ignore::FutureWarning}"
# bf16 where this machine has bf16 kernels (the settings the job was timed and validated with), float32 where bf16
# would be emulated (an AVX2-only CPU: the SFT step alone would take about 2 hours). Set SQUARECHIPO_DTYPE to choose.
DTYPE="${SQUARECHIPO_DTYPE:-$("$SQ" env --fast-dtype)}"
case "$DTYPE" in
  bfloat16) BF16=true ;;
  float32) BF16=false ;;
  *) echo "SQUARECHIPO_DTYPE=$DTYPE: set it to bfloat16 or float32" >&2; exit 2 ;;
esac
# Each stage's start, for the summary's seconds per stage (outputs/quickstart/summary.json).
mkdir -p outputs/quickstart
STAGES=outputs/quickstart/stages.tsv
printf 'install\t%s\n' "$STARTED" > "$STAGES"
stage() {
  printf '%s\t%s\n' "$1" "$(date +%s)" >> "$STAGES"
  if [ -n "$2" ]; then echo "== $2"; fi
}
echo "== weights and autocast in $DTYPE (bfloat16 where this machine has bf16 kernels, else float32; squarechipo env)"

stage data "[1/7] data: finance_preference -> data/"
if [ ! -d data/finance_preference ]; then
  "$SQ" data finance --out data --seed 0
elif [ ! -d data/finance_sft_mixed_conversational ]; then
  echo "data/ was written by an older generator (it has no judge split or no mixed SFT rows): move it away"
  echo "(mv data data.old) and run this script again" >&2
  exit 1
else
  echo "data/ already exists; delete it to regenerate"
fi

# The registry of releases (squarechipo.privacy.release.registry) refuses a second release of the same rows and never starts
# silently: the main job keeps one of its own beside its outputs, started explicitly before its first release.
export SQUARECHIPO_RELEASE_REGISTRY="${SQUARECHIPO_RELEASE_REGISTRY:-$PWD/outputs/quickstart/releases.sqlite}"
if [ ! -e "$SQUARECHIPO_RELEASE_REGISTRY" ] && [ ! -d outputs/quickstart/square_chipo_ctl/released_train ]; then
  "$SQ" registry init
fi

stage sft "[2/7] SFT of the embedded SmolLM2-135M-Instruct on its own mixed rows -> outputs/quickstart/sft"
"$SQ" sft --config recipes/configs/quickstart_sft.yaml --bf16 "$BF16"

stage square_chipo "[3/7] Square-chiPO, CTL, epsilon=4, alpha=0.1 -> outputs/quickstart/square_chipo_ctl"
"$SQ" train --config recipes/configs/quickstart_align.yaml --bf16 "$BF16"

stage gold_judge "[4/7] the gold reward-model judge on public gold pairs -> outputs/quickstart/gold_judge"
"$SQ" gold-judge --config recipes/configs/quickstart_gold_judge.yaml --bf16 "$BF16"

stage gold_report "[5/7] gold-reward gain over the SFT policy: 128 test prompts x 1 sample -> outputs/quickstart/eval/gold.json"
"$SQ" gold-report --policy outputs/quickstart/square_chipo_ctl --sft outputs/quickstart/sft \
  --gold outputs/quickstart/gold_judge --dataset_name data/finance_preference_conversational --dataset_test_split test \
  --max_eval_samples 128 --samples 1 --generation_batch_size 128 --public_splits test --skip_generation_free \
  --dtype "$DTYPE" --out outputs/quickstart/eval/gold.json

stage judged_win_rate "[6/7] win rate vs the SFT policy, judged by the gold judge -> outputs/quickstart/eval"
"$SQ" judge --policy outputs/quickstart/square_chipo_ctl --baseline outputs/quickstart/sft \
  --dataset_name data/finance_preference_conversational --dataset_test_split test --max_eval_samples 16 --max-new-tokens 64 \
  --batch-size 16 --dtype "$DTYPE" \
  --judge reward-model --judge-model outputs/quickstart/gold_judge --judge-batch-size 16 \
  --calibration-pairs 16 --public_splits test --setting CTL --method square_chipo --out outputs/quickstart/eval

stage selection "[7/7] central DP selection (epsilon = 1) among base, SFT and Square-chiPO -> outputs/quickstart/selected"
if [ ! -f outputs/quickstart/selected/squarechipo_privacy.json ]; then
  "$SQ" select --config recipes/configs/select_policy.yaml --dtype "$DTYPE"
else
  echo "outputs/quickstart/selected already holds a selection; selecting again would spend another epsilon"
fi

stage summary ""
"$PY" - <<'PY'
import json, pathlib, subprocess
from squarechipo.evaluation.report import format_lines
said = []


def print(*parts, _print=print):  # each line printed is also kept: outputs/quickstart/summary.json, the record
    said.append(" ".join(str(p) for p in parts))
    _print(*parts)


out = pathlib.Path("outputs/quickstart/square_chipo_ctl")
train = json.loads((out / "train_results.json").read_text())
privacy = json.loads((out / "squarechipo_privacy.json").read_text())
print("\n== Done")
print(f"  SFT model:          {pathlib.Path('outputs/quickstart/sft').resolve()}")
print(f"  aligned model:      {out.resolve()}")
print(f"  model card:         {(out / 'README.md').resolve()}")
print(f"  privacy record:     {(out / 'squarechipo_privacy.json').resolve()}")
print(f"  released labels:    {(out / 'released_train').resolve()} (with its privacy ledger)")
print(f"  metrics:            {(out / 'train_results.json').resolve()}, {(out / 'trainer_state.json').resolve()}")
print(f"  evaluation:         {pathlib.Path('outputs/quickstart/eval/report.md').resolve()} (+ win_rates.png, judgments.jsonl)")
print(f"  method {privacy['method']}, epsilon {privacy['epsilon']}, alpha {privacy['corruption_rate']}, "
      f"order {privacy['order']}, train loss {train['train_loss']:.4f}")
from squarechipo.evaluation.gold_report import format_summary
print("  the headline, the gold reward (128 test prompts x 1 sample, paired with the SFT policy's):")
for line in format_summary(json.loads(pathlib.Path("outputs/quickstart/eval/gold.json").read_text())):
    print(f"    {line}")
summary = json.loads(pathlib.Path("outputs/quickstart/eval/summary.json").read_text())
print(f"  a second opinion, judged by {summary['judge']} on 16 prompts (greedy answers, one comparison each): its")
print("  interval is several times wider than the headline's, so it can read otherwise; the headline decides")
for line in format_lines(summary):
    print(f"    {line}")
selected = json.loads(pathlib.Path("outputs/quickstart/selected/squarechipo_privacy.json").read_text())
print(f"  central DP selection: {selected['selected']} of {selected['num_candidates']} candidates, "
      f"epsilon {selected['epsilon']}, n {selected['num_rows']} -> {pathlib.Path('outputs/quickstart/selected').resolve()}")
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
here = str(pathlib.Path.cwd()) + "/"  # a record names no machine's folders: paths relative to the checkout
import os, time
from squarechipo.models.runtime import machine_record
marks = [line.split("\t") for line in pathlib.Path("outputs/quickstart/stages.tsv").read_text().splitlines()]
ends = [int(t) for _, t in marks[1:]] + [int(time.time())]
stages = {name: end - int(start) for (name, start), end in zip(marks, ends)}
forced = {k: os.environ[k] for k in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA") if k in os.environ}
record = {"commit": commit or None, "seconds": sum(stages.values()), "stage_seconds": stages,
          "machine": {**machine_record(), "cores": os.cpu_count(), "forced_kernels": forced},
          "gold": json.loads(pathlib.Path("outputs/quickstart/eval/gold.json").read_text()),
          "judged": summary["overall"], "printed": [line.replace(here, "") for line in said]}
pathlib.Path("outputs/quickstart/summary.json").write_text(json.dumps(record, indent=1, default=str))

PY
