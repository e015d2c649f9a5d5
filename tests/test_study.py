"""The controlled study: the gold labels' law, the loop detector,
and the whole protocol (pilot, power, pre-registration, main run, report) on tiny models, including resume."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy import stats
from scipy.special import expit

from squarechipo.evaluation.gold import draw_gold_labels, has_loop, relabel
from squarechipo.stats import mde, seeds_for_power
from tests.helpers.stats import Z_TOLERANCE, binomial_se

ROOT = Path(__file__).resolve().parents[1]


def test_a_partial_main_run_says_so_and_lists_untestable_claims():
    """One seed done of two: the report counts the cells, says INCOMPLETE, and lists every claim as not tested
    (no t interval from one paired seed) instead of leaving it out."""
    from squarechipo.reproduce.study import report as sr
    from squarechipo.reproduce.study.design import CLAIMS, StudyDesign

    design = StudyDesign()
    arms = [a.key for a in design.main_arms]
    metric = {"mean": 0.55, "n": 4, "sd": 0.1}
    records = [{"arm": a, "seed": 0, "summary": {m: metric for m in sr._METRICS}} for a in arms]
    prereg = {"plan": {"seeds": [0, 1], "arms": arms}}
    assert sr.progress(records, prereg) == (
        f"Main run: {len(arms)} of {2 * len(arms)} pre-registered cells done, 1 of 2 seeds complete "
        "(INCOMPLETE: the figures below cover only these cells)."
    )
    found = sr.claims(records, design)
    assert [c["claim"] for c in found] == [c.name for c in CLAIMS]
    assert all(c["verdict"] == "not tested: 1 paired seed(s) done" for c in found)
    assert (
        sr.in_short({"claims": found, "headline": []})
        == f"In short: of {len(found)} claims, holds 0, reversed 0, not decided 0, not tested {len(found)}."
    )
    assert "| — | — | — | not tested" in "\n".join(sr._claim_table({"claims": found}))
    kept = [a.key for a in design.main_arms if a.epsilon != 1.0]
    cut = {c["claim"]: c["verdict"] for c in sr.claims(records, design, kept)}
    assert (
        cut["debiasing helps Square-χPO at ε = 1 (CTL)"] == "not tested: an arm was cut from the pre-registered plan"
    )
    assert cut["Square-χPO ≥ χPO under CTL (ε = 0.5)"] == "not tested: 1 paired seed(s) done"


def test_deviations_end_a_run_and_cannot_hide_a_record(tmp_path):
    """Cells of the plan not run, stated with a reason in deviations.json, end the run in the report's words; a
    deviation naming a cell outside the plan, a cell with a record, or no cell at all is refused."""
    from squarechipo.reproduce.study import report as sr
    from squarechipo.reproduce.study.design import StudyDesign

    arms = [a.key for a in StudyDesign().main_arms]
    records = [{"arm": a, "seed": 0} for a in arms]
    prereg = {"plan": {"seeds": [0, 1], "arms": arms}}
    gap = [{"cells": [f"{a}_seed1" for a in arms], "reason": "The machine was lost."}]
    assert sr.progress(records, prereg, gap).endswith(
        f"(ended: {len(arms)} cell(s) not run, for the reason stated below)."
    )
    assert sr.progress(records, prereg, [{"cells": gap[0]["cells"][1:], "reason": "x"}]).endswith(
        "(INCOMPLETE: the figures below cover only these cells)."
    )
    (tmp_path / sr.DEVIATIONS).write_text(json.dumps(gap))
    assert sr.load_deviations(tmp_path, records, prereg) == gap
    assert sr._deviation_lines(gap)[2].startswith(f"- Not run: {arms[0]}_seed1, ")
    for bad, why in (
        ([{"cells": [f"{arms[0]}_seed0"], "reason": "x"}], "has a record"),
        ([{"cells": [f"{arms[0]}_seed9"], "reason": "x"}], "not a cell of the pre-registered plan"),
        ([{"cells": []}], "needs 'cells'"),
    ):
        (tmp_path / sr.DEVIATIONS).write_text(json.dumps(bad))
        with pytest.raises(ValueError, match=why):
            sr.load_deviations(tmp_path, records, prereg)


def test_bradley_terry_gold_labels_have_the_right_law():
    rng = np.random.default_rng(3)
    gaps = np.repeat([-2.0, -0.5, 0.0, 1.0, 3.0], 20_000)
    first = rng.normal(size=gaps.size)
    labels = draw_gold_labels(first + gaps, first, "bt", rng)
    for gap in np.unique(gaps):
        share, p = labels[gaps == gap].mean(), expit(gap)
        assert abs(share - p) < Z_TOLERANCE * binomial_se(p, 20_000), gap
    # The exact law: a chi-square test of the counts per gap against σ(gap).
    observed = np.array([[labels[gaps == g].sum(), (~labels[gaps == g]).sum()] for g in np.unique(gaps)])
    expected = np.array([[20_000 * expit(g), 20_000 * (1 - expit(g))] for g in np.unique(gaps)])
    assert stats.chisquare(observed.ravel(), expected.ravel(), ddof=0).pvalue > 1e-4
    assert draw_gold_labels(np.array([1.0, 0.0, 2.0]), np.array([0.0, 0.0, 3.0]), "argmax").tolist() == [
        True,
        True,
        False,
    ]
    assert draw_gold_labels(np.zeros(3), np.ones(3), "dataset").all()
    with pytest.raises(ValueError, match="pass a numpy Generator"):
        draw_gold_labels(np.zeros(2), np.zeros(2), "bt")
    with pytest.raises(ValueError, match="label source must be one of"):
        draw_gold_labels(np.zeros(2), np.zeros(2), "coin")


def test_relabel_swaps_exactly_the_rows_whose_first_response_loses():
    import datasets

    rows = datasets.Dataset.from_dict(
        {"prompt": ["p0", "p1", "p2"], "chosen": ["a0", "a1", "a2"], "rejected": ["b0", "b1", "b2"], "id": [0, 1, 2]}
    )
    out = relabel(rows, np.array([True, False, True]))
    assert out["chosen"] == ["a0", "b1", "a2"] and out["rejected"] == ["b0", "a1", "b2"] and out["id"] == [0, 1, 2]
    with pytest.raises(ValueError, match="the dataset has 3 rows"):
        relabel(rows, np.array([True]))


def test_loop_detector_flags_repetition_loops_and_not_plain_plans():
    assert has_loop("Invest in 1.1.1.1.1.1 and wait")
    assert has_loop("SMML.1121111111")
    assert has_loop("the the the plan")
    sentence = "Keep the money in savings. "
    assert has_loop("Start here. " + sentence * 3)
    plan = (
        "Write a line-item budget for the block party and keep a 10% cushion for surprises. Book the big items "
        "early, and compare three quotes for the block party. Budget $1,000,000 over 10 years."
    )
    assert not has_loop(plan)


def _tiny_study(tmp_path, tokenizer, finance_splits, **overrides):
    """A study design on the tiny model: real recipes, release, generation and gold judge, tiny sizes."""
    import yaml

    from tests.helpers.models import make_tiny_model

    data = tmp_path / "data"
    if not data.exists():
        for name in ("finance_preference_conversational", "finance_sft_mixed_conversational"):
            finance_splits[name].save_to_disk(str(data / name))
        make_tiny_model(tokenizer, seed=0).save_pretrained(tmp_path / "base")
        tokenizer.save_pretrained(tmp_path / "base")
    arms = [
        {"method": "square_chipo", "setting": "CTL", "epsilon": 0.5},
        {"method": "dpo", "setting": "CTL", "epsilon": 0.5},
        {"method": "square_chipo", "setting": "CTL", "epsilon": 0.5, "debias": False, "tier": 2},
        {"method": "dpo", "setting": "clean", "epsilon": None, "tier": 3},
    ]
    spec = {
        "data_dir": str(data),
        "base_model": str(tmp_path / "base"),
        "sft_rows": 8,
        "judge_rows": 16,
        "train_rows": 16,
        "learning_rate": 1.0e-3,
        "sft_lora_r": 4,  # the set-up is committed: a LoRA SFT adapter and the gold judge's head
        "max_length": 96,
        "bf16": False,
        "test_prompts": 3,
        "max_new_tokens": 6,
        "eval_dtype": "float32",
        "pilot_seeds": [1000, 1001],  # two: the fewest that give the power step a between-seed SD
        "pilot_arms": arms[:2],
        "main_arms": arms,
        "effect_points": 50.0,
        # A budget that binds: the main run is cut to the tier-1 arms at the fewest seeds the plan allows, which
        # exercises the cutting (1 hour ran all four arms at more seeds, repeating every step).
        "budget_hours": 0.001,
        **overrides,
    }
    path = tmp_path / "design.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _leaves(record: dict) -> tuple[list, list[float]]:
    """A cell record's texts and numbers in a fixed order, without its timings (float sums differ in the last
    digits from one run to the next)."""
    texts, numbers = [], []

    def walk(value) -> None:
        if isinstance(value, dict):
            for key in sorted(value):
                if "seconds" not in key:
                    walk(value[key])
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            numbers.append(float(value))
        else:
            texts.append(value)

    walk(record)
    return texts, numbers


@pytest.mark.slow
def test_study_pilot_preregisters_main_refuses_changes_and_a_resumed_run_redoes_nothing(
    tokenizer, finance_splits, tmp_path
):
    from squarechipo.reproduce.cli import main

    design = _tiny_study(tmp_path, tokenizer, finance_splits)
    out, results = tmp_path / "out", tmp_path / "results"
    args = [
        "study",
        "pilot",
        "--design",
        str(design),
        "--out",
        str(out),
        "--results",
        str(results),
    ]
    main(args)
    prereg = json.loads((results / "preregistration.json").read_text())
    pilot = prereg["pilot"]
    assert sorted(p.stem for p in (results / "pilot").glob("*.json")) == sorted(
        f"ctl_eps0.5_{m}_seed{s}" for m in ("square_chipo", "dpo") for s in (1000, 1001)
    )
    difference = next(iter(pilot["differences"].values()))
    sd = float(np.std(difference["differences_points"], ddof=1))
    assert difference["sd"] == pytest.approx(sd)
    assert pilot["seeds_needed"] == seeds_for_power(50.0, pilot["sd_for_power"])
    plan = prereg["plan"]
    assert plan["mde_points"] == pytest.approx(mde(len(plan["seeds"]), pilot["sd_for_power"]))
    # The budget binds: only the tier-1 arms run, at the fewest seeds, and the plan names what it cut.
    assert plan["budget_binds_seeds"] and plan["seeds"] == [0, 1]
    assert len(plan["arms"]) == 2 and len(plan["cut_arms"]) == 2 and not set(plan["arms"]) & set(plan["cut_arms"])
    # The two methods of a seed trained on one release of the same labels.
    releases = sorted(p.name for p in (out / "releases").iterdir() if not p.name.startswith("."))
    assert releases == [f"ctl_eps0.5_alpha0.1_seed{s}" for s in (1000, 1001)]
    record = json.loads((results / "pilot" / "ctl_eps0.5_dpo_seed1000.json").read_text())
    assert len(record["per_prompt"]["expected_win"]) == 3
    assert 0.0 <= record["summary"]["expected_win"]["mean"] <= 1.0
    assert not list((out / "cells" / record["cell"] / "model").glob("*.safetensors"))

    # The main run refuses a design whose sizes differ from the pre-registration.
    changed = _tiny_study(tmp_path, tokenizer, finance_splits, train_rows=24)
    with pytest.raises(ValueError, match=r"pre-registered another design \(fields \['train_rows'\] differ\)"):
        main(["study", "main", "--design", str(changed), "--out", str(out), "--results", str(results)])
    design = _tiny_study(tmp_path, tokenizer, finance_splits)
    main(["study", "main", "--design", str(design), "--out", str(out), "--results", str(results)])
    cells = sorted(results.glob("main/*.json"))
    assert len(cells) == len(plan["seeds"]) * len(plan["arms"])
    summary = json.loads((results / "summary.json").read_text())
    assert {row["arm"] for row in summary["arms"]} == set(plan["arms"])
    assert summary["progress"].startswith(f"Main run: {len(cells)} of {len(cells)} pre-registered cells done")
    assert (results / "frontier.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The report's README block (docs/study.md's `study report --readme README.md`, run here on a copy): only the text
    # between the markers changes, and it is the report of these records.
    from squarechipo.reproduce.study.report import readme_markers

    begin, end = readme_markers("design")  # a design file's study is named after the file
    readme = tmp_path / "README.md"
    readme.write_text(f"# head\n\n{begin}\nold block\n{end}\n\ntail\n")
    step = ["--design", str(design), "--out", str(out), "--results", str(results)]
    main(["study", "report", *step, "--readme", str(readme)])
    head, rest = readme.read_text().split(begin)
    block, tail = rest.split(end)
    assert head == "# head\n\n" and tail == "\n\ntail\n" and "old block" not in block
    assert summary["progress"] in block and "![Reward–KL frontier](results/frontier.png)" in block

    # A resumed run redoes nothing: every record and the pre-registration stay as they were.
    stamps = {p: p.stat().st_mtime_ns for p in [*cells, *results.glob("pilot/*.json"), results / "sft.json"]}
    main(["study", "pilot", "--design", str(design), "--out", str(out), "--results", str(results)])
    main(["study", "main", "--design", str(design), "--out", str(out), "--results", str(results)])
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    assert json.loads((results / "preregistration.json").read_text()) == prereg

    # A fresh work folder beside the committed files (another machine): the set-up is rebuilt from the committed
    # adapter and gold head (nothing retrained), its digests match setup.json, the seeds' labels come from their
    # committed files, and the missing cell comes out as it was; nothing else is redone.
    committed = sorted(p for p in (results / "setup").rglob("*") if p.is_file()) + sorted(results.glob("labels/*"))
    assert {p.parent.name for p in committed} == {"sft_adapter", "gold_head", "labels"}
    committed += [results / "setup.json", results / "sft_samples.json"]
    stamps.update({p: p.stat().st_mtime_ns for p in committed})
    redo, others = cells[-1], {p: t for p, t in stamps.items() if p != cells[-1]}
    before = json.loads(redo.read_text())
    redo.unlink()
    shutil.rmtree(out)
    main(["study", "main", "--design", str(design), "--out", str(out), "--results", str(results)])
    after = json.loads(redo.read_text())
    assert after["setup_digests"] == json.loads((results / "setup.json").read_text())["digests"]
    # The record names the code that trained it and the evaluation that measured it.
    # In a copy that is not a git checkout there is no commit to name: the record says so (None), as code_record does.
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    expected = head.stdout.strip() if head.returncode == 0 and head.stdout.strip() else None
    assert after["code"]["commit"] == expected and after["evaluation"]["test_prompts"] > 0
    # And the machine: bf16 rounds differently on CPUs with and without bf16 kernels.
    import torch

    from squarechipo.models.runtime import cpu_runs_bf16_natively

    machine = after["machine"]
    assert machine["cpu_bf16_kernels"] == cpu_runs_bf16_natively() and machine["device"] == "cpu"
    assert machine["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert not json.loads((out / "sft" / "done.json").read_text())["trained"]
    for record in (before, after):  # the tiny policy's samples tie SFT's up to float noise: a sign flips a tie
        del record["summary"]["hard_win"]
    texts, numbers = _leaves(after)
    assert (texts, numbers) == (_leaves(before)[0], pytest.approx(_leaves(before)[1], rel=1e-4, abs=1e-6, nan_ok=True))
    assert {p: p.stat().st_mtime_ns for p in others} == others

    # A design measured along training (its own study, on this set-up): every checkpoint epoch is measured and the
    # last is the cell's result; no weights are kept.
    from dataclasses import replace

    from squarechipo.reproduce.study.design import load_design
    from squarechipo.reproduce.study.runner import Study

    along = replace(load_design(str(design)), epochs=2.0, checkpoints=(1.0, 2.0), lr_scheduler_type="constant")
    # The cell is cut off after its epoch-1 checkpoint, and in the middle of saving the next one. (The cut-off run
    # is made by training one epoch under the cell's settings at a constant learning rate: the same first two steps;
    # tests/test_trainer.py cuts a run off for real and checks that resuming gives the uninterrupted weights.)
    from squarechipo.reproduce.launch import run_script
    from squarechipo.reproduce.study.runner import cell_name

    study, arm = Study(along, out, results), along.main_arms[0]
    folder = out / "cells" / cell_name(arm, 0)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    config = study._cell_config(arm, 0, folder)
    run_script("train", {**config, "num_train_epochs": 1.0}, folder)
    (folder / "train.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    for path in (folder / "model").iterdir():
        if path.name != "checkpoint-2":
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    (folder / "model" / "checkpoint-3").mkdir()  # a save cut off: no marker
    record = study.cell(arm, 0, "along")
    assert record["resumed_from_step"] == 2
    assert [(c["epoch"], c["step"]) for c in record["checkpoints"]] == [(1.0, 2), (2.0, 4)]  # 16 rows, batches of 8
    assert record["summary"] == record["checkpoints"][-1]["summary"] != record["checkpoints"][0]["summary"]
    assert record["train_loss"] > 0
    assert not [p for p in folder.rglob("*") if p.suffix in (".safetensors", ".pt", ".pth", ".bin")]
    assert sorted(p.name for p in (folder / "model").glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    assert "degenerate_rate" in record["summary"] and "gold_gain_clean" in record["summary"]

    # An SFT record measured before the degenerate-text flags (an older shared set-up) gets them from its committed
    # samples: the flags the evaluator gives each sample, so every cell can still read gold_gain_clean.
    sft_path = results / "sft.json"
    original = sft_path.read_text()
    stored = json.loads(original)
    flags = stored["record"].pop("degenerate")
    sft_path.write_text(json.dumps(stored))
    assert Study(along, out, results).sft_record()["record"]["degenerate"] == flags
    sft_path.write_text(original)

    # Weights that are not the committed set-up's are refused before any cell trains on them: here a work folder
    # rebuilt from an edited adapter (one LoRA weight changed).
    from safetensors.torch import load_file, save_file

    adapter = results / "setup" / "sft_adapter" / "adapter_model.safetensors"
    tensors = load_file(str(adapter))
    name = sorted(k for k in tensors if "lora_B" in k)[0]
    tensors[name][0, 0] += 0.5
    save_file(tensors, str(adapter))
    shutil.rmtree(out / "sft")
    redo.unlink()
    trained = {p: p.stat().st_mtime_ns for p in (out / "cells" / redo.stem).rglob("*")}
    assert trained  # the cell's folder from the rebuild above: a refusal must leave it alone
    # The adapter's own record names the digest of the file it describes: the edit is found before the merge.
    refusal = r"sft_adapter/squarechipo_privacy\.json: the model files .* \(changed \['adapter_model\.safetensors'\]\)"
    from squarechipo.trust.seals import IntegrityError

    with pytest.raises(IntegrityError, match=refusal):
        main(["study", "main", "--design", str(design), "--out", str(out), "--results", str(results)])
    # Without that record (an older set-up), the set-up's committed digest still refuses the merged weights.
    (adapter.parent / "squarechipo_privacy.json").unlink()
    shutil.rmtree(out / "sft", ignore_errors=True)
    refusal = r"setup\.json: the work folder's models are not the committed set-up \(sft: "
    with pytest.raises(RuntimeError, match=refusal):
        main(["study", "main", "--design", str(design), "--out", str(out), "--results", str(results)])
    assert not redo.exists()
    assert {p: p.stat().st_mtime_ns for p in (out / "cells" / redo.stem).rglob("*")} == trained


def test_a_study_whose_set_up_was_not_committed_is_not_resumed_on_a_fresh_work_folder(tmp_path):
    """Without sft_lora_r the set-up lived only in the work folder: beside committed records, a fresh one is refused
    before anything is trained (a retrained SFT policy would be other weights, and cells would not be paired)."""
    from squarechipo.reproduce.study.design import StudyDesign
    from squarechipo.reproduce.study.runner import Study

    results = tmp_path / "results"
    results.mkdir()
    (results / "sft.json").write_text("{}")
    study = Study(StudyDesign(data_dir=str(tmp_path / "no-data")), tmp_path / "out", results)
    with pytest.raises(RuntimeError, match=r"sft\.json was measured with a set-up that lived only in its work folder"):
        study.setup()
    assert not (tmp_path / "out").exists() and not (tmp_path / "no-data").exists()


def test_the_sft_adapter_merges_to_the_float64_sum_of_its_rank_updates(tokenizer, tmp_path):
    """merge_adapter's result is W + s·B·A computed in float64 and rounded once (the same on every processor), within
    float32 rounding of PEFT's own merge, and its digest is the saved model's."""
    import torch
    from peft import LoraConfig, get_peft_model

    from squarechipo.reproduce.study.shared_setup import merge_adapter, model_digest
    from tests.helpers.models import make_tiny_model

    make_tiny_model(tokenizer).save_pretrained(tmp_path / "base")
    tokenizer.save_pretrained(tmp_path / "base")
    lora = get_peft_model(make_tiny_model(tokenizer), LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    with torch.no_grad():
        for name, weight in lora.named_parameters():
            if "lora_B" in name:
                weight.normal_(0, 0.05, generator=torch.Generator().manual_seed(len(name)))
    lora.save_pretrained(tmp_path / "adapter")
    tokenizer.save_pretrained(tmp_path / "adapter")
    digest = merge_adapter(tmp_path / "base", tmp_path / "adapter", tmp_path / "merged")
    assert digest == model_digest(tmp_path / "merged")
    from peft.tuners.lora import LoraLayer

    expected = {}  # the float64 product B·A (matrix multiplication here), added to W, rounded once
    for name, module in lora.named_modules():
        if isinstance(module, LoraLayer):
            a, b = module.lora_A["default"].weight.double(), module.lora_B["default"].weight.double()
            weight = module.get_base_layer().weight
            key = name.removeprefix("base_model.model.") + ".weight"
            expected[key] = (weight.double() + module.scaling["default"] * (b @ a)).float()
    assert len(expected) == 2 * 7  # q, k, v, o, gate, up and down of both blocks
    merged = type(lora.get_base_model()).from_pretrained(tmp_path / "merged").state_dict()
    peft_merged = lora.merge_and_unload().state_dict()
    assert set(expected) < set(merged)
    for key, weight in merged.items():
        assert torch.equal(weight, expected[key]) if key in expected else torch.equal(weight, peft_merged[key])
        torch.testing.assert_close(weight, peft_merged[key], rtol=0, atol=1e-6)


def _cell(arm: str, seed: int, gains: dict[float, float], kl: float | dict[float, float] = 1.0) -> dict:
    """A hand-made cell record measured at checkpoint epochs: gold gain (and KL, if given) per epoch, the rest
    fixed."""
    kls = kl if isinstance(kl, dict) else dict.fromkeys(gains, kl)

    def summary(gain: float, kl: float) -> dict:
        metric = {"mean": gain, "n": 4, "sd": 0.1, "low": gain - 0.1, "high": gain + 0.1, "p_value": 0.5}
        win = {**metric, "mean": 0.5 + gain / 10}
        extras = {"implicit_accuracy": 0.6, "loop_rate": 0.0, "words": 50.0, "length_regression": {"share": 0.0}}
        return {"gold_gain": metric, "pool_gain": metric, "expected_win": win, "hard_win": win,
                "kl": {**metric, "mean": kl}, **extras}  # fmt: skip

    checkpoints = [{"epoch": e, "summary": summary(g, kls[e])} for e, g in gains.items()]
    record = {"arm": arm, "seed": seed, "summary": checkpoints[-1]["summary"], "checkpoints": checkpoints}
    return {**record, "train_seconds": 60.0, "eval_seconds": 30.0}


def _overoptimisation_with_private_arms():
    """The shipped over-optimisation design with CTL (ε = 1) arms and two of their claims, as it held them before its
    amendment cut them: a claim on an arm that no pilot ran is sized through another label setting's pilot arm."""
    from dataclasses import replace

    from squarechipo.reproduce.study.design import Arm, Claim, load_design

    design = load_design(str(ROOT / "recipes" / "studies" / "overoptimisation.yaml"))
    private = tuple(Arm(method, "CTL", 1.0, tier=2) for method in ("dpo", "chipo", "square_chipo"))
    claims = (
        Claim("DPO over-optimises (CTL, ε = 1)", "ctl_eps1_dpo", metric="gold_gain", kind="drop"),
        Claim("χPO ends above DPO (CTL, ε = 1, epoch 16)", "ctl_eps1_chipo", "ctl_eps1_dpo", "gold_gain"),
    )
    return replace(design, main_arms=design.main_arms + private, claims=design.claims + claims)


