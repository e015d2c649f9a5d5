#!/usr/bin/env bash
# Mutation testing (mutmut) of every module of trust/, privacy/, data/ and reproduce/study/, and of the losses, the selector
# and the statistics, each against the fastest test files that cover it (tests/test_architecture.py keeps the table
# complete). Outside the ten-minute suite: `bash scripts/mutation.sh` runs every module in
# the table below, `bash scripts/mutation.sh squarechipo/losses.py` one. It works in a copy of the working tree under
# ${MUTATION_DIR:-/tmp/squarechipo-mutation} and prints, per module, killed / survived / total and the kill rate; the
# survivors are listed in <dir>/<module>/survivors.txt (`mutmut show NAME` in that folder prints each one's diff).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
declare -A TESTS=(
  [squarechipo/privacy/door.py]="tests/test_door.py"
  [squarechipo/privacy/mechanisms/calibration.py]="tests/test_calibration.py tests/test_losses.py tests/test_mechanisms.py"
  [squarechipo/privacy/mechanisms/binary.py]="tests/test_mechanisms.py"
  [squarechipo/privacy/mechanisms/label_dp.py]="tests/test_label_dp.py tests/test_mechanisms.py"
  [squarechipo/privacy/mechanisms/measurements.py]="tests/test_mechanisms.py tests/test_release.py tests/test_label_dp.py"
  [squarechipo/privacy/ledger/binding.py]="tests/test_ledger.py tests/test_privacy_invariants.py tests/test_release.py tests/test_trust_boundary.py tests/test_provenance.py"
  [squarechipo/privacy/ledger/ledger.py]="tests/test_ledger.py tests/test_release.py tests/test_integrity.py tests/test_label_dp.py"
  [squarechipo/privacy/ledger/release_entry.py]="tests/test_ledger.py tests/test_release.py tests/test_label_dp.py"
  [squarechipo/privacy/ledger/debiasing.py]="tests/test_ledger.py tests/test_trainer.py"
  [squarechipo/privacy/provenance/lineage.py]="tests/test_lineage.py"
  [squarechipo/privacy/provenance/record.py]="tests/test_lineage.py tests/test_trust_boundary.py tests/test_integrity.py tests/test_provenance.py"
  [squarechipo/privacy/provenance/sketch.py]="tests/test_sketch.py tests/test_lineage.py"
  [squarechipo/privacy/provenance/subjects.py]="tests/test_provenance.py tests/test_trust_boundary.py"
  [squarechipo/privacy/release/registry.py]="tests/test_registry.py tests/test_privacy_invariants.py tests/test_team_registry.py"
  [squarechipo/privacy/release/lookup.py]="tests/test_registry.py tests/test_privacy_invariants.py tests/test_team_registry.py"
  [squarechipo/privacy/release/registry_schema.py]="tests/test_registry.py"
  [squarechipo/privacy/release/registry_admin.py]="tests/test_registry.py tests/test_team_registry.py"
  [squarechipo/privacy/release/budget.py]="tests/test_budget.py"
  [squarechipo/privacy/release/machine_registry.py]="tests/test_registry.py tests/test_provenance.py"
  [squarechipo/privacy/release/rows.py]="tests/test_release.py tests/test_validation.py tests/test_trust_boundary.py tests/test_provenance.py"
  [squarechipo/privacy/release/release_dataset.py]="tests/test_release_store.py tests/test_integrity.py"
  [squarechipo/privacy/release/saved.py]="tests/test_release_store.py tests/test_integrity.py"
  [squarechipo/privacy/release/transaction.py]="tests/test_release_store.py tests/test_registry.py tests/test_trust_boundary.py tests/test_release.py tests/test_provenance.py"
  [squarechipo/privacy/release/folder.py]="tests/test_trust_boundary.py tests/test_release_store.py tests/test_registry.py"
  [squarechipo/data/columns.py]="tests/test_release.py tests/test_validation.py tests/test_label_dp.py"
  [squarechipo/data/local_server.py]="tests/test_team_registry.py"
  [squarechipo/data/database.py]="tests/test_team_registry.py tests/test_registry.py"
  [squarechipo/data/finance.py]="tests/test_finance_data.py"
  [squarechipo/data/finance_templates.py]="tests/test_finance_data.py"
  [squarechipo/data/fingerprint.py]="tests/test_near_duplicates.py tests/test_validation.py tests/test_ledger.py tests/test_trust_boundary.py"
  [squarechipo/data/integrity.py]="tests/test_integrity.py tests/test_release_store.py"
  [squarechipo/data/kary.py]="tests/test_label_dp.py"
  [squarechipo/data/label_roles.py]="tests/test_door.py"
  [squarechipo/data/loading.py]="tests/test_release_store.py tests/test_validation.py"
  [squarechipo/data/metadata.py]="tests/test_release_store.py tests/test_ledger.py"
  [squarechipo/data/near_duplicates.py]="tests/test_near_duplicates.py"
  [squarechipo/data/row_scan.py]="tests/test_near_duplicates.py tests/test_release.py"
  [squarechipo/data/shards.py]="tests/test_shards.py"
  [squarechipo/data/store.py]="tests/test_registry.py tests/test_team_registry.py tests/test_lineage.py tests/test_provenance.py"
  [squarechipo/data/text.py]="tests/test_reward_trainer.py tests/test_evaluation.py"
  [squarechipo/data/validation.py]="tests/test_validation.py"
  [squarechipo/losses.py]="tests/test_losses.py"
  [squarechipo/select/exponential.py]="tests/test_select_exponential.py"
  [squarechipo/stats.py]="tests/test_stats.py tests/test_report_intervals.py tests/test_judge_stats.py"
  [squarechipo/reproduce/study/claims.py]="tests/test_study.py"
  [squarechipo/reproduce/study/cli.py]="tests/test_study.py"
  [squarechipo/reproduce/study/decisions.py]="tests/test_study.py tests/test_report_intervals.py"
  [squarechipo/reproduce/study/design.py]="tests/test_study.py tests/test_power_plan.py"
  [squarechipo/reproduce/study/power.py]="tests/test_power_plan.py tests/test_study.py"
  [squarechipo/reproduce/study/headline.py]="tests/test_headline.py tests/test_study.py"
  [squarechipo/reproduce/study/provenance.py]="tests/test_study_provenance.py tests/test_study.py"
  [squarechipo/reproduce/study/report.py]="tests/test_study.py tests/test_report_intervals.py"
  [squarechipo/reproduce/study/reuse.py]="tests/test_study_reuse.py tests/test_study_provenance.py tests/test_study.py"
  [squarechipo/reproduce/study/runner.py]="tests/test_study.py"
  [squarechipo/reproduce/study/cells.py]="tests/test_study.py tests/test_trainer.py"
  [squarechipo/reproduce/study/shared_setup.py]="tests/test_study.py"
  [squarechipo/reproduce/study/closure.py]="tests/test_study.py"
  [squarechipo/trust/keys.py]="tests/test_signing.py tests/test_integrity.py tests/test_provenance.py"
  [squarechipo/trust/machine.py]="tests/test_provenance.py tests/test_registry.py tests/test_signing.py"
  [squarechipo/trust/seals.py]="tests/test_integrity.py tests/test_ledger.py tests/test_trust_boundary.py"
  [squarechipo/reproduce/study/verdicts.py]="tests/test_readings.py"
  [squarechipo/reproduce/study/training.py]="tests/test_study.py"
)
# Extra pytest arguments per module: the study's modules skip its whole-protocol test (two minutes a mutant); its
# other tests check the claims, the plan and the headline on hand-made records.
declare -A ARGS=(
  [squarechipo/reproduce/study/claims.py]="-m|not slow"
  [squarechipo/reproduce/study/power.py]="-m|not slow"
  [squarechipo/reproduce/study/headline.py]="-m|not slow"
  [squarechipo/reproduce/study/reuse.py]="-m|not slow"
  [squarechipo/reproduce/study/provenance.py]="-m|not slow"
  [squarechipo/reproduce/study/design.py]="-m|not slow"
  [squarechipo/reproduce/study/decisions.py]="-m|not slow"
)
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  echo "usage: bash scripts/mutation.sh [module ...]  (no module: all of them; results in ${MUTATION_DIR:-/tmp/squarechipo-mutation})"
  printf '  %s\n' "${!TESTS[@]}" | sort
  exit 0
