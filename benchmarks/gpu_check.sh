#!/usr/bin/env bash
# The GPU check: one command that a lent GPU machine runs in at most 8 minutes and that never hangs (not a test).
#
#     bash benchmarks/gpu_bundle.sh DIR                    # here, on a CPU machine: what the call carries
#     cd DIR/project && bash benchmarks/gpu_check.sh       # there: every step below on CUDA, in bf16
#     bash benchmarks/gpu_check.sh --dry-run --out OUT     # here: the same steps and limits on the CPU, tiny model
#
# Every step runs under its own `timeout` (its whole process group), within one deadline for the run, and writes its
# outcome (exit code, seconds, what it measured) into OUT/gpu_check.json as it ends, with its output in
# OUT/gpu_check.log: a run cut off returns what it had measured. OUT is $OUT (the device tool sets it) or --out.
#   1. offline and no telemetry, set before any import; on the GPU machine the bundle's wheels installed (--target)
#   2. import probe: each package alone in its own process, 30 s each, printing its version and seconds
#   3. benchmarks/bench_trainer.py at the SmolLM2-1.7B shape, bf16, 8 pairs × 512 tokens: TRL's DPOTrainer against
#      ours (dpo, square_chipo, packed prompt sharing), median seconds a step and peak memory
#   4. the main job's steps with SmolLM2-135M built from its config (random weights: speed and "it runs", never
#      quality): model, data, release, SFT, Square-χPO, gold judge, gold report, judged win rate, central-DP selection
#   5. the DDP and FSDP2 Accelerate configs, 10 steps each (2 in the dry run), one process, on the released rows
# The dry run builds the tests' tiny model over SmolLM2's tokenizer, uses the current Python and its packages, and
# runs the trainer benchmark's own dry run; tests/test_gpu_check.py runs it on every run of the suite.
set -u
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 DO_NOT_TRACK=1 \
  HF_HUB_DISABLE_PROGRESS_BARS=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1 WANDB_MODE=disabled \
  PYTHONWARNINGS="${PYTHONWARNINGS:-ignore::FutureWarning}"
HERE=$(cd "$(dirname "$0")" && pwd)
PROJECT=$(dirname "$HERE")
BUNDLE=$(dirname "$PROJECT")
DRY=no
CONFIG_DIR_GIVEN=
OUT=${OUT:-}
BUDGET=${GPU_CHECK_BUDGET:-470}
while [ $# -gt 0 ]; do
  case $1 in
    --dry-run) DRY=yes ;;
    --out) OUT=$2; shift ;;
    --budget) BUDGET=$2; shift ;;
    --config-dir) CONFIG_DIR_GIVEN=$2; shift ;;
    --python) PYTHON=$2; shift ;;
    *) echo "usage: bash benchmarks/gpu_check.sh [--dry-run] [--out DIR] [--budget SECONDS] [--config-dir DIR]" \
         "[--python PY]" >&2
       exit 2 ;;
  esac
  shift
done
OUT=${OUT:-$PROJECT/outputs/gpu_check}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
JSON=$OUT/gpu_check.json
LOG=$OUT/gpu_check.log
: >"$LOG"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/squarechipo-gpu-check.XXXXXX")
DEADLINE=$(($(date +%s) + BUDGET))
if [ "$DRY" = yes ]; then
  PY=${PYTHON:-$PROJECT/.venv/bin/python}
  CONFIG_DIR=${CONFIG_DIR_GIVEN:-$WORK/smollm2}
  SHAPE=tiny
  BF16=false
  DTYPE=float32
  STEPS=2
  ACCELERATE_STEPS=2
  ROWS=(--rows 140 --sft-rows 40 --judge-rows 40)
  CPU_FLAG=(--cpu)
else
  PY=${PYTHON:-python3}
  CONFIG_DIR=${CONFIG_DIR_GIVEN:-$BUNDLE/smollm2}
  SHAPE=135m
  BF16=true
  DTYPE=bfloat16
  STEPS=8
  ACCELERATE_STEPS=10
  ROWS=(--rows 400 --sft-rows 128 --judge-rows 128)
  CPU_FLAG=()
fi
RECORD=("$PY" -I "$HERE/gpu_record.py" "$JSON")
case ":${PYTHONPATH:-}:" in *":$PROJECT:"*) ;; *) export PYTHONPATH="$PROJECT${PYTHONPATH:+:$PYTHONPATH}" ;; esac
# The run's own registry, record store and key: nothing of the machine's account is read or written.
export SQUARECHIPO_RELEASE_REGISTRY=$WORK/releases.sqlite SQUARECHIPO_RECORD_STORE=$WORK/records.sqlite \
  SQUARECHIPO_SIGNING_KEY=$WORK/key.pem SQUARECHIPO_CACHE=$WORK/cache
