"""The study's power step (squarechipo.reproduce.study.power) on hand-made pilot records: the SD's upper limit
against its definition and by simulation, the paired differences of the first study's design, which pilot arm stands
in for a main arm, and the pilot gate. The whole protocol runs in tests/test_study.py; these check its numbers
directly (the mutation run of the module uses this file)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from squarechipo.reproduce.study.power import _pilot_arm, _pilot_differences, _spread, check_gate, plan_main, upper_sd
from squarechipo.stats import mde
from tests.helpers.stats import Z_TOLERANCE, binomial_se


@pytest.mark.parametrize("n,confidence", [(2, 0.8), (3, 0.8), (5, 0.9), (12, 0.5)])
def test_the_sds_upper_limit_is_the_chi_square_bound_and_covers_at_its_level(n, confidence):
    """At σ = upper_sd(s, n), a sample SD at most s has probability 1 − confidence: (n − 1)s²/σ² ~ χ²(n − 1). By
    simulation, the limit lies above the true σ in a share `confidence` of samples."""
    s = 1.7
    limit = upper_sd(s, n, confidence)
    assert stats.chi2.cdf((n - 1) * s**2 / limit**2, n - 1) == pytest.approx(1 - confidence, rel=1e-9)
    assert upper_sd(2 * s, n, confidence) == pytest.approx(2 * limit)
    rng = np.random.default_rng(n)
    samples = rng.normal(0.0, 2.0, size=(20_000, n)).std(axis=1, ddof=1)
    covered = np.mean(samples * upper_sd(1.0, n, confidence) >= 2.0)  # the limit is proportional to the SD
    assert abs(covered - confidence) <= Z_TOLERANCE * binomial_se(confidence, samples.size)


def test_a_spread_of_one_seed_has_no_sd_and_names_its_seeds_and_mean():
    one = _spread({7: 3.0})
    assert one["seeds"] == [7] and one["mean"] == 3.0 and math.isnan(one["sd"]) and math.isnan(one["sd_upper80"])
    two = _spread({9: 1.0, 4: 3.0})
    assert two["seeds"] == [4, 9] and two["mean"] == 2.0 and two["sd"] == pytest.approx(math.sqrt(2))
    assert two["sd_upper80"] == pytest.approx(upper_sd(math.sqrt(2), 2))


def _record(arm: str, seed: int, win: float) -> dict:
    return {"arm": arm, "seed": seed, "summary": {"expected_win": {"mean": win}}}


def test_the_first_designs_pilot_pairs_every_two_arms_by_seed_in_win_points():
    """A design without claims compares every pair of pilot arms: each seed's difference of expected wins, in points
    (×100), over the seeds both arms ran."""
    from dataclasses import replace
    from pathlib import Path

    from squarechipo.reproduce.study.design import load_design

    wins = {
        "ctl_eps0.5_dpo": [0.50, 0.55, 0.52],
        "ctl_eps0.5_square_chipo": [0.60, 0.58, 0.65],
        "clean_epsinf_dpo": [0.7, 0.72],
    }
    records = [_record(arm, seed, w) for arm, values in wins.items() for seed, w in enumerate(values)]
    rows_needed = Path(__file__).resolve().parents[1] / "recipes" / "studies" / "rows_needed.yaml"
    design = replace(load_design(str(rows_needed)), claims=None)  # the first study's design had no claims
    found, reference = _pilot_differences(records, design)
    assert reference == {} and len(found) == 3
    pair = found["ctl_eps0.5_dpo − ctl_eps0.5_square_chipo"]
    assert pair["seeds"] == [0, 1, 2]
    assert pair["differences_points"] == pytest.approx([-10.0, -3.0, -13.0])
    assert pair["sd"] == pytest.approx(np.std([-10.0, -3.0, -13.0], ddof=1))
    clean = found["clean_epsinf_dpo − ctl_eps0.5_dpo"]
    assert clean["seeds"] == [0, 1] and clean["differences_points"] == pytest.approx([20.0, 17.0])


def test_a_drop_claims_main_arm_takes_the_pilot_arm_of_its_method_and_others_only_themselves():
    records = [_record(arm, 0, 0.5) for arm in ("ctl_eps1_dpo_beta0.05", "ctl_eps1_square_chipo", "clean_epsinf_dpo")]
    assert _pilot_arm(records, "ctl_eps1_square_chipo", by_method=False) == "ctl_eps1_square_chipo"
    assert _pilot_arm(records, "ltc_eps1_square_chipo", by_method=False) is None
    assert _pilot_arm(records, "ltc_eps1_square_chipo", by_method=True) == "ctl_eps1_square_chipo"
    assert _pilot_arm(records, "ctl_eps2_dpo_beta0.05", by_method=True) == "ctl_eps1_dpo_beta0.05"
    assert _pilot_arm(records, "ctl_eps1_chipo", by_method=True) is None


def test_the_gate_stops_the_main_run_only_when_it_was_set_and_not_cleared():
    check_gate({"pilot": {}})  # no gate: the main run goes on
    check_gate({"pilot": {"gate": {"passed": True, "arm": "a", "metric": "kl", "mean": 50.0, "at_least": 40.0}}})
    failed = {"passed": False, "arm": "ctl_eps1_dpo_beta0.025", "metric": "kl", "mean": 31.25, "at_least": 40.0}
    with pytest.raises(
        ValueError,
        match=r"^the pilot gate was not cleared: ctl_eps1_dpo_beta0\.025 reached a mean kl "
        r"of 31\.2 over the pilot seeds, below the pre-registered 40, so the main run does not start\. "
        r"Report the pilot \(study report\); a new design needs a new --results folder and its own "
        r"pilot\.$",
    ):
        check_gate({"pilot": {"gate": failed}})


def _design(**changes):
    from dataclasses import replace
    from pathlib import Path

    from squarechipo.reproduce.study.design import Arm, load_design

    design = load_design(str(Path(__file__).resolve().parents[1] / "recipes" / "studies" / "rows_needed.yaml"))
    arms = (*design.main_arms, Arm("chipo", "CTL", 1.0, tier=3))  # tiers 1 (7 arms), 2 (1) and 3 (1)
    return replace(design, main_arms=arms, **changes)


def _analysis(needed=5, cell=30.0, sd=4.0, **extra):
    return {
        "seeds_needed": needed,
        "cell_minutes": cell,
        "sd_for_power": sd,
        "differences": {"d": {"sd": 3.0}},
        **extra,
    }


def _hours(n_arms, seeds, cell=30.0, seed_minutes=1.0, free=0):
    return (seeds * (seed_minutes + cell * n_arms) - cell * free) / 60


@pytest.mark.parametrize(
    "budget,arms,seeds,binds",
    [
        (_hours(9, 5), 9, 5, False),  # exactly the budget: everything runs
        (_hours(9, 5) - 0.01, 8, 5, False),  # the tier-3 arm goes first
        (_hours(8, 5) - 0.01, 7, 5, False),  # then tier 2: the tier-1 arms at the seeds needed
        (_hours(7, 5) - 0.01, 7, 4, True),  # then seeds, down to what fits
        (_hours(7, 2) - 0.01, 7, 2, True),  # never fewer than two, even over the budget
    ],
)
def test_the_plan_cuts_arms_by_tier_then_seeds_to_fit_the_budget(budget, arms, seeds, binds):
    design = _design(budget_hours=budget, power=0.9, alpha=0.01)
    plan = plan_main(design, _analysis())
    assert len(plan["arms"]) == arms and plan["seeds"] == list(range(seeds)) and plan["budget_binds_seeds"] is binds
    assert plan["cut_arms"] == [a.key for a in design.main_arms if a.key not in plan["arms"]]
    assert all(a.tier == 1 for a in design.main_arms if a.key in plan["arms"]) or arms > 7
    assert plan["expected_hours"] == round(_hours(arms, seeds), 2)
    assert plan["mde_points"] == pytest.approx(mde(seeds, 4.0, target=0.9, alpha=0.01))
    assert plan["mde_points_at_pilot_sd"] == pytest.approx(mde(seeds, 3.0, target=0.9, alpha=0.01))
    assert "arm_betas" not in plan and "reference_epochs" not in plan


def test_reused_cells_cost_nothing_and_the_plans_extras_pass_through():
    design = _design(budget_hours=100.0)
    every_seed_of_one_arm = design.main_arms[0]
    plan = plan_main(
        design, _analysis(reference_epochs={"c": 8.0}), reused=lambda arm, seed: arm == every_seed_of_one_arm
    )
    assert plan["expected_hours"] == round(_hours(9, 5, free=5), 2) and plan["reference_epochs"] == {"c": 8.0}
    assert plan_main(design, _analysis(), seed_minutes=10.0)["expected_hours"] == round(
        _hours(9, 5, seed_minutes=10.0), 2
    )


def test_the_preregistration_is_written_once_readably_with_its_code_and_time_and_then_only_checked(
    tmp_path, monkeypatch
):
    import json
    import subprocess
    from pathlib import Path

    from squarechipo.reproduce.study.power import _commit, preregister

    design = _design(budget_hours=3.0)
    results = tmp_path / "a" / "results"  # parents are made
    record = preregister(results, design, {"seeds_needed": 2}, {"seeds": [0, 1]})
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1]).stdout.strip() or None  # fmt: skip
    assert record["commit"] == head and record["written"].endswith("+00:00") and record["version"]  # None: no checkout
    text = (results / "preregistration.json").read_text()
    assert '\n  "written"' in text and "Square-χPO" in text  # indented, and names as written
    assert json.loads(text) == record
    again = preregister(results, design, {"seeds_needed": 9}, {"seeds": list(range(9))})
    assert again["plan"] == {"seeds": [0, 1]}  # written once: a second pilot analysis does not replace it
    with pytest.raises(ValueError, match=r"pre-registered another design \(fields \['budget_hours'\] differ\)"):
        preregister(results, _design(budget_hours=4.0), {}, {})
    monkeypatch.chdir(tmp_path)  # outside a checkout there is no commit to name
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    assert _commit() is None


def test_the_pilot_beta_closest_to_the_target_kl_on_a_log_scale_is_each_arms_and_the_plan_names_it():
    from squarechipo.reproduce.study.design import Arm
    from squarechipo.reproduce.study.power import _at_chosen_betas, choose_betas

    arms = (Arm("square_chipo", "CTL", 1.0, beta=0.01), Arm("dpo", "CTL", 1.0), Arm("dpo", "LTC", 1.0))
    from dataclasses import replace

    design = replace(_design(budget_hours=100.0), main_arms=arms, claims=None, target_kl=40.0)
    kl = {f"ctl_eps1_dpo_beta{b}": {"method": "dpo", "setting": "CTL", "beta": b, "kl": k}
          for b, k in ((0.1, 10.0), (0.05, 30.0), (0.025, 100.0))}  # fmt: skip
    kl["ltc_eps1_dpo_beta0.5"] = {"method": "dpo", "setting": "LTC", "beta": 0.5, "kl": 0.2}
    kl["ltc_eps1_dpo_beta0.2"] = {"method": "dpo", "setting": "LTC", "beta": 0.2, "kl": 0.9}
    chosen = choose_betas(design, kl)  # an arm with its own β is skipped; the next ones are still chosen
    assert chosen == {"ctl_eps1_dpo": 0.05, "ltc_eps1_dpo": 0.2}  # |log(30/40)| < |log(100/40)|; 0.9 nearer than 0.2
    plan = plan_main(design, _analysis(final_kl=kl))
    assert plan["arm_betas"] == chosen
    with pytest.raises(
        ValueError, match=r"^target_kl: the pilot ran no dpo arm on LTC labels and 128 rows to choose β from\.$"
    ):
        choose_betas(design, {k: v for k, v in kl.items() if not k.startswith("ltc")})
    records = [{"arm": a, "method": "dpo", "setting": "CTL", "seed": 0} for a in kl if a.startswith("ctl")]
    records.append({"arm": "ctl_eps1_square_chipo_beta0.01", "method": "square_chipo", "setting": "CTL", "seed": 0})
    renamed = _at_chosen_betas(records, design, {"ctl_eps1_dpo": 0.05})
    assert sorted(r["arm"] for r in renamed) == ["ctl_eps1_dpo", "ctl_eps1_square_chipo_beta0.01"]


def test_a_reused_cell_is_free_only_for_its_own_seed():
    design = _design(budget_hours=100.0)
    first = design.main_arms[0]
    plan = plan_main(design, _analysis(), reused=lambda arm, seed: arm == first and seed == 0)
    assert plan["expected_hours"] == round(_hours(9, 5, free=1), 2)


def test_a_claim_with_one_pilot_seed_gives_no_spread_to_plan_with():
    from squarechipo.reproduce.study.design import load_design
    from squarechipo.reproduce.study.power import _pilot_differences

    rows_needed = Path(__file__).resolve().parents[1] / "recipes" / "studies" / "rows_needed.yaml"
    design = load_design(str(rows_needed))
    records = [_record(arm, 0, w) for arm, w in (("ctl_eps1_square_chipo", 0.6), ("ctl_eps1_dpo", 0.5))]
    assert _pilot_differences(records, design) == ({}, {})


def test_the_preregistration_in_force_and_its_refusals(tmp_path):
    import json

    from squarechipo.reproduce.study.power import _in_force, check_preregistration, preregister

    first = {"design": {"a": 1}, "pilot": {"sd": 1}, "plan": {"seeds": [0, 1]}}
    amended = {**first, "amendments": [{"design": {"a": 2}, "pilot": {"sd": 2}, "plan": {"seeds": [0, 1, 2]}}]}
    assert _in_force(first) == first
    assert _in_force(amended) == {**amended, "design": {"a": 2}, "pilot": {"sd": 2}, "plan": {"seeds": [0, 1, 2]},
                                  "first_plan": {"seeds": [0, 1]}}  # fmt: skip
    design = _design(budget_hours=3.0)
    with pytest.raises(
        FileNotFoundError,
        match=rf"^{re.escape(str(tmp_path))}/preregistration\.json not found: run the "
        r"pilot first \(python -m squarechipo\.reproduce study pilot\), which writes the pre-registered "
        r"sizes the main run uses\.$",
    ):
        check_preregistration(tmp_path, design)
    record = preregister(tmp_path, design, {}, {})
    record["design"]["a_field_no_design_has"] = 1  # a recorded field the current design lacks is a difference too
    (tmp_path / "preregistration.json").write_text(json.dumps(record))
    with pytest.raises(
        ValueError,
        match=r"fields \['a_field_no_design_has'\] differ\)\. The main run keeps the "
        r"pre-registered sizes: drop the changes, amend the plan before the main run \(study amend "
        r"--reason, fields \['main_arms', 'claims', 'effect_points', 'budget_hours'\] only\), or use a "
        r"new --results folder for a new study \(with its own pilot\)\.$",
    ):
        check_preregistration(tmp_path, design)


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        "[]",
        '{"design": {}, "plan": {}, "amendments": {"design": {}}}',
        '{"design": {}, "plan": {}, "amendments": [{"design": {}, "pilot": {}}]}',
        '{"design": {}, "plan": {}, "amendments": ["later"]}',
    ],
)
def test_an_edited_preregistration_is_refused_naming_the_file_and_the_fix(tmp_path, text):
    """A pre-registration is the study's record, written only by `study pilot` and `study amend`: an edited one (a
    non-list `amendments` once raised AttributeError deep in the main run) is refused naming the file."""
    from squarechipo.reproduce.study.power import PREREGISTRATION, design_in_force, read_preregistration

    (tmp_path / PREREGISTRATION).write_text(text)
    for read in (read_preregistration, design_in_force):
        with pytest.raises(ValueError, match=rf"{PREREGISTRATION}.*restore it from git"):
            read(tmp_path)


def test_a_written_preregistration_with_amendments_is_read_as_written(tmp_path):
    from squarechipo.reproduce.study.power import PREREGISTRATION, read_preregistration

    record = {"design": {"name": "x"}, "plan": {"seeds": [0]}, "amendments": [{"design": {}, "pilot": {}, "plan": {}}]}
    (tmp_path / PREREGISTRATION).write_text(__import__("json").dumps(record))
    assert read_preregistration(tmp_path) == record


def test_fresh_main_seeds_start_where_the_design_says_and_never_fall_below_its_floor():
    """A study that must not reuse an earlier study's seeds names its first main seed; ``min_seeds`` is a floor fixed
    before the pilot, kept when the power step asks fewer and when the budget would allow fewer."""
    from dataclasses import replace

    tight = _design(budget_hours=_hours(7, 4) - 0.01, main_seeds_from=100, min_seeds=9)
    plan = plan_main(tight, _analysis(needed=12))
    assert plan["seeds"] == list(range(100, 109)) and plan["budget_binds_seeds"]
    assert plan["mde_points"] == pytest.approx(mde(9, 4.0, target=tight.power, alpha=tight.alpha))
    roomy = replace(tight, budget_hours=1000.0)
    assert plan_main(roomy, _analysis(needed=5))["seeds"] == list(range(100, 109))  # power asked 5: the floor
    assert plan_main(roomy, _analysis(needed=12))["seeds"] == list(range(100, 112))
    first = roomy.main_arms[0]
    free = plan_main(roomy, _analysis(needed=12), reused=lambda arm, seed: arm == first and seed == 100)
    assert free["expected_hours"] == round(_hours(9, 12, free=1), 2)  # reuse is looked up by the actual seed
    for bad in ({"min_seeds": 1}, {"main_seeds_from": -1}, {"min_seeds": "9"}, {"main_seeds_from": True}):
        with pytest.raises(ValueError, match="min_seeds must be a whole number ≥ 2 and main_seeds_from one ≥ 0"):
            _design(**bad)


def test_a_gate_at_a_checkpoint_reads_the_metric_there():
    from dataclasses import replace

    from squarechipo.reproduce.study.design import Arm, Gate, StudyDesign
    from squarechipo.reproduce.study.power import gate_result

    arm = Arm("square_chipo", "CTL", 1.0, rows=128, beta=0.01)

    def cell(seed, at_12, at_32):
        marks = [{"epoch": e, "summary": {"gold_gain": {"mean": g}}} for e, g in ((12, at_12), (32, at_32))]
        return {"arm": arm.key, "seed": seed, "summary": marks[-1]["summary"], "checkpoints": marks}

    design = StudyDesign(
        pilot_arms=(arm,), main_arms=(arm,), epochs=32, checkpoints=(12, 32),
        pilot_gate=Gate(arm.key, "gold_gain", 0.0, epoch=12),
    )  # fmt: skip
    records = [cell(0, 0.2, -0.5), cell(1, 0.1, -0.3)]
    found = gate_result(records, design)
    assert found["values"] == [0.2, 0.1] and found["passed"] and found["epoch"] == 12
    at_end = gate_result(records, replace(design, pilot_gate=Gate(arm.key, "gold_gain", 0.0)))
    assert at_end["values"] == [-0.5, -0.3] and not at_end["passed"]
    with pytest.raises(ValueError, match=r"pilot_gate.epoch 8 is not one of the design.s checkpoints \(\[12, 32\]\)"):
        replace(design, pilot_gate=Gate(arm.key, "gold_gain", 0.0, epoch=8))


def test_a_beta_chosen_by_the_pilots_gain_at_an_epoch_is_the_largest_there_and_a_gate_reads_it():
    """``beta_by_gain_at``: a main arm without β takes the pilot β (same method, setting and rows) whose mean gold
    gain at that checkpoint is largest; a gate naming that main arm reads the chosen pilot arm."""
    from dataclasses import replace

    from squarechipo.reproduce.study.design import Arm, Claim, Gate, StudyDesign
    from squarechipo.reproduce.study.power import analyse_pilot, choose_betas, final_kl

    dpo = Arm("dpo", "CTL", 1.0, beta=0.025)
    square = Arm("square_chipo", "CTL", 1.0, rows=128)
    pilot_arms = (dpo, *(replace(square, beta=b) for b in (0.01, 0.003)), Arm("square_chipo", "CTL", 1.0, beta=0.1))

    def cell(arm, seed, at_12, at_32, kl=5.0):
        marks = [{"epoch": e, "summary": {"gold_gain": {"mean": g}, "kl": {"mean": kl}, "expected_win": {"mean": 0.5}}}
                 for e, g in ((12, at_12), (32, at_32))]  # fmt: skip
        rows = arm.rows or 32
        times = {"train_seconds": 60, "eval_seconds": 60}
        return {"arm": arm.key, "seed": seed, "method": arm.method, "setting": "CTL", "rows": rows, "beta": arm.beta,
                "summary": marks[-1]["summary"], "checkpoints": marks, **times}  # fmt: skip

    gains = {0.01: (0.1, 0.3), 0.003: (0.4, 0.2)}  # at epoch 12, seeds 0 and 1 alike
    records = [cell(dpo, s, 0.9, 0.4 - 0.1 * s) for s in (0, 1)]
    records += [
        cell(replace(square, beta=b), s, g12 + 0.01 * s, g32) for b, (g12, g32) in gains.items() for s in (0, 1)
    ]
    records += [cell(pilot_arms[-1], s, 2.0, 2.0) for s in (0, 1)]  # 32 rows: not the 128-row arm's grid
    claims = (Claim("Square-χPO ends above DPO", square.key, dpo.key, metric="gold_gain"),)
    design = StudyDesign(
        pilot_arms=pilot_arms, main_arms=(dpo, square), claims=claims, epochs=32, checkpoints=(12, 32),
        pilot_seeds=(0, 1), beta_by_gain_at=12, pilot_gate=Gate(square.key, "gold_gain", 0.0, epoch=12),
    )  # fmt: skip
    assert choose_betas(design, final_kl(records, 12)) == {square.key: 0.003}
    analysis = analyse_pilot(records, design)
    assert analysis["gate"]["values"] == pytest.approx([0.4, 0.41]) and analysis["gate"]["passed"]
    assert analysis["final_kl"][replace(square, beta=0.003).key]["gain_at_epoch"] == pytest.approx(0.405)
    with pytest.raises(ValueError, match="give target_kl or beta_by_gain_at, not both"):
        replace(design, target_kl=10.0)
    with pytest.raises(ValueError, match=r"beta_by_gain_at 8 is not one of the design's checkpoints"):
        replace(design, beta_by_gain_at=8)
    with pytest.raises(ValueError, match="pilot_gate names arm"):  # a main arm is named only where a rule chooses
        replace(design, beta_by_gain_at=None)


def test_the_deciding_over_optimisation_design_plans_fresh_seeds_and_reads_its_pilot_by_its_rules():
    """recipes/studies/overoptimisation_decide.yaml, on made-up pilot records: the drop claim's reference epoch is 12,
    Square-χPO's β is the 128-row pilot β with the larger gain at epoch 12, the gate reads that arm, and the plan's
    seeds are fresh (from 100) and at least 9."""
    from pathlib import Path

    from squarechipo.reproduce.study.design import load_design
    from squarechipo.reproduce.study.power import analyse_pilot

    design = load_design(
        str(Path(__file__).resolve().parents[1] / "recipes" / "studies" / "overoptimisation_decide.yaml")
    )

    def cell(arm, seed, at_12, at_32, minutes):
        def summary(gain):
            return {"gold_gain": {"mean": gain}, "kl": {"mean": 9.0}, "expected_win": {"mean": 0.5}}

        marks = [{"epoch": e, "summary": summary(g)} for e, g in ((12, at_12), (32, at_32))]
        return {"arm": arm.key, "seed": seed, "method": arm.method, "setting": arm.setting, "beta": arm.beta,
                "rows": arm.rows or design.train_rows, "summary": marks[-1]["summary"], "checkpoints": marks,
                "train_seconds": 60 * minutes, "eval_seconds": 0}  # fmt: skip

    dpo, square_01, square_003 = design.pilot_arms
    records = [cell(dpo, s, 1.0, 0.5 - 0.2 * s, 17) for s in design.pilot_seeds]
    records += [cell(square_01, s, 0.1, 0.2, 60) for s in design.pilot_seeds]
    records += [cell(square_003, s, 0.3 + 0.1 * s, 0.4, 60) for s in design.pilot_seeds]
    analysis = analyse_pilot(records, design)
    assert analysis["reference_epochs"] == {dpo.key: 12.0} and analysis["gate"]["passed"]
    plan = plan_main(design, analysis)
    assert plan["arm_betas"] == {"ctl_eps1_square_chipo_n128": 0.003}
    assert plan["seeds"][0] == 100 and 9 <= len(plan["seeds"]) and not set(plan["seeds"]) & set(design.pilot_seeds)
    assert [c.metric for c in design.secondary] == ["gold_gain_clean"] and len(design.claims) == 2
    arms = enumerate((square_01, square_003))
    negative = [*records[:2], *(cell(a, s, -0.1 * (1 + i), 0.4, 60) for i, a in arms for s in design.pilot_seeds)]
    assert not analyse_pilot(negative, design)["gate"]["passed"]  # no gain at epoch 12 at either β: no main run