fi
MODULES=("$@")
[ ${#MODULES[@]} -eq 0 ] && MODULES=("${!TESTS[@]}")
# Every module named is checked before anything is installed (the install takes minutes on a fresh clone).
for module in "${MODULES[@]}"; do
  if [ -z "${TESTS[$module]:-}" ]; then
    echo "mutation.sh: no test files are listed for $module; add it to the table in scripts/mutation.sh (see --help)" >&2
    exit 2
  fi
  [ -f "$module" ] || { echo "mutation.sh: $module does not exist" >&2; exit 2; }
done
bash scripts/install.sh >/dev/null
.venv/bin/python -m pip --disable-pip-version-check -q install "mutmut>=3.8,<4"
BASE=${MUTATION_DIR:-/tmp/squarechipo-mutation}
# mutmut forks a child per mutant from a process that has run the tests: with OpenMP's thread pool started in the
# parent (torch on two threads), a forked child can hang in it, asleep, until mutmut's wall-clock limit (read as a
# time-out). One thread each avoids the pool.
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
for module in "${MODULES[@]}"; do
  tests=${TESTS[$module]}
  work="$BASE/$(echo "$module" | tr '/' '_')"
  rm -rf "$work" && mkdir -p "$work"
  git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$work" 2>/dev/null || true
  {
    echo "[mutmut]"
    echo "source_paths = $module"
    echo "pytest_add_cli_args_test_selection ="
    for test in $tests; do echo "    $test"; done
    printf 'pytest_add_cli_args =\n    -p\n    no:cacheprovider\n'
    # mutmut waits for any child of its own process, so one a test leaves (the resource tracker of a multiprocessing
    # race between releases) crashes it: the three race tests are left out here (the suite runs them).
    printf '    -k\n    not racing_on_one_fresh_folder and not simultaneous_releases and not first_releases_at_once\n'
    [ -n "${ARGS[$module]:-}" ] && echo "${ARGS[$module]}" | tr '|' '\n' | sed 's/^/    /'
    # mutmut's CPU limit is (the tests' own time + constant) × 30; each mutant's run also imports torch, which the
    # default constant (1 s) leaves little room for.
    echo "timeout_constant = 10"
    printf 'also_copy =\n    tests\n    squarechipo\n    recipes\n    results\n    docs\n    README.md\n    CHANGELOG.md\n    pyproject.toml\n'
  } > "$work/setup.cfg"
  (cd "$work" && "$ROOT/.venv/bin/mutmut" run --max-children 2 >mutmut.log 2>&1 || true)
  (cd "$work" && "$ROOT/.venv/bin/mutmut" export-cicd-stats >/dev/null 2>&1 && "$ROOT/.venv/bin/mutmut" results 2>/dev/null |
    sed 's/^ *//' >survivors.txt || true)
  "$ROOT/.venv/bin/python" - "$module" "$work/mutants/mutmut-cicd-stats.json" <<'PY'
import json, sys
module, path = sys.argv[1], sys.argv[2]
s = json.load(open(path))
decided = s["killed"] + s["survived"]
if s["total"] and not decided + s["timeout"]:
    sys.exit(f"{module}: no mutant ran: the tests failed without mutation, or mutmut stopped (see the end of "
             "mutmut.log in its folder)")
rate = 100 * s["killed"] / decided if decided else float("nan")
print(f"{module}: killed {s['killed']}, survived {s['survived']}, timeout {s['timeout']}, total {s['total']}, "
      f"kill rate {rate:.1f}%")
PY
done
