# One fresh release of the main job's alignment, on the shared SFT, then its gold gain on 170 test prompts
# (with the 64- and 128-prompt readings of the same samples).   bash /work/wt64_release.sh I ROWS EPSILON
set -euo pipefail
i=$1; rows=$2; eps=$3
cd /work/wt64
export PYTHONPATH=/work/wt64 PYTHONWARNINGS=ignore::FutureWarning
PY=/work/main/.venv/bin/python
LAUNCH=(/work/main/.venv/bin/accelerate launch --num_processes 1 --num_machines 1 --mixed_precision no --dynamo_backend no --num_cpu_threads_per_process 2)
d=outputs/rel_n${rows}_eps${eps}_$i
if [ ! -f $d/policy/train_results.json ]; then
  rm -rf $d; mkdir -p $d
  export SQUARECHIPO_RELEASE_REGISTRY=$PWD/$d/releases.sqlite
  /work/main/.venv/bin/squarechipo registry init > $d/registry.log 2>&1
  t=$(date +%s)
  "${LAUNCH[@]}" recipes/train.py --config recipes/configs/quickstart_align.yaml --output_dir $d/policy \
    --max_train_samples $rows --label_epsilon $eps > $d/train.log 2>&1
  echo "{\"release\": $i, \"rows\": $rows, \"epsilon\": $eps, \"align_s\": $(( $(date +%s)-t ))}" > $d/times.json
fi
$PY /work/gold_prefix.py $d > $d/prefix.log 2>&1
grep "^outputs" $d/prefix.log || true
