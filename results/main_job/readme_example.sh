#!/usr/bin/env bash
# Time the README's Python example as a reader runs it after the quick start (its data and the model cache in place),
# on a machine folder of its own (a fresh registry and key, as on a new machine), into a JSON record:
#   bash results/main_job/readme_example.sh OUT.json        (from a checkout that ran bash scripts/quickstart.sh)
# Set ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 to time it with the kernels of an AVX2-only CPU.
set -euo pipefail
out=$1
root=$PWD
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r data "$work/data"
.venv/bin/python - "$work/example.py" <<'PY'
import re, sys
block = re.findall(r"^```python\n(.*?)^```", open("README.md", encoding="utf-8").read(), flags=re.S | re.M)[0]
open(sys.argv[1], "w").write(block)
PY
start=$(date +%s.%N)
(cd "$work" && PYTHONPATH="$root/tests/helpers/machine" SQUARECHIPO_TEST_MACHINE_DIR="$work/machine" \
  "$root/.venv/bin/python" example.py > "$work/example.log" 2>&1)
end=$(date +%s.%N)
.venv/bin/python - "$out" "$start" "$end" "$(git rev-parse --short HEAD)" <<'PY'
import json, os, sys
from squarechipo.models.runtime import machine_record
out, start, end, commit = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
forced = {k: os.environ[k] for k in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA") if k in os.environ}
record = {"what": "the README's Python example, run as written in a fresh folder with the quick start's data",
          "commit": commit, "seconds": round(end - start, 1), "machine": {**machine_record(), "cores": os.cpu_count(),
          "forced_kernels": forced}}
json.dump(record, open(out, "w"), indent=1)
print(json.dumps(record))
PY
