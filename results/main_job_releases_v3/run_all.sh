#!/usr/bin/env bash
# The ten releases in order, from the worktree of the commit RUN.md names, with the shared steps copied in (PLAN.md):
#   bash results/main_job_releases_v3/run_all.sh OUT
set -euo pipefail
for i in 1 2 3 4 5 6 7 8 9 10; do
  echo "== release $i $(date +%T)"
  bash results/main_job_releases_v3/release.sh "$i" "$1" || echo "release $i failed rc $?"
done
echo "== done $(date +%T)"
