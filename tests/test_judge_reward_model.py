"""The reward-model judge, the soft rule against a planted position bias, and the gold judge.

Tiny sequence classifiers with the real tokenizer for the judge's mechanics; the embedded SmolLM2
for the gold judge, whose point is the model's features.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from scipy import stats

from squarechipo.data.text import prompt_text
from squarechipo.evaluation.pipeline import calibrate_judge, judge_pairs
from squarechipo.judge.base import PairwiseJudge, Verdict
from squarechipo.judge.reward_model import RewardModelJudge
from squarechipo.models.runtime import accelerator_available, cpu_runs_bf16_natively
from squarechipo.reward.features import fit_linear_reward_model
from tests.helpers.launch import launch
from tests.helpers.models import make_tiny_classifier, make_tiny_model
from tests.helpers.rows import release_rows

ROOT = Path(__file__).resolve().parents[1]


def _texts(split, n):
    rows = split.select(range(n))
    return (
        [prompt_text(p) for p in rows["prompt"]],
        [c[0]["content"] for c in rows["chosen"]],
        [r[0]["content"] for r in rows["rejected"]],
    )


@pytest.fixture(scope="module")
def reward_model_dir(tmp_path_factory, tokenizer):
    folder = tmp_path_factory.mktemp("rm")
    model = make_tiny_classifier(tokenizer, seed=4)
    torch.nn.init.normal_(model.score.weight, std=1.0)  # rewards of a usable spread
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_swapping_the_responses_flips_the_verdict_exactly(reward_model_dir, finance_splits):
    prompts, chosen, rejected = _texts(finance_splits["finance_preference_conversational"]["test"], 12)
    judge = RewardModelJudge(str(reward_model_dir), batch_size=5)
    forward, backward = judge.verdicts(prompts, chosen, rejected), judge.verdicts(prompts, rejected, chosen)
    assert len({v.choice for v in forward}) == 2  # the random head does not prefer one side everywhere
    for a, b in zip(forward, backward):
        assert a.choice == 1 - b.choice and a.log_odds == -b.log_odds and a.log_odds != 0


def test_batched_rewards_equal_the_model_on_each_text_alone(reward_model_dir, finance_splits, tokenizer):
    prompts, chosen, _ = _texts(finance_splits["finance_preference_conversational"]["test"], 6)
    judge = RewardModelJudge(str(reward_model_dir), batch_size=4)
    batched = judge.rewards(prompts, chosen)
    with torch.no_grad():
        for prompt, response, reward in zip(prompts, chosen, batched):
            text = tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}], tokenize=False
            )
            ids = tokenizer(text, return_tensors="pt", add_special_tokens=False)
            assert judge.model(**ids).logits[0, 0].item() == pytest.approx(reward, abs=1e-4)


def test_a_model_with_several_outputs_is_refused(tmp_path, tokenizer):
    from transformers import LlamaForSequenceClassification

    from tests.helpers.models import tiny_llama_config

    LlamaForSequenceClassification(tiny_llama_config(tokenizer, num_labels=3)).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="num_labels=1"):
        RewardModelJudge(str(tmp_path))


class PositionBiasedJudge(PairwiseJudge):
    """A reward-model judge whose log-odds carry a constant pull towards the first position."""

    def __init__(self, inner: RewardModelJudge, bias: float) -> None:
        self.inner, self.bias, self.name = inner, bias, "biased"

    def verdicts(self, prompts, responses_a, responses_b):
        out = []
        for v in self.inner.verdicts(prompts, responses_a, responses_b):
            log_odds = v.log_odds + self.bias
            out.append(Verdict(choice=0 if log_odds > 0 else 1, raw=v.raw, log_odds=log_odds))
        return out


def test_soft_rule_recovers_a_judge_with_a_planted_position_bias(reward_model_dir, finance_splits):
    test = finance_splits["finance_preference_conversational"]["test"].select(range(16))
    inner = RewardModelJudge(str(reward_model_dir))
    clean = calibrate_judge(inner, test, labels_public=True)
    bias = 1.0 + 2 * max(abs(v.log_odds) for v in inner.verdicts(*_texts(test, 16)))  # larger than any real signal
    biased = calibrate_judge(PositionBiasedJudge(inner, bias), test, labels_public=True)
    assert biased["position_bias_rate"] == 1.0 and biased["hard_accuracy"] == 0.0
    assert biased["soft_accuracy"] == pytest.approx(clean["soft_accuracy"]) and biased["rule"] == "soft"
    assert clean["hard_accuracy"] == pytest.approx(clean["soft_accuracy"])  # a position-free judge: the rules agree


def test_identical_responses_are_counted_apart_and_not_judged(reward_model_dir):
    class Counting(RewardModelJudge):
        asked = 0

        def verdicts(self, prompts, a, b):
            type(self).asked += len(prompts)
            return super().verdicts(prompts, a, b)

    judge = Counting(str(reward_model_dir))
    rows, rule = judge_pairs(judge, ["p1", "p2", "p3"], ["same", "x", "y "], ["same ", "z", "y"])
    assert [r["outcome"] for r in rows][0] == "identical" and rows[2]["outcome"] == "identical"
    assert rows[1]["outcome"] in ("win", "loss") and rule == "soft"
    assert Counting.asked == 2  # one pair, both orders


def test_rule_is_hard_for_a_judge_without_log_odds(reward_model_dir):
    class LettersOnly(RewardModelJudge):
        def verdicts(self, prompts, a, b):
            return [Verdict(v.choice, v.raw) for v in super().verdicts(prompts, a, b)]

    rows, rule = judge_pairs(LettersOnly(str(reward_model_dir)), ["p"], ["a"], ["b"])
    assert rule == "hard" and rows[0]["soft_outcome"] is None and rows[0]["outcome"] == rows[0]["hard_outcome"]


def test_linear_head_equals_the_fitted_margins(tokenizer, finance_splits):
    # The saved head scores each text with exactly the margin the fit optimised: r(a⁺) − r(a⁻) = ⟨θ, x⟩.
    train = finance_splits["finance_preference_conversational"]["judge"].select(range(24))
    model = make_tiny_classifier(tokenizer, seed=1)
    fit = fit_linear_reward_model(model, tokenizer, train, radius=3.0, batch_size=8, labels_public=True)
    assert fit["theta_norm"] <= 3.0 + 1e-9 and fit["n_rows"] == 24
    from squarechipo.reward.features import pooled_features, reward_texts, sequence_scores

    texts = reward_texts(tokenizer, train["prompt"], train["chosen"])
    rewards = sequence_scores(model, tokenizer, texts)[:, 0]
    features = pooled_features(model, tokenizer, texts)
    assert np.allclose(rewards, features @ model.score.weight.detach().double().numpy()[0], atol=1e-4)
    with pytest.raises(ValueError, match="linear `score` head"):
        fit_linear_reward_model(make_tiny_model(tokenizer), tokenizer, train, radius=1.0, labels_public=True)


@pytest.mark.slow
def test_gold_judge_recipe_beats_chance_on_held_out_gold_pairs(finance_splits, tmp_path):
    finance_splits["finance_preference_conversational"].save_to_disk(str(tmp_path / "data"))
    out = launch(
        [
            sys.executable,
            "recipes/gold_judge.py",
            "--model_name_or_path",
            "embedded",
            "--dataset_name",
            str(tmp_path / "data"),
            # 24 pairs fit a judge that ranked all 20 held-out pairs right on an AVX2 CPU in float32 (32 pairs: 28 of
            # 28); 18 of 20 still passes (p 2e-4), and the run is 12 s shorter there than with 32 and 28.
            "--max_train_samples",
            "24",
            "--max_eval_samples",
            "20",
            "--output_dir",
            str(tmp_path / "judge"),
            "--batch_size",
            "16",
            "--test_labels_public",
            "true",
            # The feature pass under bfloat16 autocast, as the main job runs it, where the CPU has bf16 kernels; on an
            # AVX2 CPU emulated bf16 took this test 319 s, so it runs in float32 there (the main job's recipe fits the
            # same head both ways: recipes/configs/quickstart_gold_judge.yaml).
            "--bf16",
            str(cpu_runs_bf16_natively() or accelerator_available()).lower(),
        ],
        cwd=ROOT,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "accuracy on 20 held-out gold pairs" in out.stdout
    weights = load_file(str(tmp_path / "judge" / "model.safetensors"))
    assert {w.dtype for w in weights.values()} == {torch.float32}  # autocast leaves the saved judge float32
    result = json.loads((tmp_path / "judge" / "gold_judge.json").read_text())
    correct = round(result["test_accuracy"] * result["test_pairs"])
    # One-sided binomial test against a coin: the judge must be above chance at p < 1e-3.
    assert stats.binomtest(correct, result["test_pairs"], 0.5, alternative="greater").pvalue < 1e-3
    record = json.loads((tmp_path / "judge" / "squarechipo_privacy.json").read_text())
    assert record["stage"] == "gold_judge" and record["epsilon"] is None and record["prompt_sketch"]
    judge = RewardModelJudge(str(tmp_path / "judge"))  # an ordinary reward model folder
    assert judge.model.config.num_labels == 1


@pytest.mark.integration
def test_gold_judge_recipe_refuses_released_labels(finance_splits, tmp_path):
    from squarechipo.privacy import LabelPipeline, save_privatized

    released = release_rows(
        finance_splits["finance_preference_conversational"]["judge"].select(range(8)),
        LabelPipeline(epsilon=1.0),
        seed=0,
    )
    save_privatized(released, tmp_path / "released.jsonl")
    out = launch(
        [
            sys.executable,
            "recipes/gold_judge.py",
            "--dataset_name",
            str(tmp_path / "released.jsonl"),
            "--dataset_train_split",
            "train",
            "--dataset_test_split",
            "",
            "--output_dir",
            str(tmp_path / "judge"),
        ],
        cwd=ROOT,
        timeout=300,
    )
    assert out.returncode != 0 and "carries a privacy ledger" in out.stderr
