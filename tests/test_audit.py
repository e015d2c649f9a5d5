"""The privacy audit: Clopper–Pearson ε lower bounds on hand-made counts, every mechanism within its claim,
the planted broken mechanism caught, and the command's report."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import datasets
import numpy as np
import pytest
from scipy import stats

from squarechipo.audit.mechanisms import ALPHA, audit_case, epsilon_lower_bound, mechanism_cases
from tests.helpers.launch import launch

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


@pytest.mark.integration
def test_audit_command_writes_its_report(tmp_path):
    command = [sys.executable, "-m", "squarechipo.audit", "mechanisms", "--samples", "100000", "--out", str(tmp_path)]
    done = launch(command, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    records = json.loads((tmp_path / "mechanisms.json").read_text())
    assert len(records) == len(mechanism_cases())
    assert all(r["lower_bound"] <= r["claimed_epsilon"] for r in records if not r["planted_bug"])
    assert "| binary RR | 1 |" in (tmp_path / "mechanisms.md").read_text()


def test_canary_bound_is_the_logit_of_a_one_sided_clopper_pearson_bound():
    from squarechipo.audit.canaries import canary_epsilon_bound

    low = stats.beta.ppf(0.05, 80, 100 - 80 + 1)
    assert canary_epsilon_bound(80, 100) == pytest.approx(math.log(low / (1 - low)), rel=1e-9)
    assert canary_epsilon_bound(50, 100) == 0.0  # chance: no evidence of a leak
    edge = 0.05 ** (1 / 100)  # all right: the lower bound is α^(1/n)
    assert canary_epsilon_bound(100, 100) == pytest.approx(math.log(edge / (1 - edge)), rel=1e-9)
    assert canary_epsilon_bound(0, 0) == 0.0


def test_canaries_get_fair_coin_labels_and_guesses_are_scored_against_them(finance_splits):
    from squarechipo.audit.canaries import plant_canaries, score_guesses

    source = finance_splits["finance_preference_conversational"]["train"].select(range(200))
    rows, labels = plant_canaries(source, np.random.default_rng(0))
    swapped = np.array([c != o for c, o in zip(rows["chosen"], source["chosen"])])
    np.testing.assert_array_equal(swapped, labels.astype(bool))  # label 1 = the source's rejected is preferred
    assert abs(labels.mean() - 0.5) <= 4 * math.sqrt(0.25 / 200)  # a fair coin, within 4 standard errors
    assert rows["rejected"][int(np.argmax(labels))] == source["chosen"][int(np.argmax(labels))]
    # Score > 0 guesses label 0; 0 abstains.
    assert score_guesses(np.array([1.0, -2.0, 0.5, 0.0]), np.array([0, 1, 1, 0])) == (2, 3)


def test_random_word_canaries_keep_the_prompt_and_draw_both_responses_from_the_source_words(finance_splits):
    from squarechipo.audit.canaries import CANARY_WORDS, random_word_responses

    source = finance_splits["finance_preference_conversational"]["train"].select(range(50))
    rows = random_word_responses(source, np.random.default_rng(0))
    words = {w for column in ("chosen", "rejected") for r in source[column] for w in r[-1]["content"].lower().split()}
    assert rows["prompt"] == source["prompt"]
    texts = []
    for row in rows:
        for column in ("chosen", "rejected"):
            assert [m["role"] for m in row[column]] == ["assistant"]  # the dataset's own message format
            drawn = row[column][-1]["content"].split()
            assert len(drawn) == CANARY_WORDS and all(w.isalpha() and len(w) >= 3 for w in drawn)
            # Every drawn word occurs in the source answers (ignoring punctuation attached there).
            assert all(any(w in s for s in words) for w in drawn)
            texts.append(" ".join(drawn))
    assert len(set(texts)) == len(texts)  # 100 independent strings: no two alike
    again = random_word_responses(source, np.random.default_rng(0))
    assert again["chosen"] == rows["chosen"]  # seeded: an audit can be re-run on the same canaries
    plain = datasets.Dataset.from_dict({"prompt": ["q"], "chosen": ["hello there world"], "rejected": ["no"]})
    assert len(random_word_responses(plain, np.random.default_rng(0), words=2)[0]["chosen"].split()) == 2
    with pytest.raises(ValueError, match="fewer than 16"):
        random_word_responses(plain, np.random.default_rng(0))


def test_abstaining_guesses_keep_the_most_confident_and_the_bound_is_bonferroni_corrected():
    from squarechipo.audit.canaries import CanaryAudit, canary_epsilon_bound, guess_counts

    scores = np.array([0.1, -3.0, 2.0, -0.2, 0.0, 1.0, -0.5, 0.3, 4.0, -1.5])
    labels = np.array([1, 1, 0, 0, 0, 1, 1, 1, 0, 1])
    # |score| order: 4.0 (right), -3.0 (right), 2.0 (right), -1.5 (right), 1.0 (wrong), -0.5 (right), ...
    assert guess_counts(scores, labels, (0.1, 0.4, 0.5, 1.0)) == ((1, 1), (4, 4), (4, 5), (5, 9))
    audit = CanaryAudit(10, (1, 4, 5, 9), (1, 4, 4, 5), 0.5, 0.05)
    expected = tuple(canary_epsilon_bound(c, g, 0.05 / 4) for c, g in zip((1, 4, 4, 5), (1, 4, 5, 9)))
    assert audit.bounds() == expected and audit.lower_bound == max(expected)
    assert expected[1] == 0.0  # 4 of 4 is not enough at α/4: (0.0125)^(1/4) = 0.33 < ½
    # 20 of 20 at α/4: the bound is the logit of (α/4)^(1/20), above ε = 0.5, so the claim is refuted.
    edge = (0.05 / 4) ** (1 / 20)
    refuted = CanaryAudit(200, (20, 200), (20, 120), 0.5, 0.05 * 2 / 4)
    assert refuted.lower_bound == pytest.approx(math.log(edge / (1 - edge)), rel=1e-9)
    assert refuted.verdict.startswith("REFUTED")


@pytest.mark.integration
def test_training_audit_runs_end_to_end_with_the_sft_leak(tokenizer, finance_splits, tmp_path):
    """A real (tiny) run: canaries planted after the training rows, released through the config's pipeline,
    trained by recipes/train.py, guessed from the trained model. The leaky variant fine-tunes the starting model on
    the canaries' chosen responses first, and the run goes ahead only because the guard override is recorded."""
    import yaml

    from squarechipo.audit.canaries import CANARY_WORDS, canary_epsilon_bound
    from tests.helpers.models import make_tiny_model

    make_tiny_model(tokenizer, seed=0).save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    finance_splits["finance_preference_conversational"].save_to_disk(str(tmp_path / "data"))
    source_prompts = finance_splits["finance_preference_conversational"]["train"]["prompt"][16:28]
    config = {
        "model_name_or_path": str(tmp_path / "model"),
        "dataset_name": str(tmp_path / "data"),
        "max_train_samples": 16,
        "output_dir": str(tmp_path / "unused"),
        "method": "square_chipo",
        "max_steps": 2,
        "per_device_train_batch_size": 4,
        "max_length": 128,
        "learning_rate": 1.0e-3,
        "gradient_checkpointing": False,
        "label_epsilon": 0.5,
        "label_corruption_rate": 0.1,
        "label_public_columns": ["id", "category"],
    }
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump(config))
    # The honest run (no --leak) is docs/auditing.md's command, which tests/test_docs.py runs; a model with no
    # labelled ancestry records no exposure (tests/test_lineage.py).
    out = tmp_path / "audit-sft"
    # At confidence 1 - 1e-4 an honest run is refuted with at most that chance: the test cannot flake on it.
    command = [sys.executable, "-m", "squarechipo.audit", "training", "--config", str(path), "--canaries", "12"]
    command += ["--alpha", "1e-4", "--out", str(out), "--leak", "sft"]
    done = launch(command, cwd=ROOT, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((out / "training_audit.json").read_text())
    assert record["canaries"] == 12 and record["guesses"][-1] <= 12 and record["claimed_epsilon"] == 0.5
    assert record["alpha"] == 1e-4
    assert record["canary_text"] == "random"
    planted = datasets.load_from_disk(str(out / "data"))["train"]
    assert len(planted) == 16 + 12 and planted["prompt"][16:] == source_prompts  # the rows after the 16 used
    assert {len(r[-1]["content"].split()) for r in planted["chosen"][16:]} == {CANARY_WORDS}
    assert record["guesses"][0] == 2  # ⌈0.1 · 12⌉: the most confident guesses come first
    level = record["alpha"] / len(record["guesses"])
    bounds = [canary_epsilon_bound(c, g, level) for c, g in zip(record["correct"], record["guesses"])]
    assert record["bounds"] == bounds and record["lower_bound"] == max(bounds)
    report = (out / "training_audit.md").read_text()
    assert f"bound {max(bounds):.3f} at confidence 0.9999" in report
    assert f"| 2 | {record['correct'][0]} |" in report
    privacy = json.loads((out / "model" / "squarechipo_privacy.json").read_text())
    assert privacy["ledger"]["releases"][0]["n_rows"] == 16 + 12  # the canaries were released with the rows
    # The leaky start is seen by the lineage guard and recorded as an exposure (the audit overrides the guard).
    exposures = {(e["status"], Path(e["model"]).name) for e in privacy["label_exposure"]}
    assert exposures == {("prompt_overlap", "leaky_sft")}
