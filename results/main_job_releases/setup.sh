#!/usr/bin/env bash
# Run from a checkout of the commit README.md names, with its venv (bash scripts/install.sh):
#   cd CHECKOUT && bash results/main_job_releases/setup.sh   (VENV=folder to use another venv)
set -euo pipefail
export PYTHONPATH=$PWD PYTHONWARNINGS=ignore::FutureWarning
VENV=${VENV:-$PWD/.venv}
PY=$VENV/bin/python
LAUNCH=("$VENV/bin/accelerate" launch --num_processes 1 --num_machines 1 --mixed_precision no --dynamo_backend no --num_cpu_threads_per_process 2)
t=$(date +%s); $PY -m data_gen.finance --out data --seed 0 >/dev/null; echo "data $(( $(date +%s)-t ))"
export SQUARECHIPO_RELEASE_REGISTRY=$PWD/outputs/quickstart/releases.sqlite
mkdir -p outputs/quickstart
t=$(date +%s); "${LAUNCH[@]}" recipes/sft.py --config recipes/configs/quickstart_sft.yaml > outputs/sft.log 2>&1; echo "sft $(( $(date +%s)-t ))"
t=$(date +%s); $PY recipes/gold_judge.py --config recipes/configs/quickstart_gold_judge.yaml > outputs/judge.log 2>&1; echo "judge $(( $(date +%s)-t ))"
