"""The win-rate pipeline and eval/judge.py end to end, on tiny saved models (real classes and tokenizer)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from squarechipo.evaluation.pipeline import GenerationSettings, evaluate_win_rate
from squarechipo.judge.local import TransformersJudge
from squarechipo.judge.stats import pair_outcome, soft_outcome
from tests.helpers.launch import launch
from tests.helpers.models import make_tiny_model

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def models(tmp_path_factory, tokenizer):
    folder = tmp_path_factory.mktemp("models")
    for name, seed in (("policy", 1), ("baseline", 2), ("judge", 3)):
        make_tiny_model(tokenizer, seed=seed).save_pretrained(folder / name)
        tokenizer.save_pretrained(folder / name)
    return folder


def test_pipeline_writes_every_output(models, finance_splits, tmp_path):
    test = finance_splits["finance_preference_conversational"]["test"]
    judge = TransformersJudge(str(models / "judge"))
    result = evaluate_win_rate(
        str(models / "policy"),
        str(models / "baseline"),
        test,
        judge,
        tmp_path,
        # Sampling, so the two random models write different, non-empty responses and every pair is judged.
        generation=GenerationSettings(max_new_tokens=8, batch_size=4, seed=0, do_sample=True),
        max_prompts=6,
        calibration_pairs=4,
        label={"setting": "CTL", "method": "square_chipo"},
        labels_public=True,  # the generator's test pairs are gold pairs
    )
    rows = [json.loads(line) for line in (tmp_path / "judgments.jsonl").read_text().splitlines()]
    assert len(rows) == 6
    assert sum(r["outcome"] != "identical" for r in rows) >= 4  # the judging path below is exercised
    for row in rows:
        assert row["policy_response"] is not None and row["baseline_response"] is not None
        if row["outcome"] == "identical":
            assert row["policy_response"].strip() == row["baseline_response"].strip() and row["policy_first"] is None
            continue
        assert row["policy_first"]["raw"] and row["baseline_first"]["raw"]
        assert row["hard_outcome"] == pair_outcome(row["policy_first"]["choice"], row["baseline_first"]["choice"])
        # The transformers judge reports log-odds, so the soft rule decides.
        assert row["outcome"] == soft_outcome(row["policy_first"]["log_odds"], row["baseline_first"]["log_odds"])
    summary = json.loads((tmp_path / "summary.json").read_text())
    overall = summary["overall"]
    assert summary["decision_rule"] == "soft"
    assert overall["wins"] + overall["ties"] + overall["losses"] + overall["identical"] + overall["n_invalid"] == 6
    scores = {"win": 1.0, "tie": 0.5, "identical": 0.5, "loss": 0.0}
    assert overall["win_rate_half_ties"] == pytest.approx(sum(scores[r["outcome"]] for r in rows) / 6)
    assert summary["overall_hard"]["wins"] == sum(r["hard_outcome"] == "win" for r in rows)
    assert sum(c["n_pairs"] for c in summary["per_category"].values()) == 6
    lengths = summary["lengths"]
    assert lengths["policy_longer"]["n"] + lengths["policy_not_longer"]["n"] == sum(
        r["outcome"] in ("win", "tie", "loss") for r in rows
    )
    assert lengths["policy_mean_words"] == pytest.approx(sum(len(r["policy_response"].split()) for r in rows) / 6)
    cal = summary["calibration"]
    assert cal["n_pairs"] == 4 and summary["label"]["method"] == "square_chipo"
    assert cal["rule"] == "soft" and cal["soft_accuracy"] is not None and cal["hard_accuracy"] is not None
    assert len((tmp_path / "calibration.jsonl").read_text().splitlines()) == 4
    assert (tmp_path / "win_rates.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = (tmp_path / "report.md").read_text()
    assert "Judge calibration" in report and "| win |" in report and "Per category" in report
    assert "Win rate (ties as ½)" in report and "| hard (both orders agree) |" in report and "## Length" in report
    assert json.loads(json.dumps(result.summary)) == summary
    # The report shows this run's figures, not only its headings.
    assert f"**Win rate (ties as ½): {overall['win_rate_half_ties']:.1%}" in report
    assert f"| win | {overall['win_rate']:.1%} |" in report and f"| {overall['wins']} |" in report
    assert f"| soft (mean log-odds over both orders, tie band 0) | {cal['soft_accuracy']:.1%} |" in report
    for category, counts in summary["per_category"].items():
        assert f"| {category} | {counts['win_rate_half_ties']:.1%} |" in report


def test_generation_is_seeded(models, finance_splits):
    from squarechipo.models.generation import generate_responses

    prompts = finance_splits["finance_preference_conversational"]["test"]["prompt"][:3]
    kwargs = dict(max_new_tokens=6, batch_size=2, do_sample=True, temperature=1.0)
    a = generate_responses(str(models / "policy"), prompts, seed=7, **kwargs)
    b = generate_responses(str(models / "policy"), prompts, seed=7, **kwargs)
    c = generate_responses(str(models / "policy"), prompts, seed=8, **kwargs)
    assert a == b and a != c


def test_the_exponential_race_draws_each_token_with_its_probability_and_couples_close_policies():
    """ExponentialRaceSampler: the drawn tokens' frequencies match softmax(scores) (χ², seeded), a token of score −inf
    is never drawn, and two policies given the same seed draw the same token where their distributions agree: the
    common random numbers the gold report's pairing relies on."""
    from scipy.stats import chisquare

    from squarechipo.models.generation import ExponentialRaceSampler

    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, float("-inf")])
    rows = 40_000
    out = ExponentialRaceSampler(seed=0)(None, logits.expand(rows, -1).clone())
    assert torch.isinf(out).sum(dim=1).eq(5).all() and out.max(dim=1).values.eq(0).all()
    counts = torch.bincount(out.argmax(dim=1), minlength=6).double()
    assert counts[5] == 0
    probs = torch.softmax(logits.double(), dim=0)[:5]
    assert chisquare(counts[:5].numpy(), (probs / probs.sum() * rows).numpy()).pvalue > 1e-3

    close = logits + torch.tensor([0.0, 0.1, -0.1, 0.05, 0.0, 0.0])  # total variation ≈ 0.03 from `logits`
    first = ExponentialRaceSampler(seed=3)(None, logits.expand(rows, -1).clone()).argmax(dim=1)
    second = ExponentialRaceSampler(seed=3)(None, close.expand(rows, -1).clone()).argmax(dim=1)
    other = ExponentialRaceSampler(seed=4)(None, close.expand(rows, -1).clone()).argmax(dim=1)
    assert (first == second).double().mean() > 0.93  # coupled: they differ only where the distributions do
    assert (first == other).double().mean() < 0.5  # independent draws agree with probability Σ p_j q_j ≈ 0.35