def test_training_length_claims_are_paired_falls_from_a_pilot_fixed_epoch(tmp_path):
    """drop: gain at the reference epoch minus gain at the end, per seed; drop_difference: the second arm's fall
    minus the first's; the reference epoch is the pilot's argmax of the mean gain before the last checkpoint, and a
    method's pilot arm stands in for its arm in another label setting. The report tabulates every epoch, draws the
    curves, and the power step sizes the main run from the claims' pilot SDs."""
    from dataclasses import replace

    from squarechipo.reproduce.study import report as sr
    from squarechipo.reproduce.study.claims import claim_values, reference_epochs
    from squarechipo.reproduce.study.power import analyse_pilot

    design = _overoptimisation_with_private_arms()
    epochs = design.checkpoints
    rise_fall = {0: [0.2, 0.6, 0.5, 0.1, -0.2], 1: [0.3, 0.5, 0.4, 0.2, 0.0]}  # DPO: peaks at epoch 2 on average
    steady = {0: [0.2, 0.3, 0.4, 0.4, 0.4], 1: [0.1, 0.3, 0.3, 0.5, 0.45]}  # χPO: its largest mean is at epoch 8
    pilot = [_cell("clean_epsinf_dpo", s, dict(zip(epochs, g)), kl=10.0) for s, g in rise_fall.items()]
    pilot += [_cell("clean_epsinf_chipo", s, dict(zip(epochs, g))) for s, g in steady.items()]
    claims = {c.name: c for c in design.claims}
    reference = reference_epochs(pilot, design.claims, epochs)
    assert reference["clean_epsinf_dpo"] == 2 and reference["clean_epsinf_chipo"] == 8
    assert reference["ctl_eps1_dpo"] == 2  # no private pilot arm: the clean DPO pilot arm stands in
    dpo_drop = claim_values(pilot, claims["DPO over-optimises (clean)"], reference)
    assert dpo_drop == pytest.approx({0: 0.6 - (-0.2), 1: 0.5 - 0.0})
    less = claim_values(pilot, claims["χPO over-optimises less than DPO (clean)"], reference)
    assert less == pytest.approx({0: 0.8 - (0.4 - 0.4), 1: 0.5 - (0.5 - 0.45)})
    ends = claim_values(pilot, claims["χPO ends above DPO (clean, epoch 16)"], reference)
    assert ends == pytest.approx({0: 0.4 + 0.2, 1: 0.45 - 0.0})

    analysis = analyse_pilot(pilot, design)
    assert analysis["reference_epochs"] == reference
    measured = analysis["differences"]
    assert measured["DPO over-optimises (clean)"]["sd"] == pytest.approx(np.std([0.8, 0.5], ddof=1))
    # The private DPO drop is sized through the clean DPO pilot arm; a comparison of two arms needs both arms.
    assert "DPO over-optimises (CTL, ε = 1)" in measured
    assert "χPO ends above DPO (CTL, ε = 1, epoch 16)" not in measured

    prereg = {"plan": {"seeds": [0, 1], "arms": [a.key for a in design.main_arms], "reference_epochs": reference}}
    prereg["plan"]["mde_points"] = 0.96
    summary = sr.study_summary(pilot, design, prereg)
    # Every claim here is on the gold gain, so the plan's MDE is in r*, not in points of expected win.
    text = sr.markdown(summary, design)
    assert design.effect_unit == "r*" and "MDE 0.96 r* (the claims' gold gain)" in text
    # The report names the epoch each fall is measured from: the pre-registered ones, not the ones seen later.
    assert "from the pilot (DPO, clean: epoch 2; χPO, clean: epoch 8; DPO, CTL ε=1: epoch 2)." in text
    assert "Share of the clean gain kept" in text  # the CTL arms here have clean arms to be a share of
    clean_only = replace(design, main_arms=design.main_arms[:3], claims=design.claims[:2])
    assert "Share of the clean gain kept" not in sr.markdown(sr.study_summary(pilot, clean_only, prereg), clean_only)
    verdicts = {c["claim"]: c for c in summary["claims"]}
    assert verdicts["DPO over-optimises (clean)"]["mean"] == pytest.approx(0.65)
    assert verdicts["DPO over-optimises (CTL, ε = 1)"]["verdict"] == "not tested: 0 paired seed(s) done"
    assert verdicts["Square-χPO over-optimises less than DPO (clean)"]["verdict"] == (
        "not tested: no reference epoch was pre-registered for clean_epsinf_square_chipo"
    )  # the hand-made pilot has no Square-χPO arm
    lines = sr.along_training_table(summary, design)
    table = "\n".join(line for line in lines if line.startswith("|"))
    assert "| DPO, clean | 2 | 0.25 [" in table and table.count("KL 10.0") == len(epochs)
    turned = [line for line in lines if line.startswith("- DPO, clean:")]
    # The hand-made DPO curve is highest before its end: said as an observation on the means, never as a finding.
    assert len(turned) == 1 and "highest mean gold gain at epoch 2 of" in turned[0]
    assert not re.search(r"peak|fell|fall|turn", turned[0])
    sr.write_training_plot(pilot, design, tmp_path / "curves.png")
    assert (tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG"


def test_a_matched_kl_claim_compares_gold_gains_at_the_largest_kl_both_arms_reached_in_one_unit():
    """Per seed: KL* = the smaller of the two arms' largest KL; each gain is read off its curve through the SFT
    policy's (0, 0) and its checkpoints, linearly; the claim's value is the difference (hand-computed here)."""
    from squarechipo.reproduce.study.claims import claim_values, gain_at_kl
    from squarechipo.reproduce.study.design import Claim, StudyDesign

    epochs = (1, 2, 4, 8, 16)
    dpo = _cell(
        "clean_epsinf_dpo", 0, dict(zip(epochs, [0.2, 0.4, 0.3, 0.0, -0.2])), dict(zip(epochs, [1, 2, 4, 8, 16]))
    )
    chipo = _cell("clean_epsinf_chipo", 0, dict(zip(epochs, [0.1, 0.25, 0.35, 0.4, 0.45])),
                  dict(zip(epochs, [0.5, 1.0, 1.5, 2.0, 3.0])))  # fmt: skip
    claim = Claim("χPO ≥ DPO at matched KL", "clean_epsinf_chipo", "clean_epsinf_dpo", "gold_gain", "matched_kl")
    # KL* = min(16, 3) = 3: DPO between (2, 0.4) and (4, 0.3) gives 0.35; χPO's last point gives 0.45.
    assert claim_values([dpo, chipo], claim) == pytest.approx({0: 0.45 - 0.35})
    assert gain_at_kl(dpo, 0.5) == pytest.approx(0.1)  # between the SFT policy (0, 0) and epoch 1 (1, 0.2)
    with pytest.raises(ValueError, match="gold_gain"):
        Claim("wins at matched KL", "clean_epsinf_chipo", "clean_epsinf_dpo", "expected_win", "matched_kl")
    arms = (StudyDesign().main_arms[0].key, StudyDesign().main_arms[1].key)
    mixed = (Claim("a", *arms, "expected_win"), Claim("b", *arms, "gold_gain"))
    with pytest.raises(ValueError, match=r"claims mix win-rate and gain metrics \(\['expected_win', 'gold_gain'\]\)"):
        StudyDesign(claims=mixed)
    assert StudyDesign(claims=mixed[1:]).effect_unit == "r*"


def test_an_amendment_changes_only_what_the_main_run_spends_and_only_before_the_main_run(tmp_path):
    """A plan is amended with a reason, on the same pilot records, in the fields that do not change what the pilot
    measured, before any main cell; the first plan stays in the file and the report names what it replaced."""
    from dataclasses import replace

    import yaml

    from squarechipo.reproduce.cli import main as reproduce_main
    from squarechipo.reproduce.study import report as sr
    from squarechipo.reproduce.study.design import load_design
    from squarechipo.reproduce.study.power import amend, analyse_pilot, check_preregistration, plan_main, preregister

    design = load_design(str(ROOT / "recipes" / "studies" / "privacy_cost.yaml"))
    pilot = [
        _cell(arm.key, seed, {1.0: 1.0 - 0.2 * i + 0.1 * ((seed + i) % 3)})
        for seed in design.pilot_seeds
        for i, arm in enumerate(design.pilot_arms)
    ]
    first = plan_main(design, analyse_pilot(pilot, design), seed_minutes=1.0)
    preregister(tmp_path, design, analyse_pilot(pilot, design), first)
    narrower = replace(design, main_arms=design.pilot_arms, claims=design.claims[:2], budget_hours=5.0)
    with pytest.raises(ValueError, match="differ"):
        check_preregistration(tmp_path, narrower)
    with pytest.raises(ValueError, match="--reason"):
        amend(tmp_path, narrower, pilot, "  ")
    with pytest.raises(ValueError, match=r"\['train_rows'\]"):
        amend(tmp_path, replace(narrower, train_rows=256), pilot, "more rows")
    reason = "the first plan's seeds decide nothing"
    for record in pilot:  # the CLI reads the committed pilot records
        (tmp_path / "pilot").mkdir(exist_ok=True)
        (tmp_path / "pilot" / f"{record['arm']}_seed{record['seed']}.json").write_text(json.dumps(record))
    amended = tmp_path / "privacy_cost.yaml"
    amended.write_text(yaml.safe_dump(narrower.to_dict(), allow_unicode=True))
    cli = ["study", "amend", "--design", str(amended), "--results", str(tmp_path), "--out", str(tmp_path / "out")]
    reproduce_main([*cli, "--reason", reason])
    in_force = json.loads((tmp_path / "preregistration.json").read_text())["amendments"][-1]
    assert in_force["plan"] == plan_main(narrower, analyse_pilot(pilot, narrower), seed_minutes=1.0) != first
    assert check_preregistration(tmp_path, narrower)["plan"] == in_force["plan"]
    with pytest.raises(ValueError, match="differ"):
        check_preregistration(tmp_path, design)  # the first design is no longer in force
    stored = json.loads((tmp_path / "preregistration.json").read_text())
    assert stored["plan"] == first and stored["amendments"][0]["changed"] == ["budget_hours", "claims", "main_arms"]
    text = sr.markdown(sr.study_summary(pilot, narrower, check_preregistration(tmp_path, narrower)), narrower)
    assert reason in text and f"{len(first['seeds'])} seeds x {len(first['arms'])} arms" in text
    (tmp_path / "main").mkdir()
    (tmp_path / "main" / "clean_epsinf_square_chipo_seed0.json").write_text("{}")
    with pytest.raises(ValueError, match="main cells"):
        amend(tmp_path, replace(narrower, budget_hours=6.0), pilot, "more budget")


def test_the_share_kept_is_tabulated_at_every_epsilon_beside_the_labels_clean_equivalent(tmp_path):
    from squarechipo.privacy.mechanisms.measurements import LabelPipeline
    from squarechipo.reproduce.study import report as sr
    from squarechipo.reproduce.study.design import load_design

    design = load_design(str(ROOT / "recipes" / "studies" / "privacy_cost.yaml"))
    gains = {"clean_epsinf_square_chipo": 1.0, "clean_epsinf_dpo": 1.2, "ctl_eps1_square_chipo": 0.5}
    gains |= {"ctl_eps4_square_chipo": 0.8, "ctl_eps1_rdpo": 0.3}
    records = [
        {"arm": arm, "seed": seed, "summary": {"gold_gain": {"mean": gain * (1 + 0.1 * seed)}}}
        for arm, gain in gains.items()
        for seed in range(3)
    ]
    rows = sr.headline(records, design)
    assert [(r["method"], r["epsilon"]) for r in rows] == [("Square-χPO", "1"), ("Square-χPO", "4"), ("rDPO", "1")]
    assert rows[0]["ratio"] == pytest.approx(0.5) and rows[2]["ratio"] == pytest.approx(0.3 / 1.2)  # rDPO: DPO clean
    wrong = LabelPipeline(4.0, 0.1, "flip", "ctl").expected_flip_rate()
    assert rows[1]["wrong_label_rate"] == wrong and rows[1]["clean_equivalent_share"] == (1 - 2 * wrong) ** 2
    sr.write_privacy_plot(rows, tmp_path / "cost.png")
    assert (tmp_path / "cost.png").read_bytes()[:4] == b"\x89PNG"
    # Each study has its own README block; the first study keeps its markers.
    readme = tmp_path / "README.md"
    begin, end = sr.readme_markers("privacy_cost")
    readme.write_text(f"{sr.README_BEGIN}\nfirst\n{sr.README_END}\n{begin}\nold\n{end}\n")
    sr.update_readme(readme, "new", "privacy_cost")
    assert readme.read_text() == f"{sr.README_BEGIN}\nfirst\n{sr.README_END}\n{begin}\nnew\n{end}\n"


def test_a_study_shares_a_set_up_on_its_first_prompts_only_in_whole_generation_batches(tmp_path):
    """Sampling batch b is seeded seed + b: the first 64 prompts of a 128-prompt set-up, in batches of 64, are paired
    with its SFT samples, and the SFT record is cut to them; 48 prompts (part of a batch) or another sampling size
    are refused, naming the fields."""
    from squarechipo.reproduce.study.shared_setup import check_setup, first_prompts, write_setup

    fields = {"test_prompts": 128, "generation_batch_size": 64, "samples_per_prompt": 2}
    write_setup(tmp_path, {"digests": {"sft": "a"}, "design": fields})
    check_setup(tmp_path, {"sft": "a"}, {**fields, "test_prompts": 64})
    for changed, named in (({"test_prompts": 48}, "test_prompts"), ({"samples_per_prompt": 1}, "samples_per_prompt")):
        with pytest.raises(ValueError, match=rf"the set-up was made with other values of \['{named}'\]"):
            check_setup(tmp_path, {"sft": "a"}, {**fields, **changed})
    record = {"record": {"reward": [[1, 2, 3, 4]] * 2, "examples": ["a", "b"]}, "constants": {"pool": [[5, 6, 7, 8]]}}
    cut = first_prompts(record, 2)
    assert cut["record"] == {"reward": [[1, 2]] * 2, "examples": ["a", "b"]} and cut["constants"] == {"pool": [[5, 6]]}


@pytest.mark.parametrize(
    "name",
    ["study", "privacy_cost", "overoptimisation", "rows_needed", "overoptimisation_noisy", "overoptimisation_beta"],
)
def test_the_readme_blocks_are_the_reports_of_the_committed_records(name, tmp_path, capsys):
    """docs/study.md's `study report --readme docs/results.md`, run on a copy of the committed records: the block in
    docs/results.md is exactly what the command writes, so no figure in it was typed by hand or left stale. The first
    study runs the default design, pre-registered before generation_batch_size existed (a field added later counts at
    its default)."""
    from squarechipo.reproduce.cli import main
    from squarechipo.reproduce.study.report import readme_markers

    results = tmp_path / "results" / name
    shutil.copytree(ROOT / "results" / name, results, ignore=shutil.ignore_patterns("*.png", "setup"))
    readme = tmp_path / "docs" / "results.md"
    readme.parent.mkdir()
    begin, end = readme_markers("cpu" if name == "study" else name)  # the first study's design is named cpu
    committed = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    readme.write_text(begin + "\nstale\n" + end + "\n", encoding="utf-8")
    design = [] if name == "study" else ["--design", str(ROOT / "recipes" / "studies" / f"{name}.yaml")]
    main(
        [
            "study",
            "report",
            *design,
            "--results",
            str(results),
            "--out",
            str(tmp_path / "out"),
            "--readme",
            str(readme),
        ]
    )
    capsys.readouterr()
    block = readme.read_text(encoding="utf-8")
    assert "stale" not in block and block.strip() in committed
    assert (results / "report.md").read_text() == (ROOT / "results" / name / "report.md").read_text()
    # summary.json to 1e-9 relative: its unrounded floats move in the 13th digit with the numpy/scipy build (a
    # rows_needed bound did between numpy 2.3 and 2.4); every figure a reader sees (the block, report.md) is exact.
    written = json.loads((results / "summary.json").read_text())
    assert _close(written, json.loads((ROOT / "results" / name / "summary.json").read_text()))


def _close(a, b) -> bool:
    """JSON values equal, floats to 1e-9 relative."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    numbers = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, b))
    if numbers and (isinstance(a, float) or isinstance(b, float)):
        return a == pytest.approx(b, rel=1e-9, abs=1e-12, nan_ok=True)
    return a == b


def test_arms_with_their_own_rows_and_beta_have_keys_releases_and_reuse_of_their_own(tmp_path):
    """An arm may train on more rows (nested on the design's) or at another β: its key, label and release say so,
    and a cell recorded by the study it shares a set-up with is reused only for the same arm and seed."""
    import json

    from squarechipo.reproduce.study.design import Arm, StudyDesign
    from squarechipo.reproduce.study.runner import Study

    base, more = Arm("dpo", "CTL", 1.0), Arm("dpo", "CTL", 1.0, rows=512, beta=0.02)
    assert (base.key, more.key) == ("ctl_eps1_dpo", "ctl_eps1_dpo_n512_beta0.02")
    assert more.label == "DPO, CTL ε=1, 512 rows, β=0.02"
    assert base.release(3, 0.1) != more.release(3, 0.1) == "ctl_eps1_alpha0.1_n512_seed3"
    source = tmp_path / "other"
    (source / "main").mkdir(parents=True)
    (source / "main" / "ctl_eps1_dpo_seed3.json").write_text(json.dumps({"arm": "ctl_eps1_dpo", "seed": 3, "x": 1}))
    design = StudyDesign(setup_from=str(tmp_path / "setup"), cells_from=str(source), main_arms=(base, more))
    (source / "preregistration.json").write_text(json.dumps({"design": design.to_dict()}))
    study = Study(design, tmp_path / "out", tmp_path / "results")
    reused = study.cell(base, 3, "main")
    assert reused["x"] == 1 and reused["reused_from"].endswith("ctl_eps1_dpo_seed3.json")
    assert json.loads((tmp_path / "results" / "main" / "ctl_eps1_dpo_seed3.json").read_text()) == reused
    assert study._reused(more, 3, "main") is None and study._reused(base, 4, "main") is None


def _reuse_source(tmp_path, design, records):
    import json

    source = tmp_path / "other"
    (source / "main").mkdir(parents=True)
    for name, record in records.items():
        (source / "main" / f"{name}.json").write_text(json.dumps(record))
    (source / "preregistration.json").write_text(json.dumps({"design": design.to_dict()}))
    return source


def test_a_cell_another_study_trained_at_this_arms_beta_is_reused_under_this_arms_name_and_evaluation(tmp_path):
    """The noisy over-optimisation study's Square-χPO arm had no β in its key (its plan chose 0.01): a study whose
    arm names β 0.01 reuses those cells, renamed, with the evaluation the other study's design measured them under;
    a cell trained at another β is another cell: not reused, so the study trains it (the main run of the β study
    stopped on it, seed 0 of DPO at β 0.05 against the noisy study's DPO at β 0.5). A record under this arm's own
    name that is another cell is refused."""
    from dataclasses import replace

    from squarechipo.reproduce.study.design import Arm, StudyDesign
    from squarechipo.reproduce.study.provenance import evaluation_record
    from squarechipo.reproduce.study.runner import Study

    arm, other_beta = Arm("square_chipo", "CTL", 1.0, beta=0.01), Arm("square_chipo", "CTL", 1.0, beta=0.05)
    design = StudyDesign(setup_from=str(tmp_path / "setup"), test_prompts=64, main_arms=(arm, other_beta))
    source = _reuse_source(
        tmp_path,
        replace(design, main_arms=(Arm("square_chipo", "CTL", 1.0),)),
        {f"ctl_eps1_square_chipo_seed{s}": {"arm": "ctl_eps1_square_chipo", "seed": s, "beta": 0.01} for s in (0, 1)},
    )
    study = Study(replace(design, cells_from=str(source)), tmp_path / "out", tmp_path / "results")
    reused = study.cell(arm, 1, "main")
    assert (reused["arm"], reused["cell"], reused["beta"]) == (arm.key, "ctl_eps1_square_chipo_beta0.01_seed1", 0.01)
    assert reused["evaluation"] == evaluation_record(design) and reused["evaluation"]["test_prompts"] == 64
    assert study.reusable(arm, 0) and not study.reusable(arm, 2)
    assert not study.reusable(other_beta, 0) and study._reused(other_beta, 0, "main") is None
    (source / "main" / "ctl_eps1_square_chipo_beta0.05_seed0.json").write_text(
        json.dumps({"arm": other_beta.key, "seed": 0, "beta": 0.01})
    )
    with pytest.raises(ValueError, match="is not the record of ctl_eps1_square_chipo_beta0.05_seed0"):
        study.cell(other_beta, 0, "main")


@pytest.mark.parametrize(
    ("field", "value"),
    [("learning_rate", 5e-5), ("test_prompts", 64), ("epochs", 16.0), ("corruption_rate", 0.2), ("setup_from", None)],
)
def test_cells_of_a_study_that_trained_or_measured_otherwise_are_refused_naming_the_setting(tmp_path, field, value):
    """Reuse is sound only if the other study's cells trained and were measured as this study's would be."""
    from dataclasses import replace

    from squarechipo.reproduce.study.design import Arm, StudyDesign
    from squarechipo.reproduce.study.runner import Study

    arm = Arm("dpo", "CTL", 1.0)
    design = StudyDesign(setup_from=str(tmp_path / "setup"), main_arms=(arm,))
    source = _reuse_source(
        tmp_path, replace(design, **{field: value}), {"ctl_eps1_dpo_seed0": {"arm": arm.key, "seed": 0}}
    )
    study = Study(replace(design, cells_from=str(source)), tmp_path / "out", tmp_path / "results")
    named = "set-up" if field == "setup_from" else field
    with pytest.raises(ValueError, match=rf"cells_from .*differs from .* in \['{named}'\]"):
        study.cell(arm, 0, "main")
    assert not (tmp_path / "results" / "main").exists()
    (source / "preregistration.json").unlink()  # a folder that shows nothing is not trusted either
    with pytest.raises(ValueError, match=r"cells_from .*holds no preregistration\.json"):
        study.cell(arm, 0, "main")


def test_a_pilot_gate_that_is_not_cleared_stops_the_main_run_before_any_cell(tmp_path):
    """The gate is fixed in the design before the pilot: DPO at the smaller β must reach 40 nats of KL, or the
    study ends with its pilot."""
    from squarechipo.reproduce.study.cli import main_run
    from squarechipo.reproduce.study.design import Arm, Claim, Gate, StudyDesign
    from squarechipo.reproduce.study.power import analyse_pilot, plan_main, preregister
    from squarechipo.reproduce.study.runner import Study

    small, large = Arm("dpo", "CTL", 1.0, beta=0.025), Arm("dpo", "CTL", 1.0, beta=0.05)
    with pytest.raises(ValueError, match="pilot_gate names arm 'ctl_eps1_dpo'"):
        StudyDesign(pilot_arms=(small,), pilot_gate=Gate("ctl_eps1_dpo", "kl", 40.0))
    with pytest.raises(ValueError, match=r"pilot_gate.metric must be one of \['expected_win'"):
        Gate(small.key, "KL", 40.0)
    with pytest.raises(ValueError, match="pilot_gate.at_least must be a number"):
        Gate(small.key, "kl", "40 nats")
    with pytest.raises(ValueError, match=r"pilot_gate: unknown fields \['atleast'\]"):
        StudyDesign.from_dict({"pilot_arms": [small], "pilot_gate": {"arm": small.key, "atleast": 40}})
    claim = Claim("small below large", large.key, small.key, metric="gold_gain")

    def record(arm, seed, kl, gain):
        summary = {"kl": {"mean": kl}, "gold_gain": {"mean": gain}, "expected_win": {"mean": 0.5}}
        return {"arm": arm.key, "seed": seed, "method": "dpo", "setting": "CTL", "beta": arm.beta,
                "summary": summary, "train_seconds": 60, "eval_seconds": 60}  # fmt: skip

    for kls, cleared in (((45.0, 41.0), True), ((45.0, 30.0), False)):
        design = StudyDesign(
            pilot_arms=(small, large), main_arms=(small, large), claims=(claim,), effect_points=0.25,
            pilot_seeds=(0, 1), pilot_gate=Gate(small.key, "kl", 40.0),
        )  # fmt: skip
        pilot = [record(small, s, kl, 0.1 * s) for s, kl in enumerate(kls)]
        pilot += [record(large, s, 20.0, 0.3 + 0.05 * s) for s in (0, 1)]
        analysis = analyse_pilot(pilot, design)
        assert analysis["gate"]["mean"] == pytest.approx(sum(kls) / 2) and analysis["gate"]["passed"] is cleared
        results = tmp_path / str(cleared)
        preregister(results, design, analysis, plan_main(design, analysis))
        if not cleared:
            with pytest.raises(
                ValueError, match="pilot gate was not cleared: ctl_eps1_dpo_beta0.025 reached a mean kl"
            ):
                main_run(Study(design, tmp_path / "out", results))
            assert not (results / "main").exists()


def test_the_plan_counts_reused_cells_as_free():
    """Seeds a budget buys: only the cells the main run trains cost time."""
    from squarechipo.reproduce.study.design import Arm, StudyDesign
    from squarechipo.reproduce.study.power import plan_main

    trained, reused = Arm("dpo", "CTL", 1.0, beta=0.05), Arm("square_chipo", "CTL", 1.0, beta=0.01)
    design = StudyDesign(main_arms=(trained, reused), budget_hours=2.0)
    analysis = {"seeds_needed": 10, "cell_minutes": 20.0, "sd_for_power": 0.3, "differences": {"x": {"sd": 0.3}}}
    every = plan_main(design, analysis, seed_minutes=0.0)
    free = plan_main(design, analysis, seed_minutes=0.0, reused=lambda arm, seed: arm == reused)
    assert (len(every["seeds"]), len(free["seeds"])) == (3, 6) and free["expected_hours"] == 2.0


def test_a_shared_set_ups_labels_are_taken_only_when_they_hold_the_rows_the_design_asks_for(tmp_path):
    """A study sharing another's set-up takes its committed labels for a seed only if they are that seed's draw
    for this design: a set-up study of 128 rows commits 128 rows under the name a 32-row study looks for."""
    import json

    from squarechipo.reproduce.study.design import StudyDesign
    from squarechipo.reproduce.study.runner import Study

    shared = tmp_path / "setup" / "labels"
    shared.mkdir(parents=True)
    for seed, rows in ((0, 128), (1, 32)):
        kept = {"rows": list(range(rows)), "keep": [True] * rows, "summary": {"source": "bt", "rows": rows}}
        (shared / f"seed{seed}.json").write_text(json.dumps(kept))
    results = tmp_path / "results"
    study = Study(StudyDesign(setup_from=str(tmp_path / "setup"), train_rows=32), tmp_path / "out", results)
    assert study._committed_labels(0, None) == results / "labels" / "seed0.json"  # 128 rows: not this draw
    assert study._committed_labels(1, None) == shared / "seed1.json"
    other_source = Study(
        StudyDesign(setup_from=str(tmp_path / "setup"), train_rows=32, label_source="argmax"),
        tmp_path / "out",
        results,
    )
    assert other_source._committed_labels(1, None) == results / "labels" / "seed1.json"


def test_a_target_kl_chooses_each_methods_beta_from_the_pilot_by_kl_alone():
    """The rule on KL, fixed before the pilot: each main arm takes the pilot β of its method and labels whose final KL
    is closest to target_kl on a log scale; the pilot's differences are then those of the chosen β."""
    from squarechipo.reproduce.study.design import load_design
    from squarechipo.reproduce.study.power import _at_chosen_betas, choose_betas, final_kl

    design = load_design(str(ROOT / "recipes" / "studies" / "overoptimisation_noisy.yaml"))

    def record(arm, seed, kl, gain):
        method, beta = arm.method, arm.beta
        return {"arm": arm.key, "seed": seed, "method": method, "setting": "CTL", "beta": beta,
                "summary": {"kl": {"mean": kl}, "gold_gain": {"mean": gain}}}  # fmt: skip

    kls = {"ctl_eps1_dpo_beta0.1": 20.0, "ctl_eps1_dpo_beta0.5": 3.0, "ctl_eps1_square_chipo_beta0.01": 6.0,
           "ctl_eps1_square_chipo_beta0.05": 2.0}  # fmt: skip
    records = [record(a, s, kls[a.key] + s, 0.1 * s) for a in design.pilot_arms for s in (0, 1)]
    betas = choose_betas(design, final_kl(records))
    # DPO: 3.5 nats is nearer 4 than 20.5; Square-χPO: |log(2.5/4)| = 0.47 is below |log(6.5/4)| = 0.49.
    assert betas == {"ctl_eps1_dpo": 0.5, "ctl_eps1_square_chipo": 0.05}
    chosen = _at_chosen_betas(records, design, betas)
    assert sorted({r["arm"] for r in chosen}) == ["ctl_eps1_dpo", "ctl_eps1_square_chipo"] and len(chosen) == 4


def test_rows_to_the_clean_gain_are_read_off_the_line_through_the_shares_against_log2_rows(tmp_path):
    """The rows-needed headline: each method's share at 128, 256 and 512 private rows, DPO's shares taken against
    Square-χPO's clean arm when DPO's own was cut, and the rows at which the least-squares line through the shares
    against log2 n reaches 1 (Fieller's interval), beside the clean rows × c(ε)² and × 1/(1 − 2ρ)²."""
    from squarechipo.privacy.mechanisms.calibration import debias_factor
    from squarechipo.reproduce.study.design import load_design
    from squarechipo.reproduce.study.headline import headline, headline_lines, rows_to_clean_gain, write_rows_plot

    design = load_design(str(ROOT / "recipes" / "studies" / "rows_needed.yaml"))
    noise = [0.02, -0.03, 0.01, 0.04, -0.02]
    shares = {
        "clean_epsinf_square_chipo": 1.0,
        "ctl_eps1_square_chipo": 0.5, "ctl_eps1_square_chipo_n256": 0.9, "ctl_eps1_square_chipo_n512": 1.1,
        "ctl_eps1_dpo": 0.25, "ctl_eps1_dpo_n256": 0.5, "ctl_eps1_dpo_n512": 0.75,
    }  # fmt: skip
    records = [
        {"arm": arm, "seed": seed, "summary": {"gold_gain": {"mean": (share + noise[seed] * (1 + i)) * 2.0}}}
        for i, (arm, share) in enumerate(shares.items())
        for seed in range(5)
    ]
    summary = {"headline": headline(records, design), "rows_needed": rows_to_clean_gain(records, design)}
    by_arm = {h["arm"]: h for h in summary["headline"]}
    assert by_arm["ctl_eps1_dpo_n512"]["reference"] == "clean_epsinf_square_chipo"  # DPO's clean arm was cut
    assert by_arm["ctl_eps1_dpo_n256"]["rows"] == 256 and by_arm["ctl_eps1_dpo"]["rows"] == 128
    needed = {r["method"]: r for r in summary["rows_needed"]}
    for method, prefix in (("Square-χPO", "ctl_eps1_square_chipo"), ("DPO", "ctl_eps1_dpo")):
        # The line through the shares of the mean gains, fitted independently.
        ratios = [by_arm[arm]["ratio"] for arm in (prefix, f"{prefix}_n256", f"{prefix}_n512")]
        slope, intercept = np.polyfit(np.log2([128, 256, 512]), ratios, 1)
        assert needed[method]["rows"] == pytest.approx(2 ** ((1 - intercept) / slope), rel=1e-9)
        assert needed[method]["low"] < needed[method]["rows"] < needed[method]["high"]
        # Each bound inverts the paired t-test of each seed's shortfall from the clean gain minus (x − x̄) times its
        # slope against log2 n (Fieller): there the test sits exactly at Student's 97.5% point, 4 df.
        x = np.log2([128, 256, 512])
        gains = {r["seed"]: [] for r in records}
        for arm in (prefix, f"{prefix}_n256", f"{prefix}_n512"):
            for r in (r for r in records if r["arm"] == arm):
                gains[r["seed"]].append(r["summary"]["gold_gain"]["mean"])
        clean = {
            r["seed"]: r["summary"]["gold_gain"]["mean"] for r in records if r["arm"] == "clean_epsinf_square_chipo"
        }
        slopes = np.array([np.polyfit(x, gains[s], 1)[0] for s in sorted(gains)])
        shortfalls = np.array([clean[s] - np.mean(gains[s]) for s in sorted(gains)])
        for bound in (needed[method]["low"], needed[method]["high"]):
            d = shortfalls - (np.log2(bound) - x.mean()) * slopes
            t = d.mean() / (d.std(ddof=1) / np.sqrt(d.size))
            assert abs(t) == pytest.approx(stats.t.ppf(0.975, d.size - 1), rel=1e-6)
    assert 256 < needed["Square-χPO"]["rows"] < 512 and needed["DPO"]["rows"] == pytest.approx(1024, rel=0.1)
    assert needed["DPO"]["c_squared_rows"] == pytest.approx(128 * debias_factor(1.0) ** 2)
    text = "\n".join(headline_lines(summary, design))
    assert "| DPO | 1 | 128 | beyond 512 (the line reaches it at " in text
    assert "DPO's clean reference is clean_epsinf_square_chipo" in text
    assert re.search(r"\| Square-χPO \| 1 \| 512 \| 1\d\d% \|", text)  # the share table has a rows column
    write_rows_plot(summary["headline"], summary["rows_needed"], tmp_path / "rows.png")
    assert (tmp_path / "rows.png").read_bytes()[:4] == b"\x89PNG"


def test_a_pre_registered_reading_is_shown_only_if_its_claims_hold_and_none_it_forbids_is_reversed():
    """The noisy over-optimisation design's reading, "Square-χPO over-optimises less than DPO": shown only if the
    drop_difference claim holds and the matched-KL claim is not reversed; the report names what stands in the way.
    A reading naming a claim the design lacks is refused, and the design round-trips through its record."""
    from dataclasses import replace

    from squarechipo.reproduce.study import report as sr
    from squarechipo.reproduce.study.design import Conclusion, StudyDesign, load_design

    design = load_design(str(ROOT / "recipes" / "studies" / "overoptimisation_noisy.yaml"))
    (reading,) = design.conclusions
    less, matched = reading.holds[0], reading.not_reversed[0]

    def rows(**verdicts):
        return [{"claim": c.name, "verdict": verdicts.get(c.name, "holds")} for c in design.claims]

    def shown(**verdicts):
        return [(c["shown"], c["because"]) for c in sr.conclusions(design, rows(**verdicts))]

    assert shown() == [(True, [])]
    assert shown(**{matched: "not decided at MDE 0.5 (gold gain (r*)) (α = 0.0125, Holm)"}) == [(True, [])]
    assert shown(**{matched: "reversed"}) == [(False, [f"{matched}: reversed"])]
    undecided = "not decided at MDE 0.9 (gold gain (r*)) (α = 0.0167, Holm)"
    assert shown(**{less: undecided}) == [(False, [f"{less}: {undecided}"])]
    assert shown(**{less: "reversed", matched: "reversed"}) == [(False, [f"{less}: reversed", f"{matched}: reversed"])]
    # The report says it in words; a design without readings has no such lines and no such field.
    summary = {"conclusions": sr.conclusions(design, rows(**{matched: "reversed"}))}
    assert sr._conclusion_lines(summary)[2] == f"- {reading.name}: **not shown** ({matched}: reversed)."
    assert sr._conclusion_lines({}) == []
    with pytest.raises(ValueError, match=r"names claims that are not in claims: \['no such claim'\]"):
        replace(design, conclusions=(Conclusion("x", holds=("no such claim",)),))
    with pytest.raises(ValueError, match="at least one claim that must hold"):
        Conclusion("x", not_reversed=(matched,))
    assert StudyDesign.from_dict(design.to_dict()) == design


def test_a_drop_claims_reference_epoch_comes_from_its_own_arm_or_the_pilot_arm_of_its_method_and_beta():
    """The reference epoch (the pilot's peak before the last checkpoint) of a drop claim's arm: its own pilot arm's
    when the pilot ran it, otherwise the pilot arm with the same method and β (another label setting), never another
    β's or a clean arm's; an arm with no such pilot arm has none, and the next claim still gets its own."""
    from squarechipo.reproduce.study.claims import reference_epochs
    from squarechipo.reproduce.study.design import Claim

    peaks = {"clean_epsinf_dpo": 2.0, "ctl_eps1_dpo_beta0.05": 4.0, "ctl_eps1_dpo_beta0.025": 8.0, "ctl_eps1_dpo": 6.0}
    records = [
        _cell(arm, seed, {e: (1.0 if e == peak else 0.1 * e / 16) for e in (2.0, 4.0, 6.0, 8.0, 16.0)})
        for arm, peak in peaks.items()
        for seed in (0, 1)
    ]
    claims = (
        Claim("chipo falls", first="ltc_eps1_chipo", kind="drop", metric="gold_gain"),  # no pilot arm of its method
        Claim("β 0.025 falls (LTC)", first="ltc_eps1_dpo_beta0.025", kind="drop", metric="gold_gain"),
        Claim("DPO falls", first="ctl_eps1_dpo", kind="drop", metric="gold_gain"),
    )
    assert reference_epochs(records, claims, (2.0, 4.0, 6.0, 8.0, 16.0)) == {
        "ltc_eps1_dpo_beta0.025": 8.0,
        "ctl_eps1_dpo": 6.0,
    }


def test_a_drop_difference_claim_whose_first_arm_has_no_pilot_arm_still_takes_its_seconds_reference():
    from squarechipo.reproduce.study.claims import reference_epochs
    from squarechipo.reproduce.study.design import Claim

    records = [_cell("ctl_eps1_dpo", s, {2.0: 0.1, 4.0: 1.0, 8.0: 0.2}) for s in (0, 1)]
    claim = Claim("DPO falls more", first="ctl_eps1_chipo", second="ctl_eps1_dpo", kind="drop_difference",
                  metric="gold_gain")  # fmt: skip
    assert reference_epochs(records, (claim,), (2.0, 4.0, 8.0)) == {"ctl_eps1_dpo": 4.0}


def test_a_secondary_reading_is_read_on_its_raw_p_outside_holm_and_decides_no_claim():
    """A pre-registered secondary reading (the fall without degenerate samples) is paired by seed like a claim, read
    at α on its raw p, and changes neither the claims' Holm correction nor their verdicts."""
    from dataclasses import replace

    from squarechipo.reproduce.study import report as sr
    from squarechipo.reproduce.study.design import Arm, Claim, StudyDesign
    from squarechipo.stats import paired_test

    arm = Arm("dpo", "CTL", 1.0, beta=0.025)
    falls = Claim("DPO falls", arm.key, kind="drop", metric="gold_gain")
    clean = Claim("DPO falls without degenerate samples", arm.key, kind="drop", metric="gold_gain_clean")
    design = StudyDesign(main_arms=(arm,), claims=(falls,), secondary=(clean,), epochs=32, checkpoints=(12, 32))
    records = []
    for seed, (top, end, clean_end) in enumerate([(0.9, 0.3, 0.5), (0.8, 0.4, 0.9), (1.0, 0.2, 0.6)]):
        cell = _cell(arm.key, seed, {12: top, 32: end})
        for checkpoint, value in zip(cell["checkpoints"], (top, clean_end)):
            checkpoint["summary"]["gold_gain_clean"] = {**checkpoint["summary"]["gold_gain"], "mean": value}
        records.append(cell)
    prereg = {"plan": {"arms": [arm.key], "seeds": [0, 1, 2], "reference_epochs": {arm.key: 12.0}}}
    summary = sr.study_summary(records, design, prereg)
    (reading,) = summary["secondary"]
    expected = paired_test([0.9 - 0.5, 0.8 - 0.9, 1.0 - 0.6])
    assert reading["p_value"] == pytest.approx(expected.p_value) and reading["mean"] == pytest.approx(expected.mean)
    alone = sr.study_summary(records, replace(design, secondary=None), prereg)
    assert summary["claims"] == alone["claims"] and "secondary" not in alone  # Holm over the claims alone
    for cell in records:
        cell["summary"]["degenerate_rate"] = 0.25
    arms = sr._arm_table(sr.study_summary(records, design, prereg))
    assert arms[0].endswith("| degenerate (%) | gold gain without degenerate (r*) |") and "| 25.0 | 0.67 [" in arms[2]
    table = sr._secondary_table(summary)
    assert "| p (raw) |" in table[2] and table[4].startswith("| DPO falls without degenerate samples | gold gain")
    assert StudyDesign.from_dict(design.to_dict()) == design
    with pytest.raises(ValueError, match=r"secondary readings name arms that are not in main_arms: \['x'\]"):
        replace(design, secondary=(Claim("x falls", "x", kind="drop", metric="gold_gain"),))


def test_more_rows_draw_and_commit_the_designs_own_rows_first_when_none_are_committed(
    tmp_path, tokenizer, finance_splits
):
    """An arm of more rows nests on the design's rows; on a new machine with neither committed (a cell of the design's
    rows recorded elsewhere), the design's rows are drawn and committed first, and the larger draw starts with them."""
    import json

    from squarechipo.reproduce.study.design import StudyDesign
    from squarechipo.reproduce.study.runner import _PREFERENCE, Study
    from tests.helpers.models import make_tiny_classifier, make_tiny_model

    data, out = tmp_path / "data", tmp_path / "out"
    finance_splits[_PREFERENCE].save_to_disk(str(data / _PREFERENCE))
    for folder, model in (("sft", make_tiny_model(tokenizer)), ("gold_judge", make_tiny_classifier(tokenizer))):
        model.save_pretrained(out / folder)
        tokenizer.save_pretrained(out / folder)
    design = StudyDesign(data_dir=str(data), train_rows=4, sft_lora_r=16, test_prompts=2, eval_dtype="float32")
    results = tmp_path / "results"
    Study(design, out, results).labels(7, 8)
    base = json.loads((results / "labels" / "seed7.json").read_text())
    more = json.loads((results / "labels" / "seed7_n8.json").read_text())
    assert len(base["rows"]) == 4 and more["rows"][:4] == base["rows"] and more["keep"][:4] == base["keep"]
    assert len(set(more["rows"])) == 8 and more["summary"]["nested_on"] == 4


@pytest.mark.parametrize(
    "bf16, eval_dtype, named",
    [
        (True, "float32", "bf16: true"),
        (False, "bfloat16", "eval_dtype: bfloat16"),
        (True, "bfloat16", "bf16: true and eval_dtype: bfloat16"),
        (False, "float32", None),
    ],
)
def test_each_field_that_asks_for_bf16_is_refused_without_bf16_kernels(bf16, eval_dtype, named):
    """Every field of a design that asks for bf16 (training's bf16, the evaluation's eval_dtype), alone or together,
    is refused on a machine without bf16 kernels, naming the fields; with the kernels, or allowed, nothing is."""
    from squarechipo.reproduce.study.design import StudyDesign, refuse_emulated_bf16

    design = StudyDesign(name="fields", bf16=bf16, eval_dtype=eval_dtype)
    refuse_emulated_bf16(design, bf16_kernels=True)
    refuse_emulated_bf16(design, allowed=True, bf16_kernels=False)
    if named is None:
        refuse_emulated_bf16(design, bf16_kernels=False)
        return
    with pytest.raises(
        ValueError, match=rf"study 'fields': its design sets {named}, and this CPU has no bf16 kernels"
    ):
        refuse_emulated_bf16(design, bf16_kernels=False)


def test_a_bf16_design_is_refused_before_anything_trains_on_a_cpu_without_bf16_kernels(
    tokenizer, finance_splits, tmp_path
):
    """A bf16 study on an AVX2-only CPU took minutes a step and would round unlike its other cells: refused before
    the SFT policy or a cell trains, unless the caller allows it; a float32 design is not refused."""
    from squarechipo.models.runtime import accelerator_available, cpu_runs_bf16_natively
    from squarechipo.reproduce.cli import main
    from squarechipo.reproduce.study.design import load_design, refuse_emulated_bf16

    out, results = tmp_path / "out", tmp_path / "results"
    bf16 = load_design(_tiny_study(tmp_path, tokenizer, finance_splits, bf16=True))
    refuse_emulated_bf16(bf16, allowed=True)
    refuse_emulated_bf16(load_design(_tiny_study(tmp_path, tokenizer, finance_splits)))
    if accelerator_available() or cpu_runs_bf16_natively():  # the kernels exist: nothing to refuse
        refuse_emulated_bf16(bf16)
        return
    design = _tiny_study(tmp_path, tokenizer, finance_splits, bf16=True)
    refused = r"sets bf16: true, and this CPU has no bf16 kernels.*--allow-emulated-bf16"
    with pytest.raises(ValueError, match=refused):
        main(["study", "pilot", "--design", str(design), "--out", str(out), "--results", str(results)])
    assert not (out / "sft_adapter").exists() and not (results / "setup").exists()  # nothing trained


def test_a_study_that_cannot_decide_is_closed_as_a_record_and_reopened_only_on_request(tmp_path):
    """`study close` on the committed pilot of the over-optimisation study: closure.json holds what deciding would
    take, recomputed here from the records with scipy (the pre-registered rule: the 80% upper limit of the SD); the
    closed study's main run is refused without --reopen; a closed or already-run study cannot be closed again."""
    import math
    import shutil

    from scipy import stats as sps

    from squarechipo.reproduce.cli import main

    design = ROOT / "recipes" / "studies" / "overoptimisation_decide.yaml"
    results = tmp_path / "results"
    shutil.copytree(ROOT / "results" / "overoptimisation_decide" / "pilot", results / "pilot")
    args = ["study", "close", "--design", str(design), "--results", str(results), "--out", str(tmp_path / "out")]
    with pytest.raises(ValueError, match="needs --reason"):
        main(args)
    main([*args, "--reason", "the machines cannot run it"])
    closure = json.loads((results / "closure.json").read_text())
    drops = {}
    for path in sorted((results / "pilot").glob("ctl_eps1_dpo_*.json")):
        record = json.loads(path.read_text())
        gain = {c["epoch"]: c["summary"]["gold_gain"]["mean"] for c in record["checkpoints"]}
        drops[record["seed"]] = gain[12] - gain[32]
    (claim,) = closure["claims"]
    values = [drops[s] for s in sorted(drops)]
    sd = float(np.std(values, ddof=1))
    upper = sd * math.sqrt((len(values) - 1) / sps.chi2.ppf(0.2, len(values) - 1))
    assert claim["pilot_values"] == pytest.approx(values) and claim["sd_upper80"] == pytest.approx(upper)

    def power_at(n, sd_):
        t = sps.t.ppf(0.975, n - 1)
        shift = 0.25 / (sd_ / math.sqrt(n))
        return sps.nct.sf(t, n - 1, shift) + sps.nct.cdf(-t, n - 1, shift)

    seeds = next(n for n in range(2, 1000) if power_at(n, upper) >= 0.8)
    assert claim["seeds_for_80pct_power"] == seeds
    assert claim["power_at_min_seeds"]["at_sd_upper80"] == pytest.approx(power_at(9, upper), abs=1e-6)
    assert closure["claims_not_sized"] == ["Square-χPO (128 rows) ends above DPO at β 0.025 (ε = 1, epoch 32)"]
    assert closure["pilot_cells"]["planned"] == 6 and len(closure["pilot_cells"]["committed"]) == 4
    import hashlib

    assert closure["pilot_cells"]["sha256"] == {  # the closure names the records it describes
        p.stem: hashlib.sha256(p.read_bytes()).hexdigest() for p in (results / "pilot").glob("*.json")
    }
    run = ["study", "main", "--design", str(design), "--results", str(results), "--out", str(tmp_path / "out")]
    with pytest.raises(ValueError, match=r"closure\.json: this study was closed as a pilot .*pass --reopen"):
        main(run)
    with pytest.raises(Exception) as past:  # reopened: the closure no longer stops it (the pilot's plan does)
        main([*run, "--reopen"])
    assert "closed as a pilot" not in str(past.value)
    with pytest.raises(ValueError, match="closed already"):
        main([*args, "--reason", "again"])
    (results / "closure.json").unlink()
    (results / "main").mkdir()
    (results / "main" / "a_cell.json").write_text("{}")
    with pytest.raises(ValueError, match="holds main cells"):
        main([*args, "--reason", "too late"])
