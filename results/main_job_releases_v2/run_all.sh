#!/usr/bin/env bash
# from the worktree of the commit RUN.md names, with the shared steps copied in (PLAN.md)
for i in 1 2 3 4 5 6 7 8 9 10; do
  echo "== release $i $(date +%T)"
  bash results/main_job_releases_v2/release.sh $i || echo "release $i failed rc $?"
done
echo "== done $(date +%T)"
