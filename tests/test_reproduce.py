"""Zhou et al. 2025 (Square-χPO)'s Table 1 command: the aggregation and paired verdicts on hand-made records, and the
real run end to end on tiny models (real recipes, trainer, release, generation and judges), including resume."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from scipy import stats

from squarechipo.reproduce.aggregate import paired_difference, verdict, win_interval, write_table1
from squarechipo.reproduce.scales import SCALES, load_scale
from squarechipo.reproduce.table1 import CELL_RECORD, Table1Run, plan_cells

ROOT = Path(__file__).resolve().parents[1]


def _record(seed, setting, method, win, epsilon=0.5, alpha=0.1, local=None):
    wins = {"gold": {"win_rate_half_ties": win / 100}}
    if local is not None:
        wins["local"] = {"win_rate_half_ties": local / 100}
    name = f"{setting}-{epsilon}-{method}-{seed}"
    return {
        "name": name,
        "seed": seed,
        "setting": setting,
        "method": method,
        "epsilon": epsilon,
        "corruption_rate": alpha,
        "win": wins,
        "train_loss": 0.5,
        "seconds": 60.0,
    }


def test_paired_difference_is_students_t_over_seeds_with_its_verdict():
    half = stats.t.ppf(0.975, 2) * 1.0 / math.sqrt(3)  # differences 5, 6, 7: mean 6, sd 1
    result = paired_difference({0: 65.0, 1: 66.0, 2: 67.0, 3: 99.0}, {0: 60.0, 1: 60.0, 2: 60.0})
    assert result["seeds"] == [0, 1, 2]  # only the seeds both sides have
    assert result["mean"] == pytest.approx(6.0)
    assert (result["low"], result["high"]) == pytest.approx((6.0 - half, 6.0 + half))
    assert result["verdict"] == "holds"
    # Differences 2, 4, 6: mean 4 but the interval [−0.97, 8.97] covers 0.
    assert paired_difference({0: 52, 1: 54, 2: 56}, {0: 50, 1: 50, 2: 50})["verdict"] == "not shown at this scale"
    assert paired_difference({0: 40, 1: 41, 2: 42}, {0: 50, 1: 50, 2: 50})["verdict"] == "reversed"
    assert verdict(math.nan, math.nan).startswith("not shown at this scale (fewer than 2")
    assert win_interval([60.0, 62.0]) == f"61.0 ± {stats.t.ppf(0.975, 1) * math.sqrt(2) / math.sqrt(2):.1f} (n=2)"
    assert win_interval([60.0]) == "60.0 (n=1)" and win_interval([]) == "—"


def test_table1_layout_claims_and_files_from_hand_made_records(tmp_path):
    scale = load_scale("cpu")
    records = []
    for seed in range(3):
        for setting, base in (("CTL", 60.0), ("LTC", 55.0)):
            for method, bump in (("chipo", 0.0), ("square_chipo", 5.0 + seed), ("dpo", -1.0), ("rdpo", 1.0)):
                records.append(_record(seed, setting, method, base + bump + seed, local=50.0))
        records.append(_record(seed, "clean", "square_chipo", 80.0, epsilon=None, alpha=0.0))
        for epsilon, win in ((1.0, 70.0), (2.0, 72.0), (None, 75.0)):
            records.append(_record(seed, "CTL", "square_chipo", win + seed, epsilon=epsilon))
    calibration = {"gold": {"soft_accuracy": 0.9, "soft_accuracy_ci": [0.8, 0.95], "n_pairs": 170}}
    text = write_table1(records, calibration, scale, tmp_path)
    ctl_square = [60.0 + 5 + 2 * s for s in range(3)]  # 65, 67, 69
    assert f"| CTL (ε = 0.5, α = 0.1) | {win_interval([60.0, 61.0, 62.0])} | {win_interval(ctl_square)} |" in text
    assert f"| clean labels (ε = ∞, α = 0) |  | {win_interval([80.0] * 3)} |" in text
    assert f"| ∞ | {win_interval([75.0, 76.0, 77.0])} |" in text
    assert "gold judge 90.0% [80.0, 95.0] on 170 pairs" in text
    claims = json.loads((tmp_path / "table1.json").read_text())["claims"]
    assert claims["Square-χPO ≥ χPO under CTL"]["mean"] == pytest.approx(6.0)
    assert claims["Square-χPO ≥ χPO under CTL"]["verdict"] == "holds"  # differences 5, 6, 7
    assert claims["CTL > LTC for χPO"]["mean"] == pytest.approx(5.0)
    assert claims["CTL > LTC for χPO"]["verdict"] == "holds"  # a constant difference: a zero-width interval
    assert "debiased local judge (second opinion)" in text
    assert len((tmp_path / "table1.csv").read_text().splitlines()) == len(records) + 1
    assert (tmp_path / "table1.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plans_pair_the_methods_on_shared_labels_and_scales_load_from_yaml(tmp_path):
    cells = plan_cells(SCALES["cpu"])
    assert len(cells) == 3 * (2 * 4 + 1 + 3)
    seed0 = [c for c in cells if c.seed == 0 and c.setting == "CTL" and c.epsilon == 0.5]
    assert len({c.labels for c in seed0}) == 1 and len(seed0) == 4  # one release for the four methods
    assert len(plan_cells(SCALES["paper"])) == 5 * 12
    spec = tmp_path / "s.yaml"
    spec.write_text("base: paper\nseeds: [7]\nsweep_epsilons: [1.0, .inf]\n")
    scale = load_scale(str(spec))
    assert (scale.name, scale.seeds, scale.sweep_epsilons, scale.train_rows) == ("s", (7,), (1.0, None), None)
    spec.write_text("seed: [1]\n")
    with pytest.raises(ValueError, match=r"unknown Scale fields \['seed'\]"):
        load_scale(str(spec))
    with pytest.raises(ValueError, match="--scale must be one of"):
        load_scale("laptop")


@pytest.mark.integration
def test_table1_runs_end_to_end_and_resumes(tokenizer, finance_splits, tmp_path):
    """One seed × {χPO, Square-χPO} under CTL on tiny models: real recipes in their own processes, real release,
    generation, gold reward-model judge and local judge. A re-run does nothing; a cut-off cell is redone on its
    saved release (no fresh noise) while finished cells stay as they were. (Two seeds before 0.3: the second seed
    repeated every step of the first.)"""
    import datasets

    from tests.helpers.models import make_tiny_model

    data = tmp_path / "data"
    for name in ("finance_preference_conversational", "finance_sft_conversational"):
        finance_splits[name].save_to_disk(str(data / name))
    base = tmp_path / "base"
    make_tiny_model(tokenizer, seed=0).save_pretrained(base)
    tokenizer.save_pretrained(base)
    spec = tmp_path / "tiny.yaml"
    spec.write_text(
        f"name: tiny\ndata_dir: {data}\nbase_model: {base}\nsft_rows: 8\nseeds: [0]\nsettings: [CTL]\n"
        "methods: [chipo, square_chipo]\nsweep_epsilons: []\nclean_reference: false\ntrain_rows: 8\n"
        f"test_prompts: 3\nmax_new_tokens: 4\njudge_rows: 40\ncalibration_pairs: 6\nsecond_opinion: {base}\n"
        "max_length: 128\nlearning_rate: 1.0e-3\n"
    )
    out = tmp_path / "table1"
    from squarechipo.reproduce.cli import main

    main(["table1", "--scale", str(spec), "--out", str(out)])  # docs/reproduction.md's command, at a tiny scale
    cells = plan_cells(load_scale(str(spec)))
    records = [json.loads((out / "cells" / c.name / CELL_RECORD).read_text()) for c in cells]
    assert [r["name"] for r in records] == [c.name for c in cells]
    assert sorted(p.name for p in (out / "releases").iterdir() if not p.name.startswith(".")) == [
        "ctl_eps0.5_alpha0.1_seed0",
    ]  # the two methods of a seed trained on one release
    scores = {"win": 1.0, "tie": 0.5, "identical": 0.5, "loss": 0.0}
    for record in records:
        assert set(record["win"]) == {"gold", "local"}
        for judge, win in record["win"].items():  # each judge's headline is its judgments' (ties as ½), per cell
            lines = (out / "cells" / record["name"] / f"eval_{judge}" / "judgments.jsonl").read_text().splitlines()
            outcomes = [json.loads(line)["outcome"] for line in lines]
            assert len(outcomes) == 3 and win["n_valid"] == sum(o != "invalid" for o in outcomes)
            valid = [scores[o] for o in outcomes if o != "invalid"]
            assert win["win_rate_half_ties"] == pytest.approx(sum(valid) / len(valid))
        privacy = json.loads((out / "cells" / record["name"] / "model" / "squarechipo_privacy.json").read_text())
        assert privacy["epsilon"] == 0.5 and privacy["method"] == record["method"]
        assert not list((out / "cells" / record["name"] / "model").glob("*.safetensors"))  # keep_models: false
    text = (out / "table1.md").read_text()
    assert "Square-χPO ≥ χPO under CTL" in text and "gold judge" in text

    finished, cut = out / "cells" / records[0]["name"], out / "cells" / records[1]["name"]
    before = {p: (p / CELL_RECORD).stat().st_mtime_ns for p in (finished, cut)}
    release = out / "releases" / records[1]["labels"]
    released = datasets.load_from_disk(str(release))["chosen"]
    (cut / CELL_RECORD).unlink()  # the run was cut off after training this cell, before its record
    again = Table1Run(load_scale(str(spec)), out).run()
    assert (finished / CELL_RECORD).stat().st_mtime_ns == before[finished]
    assert (cut / CELL_RECORD).stat().st_mtime_ns != before[cut]
    assert datasets.load_from_disk(str(release))["chosen"] == released
    assert len(again) == len(records)
    spec.write_text(spec.read_text() + "cell_minutes: 9.0\n")  # only the estimate changes: the run resumes
    assert [r["name"] for r in Table1Run(load_scale(str(spec)), out).run()] == [r["name"] for r in again]
    spec.write_text(spec.read_text().replace("test_prompts: 3", "test_prompts: 4"))
    with pytest.raises(ValueError, match=r"holds a run at another scale \(fields \['test_prompts'\] differ\)"):
        Table1Run(load_scale(str(spec)), out).run()
