"""A policy against the SFT policy under a gold reward, in plain words: the gain and the expected win with intervals.

    squarechipo gold-report --policy outputs/quickstart/square_chipo_ctl \
        --sft outputs/quickstart/sft --gold outputs/quickstart/gold_judge \
        --dataset_name data/finance_preference_conversational --dataset_test_split test --max_eval_samples 128

Both policies answer each test prompt with ``--samples`` responses at temperature 1 (the same generation seeds for
both, so the samples are paired); the gold reward model scores them. It prints the mean gold-reward gain and the
gold expected win rate mean σ(r*(y_π) − r*(y_sft)), each with a 95% t interval over prompts, KL(π‖π_sft) from the
policy's samples, and the reading: "better than SFT", "worse than SFT" or "not distinguishable from SFT" (the
gain's interval covers 0). The figures are also written to ``--out`` as JSON.
"""

from __future__ import annotations

from squarechipo.models.runtime import torch_dtype

__all__ = ["format_summary", "gold_comparison", "label_signal", "reading"]


def reading(gain: dict) -> str:
    """The plain-words reading of the gain's 95% interval."""
    if gain["low"] > 0:
        return "better than SFT"
    if gain["high"] < 0:
        return "worse than SFT"
    return "not distinguishable from SFT (the interval covers 0)"


def label_signal(policy: str) -> dict | None:
    """What the policy's private training labels were worth, from its verified privacy record.

    n labels each wrong with probability ρ carry the information of about n(1 − 2ρ)² clean labels (the squared
    correlation of a flipped label with the true one); ρ is the pipeline's expected wrong-label rate
    (Zhou et al. 2025 (Square-χPO), App. E). None when the folder has no record or its labels were not released by a
    pipeline whose rate is known.
    """
    from squarechipo.privacy.ledger.ledger import PrivacyLedger
    from squarechipo.privacy.mechanisms.measurements import LabelPipeline
    from squarechipo.privacy.provenance.record import PRIVACY_FILE, read_privacy_record

    record = read_privacy_record(policy)
    if record is None or not record.get("ledger"):
        return None
    releases = PrivacyLedger.from_dict(record.get("ledger"), f"{policy}/{PRIVACY_FILE}").releases  # seal checked
    if len(releases) != 1 or not isinstance(releases[0].pipeline, dict):
        return None
    try:
        wrong = LabelPipeline(**releases[0].pipeline).expected_flip_rate()
    except (TypeError, ValueError):  # a data-dependent adversary, or a mechanism other than a pipeline
        return None
    rows = int(releases[0].n_rows)
    return {"rows": rows, "wrong_label_rate": wrong, "clean_equivalent": rows * (1 - 2 * wrong) ** 2}


def gold_comparison(
    policy: str,
    sft: str,
    gold: str,
    dataset: str,
    *,
    split="test",
    prompts=128,
    samples=1,
    batch_size=64,
    labels_public=False,
    generation_free=True,
    dtype: str = "bfloat16",
    max_new_tokens: int = 128,
) -> dict:
    """The paired comparison of :func:`squarechipo.evaluation.policy.compare`, loaded from model folders in weight
    ``dtype``; ``batch_size`` prompts are answered at once, each with up to ``max_new_tokens`` tokens (both
    recorded)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from squarechipo.data import load_preference_dataset
    from squarechipo.evaluation.policy import GoldEvaluator, SamplingSettings, compare
    from squarechipo.judge.reward_model import RewardModelJudge

    name, dtype = dtype, torch_dtype(dtype)  # a wrong name is refused before anything loads
    # The policy's record (its seal, the key that signed it, the weights it names) is checked before anything is
    # generated: a model from another machine whose key is not trusted here fails now, not after the sampling.
    signal = label_signal(policy)
    test = load_preference_dataset(dataset, split=split)
    test = test.select(range(min(prompts, len(test))))
    reference = AutoModelForCausalLM.from_pretrained(sft, dtype=dtype).eval()
    evaluator = GoldEvaluator(
        reference,
        AutoTokenizer.from_pretrained(sft),
        RewardModelJudge(gold, batch_size=32, dtype=dtype),
        test,
        SamplingSettings(
            samples_per_prompt=samples,
            max_new_tokens=max_new_tokens,
            batch_size=batch_size,
            generation_free=generation_free,
        ),
        labels_public=labels_public,
    )
    sft_samples = evaluator.sample(reference)
    sft_record = evaluator.measure_samples(reference, sft_samples)
    model = AutoModelForCausalLM.from_pretrained(policy, dtype=dtype).eval()
    record = evaluator.measure(model, pool=sft_samples)
    return {
        **compare(record, sft_record, evaluator.constants(sft_samples, sft_record)),
        "label_signal": signal,
        "dtype": name,
        "max_new_tokens": max_new_tokens,
    }


def format_summary(summary: dict) -> list[str]:
    gain, win = summary["gold_gain"], summary["expected_win"]
    return [
        f"gold reward gain over SFT: {gain['mean']:+.3f} [{gain['low']:+.3f}, {gain['high']:+.3f}] "
        f"(95% t interval over {gain['n']} prompts)",
        f"gold expected win rate vs SFT: {100 * win['mean']:.1f}% [{100 * win['low']:.1f}, {100 * win['high']:.1f}]",
        f"KL(policy ‖ SFT) from the policy's samples: {summary['kl']['mean']:.2f} nats; "
        f"loops {100 * summary['loop_rate']:.1f}% (SFT {100 * summary['sft_loop_rate']:.1f}%)",
        f"reading: {reading(gain)}",
        *_scope(summary.get("label_signal")),
    ]


def _scope(signal: dict | None) -> list[str]:
    """Why the interval is not a run-to-run interval: it is over prompts, for this one trained policy."""
    scope = "scope: the interval is over test prompts for this one trained policy, not over training runs"
    if not signal:
        return [scope]
    return [
        scope,
        f"       its {signal['rows']} private labels (each wrong w.p. {signal['wrong_label_rate']:.3f}) carry about "
        f"{signal['clean_equivalent']:.0f} clean labels' worth, so a fresh release of them (a fresh clone) can train "
        "a policy outside this interval",
    ]
