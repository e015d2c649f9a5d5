#!/usr/bin/env bash
# Optional: llama-cpp-python, a local OpenAI-compatible judge server for the embedded GGUF that also returns
# log-probabilities (`--judge-logprobs`). Neither the main job nor the test command needs it (their server is
# `transformers serve`, pure Python); where it is installed, tests/test_judge_server.py tests it too. It compiles
# llama.cpp (4-9 minutes on 2 cores), so the wheel is built once and cached. SQUARECHIPO_SKIP_LLAMA_CPP=1 skips it.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${SQUARECHIPO_VENV:-.venv}
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check -q)
LLAMA_CPP_VERSION=0.3.36
WHEELS="${SQUARECHIPO_CACHE:-$HOME/.cache/squarechipo}/wheels"
if [ "${SQUARECHIPO_SKIP_LLAMA_CPP:-0}" != 1 ] && ! "$VENV/bin/python" -c "import llama_cpp.server" 2>/dev/null; then
  mkdir -p "$WHEELS"
  built=("$WHEELS"/llama_cpp_python-"$LLAMA_CPP_VERSION"-*.whl)
  if [ ! -f "${built[0]}" ]; then
    echo "[install] building llama-cpp-python $LLAMA_CPP_VERSION once (about 9 minutes on 2 cores); cached in $WHEELS"
    CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF}" "${PIP[@]}" wheel --no-deps -w "$WHEELS" "llama-cpp-python==$LLAMA_CPP_VERSION"
  fi
  built=("$WHEELS"/llama_cpp_python-"$LLAMA_CPP_VERSION"-*.whl)
  "${PIP[@]}" install "${built[0]}[server]"
fi
