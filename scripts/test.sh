#!/usr/bin/env bash
# The test command: install (idempotent), lint (ruff), and run the whole test suite on both cores (pytest-xdist),
# printing the 15 slowest tests at the end. Nothing compiles: the judge-server tests use `transformers serve`
# (installed with the dev extras); llama.cpp's server is tested too where `bash scripts/install_llama_cpp.sh` built
# it. Pass pytest arguments through, e.g. `bash scripts/test.sh -m "not slow"` (the quick tier) or `-n 0`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
exec .venv/bin/python -m pytest -n "${SQUARECHIPO_TEST_WORKERS:-2}" --dist loadgroup --durations=15 "$@"
