#!/usr/bin/env bash
# One fresh release of the main job's alignment, on the shared SFT, then its gold gain on 170 test prompts
# (with the 64- and 128-prompt readings of the same samples), from the checkout setup.sh ran in:
#   cd CHECKOUT && bash results/main_job_releases/release.sh I ROWS EPSILON   (VENV=folder to use another venv)
set -euo pipefail
i=$1; rows=$2; eps=$3
HERE=$(cd "$(dirname "$0")" && pwd)
export PYTHONPATH=$PWD PYTHONWARNINGS=ignore::FutureWarning
VENV=${VENV:-$PWD/.venv}
PY=$VENV/bin/python
LAUNCH=("$VENV/bin/accelerate" launch --num_processes 1 --num_machines 1 --mixed_precision no --dynamo_backend no --num_cpu_threads_per_process 2)
d=outputs/rel_n${rows}_eps${eps}_$i
if [ ! -f "$d"/policy/train_results.json ]; then
  rm -rf "$d"; mkdir -p "$d"
  export SQUARECHIPO_RELEASE_REGISTRY=$PWD/$d/releases.sqlite
  "$VENV/bin/squarechipo" registry init > "$d"/registry.log 2>&1
  t=$(date +%s)
  "${LAUNCH[@]}" recipes/train.py --config recipes/configs/quickstart_align.yaml --output_dir "$d"/policy \
    --max_train_samples "$rows" --label_epsilon "$eps" > "$d"/train.log 2>&1
  echo "{\"release\": $i, \"rows\": $rows, \"epsilon\": $eps, \"align_s\": $(( $(date +%s)-t ))}" > "$d"/times.json
fi
$PY "$HERE/gold_prefix.py" "$d" > "$d"/prefix.log 2>&1
grep "^outputs" "$d"/prefix.log || true
