"""Scalar privacy calibration: the randomized-response flip rate and the debiasing factor c(ε).

Pure functions of the privacy parameters; every other module gets these numbers from here.
"""

from __future__ import annotations

import functools
import logging
import math

logger = logging.getLogger("squarechipo")

#: The smallest ε any mechanism here accepts: below it RR's flip rate is 1/2 to within 2.5e-7 and c(ε) > 2e6, so
#: the labels are coin flips and the debiased loss is noise times millions (at 1e-300 the flip rate is exactly 1/2).
MIN_EPSILON = 1e-6
#: Above this c(ε) (ε below about 0.1) the debiasing warns: the targets' variance grows as c(ε)².
LARGE_DEBIAS_FACTOR = 20.0

__all__ = [
    "MIN_EPSILON",
    "check_epsilon",
    "check_corruption_rate",
    "check_flip_rate",
    "flip_probability",
    "debias_factor",
    "debias_factor_from_flip_rate",
]


def check_epsilon(
    epsilon: float | None, *, field: str = "epsilon", allow_none: bool = True, finite: bool = False
) -> float:
    """The one ε check: validate a privacy budget and return it as a float (``None`` and ``inf`` mean no privacy).

    ``finite=True`` is for mechanisms that need a noise scale (K-ary label DP, the exponential mechanism):
    there ε = ∞ (or None) would release the labels, or the argmin, as they are.

    Raises:
        ValueError: naming ``field`` when ε is NaN, not a number, ≤ 0, or infinite where ``finite``.
    """
    if epsilon is None:
        if allow_none and not finite:
            return math.inf
        raise ValueError(f"{field} is required: pass a positive privacy budget such as {field}=1.0.")
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)):
        raise ValueError(
            f"{field} must be a number (got {epsilon!r} of type {type(epsilon).__name__}); "
            f"pass e.g. {field}=0.5, or {field}=None for no privacy."
        )
    value = float(epsilon)
    if math.isnan(value):
        raise ValueError(
            f"{field} is NaN; pass a positive privacy budget such as {field}=0.5, or None for no privacy."
        )
    if value <= 0:
        raise ValueError(
            f"{field} must be > 0 (got {value}); ε = 0 would release no information at all. "
            f"Pass a positive budget such as {field}=0.5, or {field}=None for no privacy."
        )
    if value < MIN_EPSILON:
        raise ValueError(
            f"{field}={value:g} is below {MIN_EPSILON:g}: randomized response would flip each label with probability "
            f"1/2 − {value / 4:.3g}, so the released labels are coin flips, and the debiasing would multiply them by "
            f"c(ε) ≈ {2 / value:.3g}. Pass a budget of at least {MIN_EPSILON:g} (typically 0.1 to 8), or "
            f"{field}=None for no privacy."
        )
    if finite and math.isinf(value):
        raise ValueError(
            f"{field} must be finite for this mechanism (got {value}); ε = ∞ would release the labels (or the "
            "argmin) as they are without privacy."
        )
    return value


def _check_rate(value: float, field: str, *, upper_inclusive: bool, why: str, example: str) -> float:
    bound = "0.5]" if upper_inclusive else "0.5)"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{field} must be a number in [0, {bound} (got {value!r}).")
    rate = float(value)
    if math.isnan(rate) or rate < 0.0 or rate > 0.5 or (rate == 0.5 and not upper_inclusive):
        raise ValueError(f"{field} must lie in [0, {bound} (got {rate}); {why}. Pass e.g. {field}={example}.")
    return rate


def check_corruption_rate(corruption_rate: float, *, field: str = "corruption_rate") -> float:
    """Validate a Huber corruption rate α ∈ [0, 1/2] (Zhou et al. 2025 (Square-χPO), §3: α-Huber contamination)."""
    return _check_rate(
        corruption_rate,
        field,
        upper_inclusive=True,
        why="above 0.5 the adversary controls the majority label and nothing can be learned",
        example="0.1, or 0 for clean labels",
    )


def check_flip_rate(flip_rate: float, *, field: str = "flip_rate") -> float:
    """Validate a label flip rate ρ ∈ [0, 1/2) as used by the robust (rDPO) loss."""
    return _check_rate(flip_rate, field, upper_inclusive=False, why="at 0.5 the labels carry no signal", example="0.1")


def flip_probability(epsilon: float | None) -> float:
    """Flip rate of randomized response RR_ε: q = 1/(1 + e^ε) (Zhou et al. 2025 (Square-χPO), §3, eq. (3); App. E).

    ``epsilon=None`` or ``inf`` means no privacy and returns 0.
    """
    value = check_epsilon(epsilon)
    if math.isinf(value):
        return 0.0
    # 1/(1+e^ε) written with e^-ε so large ε does not overflow.
    e = math.exp(-value)
    return e / (1.0 + e)


def debias_factor(epsilon: float | None) -> float:
    """c(ε) = (e^ε + 1)/(e^ε − 1) of Zhou et al. 2025 (Square-χPO), Algorithm 1; c(∞) = 1.

    Under RR_ε, E[c(ε)·z̃ | x, a⁰, a¹] = E[z̄] = 2P(a¹ ≻ a⁰) − 1, so c(ε)·z̃ is an unbiased
    regression target (Zhou et al. 2025 (Square-χPO), §3.1, "Converting to ±1 with c(ε) scaling"). Computed as
    1/tanh(ε/2), which is exact and stable for small and large ε.

    Raises:
        ValueError: for ε below :data:`MIN_EPSILON` or NaN (it warns when c(ε) > 20).
    """
    value = check_epsilon(epsilon)
    if math.isinf(value):
        return 1.0
    factor = 1.0 / math.tanh(value / 2.0)
    if factor > LARGE_DEBIAS_FACTOR:
        _warn_large_factor(value, factor)
    return factor


@functools.cache
def _warn_large_factor(epsilon: float, factor: float) -> None:
    """Once per ε: a loss calls :func:`debias_factor` at every step."""
    logger.warning(
        "epsilon=%g gives c(ε) = %.3g: the debiased targets are %.3g times the released labels and their variance "
        "grows as c(ε)², so training is slow and noisy at this budget.",
        epsilon,
        factor,
        factor,
    )


def debias_factor_from_flip_rate(flip_rate: float) -> float:
    """1/(1 − 2ρ): the debiasing factor for labels flipped independently with rate ρ.

    Equals c(ε) when ρ = 1/(1+e^ε); composes multiplicatively over independent flips
    (1 − 2ρ_total = Π(1 − 2ρ_k)), which is how a ledger of several RR releases is debiased.
    """
    value = check_flip_rate(flip_rate)
    return 1.0 / (1.0 - 2.0 * value)
