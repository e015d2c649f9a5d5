"""Win rate of a policy against a baseline, judged pairwise in both orders (Zhou et al. 2025 (Square-χPO), App. E,
the design).

Writes into ``out``:

- ``judgments.jsonl``: one line per test prompt — prompt, category, both responses, the verdict,
  raw reply and log-odds for each order, and the outcome (win / tie / loss / identical / invalid)
  under the hard and the soft rule (:mod:`squarechipo.judge.stats`);
- ``calibration.jsonl``: the judge on gold pairs (the split's own chosen vs rejected), both orders;
- ``summary.json``: the ties-as-½ win rate with a bootstrap interval over prompts, strict
  win/tie/loss/identical shares with Wilson intervals, per category, the length breakdown, and the
  calibration (hard and soft gold accuracy);
- ``report.md`` and ``win_rates.png``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import datasets
import numpy as np

from squarechipo.data.label_roles import label_free
from squarechipo.data.text import prompt_text, response_text
from squarechipo.evaluation.report import write_chart, write_report
from squarechipo.judge.base import PairwiseJudge, Verdict
from squarechipo.judge.stats import (
    OUTCOME_SCORES,
    calibrate,
    pair_outcome,
    soft_margin,
    soft_outcome,
    summarize_outcomes,
)
from squarechipo.models.generation import generate_responses
from squarechipo.privacy.door import reads_labels

__all__ = ["GenerationSettings", "calibrate_judge", "evaluate_win_rate", "judge_pairs", "length_breakdown"]

logger = logging.getLogger("squarechipo")


@dataclass(frozen=True)
class GenerationSettings:
    max_new_tokens: int = 128
    batch_size: int = 8
    do_sample: bool = False
    temperature: float = 0.7
    top_p: float = 0.95
    seed: int = 0
    dtype: str | None = None  # the policies' weights (None: the checkpoint's)


@dataclass
class EvaluationResult:
    summary: dict[str, Any]
    out: Path
    rows: list[dict[str, Any]] = field(repr=False, default_factory=list)


def _log_odds(verdicts: list[Verdict]) -> list[float | None] | None:
    """The verdicts' log-odds when every one has them (the soft rule applies; vacuously so for none), else None."""
    values = [v.log_odds for v in verdicts]
    return values if all(v is not None for v in values) else None


@reads_labels("test", public="labels_public", reader="calibrate_judge", declare="labels_public=True")
def calibrate_judge(
    judge: PairwiseJudge,
    test: datasets.Dataset,
    n_pairs: int | None = None,
    out: Path | None = None,
    tie_band: float = 0.0,
    *,
    labels_public: bool = False,
) -> dict[str, Any]:
    """The judge's accuracy on the first ``n_pairs`` gold pairs (None = all), both orders, hard and soft rule.

    Writes ``calibration.jsonl`` (the pairs with their labels) into ``out`` when given. ``test`` must be released or
    its labels declared public (``labels_public``): the result and the file are computed from its labels.
    """
    gold = test.select(range(min(n_pairs or len(test), len(test))))
    prompts = [prompt_text(p) for p in gold["prompt"]]
    chosen = [response_text(c) for c in gold["chosen"]]
    rejected = [response_text(r) for r in gold["rejected"]]
    chosen_first = judge.verdicts(prompts, chosen, rejected)
    rejected_first = judge.verdicts(prompts, rejected, chosen)
    if out is not None:
        records = [
            {"prompt": p, "chosen": c, "rejected": r, "chosen_first": asdict(v1), "rejected_first": asdict(v2)}
            for p, c, r, v1, v2 in zip(prompts, chosen, rejected, chosen_first, rejected_first)
        ]
        _write_jsonl(out / "calibration.jsonl", records)
    return calibrate(
        [v.choice for v in chosen_first],
        [v.choice for v in rejected_first],
        chosen_first_log_odds=_log_odds(chosen_first),
        rejected_first_log_odds=_log_odds(rejected_first),
        tie_band=tie_band,
    ).to_dict()


def _verdict_record(verdict: Verdict | None) -> dict[str, Any] | None:
    return None if verdict is None else asdict(verdict)