unset SQUARECHIPO_TRUSTED_KEYS
timeout 20 "${RECORD[@]}" start "$([ "$DRY" = yes ] && echo dry-run || echo gpu)" || { echo "cannot write $JSON" >&2; exit 1; }
echo "gpu_check: $([ "$DRY" = yes ] && echo 'dry run on this CPU' || echo 'on the GPU'); results in $JSON, output in $LOG"

# step NAME LIMIT [--attach FILE] -- COMMAND...: run COMMAND under min(LIMIT, time left), record its outcome.
step() {
  local name=$1 limit=$2 attach=() pattern=()
  shift 2
  if [ "$1" = --attach ]; then attach=(--attach "$2"); shift 2; fi
  if [ "$1" = --pattern ]; then pattern=(--pattern "$2"); shift 2; fi
  [ "$1" = -- ] && shift
  local left=$((DEADLINE - $(date +%s) - 5))
  [ "$left" -lt "$limit" ] && limit=$left
  local t0 rc
  t0=$(date +%s.%N)
  if [ "$limit" -lt 5 ]; then
    rc=-1
    echo "== $name: skipped, the run's $BUDGET s are spent" >>"$LOG"
  else
    echo "== $name (at most $limit s): $*" >>"$LOG"
    local before
    before=$(wc -l <"$LOG")
    timeout -k 10 "$limit" "$@" >>"$LOG" 2>&1 </dev/null
    rc=$?
    tail -n +"$((before + 1))" "$LOG" >"$WORK/step.out"
  fi
  timeout 20 "${RECORD[@]}" step "$name" "$rc" "$t0" "$(date +%s.%N)" "$limit" "${pattern[@]}" --text "$WORK/step.out" "${attach[@]}"
  printf '  %-28s exit %-4s %6.1f s\n' "$name" "$rc" "$(echo "$(date +%s.%N) - $t0" | bc)"
  return 0
}

