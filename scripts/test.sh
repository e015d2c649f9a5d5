#!/usr/bin/env bash
# The test command: install (idempotent), llama.cpp for the judge-server tests, lint (ruff), and run the whole
# test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
bash scripts/install_llama_cpp.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
exec .venv/bin/python -m pytest "$@"
