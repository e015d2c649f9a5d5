#!/usr/bin/env bash
# One fresh release of the main job's alignment step, then the job's gold report on it (128 prompts x 1 sample), as
# scripts/quickstart.sh runs them, in the dtype this machine's job runs in (squarechipo env --fast-dtype, or
# SQUARECHIPO_DTYPE). Run from a checkout holding the shared steps in data/ and outputs/quickstart/{sft,gold_judge}:
#   cd CHECKOUT && bash results/main_job_releases_v3/release.sh I OUT      (VENV=folder to use another venv)
# Resumable: a release whose policy exists is not trained again, a report that exists is not run again.
set -euo pipefail
i=$1
out=$2
VENV=${VENV:-$PWD/.venv}
SQ=$VENV/bin/squarechipo
export PYTHONWARNINGS=ignore::FutureWarning
DTYPE=${SQUARECHIPO_DTYPE:-$("$SQ" env --fast-dtype)}
BF16=$([ "$DTYPE" = bfloat16 ] && echo true || echo false)
d=outputs/v3_release_$i
mkdir -p "$out/release_$i"
if [ ! -f "$d/policy/train_results.json" ]; then
  rm -rf "$d"
  mkdir -p "$d"
  export SQUARECHIPO_RELEASE_REGISTRY=$PWD/$d/releases.sqlite  # a registry of its own, as a fresh clone's
  "$SQ" registry init > "$d/registry.log" 2>&1
  t=$(date +%s)
  "$SQ" train --config recipes/configs/quickstart_align.yaml --bf16 "$BF16" --output_dir "$d/policy" > "$d/train.log" 2>&1
  echo "{\"release\": $i, \"align_s\": $(($(date +%s) - t))}" > "$out/release_$i/align_time.json"
  cp "$d/policy/squarechipo_privacy.json" "$out/release_$i/"
fi
if [ ! -f "$out/release_$i/gold.json" ]; then
  t=$(date +%s)
  "$SQ" gold-report --policy "$d/policy" --sft outputs/quickstart/sft --gold outputs/quickstart/gold_judge \
    --dataset_name data/finance_preference_conversational --dataset_test_split test \
    --max_eval_samples 128 --samples 1 --generation_batch_size 128 --public_splits test --skip_generation_free \
    --dtype "$DTYPE" --out "$out/release_$i/gold.json" > "$d/gold.log" 2>&1
  echo "{\"release\": $i, \"gold_report_s\": $(($(date +%s) - t))}" > "$out/release_$i/gold_time.json"
fi
grep -E "^(gold reward gain|reading)" "$d/gold.log" || true
