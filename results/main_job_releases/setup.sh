set -euo pipefail
cd /work/wt64
export PYTHONPATH=/work/wt64 PYTHONWARNINGS=ignore::FutureWarning
PY=/work/main/.venv/bin/python
LAUNCH=(/work/main/.venv/bin/accelerate launch --num_processes 1 --num_machines 1 --mixed_precision no --dynamo_backend no --num_cpu_threads_per_process 2)
t=$(date +%s); $PY -m data_gen.finance --out data --seed 0 >/dev/null; echo "data $(( $(date +%s)-t ))"
export SQUARECHIPO_RELEASE_REGISTRY=/work/wt64/outputs/quickstart/releases.sqlite
mkdir -p outputs/quickstart
t=$(date +%s); "${LAUNCH[@]}" recipes/sft.py --config recipes/configs/quickstart_sft.yaml > outputs/sft.log 2>&1; echo "sft $(( $(date +%s)-t ))"
t=$(date +%s); $PY recipes/gold_judge.py --config recipes/configs/quickstart_gold_judge.yaml > outputs/judge.log 2>&1; echo "judge $(( $(date +%s)-t ))"