def judge_pairs(
    judge: PairwiseJudge,
    prompts: list[str],
    policy_responses: list[str],
    baseline_responses: list[str],
    *,
    tie_band: float = 0.0,
) -> tuple[list[dict[str, Any]], str]:
    """Judge each (policy, baseline) pair in both orders; identical responses are not sent to the judge.

    Returns one record per prompt (both verdicts, the hard and the soft outcome, and ``outcome`` under
    the rule in force) and that rule: ``soft`` when the judge reported log-odds for every pair, else ``hard``.
    """
    identical = [p.strip() == b.strip() for p, b in zip(policy_responses, baseline_responses)]
    asked = [i for i, same in enumerate(identical) if not same]

    def pick(values):
        return [values[i] for i in asked]

    policy_first = dict(zip(asked, judge.verdicts(pick(prompts), pick(policy_responses), pick(baseline_responses))))
    baseline_first = dict(zip(asked, judge.verdicts(pick(prompts), pick(baseline_responses), pick(policy_responses))))
    soft = _log_odds(list(policy_first.values())) is not None and _log_odds(list(baseline_first.values())) is not None
    rule = "soft" if soft else "hard"
    rows = []
    for i, prompt in enumerate(prompts):
        first, second = policy_first.get(i), baseline_first.get(i)
        if identical[i]:
            hard_outcome = soft_result = "identical"
        else:
            hard_outcome = pair_outcome(first.choice, second.choice)
            soft_result = soft_outcome(first.log_odds, second.log_odds, tie_band) if soft else None
        rows.append(
            {
                "index": i,
                "prompt": prompt,
                "policy_response": policy_responses[i],
                "baseline_response": baseline_responses[i],
                "policy_first": _verdict_record(first),
                "baseline_first": _verdict_record(second),
                "soft_margin": soft_margin(first.log_odds, second.log_odds) if first is not None and soft else None,
                "hard_outcome": hard_outcome,
                "soft_outcome": soft_result,
                "outcome": soft_result if soft else hard_outcome,
            }
        )
    return rows, rule


def _words(text: str) -> int:
    return len(text.split())


