"""Win-rate bookkeeping: position swap, the hard and the soft decision rule, intervals, calibration.

Every pair (policy response P, baseline response S) is judged twice: P shown first, then S shown
first. Two decision rules turn the two verdicts into an outcome for the policy:

- **hard** (:func:`pair_outcome`): P wins only if both orders prefer it, S only if both prefer S;
  disagreeing orders are a tie. A judge with a strong position prior makes every pair a tie.
- **soft** (:func:`soft_outcome`): the mean of the judge's log-odds over the two orders,
  d = ½[(log P(A) − log P(B)) with P first − (log P(A) − log P(B)) with S first]. A constant
  position prior adds the same offset to both log-odds and cancels in d. The policy wins if
  d > tie_band, loses if d < −tie_band, ties otherwise. It needs a judge that reports log-odds
  (the local transformers judge, the reward-model judge, an OpenAI-compatible server with logprobs).

Outcomes: ``win``, ``tie``, ``loss``, ``identical`` (the two responses are the same text, so no
judge is asked; greedy decoding produces these often) and ``invalid`` (a reply that could not be
parsed; counted and reported, excluded from the rates). Rates are reported the way AlpacaEval,
Arena-Hard and MT-Bench do: the win rate that counts a tie (and an identical pair, as AlpacaEval
does) as ½, with a bootstrap 95% interval over prompts, beside the strict win/tie/loss shares with
Wilson intervals. Intervals come from scipy.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass

import numpy as np

from squarechipo.stats import bootstrap_mean_interval, t_interval, wilson_interval

__all__ = [
    "OUTCOMES",
    "OUTCOME_SCORES",
    "Calibration",
    "RateSummary",
    "bootstrap_mean_interval",
    "calibrate",
    "pair_outcome",
    "soft_margin",
    "soft_outcome",
    "summarize_outcomes",
    "t_interval",
    "wilson_interval",
]

OUTCOMES = ("win", "tie", "loss", "identical", "invalid")
#: The policy's score per outcome when ties count as ½ (AlpacaEval also scores identical outputs ½).
OUTCOME_SCORES = {"win": 1.0, "tie": 0.5, "identical": 0.5, "loss": 0.0}


def pair_outcome(policy_first_choice: int | None, baseline_first_choice: int | None) -> str:
    """The hard rule: the policy's outcome from the two verdicts (0 = the first-shown response won).

    ``policy_first_choice`` judges (A = policy, B = baseline); ``baseline_first_choice`` judges (A = baseline, B =
    policy).
    """
    if policy_first_choice is None or baseline_first_choice is None:
        return "invalid"
    policy_wins_first = policy_first_choice == 0
    policy_wins_second = baseline_first_choice == 1
    if policy_wins_first and policy_wins_second:
        return "win"
    if not policy_wins_first and not policy_wins_second:
        return "loss"
    return "tie"


def soft_margin(policy_first_log_odds: float | None, baseline_first_log_odds: float | None) -> float | None:
    """d = ½[log-odds(A) with the policy as A − log-odds(A) with the baseline as A]; None if either is missing.

    d > 0 favours the policy. A position prior b adds b to both log-odds and cancels.
    """
    if policy_first_log_odds is None or baseline_first_log_odds is None:
        return None
    if not (math.isfinite(policy_first_log_odds) and math.isfinite(baseline_first_log_odds)):
        return None
    return 0.5 * (policy_first_log_odds - baseline_first_log_odds)


def soft_outcome(
    policy_first_log_odds: float | None, baseline_first_log_odds: float | None, tie_band: float = 0.0
) -> str:
    """The soft rule: win if d > tie_band, loss if d < −tie_band, tie otherwise (see :func:`soft_margin`)."""
    if tie_band < 0 or not math.isfinite(tie_band):
        raise ValueError(f"tie_band must be finite and >= 0 (got {tie_band}).")
    d = soft_margin(policy_first_log_odds, baseline_first_log_odds)
    if d is None:
        return "invalid"
    return "win" if d > tie_band else "loss" if d < -tie_band else "tie"


@dataclass(frozen=True)
class RateSummary:
    """Counts and rates over valid pairs (identical pairs included, invalid ones excluded).

    ``win_rate_half_ties``: mean score with win 1, tie and identical ½, loss 0, and its bootstrap
    interval over prompts; ``win_rate``/``tie_rate``/``loss_rate``/``identical_rate``: the strict
    shares (they sum to 1), with Wilson intervals.
    """

    n_pairs: int
    n_valid: int
    n_invalid: int
    wins: int
    ties: int
    losses: int
    identical: int
    win_rate_half_ties: float
    win_rate_half_ties_ci: tuple[float, float]
    win_rate: float
    tie_rate: float
    loss_rate: float
    identical_rate: float
    win_ci: tuple[float, float]
    tie_ci: tuple[float, float]
    loss_ci: tuple[float, float]

    def to_dict(self) -> dict:
        return asdict(self)


def summarize_outcomes(outcomes: list[str], rng: np.random.Generator | None = None) -> RateSummary:
    """Rates of a list of outcomes (one per prompt); ``rng`` seeds the bootstrap (default: seed 0)."""
    counts = Counter(outcomes)
    unknown = set(counts) - set(OUTCOMES)
    if unknown:
        raise ValueError(f"unknown outcomes {sorted(unknown)}; expected {OUTCOMES}.")
    valid = sum(counts[o] for o in OUTCOME_SCORES)

    def rate(k: int) -> float:
        return k / valid if valid else float("nan")

    scores = [OUTCOME_SCORES[o] for o in outcomes if o in OUTCOME_SCORES]
    return RateSummary(
        n_pairs=len(outcomes),
        n_valid=valid,
        n_invalid=counts["invalid"],
        wins=counts["win"],
        ties=counts["tie"],
        losses=counts["loss"],
        identical=counts["identical"],
        win_rate_half_ties=float(np.mean(scores)) if scores else float("nan"),
        win_rate_half_ties_ci=bootstrap_mean_interval(scores, rng=rng),
        win_rate=rate(counts["win"]),
        tie_rate=rate(counts["tie"]),
        loss_rate=rate(counts["loss"]),
        identical_rate=rate(counts["identical"]),
        win_ci=wilson_interval(counts["win"], valid),
        tie_ci=wilson_interval(counts["tie"], valid),
        loss_ci=wilson_interval(counts["loss"], valid),
    )


@dataclass(frozen=True)
class Calibration:
    """The judge on gold pairs (chosen vs rejected), each judged in both orders.

    - ``accuracy``: share of single judgments that picked the gold ``chosen``;
    - ``hard_accuracy``: share of pairs where both orders picked it (the hard rule is right);
    - ``soft_accuracy``: share of pairs where the soft rule says ``chosen`` wins (ties are wrong);
      None when the judge reports no log-odds;
    - ``position_bias_rate``: share of valid pairs where the judge picked the same position twice;
    - ``rule``/``rule_accuracy``: the rule the win rate uses (soft when available) and its accuracy,
      the figure printed beside every win rate.
    """

    n_pairs: int
    n_valid: int
    n_invalid: int
    accuracy: float
    accuracy_ci: tuple[float, float]
    hard_accuracy: float
    hard_accuracy_ci: tuple[float, float]
    soft_accuracy: float | None
    soft_accuracy_ci: tuple[float, float] | None
    position_bias_rate: float
    tie_band: float
    rule: str
    rule_accuracy: float
    rule_accuracy_ci: tuple[float, float]

    def to_dict(self) -> dict:
        return asdict(self)


def calibrate(
    chosen_first: list[int | None],
    rejected_first: list[int | None],
    *,
    chosen_first_log_odds: list[float | None] | None = None,
    rejected_first_log_odds: list[float | None] | None = None,
    tie_band: float = 0.0,
) -> Calibration:
    """From the verdicts on (chosen, rejected) and on (rejected, chosen) for the same gold pairs."""
    if len(chosen_first) != len(rejected_first):
        raise ValueError("chosen_first and rejected_first must judge the same pairs.")
    valid = [(a, b) for a, b in zip(chosen_first, rejected_first) if a is not None and b is not None]
    n_valid = len(valid)
    correct_single = sum((a == 0) + (b == 1) for a, b in valid)
    hard = sum(pair_outcome(a, b) == "win" for a, b in valid)
    same_position = sum(a == b for a, b in valid)
    soft_accuracy = soft_ci = None
    if chosen_first_log_odds is not None and rejected_first_log_odds is not None:
        outcomes = [soft_outcome(a, b, tie_band) for a, b in zip(chosen_first_log_odds, rejected_first_log_odds)]
        if all(o != "invalid" for o in outcomes):
            soft = sum(o == "win" for o in outcomes)
            soft_accuracy, soft_ci = (
                soft / len(outcomes) if outcomes else float("nan"),
                wilson_interval(soft, len(outcomes)),
            )
    hard_accuracy = hard / n_valid if n_valid else float("nan")
    hard_ci = wilson_interval(hard, n_valid)
    use_soft = soft_accuracy is not None
    return Calibration(
        n_pairs=len(chosen_first),
        n_valid=n_valid,
        n_invalid=len(chosen_first) - n_valid,
        accuracy=correct_single / (2 * n_valid) if n_valid else float("nan"),
        accuracy_ci=wilson_interval(correct_single, 2 * n_valid),
        hard_accuracy=hard_accuracy,
        hard_accuracy_ci=hard_ci,
        soft_accuracy=soft_accuracy,
        soft_accuracy_ci=soft_ci,
        position_bias_rate=same_position / n_valid if n_valid else float("nan"),
        tie_band=tie_band,
        rule="soft" if use_soft else "hard",
        rule_accuracy=soft_accuracy if use_soft else hard_accuracy,
        rule_accuracy_ci=soft_ci if use_soft else hard_ci,
    )
