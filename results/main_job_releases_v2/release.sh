#!/usr/bin/env bash
# One fresh release of the main job's alignment step, then the job's gold report on it (128 prompts x 1 sample).
# Run from a checkout that holds the shared steps in data/ and outputs/quickstart/{sft,gold_judge} (made by the job):
#   cd CHECKOUT && bash results/main_job_releases_v2/release.sh I      (VENV=folder to use another venv)
set -euo pipefail
i=$1
VENV=${VENV:-$PWD/.venv}
SQ=$VENV/bin/squarechipo
export PYTHONPATH=$PWD PYTHONWARNINGS=ignore::FutureWarning
d=outputs/v2_release_$i
if [ ! -f "$d"/policy/train_results.json ]; then
  rm -rf "$d"; mkdir -p "$d"
  export SQUARECHIPO_RELEASE_REGISTRY=$PWD/$d/releases.sqlite  # a registry of its own, as a fresh clone's
  "$SQ" registry init > "$d"/registry.log 2>&1
  t=$(date +%s)
  "$SQ" train --config recipes/configs/quickstart_align.yaml --output_dir "$d"/policy > "$d"/train.log 2>&1
  echo "{\"release\": $i, \"align_s\": $(( $(date +%s)-t ))}" > "$d"/align_time.json
fi
if [ ! -f "$d"/gold.json ]; then
  t=$(date +%s)
  "$SQ" gold-report --policy "$d"/policy --sft outputs/quickstart/sft --gold outputs/quickstart/gold_judge \
    --dataset_name data/finance_preference_conversational --dataset_test_split test \
    --max_eval_samples 128 --samples 1 --generation_batch_size 64 --public_splits test --skip_generation_free \
    --out "$d"/gold.json > "$d"/gold.log 2>&1
  echo "{\"release\": $i, \"gold_report_s\": $(( $(date +%s)-t ))}" > "$d"/gold_time.json
fi
grep -E "^(gold reward gain|reading)" "$d"/gold.log
