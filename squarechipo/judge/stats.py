"""Win-rate bookkeeping with position swap, confidence intervals, and judge calibration.

Every pair (policy response P, baseline response S) is judged twice: P shown first, then S shown
first. P wins only if both orders prefer it; S wins only if both prefer S; if the orders disagree
the pair is a tie (the judge followed the position, not the content). A pair where either reply
could not be parsed is ``invalid``: counted and reported, excluded from the rates.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass

__all__ = ["OUTCOMES", "RateSummary", "pair_outcome", "summarize_outcomes", "wilson_interval", "Calibration", "calibrate"]

OUTCOMES = ("win", "tie", "loss", "invalid")


def wilson_interval(successes: int, n: int, confidence_z: float = 1.959963984540054) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (95% by default); (0, 1) when n = 0."""
    if n == 0:
        return 0.0, 1.0
    if not 0 <= successes <= n:
        raise ValueError(f"successes must lie in [0, n] (got {successes} of {n}).")
    p = successes / n
    z2 = confidence_z**2
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = confidence_z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def pair_outcome(policy_first_choice: int | None, baseline_first_choice: int | None) -> str:
    """Outcome for the policy from the two verdicts (0 = the first-shown response won).

    ``policy_first_choice`` judges (A = policy, B = baseline); ``baseline_first_choice`` judges
    (A = baseline, B = policy).
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


@dataclass(frozen=True)
class RateSummary:
    """Counts and rates over valid pairs, with 95% Wilson intervals."""

    n_pairs: int
    n_valid: int
    n_invalid: int
    wins: int
    ties: int
    losses: int
    win_rate: float
    tie_rate: float
    loss_rate: float
    win_ci: tuple[float, float]
    tie_ci: tuple[float, float]
    loss_ci: tuple[float, float]

    def to_dict(self) -> dict:
        return asdict(self)


def summarize_outcomes(outcomes: list[str]) -> RateSummary:
    counts = Counter(outcomes)
    unknown = set(counts) - set(OUTCOMES)
    if unknown:
        raise ValueError(f"unknown outcomes {sorted(unknown)}; expected {OUTCOMES}.")
    valid = counts["win"] + counts["tie"] + counts["loss"]

    def rate(k: int) -> float:
        return k / valid if valid else float("nan")

    return RateSummary(
        n_pairs=len(outcomes),
        n_valid=valid,
        n_invalid=counts["invalid"],
        wins=counts["win"],
        ties=counts["tie"],
        losses=counts["loss"],
        win_rate=rate(counts["win"]),
        tie_rate=rate(counts["tie"]),
        loss_rate=rate(counts["loss"]),
        win_ci=wilson_interval(counts["win"], valid),
        tie_ci=wilson_interval(counts["tie"], valid),
        loss_ci=wilson_interval(counts["loss"], valid),
    )


@dataclass(frozen=True)
class Calibration:
    """The judge on gold pairs (chosen vs rejected), each judged in both orders.

    ``accuracy``: share of single judgments that picked the gold ``chosen``;
    ``consistent_accuracy``: share of pairs where both orders picked it;
    ``position_bias_rate``: share of valid pairs where the judge picked the same position twice.
    """

    n_pairs: int
    n_valid: int
    n_invalid: int
    accuracy: float
    accuracy_ci: tuple[float, float]
    consistent_accuracy: float
    position_bias_rate: float

    def to_dict(self) -> dict:
        return asdict(self)


def calibrate(chosen_first: list[int | None], rejected_first: list[int | None]) -> Calibration:
    """From the verdicts on (chosen, rejected) and on (rejected, chosen) for the same gold pairs."""
    if len(chosen_first) != len(rejected_first):
        raise ValueError("chosen_first and rejected_first must judge the same pairs.")
    valid = [(a, b) for a, b in zip(chosen_first, rejected_first) if a is not None and b is not None]
    n_valid = len(valid)
    correct_single = sum((a == 0) + (b == 1) for a, b in valid)
    consistent = sum(a == 0 and b == 1 for a, b in valid)
    same_position = sum(a == b for a, b in valid)
    return Calibration(
        n_pairs=len(chosen_first),
        n_valid=n_valid,
        n_invalid=len(chosen_first) - n_valid,
        accuracy=correct_single / (2 * n_valid) if n_valid else float("nan"),
        accuracy_ci=wilson_interval(correct_single, 2 * n_valid),
        consistent_accuracy=consistent / n_valid if n_valid else float("nan"),
        position_bias_rate=same_position / n_valid if n_valid else float("nan"),
    )
