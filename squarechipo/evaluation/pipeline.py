"""Win rate of a policy against a baseline, judged pairwise in both orders (003 App. E, DESIGN.md §6).

Writes into ``out``:

- ``judgments.jsonl``: one line per test prompt — prompt, category, both responses, the verdict and
  the judge's raw reply for each order, and the outcome (win / tie / loss / invalid);
- ``calibration.jsonl``: the judge on gold pairs (the split's own chosen vs rejected), both orders;
- ``summary.json``: win/tie/loss rates with 95% Wilson intervals, per category, and the calibration;
- ``report.md`` and ``win_rates.png``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import datasets

from squarechipo.evaluation.generation import generate_responses, prompt_text
from squarechipo.evaluation.report import write_chart, write_report
from squarechipo.judge.base import PairwiseJudge
from squarechipo.judge.stats import calibrate, pair_outcome, summarize_outcomes

__all__ = ["GenerationSettings", "evaluate_win_rate"]

logger = logging.getLogger("squarechipo")


@dataclass(frozen=True)
class GenerationSettings:
    max_new_tokens: int = 128
    batch_size: int = 8
    do_sample: bool = False
    temperature: float = 0.7
    top_p: float = 0.95
    seed: int = 0


@dataclass
class EvaluationResult:
    summary: dict[str, Any]
    out: Path
    rows: list[dict[str, Any]] = field(repr=False, default_factory=list)


def _response_text(response) -> str:
    return response if isinstance(response, str) else "\n".join(m["content"] for m in response if m.get("role") == "assistant")


def _calibration(judge: PairwiseJudge, test: datasets.Dataset, n_pairs: int | None, out: Path) -> dict[str, Any]:
    gold = test.select(range(min(n_pairs or len(test), len(test))))
    prompts = [prompt_text(p) for p in gold["prompt"]]
    chosen = [_response_text(c) for c in gold["chosen"]]
    rejected = [_response_text(r) for r in gold["rejected"]]
    chosen_first = judge.verdicts(prompts, chosen, rejected)
    rejected_first = judge.verdicts(prompts, rejected, chosen)
    with open(out / "calibration.jsonl", "w", encoding="utf-8") as handle:
        for p, c, r, v1, v2 in zip(prompts, chosen, rejected, chosen_first, rejected_first):
            record = {"prompt": p, "chosen": c, "rejected": r, "chosen_first": asdict(v1), "rejected_first": asdict(v2)}
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    return calibrate([v.choice for v in chosen_first], [v.choice for v in rejected_first]).to_dict()


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
    label: dict[str, str] | None = None,
) -> EvaluationResult:
    """Generate with both models, judge every pair in both orders, and write the report.

    Args:
        policy, baseline: model paths or hub ids (``embedded`` works).
        test: the test split (``prompt`` column; ``category`` is used for the breakdown; ``chosen``/
            ``rejected`` for calibration).
        judge: any :class:`PairwiseJudge`.
        calibration_pairs: gold pairs to score the judge on first (None = all, 0 = skip).
        label: free-form tags stored in the summary (e.g. ``{"setting": "CTL", "method": "square_chipo"}``)
            for :func:`squarechipo.evaluation.report.aggregate_runs`.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    calibration = None
    if calibration_pairs != 0 and {"chosen", "rejected"} <= set(test.column_names):
        # Gold pairs come from the whole split, independent of how many prompts are evaluated.
        calibration = _calibration(judge, test, calibration_pairs, out)
        logger.info("judge calibration: %s", calibration)
    if max_prompts is not None:
        test = test.select(range(min(max_prompts, len(test))))
    prompts = list(test["prompt"])
    settings = asdict(generation)
    policy_responses = generate_responses(policy, prompts, desc="policy", **settings)
    baseline_responses = generate_responses(baseline, prompts, desc="baseline", **settings)
    texts = [prompt_text(p) for p in prompts]
    policy_first = judge.verdicts(texts, policy_responses, baseline_responses)
    baseline_first = judge.verdicts(texts, baseline_responses, policy_responses)
    categories = test["category"] if "category" in test.column_names else ["all"] * len(texts)
    rows = []
    for i, text in enumerate(texts):
        outcome = pair_outcome(policy_first[i].choice, baseline_first[i].choice)
        rows.append({
            "index": i,
            "category": categories[i],
            "prompt": text,
            "policy_response": policy_responses[i],
            "baseline_response": baseline_responses[i],
            "policy_first": {"choice": policy_first[i].choice, "raw": policy_first[i].raw},
            "baseline_first": {"choice": baseline_first[i].choice, "raw": baseline_first[i].raw},
            "outcome": outcome,
        })
    with open(out / "judgments.jsonl", "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    per_category = {
        category: summarize_outcomes([r["outcome"] for r in rows if r["category"] == category]).to_dict()
        for category in sorted(set(categories))
    }
    summary = {
        "policy": policy,
        "baseline": baseline,
        "judge": judge.name,
        "template": getattr(getattr(judge, "template", None), "name", None),
        "generation": settings,
        "label": label or {},
        "overall": summarize_outcomes([r["outcome"] for r in rows]).to_dict(),
        "per_category": per_category,
        "calibration": calibration,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False), encoding="utf-8")
    write_report(summary, out / "report.md")
    write_chart(summary, out / "win_rates.png")
    return EvaluationResult(summary=summary, out=out, rows=rows)