SQ=("$PY" -m squarechipo.cli)
if [ "$DRY" = no ]; then
  # The bundle's wheels, into a folder of this run (the image's own packages stay as they are).
  step install-wheels 120 -- "$PY" -m pip --disable-pip-version-check -q install --no-index --no-deps \
    --target "$WORK/site" "$BUNDLE"/wheels/*.whl
  export PYTHONPATH="$WORK/site:$PYTHONPATH"
fi

# 2. The import probe: a hang names its package.
for package in torch transformers accelerate peft datasets trl cryptography nacl scipy squarechipo; do
  step "import $package" 30 -- "$PY" -c "import time; t = time.time(); import $package as m
print('$package', getattr(m, '__version__', '?'), f'{time.time() - t:.1f} s')"
done
step "cuda" 30 -- "$PY" -c "import sys, torch
cuda = torch.cuda.is_available()
print(torch.__version__, torch.cuda.get_device_name() if cuda else 'no CUDA device', 'bf16' if cuda and torch.cuda.is_bf16_supported() else '')
sys.exit(0 if cuda or '$DRY' == 'yes' else 1)  # on the GPU machine, everything after this must run on CUDA"

# 3. The trainer benchmark (first: the figure most wanted): TRL's DPOTrainer against ours (dpo, square_chipo, packed
# prompt sharing) at the 1.7B shape, each in its own process.
if [ "$DRY" = yes ]; then  # the same path (a process per trainer), on the tiny model: 1 step of 2 short pairs
  BENCH=(--models tiny --steps 1 --batch 2 --max-length 64 --dtype fp32)
else
  BENCH=(--models 1.7b --tokenizer "$CONFIG_DIR" --steps 5 --batch 8 --max-length 512 --dtype bf16)
fi
step "bench_trainer" 150 --attach "$WORK/bench.json" -- "$PY" "$HERE/bench_trainer.py" "${BENCH[@]}" \
  --checkpointing off --reference separate --json "$WORK/bench.json"

# 4. The main job's steps.
if [ ! -f "$CONFIG_DIR/config.json" ]; then  # the dry run without --config-dir: the embedded model's, no weights
  step "tokenizer and config" 60 -- "$PY" -c "
import shutil, sys
from pathlib import Path
from squarechipo.models import embedded_model_path
source, out = Path(embedded_model_path()), Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
for f in source.iterdir():
    if f.is_file() and f.suffix != '.safetensors':
        shutil.copy(f, out / f.name)
print('copied', sorted(p.name for p in out.iterdir()))" "$CONFIG_DIR"
fi
MODEL=$WORK/model
DATA=$WORK/data
PREFS=$DATA/finance_preference_conversational
step "model from its config" 90 -- "$PY" "$HERE/gpu_model.py" "$CONFIG_DIR" "$MODEL" --shape "$SHAPE"
step "data" 60 -- "${SQ[@]}" data finance --out "$DATA" --seed 0 "${ROWS[@]}"
step "key and registry" 60 -- bash -c "'$PY' -m squarechipo.cli key new --out '$WORK/key.pem' && '$PY' -m squarechipo.cli registry init"
step "release (validation split)" 60 -- "$PY" -c "
import sys, time
from squarechipo.data import load_preference_dataset
from squarechipo.privacy import LabelPipeline, get_ledger, release_dataset
rows = load_preference_dataset(sys.argv[1], split='validation')
t = time.time()
released = release_dataset(rows, LabelPipeline(epsilon=4.0, corruption_rate=0.1), sys.argv[2], public_columns=['id', 'category'])
print(f'released {len(released)} rows at epsilon {get_ledger(released).total_epsilon} in {time.time() - t:.2f} s')" \
  "$PREFS" "$WORK/released_validation"
COMMON=(--bf16 "$BF16" --max_steps "$STEPS" --logging_steps 1 --disable_tqdm true --report_to none)
step "sft" 90 --pattern train_runtime -- "${SQ[@]}" sft --config "$PROJECT/recipes/configs/quickstart_sft.yaml" --model_name_or_path "$MODEL" \
  --dataset_name "$DATA/finance_sft_mixed_conversational" --output_dir "$WORK/sft" --max_train_samples 64 "${COMMON[@]}"
step "square-chipo" 90 --pattern train_runtime -- "${SQ[@]}" train --config "$PROJECT/recipes/configs/quickstart_align.yaml" \
  --model_name_or_path "$WORK/sft" --dataset_name "$PREFS" --output_dir "$WORK/align" --max_train_samples 64 \
  --max_eval_samples 8 "${COMMON[@]}"
step "gold judge" 90 -- "${SQ[@]}" gold-judge --config "$PROJECT/recipes/configs/quickstart_gold_judge.yaml" \
  --model_name_or_path "$MODEL" --dataset_name "$PREFS" --output_dir "$WORK/gold" --max_train_samples 64 --bf16 "$BF16"
step "gold report" 90 -- "${SQ[@]}" gold-report --policy "$WORK/align" --sft "$WORK/sft" --gold "$WORK/gold" \
  --dataset_name "$PREFS" --dataset_test_split test --max_eval_samples 16 --samples 1 --generation_batch_size 16 \
  --public_splits test --skip_generation_free --dtype "$DTYPE" --out "$WORK/eval/gold.json"
step "judged win rate" 90 -- "${SQ[@]}" judge --policy "$WORK/align" --baseline "$WORK/sft" --dataset_name "$PREFS" \
  --dataset_test_split test --max_eval_samples 8 --max-new-tokens 16 --batch-size 8 --dtype "$DTYPE" \
  --judge reward-model --judge-model "$WORK/gold" --judge-batch-size 8 --calibration-pairs 16 --public_splits test \
  --setting CTL --method square_chipo --out "$WORK/eval"
cat >"$WORK/select.yaml" <<YAML
candidates: [$MODEL, $WORK/sft, $WORK/align]
ref_model: $WORK/sft
dataset_name: $PREFS
dataset_train_split: validation
max_train_samples: 8
output_dir: $WORK/selected
central_epsilon: 1.0
beta: 0.1
r_max: 5.0
link: chipo
max_length: 256
batch_size: 8
dtype: $DTYPE
allow_unrecorded_candidates: true
YAML
step "central-DP selection" 90 -- "${SQ[@]}" select --config "$WORK/select.yaml"

# 5. The Accelerate configs, 10 steps each in one process, on the rows the Square-χPO step released (an analyst
# trains on a release; nothing is released again).
cat >"$WORK/accelerate.yaml" <<YAML
model_name_or_path: $WORK/sft
dataset_name: $WORK/align/released_train
method: square_chipo
beta: 0.1
r_max: 5.0
learning_rate: 5.0e-6
per_device_train_batch_size: 8
max_length: 256
eval_strategy: "no"
save_strategy: "no"
report_to: none
seed: 0
YAML
for config in ddp fsdp2; do
  step "accelerate $config" 60 --pattern train_runtime -- "$PY" -m accelerate.commands.launch "${CPU_FLAG[@]}" \
    --config_file "$PROJECT/recipes/accelerate/$config.yaml" --num_processes 1 "$PROJECT/recipes/train.py" \
    --config "$WORK/accelerate.yaml" --output_dir "$WORK/$config" --max_steps "$ACCELERATE_STEPS" --logging_steps 1 \
    --disable_tqdm true --bf16 "$BF16"
done

timeout 20 "$PY" -I -c "
import json, sys
record = json.load(open(sys.argv[1]))
bad = [s['name'] + ': ' + s['outcome'] for s in record['steps'] if s['exit_code'] != 0]
print(f\"gpu_check: {len(record['steps']) - len(bad)} of {len(record['steps'])} steps ok\" + (': ' + '; '.join(bad) if bad else ''))
sys.exit(1 if bad else 0)" "$JSON"
status=$?
rm -rf "$WORK"
exit $status