@label_free("judged outcomes of generated responses, no preference label of the data")
def length_breakdown(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean response length (words) of each side, and the ties-as-½ win rate split by which side is longer.

    A judge that favours length shows a higher win rate where the policy's response is the longer one.
    """
    lengths = {
        "policy_mean_words": float(np.mean([_words(r["policy_response"]) for r in rows])) if rows else float("nan"),
        "baseline_mean_words": float(np.mean([_words(r["baseline_response"]) for r in rows]))
        if rows
        else float("nan"),
    }
    judged = [r for r in rows if r["outcome"] in ("win", "tie", "loss")]
    for name, keep in (
        ("policy_longer", lambda r: _words(r["policy_response"]) > _words(r["baseline_response"])),
        ("policy_not_longer", lambda r: _words(r["policy_response"]) <= _words(r["baseline_response"])),
    ):
        part = [OUTCOME_SCORES[r["outcome"]] for r in judged if keep(r)]
        lengths[name] = {"n": len(part), "win_rate_half_ties": float(np.mean(part)) if part else float("nan")}
    return lengths


@label_free("judged outcomes of generated responses, no preference label of the data")
def summarize_rows(rows: list[dict]) -> dict:
    """Overall (rule in use and hard rule), per-category and length summaries of judged rows."""
    categories = sorted({r["category"] for r in rows})
    return {
        "overall": summarize_outcomes([r["outcome"] for r in rows]).to_dict(),
        "overall_hard": summarize_outcomes([r["hard_outcome"] for r in rows]).to_dict(),
        "per_category": {
            category: summarize_outcomes([r["outcome"] for r in rows if r["category"] == category]).to_dict()
            for category in categories
        },
        "lengths": length_breakdown(rows),
    }


def _calibrate(judge, test, calibration_pairs, out, tie_band, labels_public: bool) -> dict | None:
    """The judge's gold accuracy on the split's chosen/rejected pairs (None when skipped or unavailable)."""
    if calibration_pairs == 0 or not {"chosen", "rejected"} <= set(test.column_names):
        return None
    # Gold pairs come from the whole split, independent of how many prompts are evaluated.
    calibration = calibrate_judge(judge, test, calibration_pairs, out, tie_band, labels_public=labels_public)
    logger.info("judge calibration: %s", calibration)
    return calibration


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")


def _responses(role: str, model: str, prompts: list, settings: dict, given: dict | None) -> list[str]:
    """The given responses of ``role`` (checked against the prompts), or freshly generated ones."""
    if given is None or role not in given:
        return generate_responses(model, prompts, desc=role, **settings)
    if len(given[role]) != len(prompts):
        raise ValueError(f"responses[{role!r}] has {len(given[role])} responses for {len(prompts)} prompts.")
    return list(given[role])


@reads_labels(
    "test",
    public="labels_public",
    reader="evaluate_win_rate (the judge's calibration, calibration.jsonl)",
    declare="labels_public=True (or calibration_pairs=0 to skip calibration)",
    when=lambda arguments: arguments["calibration_pairs"] != 0,
    trigger={"calibration_pairs": None},
)
def evaluate_win_rate(
    policy: str,
    baseline: str,
    test: datasets.Dataset,
    judge: PairwiseJudge,
    out: str | Path,
    *,
    generation: GenerationSettings = GenerationSettings(),
    max_prompts: int | None = None,
    calibration_pairs: int | None = 0,
    tie_band: float = 0.0,
    label: dict[str, str] | None = None,
    responses: dict[str, list[str]] | None = None,
    labels_public: bool = False,
) -> EvaluationResult:
    """Generate with both models, judge every pair in both orders, and write the report.

    Args:
        policy, baseline: model paths or hub ids (``embedded`` works).
        test: the test split (``prompt`` column; ``category`` is used for the breakdown; ``chosen``/
            ``rejected`` for calibration).
        judge: any :class:`PairwiseJudge`.
        calibration_pairs: gold pairs to score the judge on first (None = all, 0 = skip).
        tie_band: the soft rule's tie band on the mean log-odds (see :mod:`squarechipo.judge.stats`).
        label: free-form tags stored in the summary (e.g. ``{"setting": "CTL", "method": "square_chipo"}``)
            for :func:`squarechipo.evaluation.report.aggregate_runs`.
        responses: responses already generated with ``generation`` to the (first ``max_prompts``) prompts, by
            role (``policy``, ``baseline``); a role not given is generated here (so judges can share one).
        labels_public: the split's labels are public (gold pairs): calibration may read them. Otherwise calibration
            needs a released split (:func:`squarechipo.privacy.door.require_released_or_public`).
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    calibration = _calibrate(judge, test, calibration_pairs, out, tie_band, labels_public)
    if max_prompts is not None:
        test = test.select(range(min(max_prompts, len(test))))
    prompts = list(test["prompt"])
    settings = asdict(generation)
    policy_responses = _responses("policy", policy, prompts, settings, responses)
    baseline_responses = _responses("baseline", baseline, prompts, settings, responses)
    rows, rule = judge_pairs(
        judge, [prompt_text(p) for p in prompts], policy_responses, baseline_responses, tie_band=tie_band
    )
    categories = test["category"] if "category" in test.column_names else ["all"] * len(rows)
    for row, category in zip(rows, categories):
        row["category"] = category
    _write_jsonl(out / "judgments.jsonl", rows)
    summary = {
        "policy": policy,
        "baseline": baseline,
        "judge": judge.name,
        "template": getattr(getattr(judge, "template", None), "name", None),
        "generation": settings,
        "label": label or {},
        "decision_rule": rule,
        "tie_band": tie_band,
        **summarize_rows(rows),
        "calibration": calibration,
    }
    return _written(summary, out, rows)


def _written(summary: dict, out: Path, rows: list[dict]) -> EvaluationResult:
    """The summary, report and chart written into ``out``."""
    (out / "summary.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False), encoding="utf-8")
    write_report(summary, out / "report.md")
    write_chart(summary, out / "win_rates.png")
    return EvaluationResult(summary=summary, out=out, rows=rows)
