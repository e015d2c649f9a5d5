#!/usr/bin/env bash
# The privacy adversary's long run (tests/test_privacy_invariants.py): 400 random sequences of 20 public operations on
# raw and released rows, the invariants checked after each step. The quick tier runs 12 sequences of 8.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh >/dev/null
SQUARECHIPO_ADVERSARY=long exec .venv/bin/python -m pytest -n 0 -p no:cacheprovider --hypothesis-show-statistics \
  tests/test_privacy_invariants.py "$@"
