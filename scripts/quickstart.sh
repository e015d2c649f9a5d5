#!/usr/bin/env bash
# The main job: set everything up and run the default flow on the embedded model, on CPU.
#   1. install (./.venv, torch 2.13.0 CPU first)
#   2. generate finance_preference (003 App. E/F) into ./data
#   3. short SFT of the embedded SmolLM2-135M-Instruct on finance_sft       -> outputs/quickstart/sft
#   4. Square-chiPO under CTL, epsilon = 0.5, alpha = 0.1, on a subset      -> outputs/quickstart/square_chipo_ctl
#   5. win rate of the aligned policy against the SFT policy, judged by the embedded model
#      (next-token probabilities), after scoring the judge on gold pairs  -> outputs/quickstart/eval
#   6. central DP (003 Algorithm 2): the exponential mechanism picks one of {embedded base, SFT,
#      Square-chiPO} on the private validation split, epsilon = 1           -> outputs/quickstart/selected
# About 16 minutes on 2 CPU cores (plus a one-time ~9-minute llama.cpp build by install.sh).
# Re-running reuses the released (privatized) labels.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
PY=.venv/bin/python
LAUNCH=(.venv/bin/accelerate launch --num_processes 1 --num_machines 1 --mixed_precision no --dynamo_backend no)
export PYTHONWARNINGS="${PYTHONWARNINGS:-ignore::FutureWarning}"

echo "== [1/5] data: finance_preference -> data/"
if [ ! -d data/finance_preference ]; then
  "$PY" -m data_gen.finance --out data --seed 0
else
  echo "data/ already exists; delete it to regenerate"
fi

echo "== [2/5] SFT of the embedded SmolLM2-135M-Instruct -> outputs/quickstart/sft"
"${LAUNCH[@]}" recipes/sft.py --config recipes/configs/quickstart_sft.yaml

echo "== [3/5] Square-chiPO, CTL, epsilon=0.5, alpha=0.1 -> outputs/quickstart/square_chipo_ctl"
"${LAUNCH[@]}" recipes/train.py --config recipes/configs/quickstart_align.yaml

echo "== [4/5] win rate vs the SFT policy, judged by the embedded model -> outputs/quickstart/eval"
"$PY" eval/judge.py --policy outputs/quickstart/square_chipo_ctl --baseline outputs/quickstart/sft \
  --dataset data/finance_preference_conversational --split test --max-prompts 16 --max-new-tokens 64 \
  --calibration-pairs 32 --setting CTL --method square_chipo --out outputs/quickstart/eval

echo "== [5/5] central DP selection (epsilon = 1) among base, SFT and Square-chiPO -> outputs/quickstart/selected"
if [ ! -f outputs/quickstart/selected/squarechipo_privacy.json ]; then
  "${LAUNCH[@]}" recipes/select_policy.py --config recipes/configs/select_policy.yaml
else
  echo "outputs/quickstart/selected already holds a selection; selecting again would spend another epsilon"
fi

"$PY" - <<'PY'
import json, pathlib
from squarechipo.evaluation.report import format_line
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
summary = json.loads(pathlib.Path("outputs/quickstart/eval/summary.json").read_text())
print(f"  judged: {format_line(summary)}")
selected = json.loads(pathlib.Path("outputs/quickstart/selected/squarechipo_privacy.json").read_text())
print(f"  central DP selection: {selected['selected']} of {selected['num_candidates']} candidates, "
      f"epsilon {selected['epsilon']}, n {selected['num_rows']} -> {pathlib.Path('outputs/quickstart/selected').resolve()}")
PY
