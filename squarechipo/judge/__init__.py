"""LLM-as-judge: the pairwise interface, two backends, templates and win-rate statistics."""

from squarechipo.judge.base import BasePairwiseJudge, PairwiseJudge, Verdict
from squarechipo.judge.stats import calibrate, pair_outcome, summarize_outcomes, wilson_interval
from squarechipo.judge.templates import (
    FINANCE_TEMPLATE,
    GENERAL_TEMPLATE,
    TEMPLATES,
    JudgeTemplate,
    parse_verdict,
)

__all__ = [
    "BasePairwiseJudge",
    "FINANCE_TEMPLATE",
    "GENERAL_TEMPLATE",
    "JudgeTemplate",
    "PairwiseJudge",
    "TEMPLATES",
    "Verdict",
    "calibrate",
    "pair_outcome",
    "parse_verdict",
    "summarize_outcomes",
    "wilson_interval",
]
