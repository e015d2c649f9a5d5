"""Tolerances for statistical tests: seeded generators and a few standard errors."""

from __future__ import annotations

import math

#: Number of standard errors a Monte Carlo estimate may deviate (two-sided p ≈ 6e-5 under normality).
Z_TOLERANCE = 4.0


def binomial_se(p: float, n: int) -> float:
    """Standard error of a proportion estimated from n Bernoulli(p) draws."""
    return math.sqrt(p * (1.0 - p) / n)
