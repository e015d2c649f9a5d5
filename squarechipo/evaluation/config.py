"""Run configurations of the evaluation scripts, read by TRL's ``TrlParser`` (flags or ``--config x.yaml``).

``eval/judge.py`` takes :class:`WinRateConfig`, ``eval/judge_accuracy.py`` :class:`JudgeAccuracyConfig`.
Every field is a command-line flag (``--max_new_tokens`` or ``--max-new-tokens``) and a YAML key
(``max_new_tokens``), as in the training recipes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from squarechipo.judge.templates import TEMPLATES
from squarechipo.models.runtime import check_weight_dtype

__all__ = ["JudgeAccuracyConfig", "WinRateConfig"]

_DEFAULT_DATASET = "data/finance_preference_conversational"


def _help(text: str, **metadata) -> dict:
    return {"help": text, **metadata}


def _check_positive(config, names: tuple[str, ...]) -> None:
    for name in names:
        value = getattr(config, name)
        if value is not None and value < 1:
            raise ValueError(f"{name} must be at least 1 (got {value}).")


def _public_splits():
    return field(
        default=None,
        metadata=_help(
            "splits whose labels are public (gold pairs written for evaluation); a split read for its labels must be "
            "released or listed here"
        ),
    )


@dataclass
class WinRateConfig:
    """LLM-as-judge win rate of ``policy`` against ``baseline`` on a split's prompts (Zhou et al. 2025 (Square-χPO),
    App. E)."""

    policy: str = field(metadata=_help("aligned model: path or hub id ('embedded' works)"))
    baseline: str = field(metadata=_help("baseline model, e.g. the SFT policy"))
    out: str = field(metadata=_help("output folder: report.md, summary.json, judgments.jsonl, win_rates.png"))
    dataset_name: str = field(
        default=_DEFAULT_DATASET, metadata=_help("a dataset folder, JSONL/Parquet file or hub id")
    )
    dataset_test_split: str = field(default="test", metadata=_help("the split whose prompts are answered"))
    max_eval_samples: int | None = field(default=None, metadata=_help("the first N prompts (default: all)"))
    # Generation
    max_new_tokens: int = field(default=128, metadata=_help("tokens generated per response"))
    batch_size: int = field(default=8, metadata=_help("generation batch size"))
    do_sample: bool = field(default=False, metadata=_help("sample (default: greedy)"))
    temperature: float = field(default=0.7, metadata=_help("sampling temperature (with do_sample)"))
    top_p: float = field(default=0.95, metadata=_help("nucleus sampling mass (with do_sample)"))
    seed: int = field(default=0, metadata=_help("generation seed"))
    dtype: str | None = field(
        default=None,
        metadata=_help(
            "weights' dtype for generation and a local or reward-model judge: bfloat16, float16, float32 or auto "
            "(default and auto: the checkpoint's)"
        ),
    )
    # Judge
    judge: Literal["local", "reward-model", "openai"] = field(
        default="local",
        metadata=_help("local: a causal LM's A/B probabilities; reward-model: r(x, a); openai: an HTTP endpoint"),
    )
    judge_model: str | None = field(
        default=None,
        metadata=_help("local: model path/id (default: embedded); reward-model: its folder or hub id; openai: name"),
    )
    tie_band: float = field(
        default=0.0,
        metadata=_help(
            "soft rule: |mean log-odds| at or below this is a tie (log-odds units; rewards for reward-model)"
        ),
    )
    judge_logprobs: bool = field(
        default=False, metadata=_help("openai: ask for top logprobs of the answer letter, so the soft rule applies")
    )
    judge_base_url: str | None = field(
        default=None, metadata=_help("OpenAI-compatible base URL, e.g. http://localhost:8000/v1")
    )
    judge_api_key_env: str = field(default="OPENAI_API_KEY", metadata=_help("environment variable with the API key"))
    judge_concurrency: int = field(default=4, metadata=_help("openai: requests in flight"))
    judge_timeout: float = field(default=60.0, metadata=_help("openai: seconds per request"))
    judge_retries: int = field(default=4, metadata=_help("openai: retries after a failed request"))
    judge_cache: str | None = field(default=None, metadata=_help("SQLite cache (default: <out>/judge_cache.sqlite)"))
    judge_batch_size: int = field(default=8, metadata=_help("local and reward-model judge batch size"))
    template: str = field(default="auto", metadata=_help("auto, finance or general (auto: finance for finance data)"))
    template_file: str | None = field(
        default=None, metadata=_help("YAML with name, system, user ({prompt}, {response_a}, {response_b})")
    )
    calibration_pairs: int = field(default=64, metadata=_help("gold pairs to score the judge on (0 = skip)"))
    public_splits: list[str] | None = _public_splits()
    # Labels for aggregation
    setting: str = field(default="all", metadata=_help("e.g. CTL or LTC"))
    method: str | None = field(default=None, metadata=_help("e.g. square_chipo (default: the policy folder name)"))

    def __post_init__(self) -> None:
        _check_positive(
            self, ("max_eval_samples", "max_new_tokens", "batch_size", "judge_batch_size", "judge_concurrency")
        )
        if self.template != "auto" and self.template not in TEMPLATES:
            raise ValueError(f"template must be auto or one of {sorted(TEMPLATES)} (got {self.template!r}).")
        check_weight_dtype(self.dtype)
        if self.judge == "reward-model" and not self.judge_model:
            raise ValueError(
                "--judge reward-model needs --judge-model PATH (judge_model in a YAML config): a "
                "sequence-classification reward model, e.g. outputs/gold_judge from recipes/gold_judge.py."
            )
        if self.judge == "openai" and not (self.judge_base_url and self.judge_model):
            raise ValueError("--judge openai needs --judge-base-url and --judge-model (judge_base_url, judge_model).")


@dataclass
class JudgeAccuracyConfig:
    """Gold accuracy of one or more judges on a split's (chosen, rejected) pairs, hard and soft rule."""

    dataset_name: str = field(
        default=_DEFAULT_DATASET, metadata=_help("a dataset folder, JSONL/Parquet file or hub id")
    )
    dataset_test_split: str = field(default="test", metadata=_help("the split whose gold pairs are judged"))
    max_eval_samples: int | None = field(default=None, metadata=_help("the first N gold pairs (default: all)"))
    public_splits: list[str] | None = _public_splits()
    local: str | None = field(default=None, metadata=_help("a causal LM for the local A/B judge, e.g. embedded"))
    server: str | None = field(default=None, metadata=_help("an OpenAI-compatible base URL serving logprobs"))
    server_model: str = field(default="smollm2", metadata=_help("the model name the server answers to"))
    server_concurrency: int = field(default=2, metadata=_help("requests in flight"))
    reward_model: str | None = field(default=None, metadata=_help("a sequence-classification reward model folder"))
    template: str = field(default="finance", metadata=_help("finance or general"))
    tie_band: float = field(default=0.0, metadata=_help("soft rule: |mean log-odds| at or below this is a tie"))
    batch_size: int = field(default=8, metadata=_help("local and reward-model judge batch size"))
    out: str | None = field(default=None, metadata=_help("folder for judge_accuracy.md and .json"))

    def __post_init__(self) -> None:
        _check_positive(self, ("max_eval_samples", "server_concurrency", "batch_size"))
        if self.template not in TEMPLATES:
            raise ValueError(f"template must be one of {sorted(TEMPLATES)} (got {self.template!r}).")
        if not (self.local or self.server or self.reward_model):
            raise ValueError("name at least one judge: --local, --server or --reward-model.")