def test_the_race_over_a_whole_vocabulary_draws_its_rare_tokens_as_rarely_as_their_mass():
    """Over SmolLM2's 49,152 tokens, one token holding all but 1e-6 of the mass: the other 49,151 must win about
    1e-6 of the draws. A clock of exactly 0 lets any token win, and float32 exponentials are 0 about once in 7
    million draws, so clocks drawn in float32 made about one draw in 150 a random token (a random word in about one
    answer in three, found by a main-job run whose answers turned degenerate)."""
    from squarechipo.models.generation import ExponentialRaceSampler

    vocabulary, rows = 49_152, 3_000
    logits = torch.full((vocabulary,), -30.0)
    logits[7] = 0.0  # the other tokens' mass: 49,151 e^-30 ≈ 4.6e-9
    race = ExponentialRaceSampler(seed=0)
    drawn = torch.cat([race.draw(logits.expand(500, -1)) for _ in range(rows // 500)])
    assert (drawn != 7).sum() == 0  # at the float32 rate, about 21 of these 3,000 draws would be another token


@pytest.mark.parametrize(
    "temperature, top_k, top_p",
    # (None, 2, 0.6): top-k first keeps one token (0.62 of the two kept reaches 0.6), top-p first would keep two
    [(0.5, None, None), (None, 3, None), (None, None, 0.8), (1.7, 4, 0.9), (0.7, 0, 0.95), (None, 2, 0.6)],
)
def test_exact_sampling_draws_from_the_warped_distribution_it_was_asked_for(temperature, top_k, top_p):
    """Exact sampling with a temperature, top-k and top-p: the race runs after transformers' warpers, so the drawn
    tokens follow softmax(scores / T), cut to the k most likely, then to the smallest set of mass ≥ p (computed here
    independently); χ² over 40,000 draws, seeded."""
    from scipy.stats import chisquare

    from squarechipo.models.generation import _sampling

    logits = torch.tensor([2.0, 1.5, 1.0, 0.5, 0.0, -0.5, -1.0, float("-inf")], dtype=torch.float64)
    rows = 40_000
    chain = _sampling(5, "cpu", exact=True, do_sample=False, temperature=temperature, top_p=top_p, top_k=top_k)
    scores = logits.float().expand(rows, -1).clone()
    for processor in chain["logits_processor"]:
        scores = processor(None, scores)
    counts = torch.bincount(scores.argmax(dim=1), minlength=len(logits)).double()
    probs = torch.softmax(logits / (temperature or 1.0), dim=0)
    if top_k:
        probs[probs.argsort(descending=True)[top_k:]] = 0
        probs /= probs.sum()
    if top_p is not None:
        order = probs.argsort(descending=True)
        before = probs[order].cumsum(0) - probs[order]  # mass of the tokens above each one
        probs[order[before >= top_p]] = 0  # kept: the most likely tokens until their mass reaches top_p
        probs /= probs.sum()
    kept = probs > 0
    assert counts[~kept].sum() == 0
    if kept.sum() > 1:  # one token kept: every draw is it (checked above), and χ² has nothing to compare
        assert chisquare(counts[kept].numpy(), (probs[kept] * rows).numpy()).pvalue > 1e-3
    assert chain["do_sample"] is False and chain["temperature"] is None  # generate's own sampling stays off


def test_exact_sampling_refuses_a_temperature_or_share_it_cannot_apply():
    from squarechipo.models.generation import exact_warpers

    for bad in ({"temperature": 0.0}, {"temperature": -1.0}, {"top_p": 0.0}, {"top_p": 1.5}, {"top_k": -2}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            exact_warpers(**{"temperature": None, "top_k": None, "top_p": None, **bad})
    assert exact_warpers(temperature=None, top_k=None, top_p=None) == []  # the model's own distribution
    assert exact_warpers(temperature=1.0, top_k=0, top_p=1.0) == []


def test_the_hard_win_rate_counts_a_tie_as_half_whatever_rounding_did_to_the_rewards():
    """Coupled samples of a policy close to the SFT policy are often the same text: a tie, counted ½, even where the
    two rewards differ in their last bits (scored in different batches). Different texts are won or lost by their
    rewards, and equal rewards of different texts tie."""
    from squarechipo.evaluation.policy import compare, sample_digest

    texts = [["same answer", "policy text", "x", "equal reward", "better"]]
    sft_texts = [["same answer", "sft text", "y", "equal reward, other text", "worse"]]
    policy = {"reward": [[1.0000001, 2.0, 0.0, 1.0, 3.0]], "words": [[2, 2, 1, 2, 1]], "loop": [[0] * 5],
              "logp": [[0.0] * 5], "logp_ref": [[0.0] * 5],
              "sample_digest": [[sample_digest(t) for t in texts[0]]]}  # fmt: skip
    sft = {"reward": [[1.0, 1.0, 0.5, 1.0, 2.0]], "words": [[2, 2, 1, 4, 1]], "loop": [[0] * 5],
           "sample_digest": [[sample_digest(t) for t in sft_texts[0]]]}  # fmt: skip
    summary = compare(policy, sft, {})
    assert summary["hard_win"]["mean"] == pytest.approx((0.5 + 1.0 + 0.0 + 0.5 + 1.0) / 5)  # 0.6: not ½ by accident
    without = compare({k: v for k, v in policy.items() if k != "sample_digest"}, sft, {})
    assert without["hard_win"]["mean"] == pytest.approx((1.0 + 1.0 + 0.0 + 0.5 + 1.0) / 5)  # older records: rewards


def test_exact_sampling_is_seeded_and_leaves_the_global_random_state(models, finance_splits, tokenizer):
    from transformers import AutoModelForCausalLM

    from squarechipo.models.generation import generate_with_model

    model = AutoModelForCausalLM.from_pretrained(models / "policy")
    prompts = finance_splits["finance_preference_conversational"]["test"]["prompt"][:3]
    state = torch.get_rng_state()
    a, b, c = (
        generate_with_model(model, tokenizer, prompts, max_new_tokens=6, batch_size=2, exact_sampling=True, seed=s)
        for s in (7, 7, 8)
    )
    assert a == b and a != c
    assert torch.equal(torch.get_rng_state(), state)
    with pytest.raises(ValueError, match="exact_sampling"):
        generate_with_model(model, tokenizer, prompts, exact_sampling=True, do_sample=True)


def test_generation_shows_progress_in_token_steps_with_an_estimate(models, finance_splits, tokenizer, capsys):
    """A batch of prompts can take minutes on a CPU: progress moves with each token step (an estimate after the
    first), and ends at every step of every batch, a batch that stopped early included."""
    from transformers import AutoModelForCausalLM

    from squarechipo.models.generation import generate_with_model

    model = AutoModelForCausalLM.from_pretrained(models / "policy")
    prompts = finance_splits["finance_preference_conversational"]["test"]["prompt"][:3]
    capsys.readouterr()
    generate_with_model(model, tokenizer, prompts, max_new_tokens=5, batch_size=2, desc="answers")
    shown = capsys.readouterr().err
    assert "answers (2 batches)" in shown and "10/10 [" in shown  # token steps (2 batches of 5), not batches


def _judge(argv: list[str], capsys) -> subprocess.CompletedProcess:
    """The judge's script (squarechipo.scripts.judge, which eval/judge.py only calls) in this process, its printed
    output captured: the documented day runs `python eval/judge.py` as users do."""
    from squarechipo.scripts.judge import main as judge_main

    capsys.readouterr()
    judge_main(argv)
    captured = capsys.readouterr()
    return subprocess.CompletedProcess(argv, 0, captured.out, captured.err)


def _run_judge(models, tmp_path, capsys, *options: str) -> subprocess.CompletedProcess:
    """The judge on the policy against the baseline, over 4 prompts of the data saved in tmp_path/data."""
    argv = ["--policy", str(models / "policy"), "--baseline", str(models / "baseline"), "--dataset_name"]
    argv += [str(tmp_path / "data"), "--max_eval_samples", "4", "--max-new-tokens", "6", "--out"]
    return _judge([*argv, str(tmp_path / "eval"), "--public_splits", "test", *options], capsys)


@pytest.mark.integration
def test_cli_prints_win_rate_and_calibration(models, finance_splits, tmp_path, capsys):
    finance_splits["finance_preference_conversational"].save_to_disk(str(tmp_path / "data"))
    out = _run_judge(
        models, tmp_path, capsys, "--calibration-pairs", "4", "--judge-model", str(models / "judge"), "--seed", "1"
    )
    # What it prints is what it wrote: the headline (ties as ½) over the 4 prompts, and the judge's accuracy on the
    # 4 gold pairs, each recomputed from the rows of the files it wrote.
    summary = json.loads((tmp_path / "eval" / "summary.json").read_text())
    rows = [json.loads(line) for line in (tmp_path / "eval" / "judgments.jsonl").read_text().splitlines()]
    scores = {"win": 1.0, "tie": 0.5, "identical": 0.5, "loss": 0.0}
    headline = sum(scores[r["outcome"]] for r in rows) / len(rows)
    assert len(rows) == 4 and summary["overall"]["win_rate_half_ties"] == pytest.approx(headline)
    assert f"win rate {headline:.1%}" in out.stdout and "over 4 prompts" in out.stdout
    calibration = summary["calibration"]
    assert calibration["n_pairs"] == len((tmp_path / "eval" / "calibration.jsonl").read_text().splitlines()) == 4
    assert f"judge gold accuracy {calibration['rule_accuracy']:.1%}" in out.stdout
    agg = launch(
        [sys.executable, "eval/aggregate.py", "--out", str(tmp_path / "table"), str(tmp_path / "eval")],
        cwd=ROOT,
        timeout=120,
    )
    assert agg.returncode == 0, agg.stderr[-3000:]
    # The table's cell is that run's headline, the same number, and the table file holds it.
    assert f"| all | {100 * headline:.1f} ± 0.0 (n=1) |" in agg.stdout
    assert json.loads((tmp_path / "table" / "table.json").read_text()) == {"all/policy": [headline]}


def test_aggregate_is_the_mean_and_sd_of_each_runs_headline(tmp_path):
    """eval/aggregate.py's Table 1 cell: mean ± sample SD over seeds of the ties-as-½ win rate, per setting and method;
    the judge line averages each run's rule accuracy."""
    from squarechipo.evaluation.report import aggregate_runs

    runs = []
    for seed, (win, strict, accuracy) in enumerate([(0.625, 0.5, 0.75), (0.5, 0.25, 0.5), (0.75, 0.75, 1.0)]):
        run = tmp_path / f"seed{seed}"
        run.mkdir()
        summary = {
            "policy": "out/square_chipo",
            "label": {"setting": "CTL", "method": "square_chipo"},
            "overall": {"win_rate_half_ties": win, "win_rate": strict},
            "calibration": {"rule_accuracy": accuracy, "accuracy": 0.0},
        }
        (run / "summary.json").write_text(json.dumps(summary))
        runs.append(run)
    text = aggregate_runs(runs, tmp_path / "table")
    assert "| CTL | 62.5 ± 12.5 (n=3) |" in text  # mean 62.5, sample SD of (62.5, 50, 75) is 12.5
    assert "CTL/square_chipo 75.0%" in text


@pytest.mark.integration
def test_cli_with_a_reward_model_judge(models, finance_splits, tokenizer, tmp_path, capsys):
    from tests.helpers.models import make_tiny_classifier

    make_tiny_classifier(tokenizer, seed=5).save_pretrained(tmp_path / "rm")
    tokenizer.save_pretrained(tmp_path / "rm")
    finance_splits["finance_preference_conversational"].save_to_disk(str(tmp_path / "data"))
    _run_judge(
        models,
        tmp_path,
        capsys,
        "--calibration-pairs",
        "6",
        "--judge",
        "reward-model",
        "--judge-model",
        str(tmp_path / "rm"),
        "--tie-band",
        "0.0",
        "--dtype",  # policies and judge in bfloat16 weights, as the main job runs them
        "bfloat16",
    )
    summary = json.loads((tmp_path / "eval" / "summary.json").read_text())
    assert summary["judge"].startswith("reward-model:") and summary["decision_rule"] == "soft"
    assert summary["generation"]["dtype"] == "bfloat16"
    cal = summary["calibration"]
    assert cal["hard_accuracy"] == cal["soft_accuracy"]  # position-free: both orders always agree
    for row in map(json.loads, (tmp_path / "eval" / "judgments.jsonl").read_text().splitlines()):
        if row["policy_first"] is not None:
            assert row["policy_first"]["log_odds"] == -row["baseline_first"]["log_odds"]
            assert row["outcome"] == row["hard_outcome"]
    # Argument errors and refusals, in process (the script's main; the runs above start it as users do).
    from squarechipo.scripts.judge import main as judge_main

    common = [
        "--policy",
        "p",
        "--baseline",
        "b",
        "--dataset_name",
        str(tmp_path / "data"),
        "--out",
        str(tmp_path / "r"),
    ]
    with pytest.raises(ValueError, match="--judge reward-model needs --judge-model"):
        judge_main([*common, "--judge", "reward-model"])
    with pytest.raises(ValueError, match=r"dtype must be one of bfloat16, float16, float32 \(got 'bf16'\)"):
        judge_main([*common, "--dtype", "bf16"])
    from squarechipo.evaluation.config import WinRateConfig  # one check with every other dtype option: auto is one

    assert WinRateConfig(policy="p", baseline="b", out="o", dataset_name="d", dtype="auto").dtype == "auto"
    # Calibration reads the test split's labels: a raw split not declared public is refused before anything runs.
    with pytest.raises(ValueError, match=r"reads the labels of the split 'test', but it holds raw labels.*--public_"):
        judge_main(common)
    assert not (tmp_path / "r").exists()


@pytest.mark.integration
def test_judge_accuracy_cli_reads_a_yaml_config(models, finance_splits, tokenizer, tmp_path):
    """eval/judge_accuracy.py takes its run configuration as YAML (TrlParser), flags override it, and it scores
    each named judge on the same gold pairs; the reward model is position-free (hard = soft)."""
    from tests.helpers.models import make_tiny_classifier

    make_tiny_classifier(tokenizer, seed=5).save_pretrained(tmp_path / "rm")
    tokenizer.save_pretrained(tmp_path / "rm")
    finance_splits["finance_preference_conversational"].save_to_disk(str(tmp_path / "data"))
    config = tmp_path / "accuracy.yaml"
    config.write_text(
        f"dataset_name: {tmp_path / 'data'}\nmax_eval_samples: 3\nlocal: {models / 'judge'}\n"
        f"reward_model: {tmp_path / 'rm'}\nout: {tmp_path / 'ignored'}\npublic_splits: [test]\n"
    )
    command = [sys.executable, "eval/judge_accuracy.py", "--config", str(config), "--out", str(tmp_path / "acc")]
    out = launch(command, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    results = json.loads((tmp_path / "acc" / "judge_accuracy.json").read_text())
    assert not (tmp_path / "ignored").exists()
    assert [r["judge"].split(":")[0] for r in results] == ["transformers", "reward-model"]
    assert all(r["n_pairs"] == 3 for r in results)
    assert results[1]["hard_accuracy"] == results[1]["soft_accuracy"]
    assert "Gold accuracy on 3 pairs" in out.stdout
    from squarechipo.scripts.judge_accuracy import main as accuracy_main

    with pytest.raises(ValueError, match="name at least one judge"):
        accuracy_main(["--dataset_name", str(tmp_path / "data")])
    with pytest.raises(ValueError, match=r"judge accuracy on gold pairs reads the labels of the split 'test'"):
        accuracy_main(["--dataset_name", str(tmp_path / "data"), "--local", str(models / "judge")])


@pytest.mark.integration
def test_cli_judges_the_prompts_of_a_single_jsonl_file(models, finance_splits, tmp_path, capsys, caplog):
    """A user's own file of pairs is the evaluation's test split (as TRL's scripts read one file)."""
    rows = finance_splits["finance_preference_conversational"]["test"].select(range(3))
    path = tmp_path / "my_test.jsonl"
    with open(path, "w") as handle:
        for row in rows:
            handle.write(json.dumps({k: row[k] for k in ("prompt", "chosen", "rejected")}) + "\n")
    argv = ["--policy", str(models / "policy"), "--baseline", str(models / "baseline"), "--dataset_name", str(path)]
    argv += ["--max-new-tokens", "4", "--calibration-pairs", "2", "--judge-model", str(models / "judge")]
    with caplog.at_level("INFO"):
        _judge([*argv, "--out", str(tmp_path / "eval"), "--public_splits", "test"], capsys)
    summary = json.loads((tmp_path / "eval" / "summary.json").read_text())
    assert summary["overall"]["n_pairs"] == 3 and summary["calibration"]["n_pairs"] == 2
    assert "its 3 rows are the 'test' split" in caplog.text


def test_the_gold_evaluator_reuses_the_sft_records_passes_without_changing_a_number(models, finance_splits, tokenizer):
    """The SFT policy's record already holds r* of its samples and π_ref's test log-probs, and its own samples are
    its pool: reusing them gives exactly what computing them again gives. Leaving out the generation-free measures
    changes no other figure."""
    from dataclasses import replace

    from squarechipo.evaluation.policy import GoldEvaluator, SamplingSettings, compare
    from squarechipo.judge.reward_model import RewardModelJudge
    from tests.helpers.models import make_tiny_classifier

    make_tiny_classifier(tokenizer, seed=5).save_pretrained(models / "gold")
    tokenizer.save_pretrained(models / "gold")
    reference = make_tiny_model(tokenizer, seed=2).eval()
    test = finance_splits["finance_preference_conversational"]["test"].select(range(4))
    evaluator = GoldEvaluator(
        reference,
        tokenizer,
        RewardModelJudge(str(models / "gold"), batch_size=4),
        test,
        SamplingSettings(samples_per_prompt=2, max_new_tokens=4, batch_size=4, logp_batch_size=4),
        labels_public=True,
    )
    samples = evaluator.sample(reference)
    record = evaluator.measure_samples(reference, samples)
    assert record == evaluator.measure_samples(reference, samples, pool=samples)
    # One sample per prompt is scored beside an empty response, not beside itself: the same log-probs.
    alone, paired = evaluator._sample_logps(reference, samples[:1]), evaluator.logps(reference, samples[0], samples[0])
    assert alone.shape == (1, 4) and np.allclose(alone[0], paired[0], atol=1e-4)
    constants = evaluator.constants(samples, record)
    assert constants == evaluator.constants(samples)
    # Without the generation-free measures the sampled ones are the same numbers, and the others are absent.
    policy = make_tiny_model(tokenizer, seed=1).eval()
    measured = evaluator.measure(policy, pool=samples)
    full = compare(measured, record, constants)
    # Each sample's degenerate flag is the test rows' reading of it; the summary's share is their mean.
    assert record["degenerate"] == [[float(evaluator.degenerate(r)) for r in s] for s in samples]
    assert full["degenerate_rate"] == np.mean(measured["degenerate"]) and full["clean_prompts"] <= 4
    evaluator.settings = replace(evaluator.settings, generation_free=False)
    light_record = evaluator.measure_samples(reference, samples)
    assert "logp" not in light_record  # the SFT's own log-prob pass is left out: nothing reads it
    light = compare(evaluator.measure(policy, pool=samples), light_record, evaluator.constants(samples, light_record))
    assert {"pool_gain", "implicit_accuracy"} <= set(full) and not {"pool_gain", "implicit_accuracy"} & set(light)
    assert {k: v for k, v in full.items() if k not in ("pool_gain", "implicit_accuracy")} == light


def test_a_comparison_of_a_model_with_itself_is_said_before_it_runs(tmp_path, tiny_model_factory):
    """`eval/judge.py` compared the SFT weights with themselves ("identical responses 4/4", 50%) and never said so:
    the same weights in both folders, or a policy whose record says "no update", are named in one line each."""
    from squarechipo.evaluation.same_model import same_model_notes
    from squarechipo.privacy.provenance.record import PrivacyRecord, write_privacy_record
    from squarechipo.privacy.provenance.sketch import weights_identity

    model = tiny_model_factory(0)
    for name in ("sft", "copy"):
        model.save_pretrained(tmp_path / name)
    tiny_model_factory(1).save_pretrained(tmp_path / "trained")
    assert same_model_notes(str(tmp_path / "trained"), str(tmp_path / "sft")) == []
    (same,) = same_model_notes(str(tmp_path / "copy"), str(tmp_path / "sft"))
    assert same.startswith(f"{tmp_path / 'copy'} and {tmp_path / 'sft'} hold the same weights: the comparison is of")
    record = PrivacyRecord.build({"stage": "preference_optimization", "method": "square_chipo"})
    write_privacy_record(tmp_path / "copy", record, model=model, start_identity=weights_identity(model))
    notes = same_model_notes(str(tmp_path / "copy"), str(tmp_path / "sft"))
    assert len(notes) == 2 and "its record says 'no update'" in notes[0]
