#!/usr/bin/env bash
# GPU check (not a test; issue 17 §6 and issue 16 §5). Run from the repository root on a CUDA machine that has
# squarechipo's dependencies installed:
#
#     bash benchmarks/gpu_check.sh SMOLLM2_CONFIG_DIR OUT speed|bench|configs|table1 ...
#
# SMOLLM2_CONFIG_DIR holds SmolLM2-135M-Instruct's config, tokenizer and chat template without weights (copy them
# from ~/.cache/squarechipo/models/SmolLM2-135M-Instruct). The model is built from that config with random
# weights, because the GPU machines we have are offline and the weights do not travel with a call: every figure
# this prints is speed, memory or "it runs", never quality.
#   speed    benchmarks/bench_trainer.py at the SmolLM2-135M and 1.7B shapes (random weights), bf16 mixed precision:
#            TRL's DPOTrainer vs ours, checkpointing off and on, a separate reference model and precomputed
#            reference log-probs (TRL's fastest setting); tables printed, figures in OUT/bench.json
#   bench    benchmarks/bench_trainer.py (TRL's DPOTrainer vs ours) on the 135M model, fp32, checkpointing off and on
#   configs  recipes/train.py under the DDP, FSDP2, ZeRO-2 and ZeRO-3 Accelerate configs, 10 steps each,
#            one process (one GPU; NCCL refuses two ranks on one device)
#   table1   one Table 1 cell at the paper's sizes (1,442 rows, SFT on every SFT row), timed
set -uo pipefail
config_dir=${1:?usage: gpu_check.sh SMOLLM2_CONFIG_DIR OUT speed|bench|configs|table1 ...}
out=${2:?usage: gpu_check.sh SMOLLM2_CONFIG_DIR OUT speed|bench|configs|table1 ...}
shift 2
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" SQUARECHIPO_CACHE="${SQUARECHIPO_CACHE:-$out/cache}" HF_HUB_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 TQDM_MININTERVAL=30
model="$SQUARECHIPO_CACHE/models/SmolLM2-135M-Instruct"
if [ ! -f "$model/.squarechipo-complete" ]; then
  python - "$config_dir" "$model" <<'PY'
import shutil, sys
from pathlib import Path
import torch
from transformers import AutoConfig, AutoModelForCausalLM
source, target = Path(sys.argv[1]), Path(sys.argv[2])
torch.manual_seed(0)
AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(source)).save_pretrained(target)
for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"):
    shutil.copy(source / name, target / name)
(target / ".squarechipo-complete").write_text("ok")
print("built SmolLM2-135M from its config (random weights) at", target)
PY
fi
python -c "import torch; print(torch.__version__, torch.cuda.get_device_name())"
[ -d data/finance_preference_conversational ] || python -m data_gen.finance --out data --seed 0 >/dev/null
for job in "$@"; do
  start=$(date +%s)
  case $job in
    speed)
      python benchmarks/bench_trainer.py --models 135m 1.7b --tokenizer "$config_dir" --dtype bf16 --steps 5 \
        --max-length 512 --checkpointing both --reference both --json "$out/bench.json"
      ;;
    bench)
      python benchmarks/bench_trainer.py --models smollm2 --steps 5
      ;;
    configs)
      for config in ddp fsdp2 zero2 zero3; do
        t0=$(date +%s)
        accelerate launch --config_file "recipes/accelerate/$config.yaml" --num_processes 1 recipes/train.py \
          --config recipes/configs/square_chipo.yaml --model_name_or_path embedded --output_dir "$out/$config" \
          --max_steps 10 --logging_steps 1 --eval_strategy no --save_strategy no --disable_tqdm true \
          >"$out/$config.log" 2>&1
        rc=$?
        echo "$config: exit $rc in $(( $(date +%s) - t0 )) s; losses: $(grep -o "'loss': [0-9.e-]*" "$out/$config.log" | head -10 | cut -d' ' -f2 | tr '\n' ' ')"
        [ $rc -eq 0 ] || tail -5 "$out/$config.log"
      done
      ;;
    table1)
      cat >"$out/one_cell.yaml" <<'YAML'
base: paper
seeds: [0]
settings: [CTL]
methods: [square_chipo]
sweep_epsilons: []
clean_reference: false
second_opinion: null
YAML
      python -m squarechipo.reproduce table1 --scale "$out/one_cell.yaml" --out "$out/table1" 2>&1 | tail -15
      ;;
    *) echo "unknown job $job (speed, bench, configs, table1)"; exit 2 ;;
  esac
  echo "== $job took $(( $(date +%s) - start )) s"
done
