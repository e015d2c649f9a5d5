#!/usr/bin/env bash
# What one call to a lent GPU machine carries, built here on a CPU machine (docs/benchmarks.md, "On a GPU"):
#
#     bash benchmarks/gpu_bundle.sh DIR            # then, on the GPU machine: cd DIR/project && bash benchmarks/gpu_check.sh
#
#   DIR/project  the project's tracked tree (as in the working tree), without results/
#   DIR/smollm2  SmolLM2-135M-Instruct's config and tokenizer, no weights (the check builds the model from its config)
#   DIR/wheels   one wheel each for what the GPU image lacks, pinned in benchmarks/gpu_wheels.txt (Python 3.12,
#                manylinux x86_64), installed there with pip --no-index --no-deps --target
#
# It prints the bundle's size (goal: under 40 MB; a call carries at most 64 MiB). --no-wheels skips the download
# (the tests check the rest). The embedded model is converted once here if it is not yet (about 30 s).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
usage="usage: bash benchmarks/gpu_bundle.sh DIR [--no-wheels]"
DIR=${1:?$usage}
WHEELS=yes
[ "${2:-}" = "--no-wheels" ] && WHEELS=no
[ $# -le 2 ] || { echo "$usage" >&2; exit 2; }
PY=${PYTHON:-$ROOT/.venv/bin/python}
[ -x "$PY" ] || PY=python3
if [ -e "$DIR" ] && [ -n "$(ls -A "$DIR")" ] && [ ! -e "$DIR/.squarechipo-gpu-bundle" ]; then
  echo "gpu_bundle.sh: $DIR exists and is not a GPU bundle; name an empty or new folder" >&2
  exit 2
fi
rm -rf "$DIR" && mkdir -p "$DIR/project" "$DIR/smollm2"
DIR=$(cd "$DIR" && pwd)
touch "$DIR/.squarechipo-gpu-bundle"

echo "[bundle] the tracked tree without results/ -> $DIR/project"
git ls-files -z | grep -zv '^results/' | tar --null -T - -cf - | tar -xf - -C "$DIR/project"

echo "[bundle] SmolLM2-135M-Instruct's config and tokenizer, no weights -> $DIR/smollm2"
MODEL=$("$PY" -c 'from squarechipo.models import embedded_model_path; print(embedded_model_path())' | tail -1)
for file in "$MODEL"/*; do
  case "$(basename "$file")" in
    *.safetensors|*.bin|*.gguf) ;;
    *) [ -f "$file" ] && cp "$file" "$DIR/smollm2/" ;;
  esac
done

if [ "$WHEELS" = yes ]; then
  echo "[bundle] wheels for the GPU image (benchmarks/gpu_wheels.txt) -> $DIR/wheels"
  # The GPU image's Python is 3.12 on x86_64; these platform tags cover manylinux wheels of every glibc it runs.
  "$PY" -m pip --disable-pip-version-check -q download --only-binary=:all: --no-deps --implementation cp \
    --python-version 3.12 --platform manylinux_2_28_x86_64 --platform manylinux_2_26_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -r benchmarks/gpu_wheels.txt -d "$DIR/wheels"
  listed=$(grep -cE '^[A-Za-z0-9]' benchmarks/gpu_wheels.txt)
  found=$(find "$DIR/wheels" -maxdepth 1 -name '*.whl' | wc -l)
  [ "$found" -eq "$listed" ] || { echo "gpu_bundle.sh: $found wheels for $listed pinned packages" >&2; exit 1; }
fi

bytes=$(du -sb "$DIR" | cut -f1)
echo "[bundle] $DIR: $(awk -v b="$bytes" 'BEGIN { printf "%.1f MB", b / 1e6 }') ($(du -sb "$DIR/project" | cut -f1) bytes of project, $(du -sb "$DIR/smollm2" | cut -f1) of config and tokenizer, $( [ -d "$DIR/wheels" ] && du -sb "$DIR/wheels" | cut -f1 || echo 0) of wheels)"
