"""The privacy audit: Clopper–Pearson ε lower bounds on hand-made counts, every mechanism within its claim,
the planted broken mechanism caught, and the command's report."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from squarechipo.audit.mechanisms import ALPHA, audit_case, epsilon_lower_bound, mechanism_cases

ROOT = Path(__file__).resolve().parents[1]


def test_lower_bound_is_the_log_ratio_of_exact_clopper_pearson_bounds():
    # Clopper–Pearson: the lower bound of k/n is the α/2 quantile of Beta(k, n − k + 1), the upper bound the
    # 1 − α/2 quantile of Beta(k + 1, n − k); each side at 1 − α/2, both at 1 − α.
    low = stats.beta.ppf(ALPHA / 2 / 2, 7300, 10_000 - 7300 + 1)
    high = stats.beta.ppf(1 - ALPHA / 2 / 2, 2700 + 1, 10_000 - 2700)
    assert epsilon_lower_bound(7300, 10_000, 2700, 10_000) == pytest.approx(math.log(low / high), rel=1e-9)
    # Every run in S on D, none on D': (α/4)^(1/n) over 1 − (α/4)^(1/n).
    edge = (ALPHA / 4) ** (1 / 1000)
    assert epsilon_lower_bound(1000, 1000, 0, 1000) == pytest.approx(math.log(edge / (1 - edge)), rel=1e-9)
    assert epsilon_lower_bound(0, 1000, 0, 1000) == 0.0  # S never seen: no evidence
    assert epsilon_lower_bound(300, 1000, 700, 1000) == 0.0  # the event is likelier under D': no bound


@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_every_mechanism_stays_within_its_claim_and_the_planted_bug_is_caught(epsilon):
    rng = np.random.default_rng(0)
    results = {r.name: r for r in (audit_case(c, 200_000, rng) for c in mechanism_cases(epsilon))}
    for result in results.values():
        assert result.ok, (result.name, result.lower_bound, epsilon)
    planted = next(r for r in results.values() if r.planted_bug)
    assert planted.lower_bound > epsilon and planted.verdict == "caught (planted bug)"
    # The audit has power on the exact mechanisms: binary RR's bound comes within 10% of ε at 200,000 runs.
    assert results["binary RR"].lower_bound > 0.9 * epsilon


def test_audit_command_writes_its_report(tmp_path):
    command = [sys.executable, "-m", "squarechipo.audit", "mechanisms", "--samples", "100000", "--out", str(tmp_path)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    records = json.loads((tmp_path / "mechanisms.json").read_text())
    assert len(records) == len(mechanism_cases())
    assert all(r["lower_bound"] <= r["claimed_epsilon"] for r in records if not r["planted_bug"])
    assert "| binary RR | 1 |" in (tmp_path / "mechanisms.md").read_text()
