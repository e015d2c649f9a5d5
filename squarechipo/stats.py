"""Statistics every layer may use: intervals for a mean or a proportion, paired tests, Holm's correction, power, the
MDE and Fieller's ratio interval (a leaf module: it imports nothing of the project).

A study compares policies paired twice: by prompt (each policy's samples against the SFT policy's, drawn with the same
generation seeds) and by seed (the methods of a seed share one label release). The unit of inference is the seed: each
seed gives one paired difference, and with a handful of seeds the right distribution is Student's t with n − 1 degrees
of freedom. Power is computed exactly from the noncentral t distribution (scipy), not from the normal approximation,
which is optimistic at small n. Proportions take Wilson's interval, means over prompts Student's t or the bootstrap.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from decimal import ROUND_HALF_UP, Decimal

import numpy as np
from scipy import integrate, optimize, stats

__all__ = [
    "PairedTest",
    "bootstrap_mean_interval",
    "figure",
    "holm",
    "mde",
    "paired_test",
    "power",
    "ratio_interval",
    "seeds_for_power",
    "share_explained",
    "t_interval",
    "verdict",
    "wilson_interval",
]


def figure(value: float, digits: int = 2, *, scale: float = 1.0, signed: bool = False, minus: str = "−") -> str:
    """A figure as every generated result prints it, the one rounding rule: ``value × scale`` rounded half away from
    zero at ``digits`` places on its shortest decimal form (``0.315 × 100`` is 31.5, so 32, where ``f"{31.5:.0f}"``
    of the float product gives 31 and of 32.5 gives 32), with a sign when ``signed`` and ``minus`` for a minus."""
    exact = Decimal(repr(float(value))) * Decimal(repr(float(scale)))
    if not exact.is_finite():
        return str(float(exact))
    rounded = exact.quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP)
    rounded = abs(rounded) if rounded == 0 else rounded  # no −0.00
    return f"{rounded:{'+' if signed else ''}f}".replace("-", minus)


@dataclass(frozen=True)
class PairedTest:
    """mean of the paired differences, its t interval, the two-sided p-value of mean = 0, SD and n."""

    mean: float
    low: float
    high: float
    p_value: float
    sd: float
    n: int

    def to_dict(self) -> dict:
        return asdict(self)


def paired_test(differences: Sequence[float], confidence: float = 0.95) -> PairedTest:
    """Student's t interval and the two-sided one-sample t-test of mean(differences) = 0 (scipy).

    Fewer than 2 values give NaN for every figure but the mean; identical values (SD 0) give a zero-width
    interval and p = 0 unless the mean is 0 too (then p = 1).
    """
    x = np.asarray(differences, dtype=np.float64)
    n = int(x.size)
    if n < 2:
        mean = float(x.mean()) if n else math.nan
        return PairedTest(mean, math.nan, math.nan, math.nan, math.nan, n)
    mean, sd = float(x.mean()), float(x.std(ddof=1))
    if sd == 0.0:
        return PairedTest(mean, mean, mean, 1.0 if mean == 0 else 0.0, 0.0, n)
    result = stats.ttest_1samp(x, 0.0)
    ci = result.confidence_interval(confidence_level=confidence)
    return PairedTest(mean, float(ci.low), float(ci.high), float(result.pvalue), sd, n)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (family-wise error), in the input order; NaN stays NaN.

    Sorted ascending, the k-th smallest of m is multiplied by m − k + 1, then a running maximum keeps the
    adjusted values monotone, and each is capped at 1 (Holm 1979).
    """
    p = np.asarray(p_values, dtype=np.float64)
    valid = np.flatnonzero(~np.isnan(p))
    adjusted = np.full(p.shape, np.nan)
    order = valid[np.argsort(p[valid], kind="stable")]
    m = len(order)
    running = 0.0
    for k, index in enumerate(order):
        running = max(running, min(1.0, (m - k) * p[index]))
        adjusted[index] = running
    return adjusted.tolist()


def power(n: int, effect: float, sd: float, alpha: float = 0.05) -> float:
    """Power of the two-sided paired t-test at level ``alpha`` with ``n`` pairs, true mean ``effect``, SD ``sd``.

    Exact: P(|T| > t_{1−α/2, n−1}) with T noncentral t, n − 1 degrees of freedom, noncentrality effect·√n/sd.
    """
    if n < 2:
        return math.nan
    if sd <= 0:
        return 1.0 if effect != 0 else alpha
    df = n - 1
    critical = stats.t.ppf(1 - alpha / 2, df)
    noncentrality = abs(effect) * math.sqrt(n) / sd
    upper = stats.nct.sf(critical, df, noncentrality)
    lower = stats.nct.cdf(-critical, df, noncentrality)
    if math.isnan(upper) or math.isnan(lower):  # scipy's nct is NaN far in the tails for few df
        upper, lower = _two_tails_by_quadrature(critical, df, noncentrality)
    return float(upper + lower)


def _two_tails_by_quadrature(critical: float, df: int, noncentrality: float) -> tuple[float, float]:
    """P(T > c) and P(T < −c) for T = (Z + δ)/√(V/df), Z normal, V ~ χ²(df): one integral over V each."""

    # The normal tail and the χ² density in closed form: scipy's scalar calls cost ~50× more per point, and quad
    # evaluates thousands of points for each MDE search.
    half = df / 2.0
    log_norm = -half * math.log(2.0) - math.lgamma(half)

    def tail(sign: float) -> float:
        def integrand(v: float) -> float:
            if v <= 0.0:
                return 0.0
            threshold = critical * math.sqrt(v / df)
            density = math.exp(log_norm + (half - 1.0) * math.log(v) - v / 2.0)
            return 0.5 * math.erfc((threshold - sign * noncentrality) / math.sqrt(2.0)) * density

        return integrate.quad(integrand, 0.0, math.inf, limit=200)[0]

    return tail(1.0), tail(-1.0)


def seeds_for_power(effect: float, sd: float, *, target: float = 0.8, alpha: float = 0.05, limit: int = 10_000) -> int:
    """The fewest pairs (≥ 2) whose paired t-test reaches ``target`` power for ``effect`` at SD ``sd``."""
    if not (effect > 0 and sd >= 0):
        raise ValueError(f"effect must be > 0 and sd ≥ 0 (got effect={effect}, sd={sd}).")
    for n in range(2, limit + 1):
        if power(n, effect, sd, alpha) >= target:
            return n
    raise ValueError(f"more than {limit} pairs would be needed for effect {effect} at SD {sd}.")


def mde(n: int, sd: float, *, target: float = 0.8, alpha: float = 0.05) -> float:
    """The minimum detectable difference: the true mean that ``n`` pairs detect with ``target`` power."""
    if n < 2:
        return math.inf
    if sd == 0:
        return 0.0
    high = sd
    while power(n, high, sd, alpha) < target:
        high *= 2
    return float(optimize.brentq(lambda d: power(n, d, sd, alpha) - target, 0.0, high, xtol=1e-10 * sd))


def verdict(test: PairedTest, adjusted_p: float, detectable: float, alpha: float = 0.05, unit: str = "") -> str:
    """ "holds" / "reversed" when the Holm-adjusted p is below ``alpha`` (by the sign of the mean), otherwise
    "not decided at MDE X"."""
    if not math.isnan(adjusted_p) and adjusted_p < alpha:
        return "holds" if test.mean > 0 else "reversed"
    return f"not decided at MDE {detectable:.2f}{unit}"


def share_explained(gains: Sequence[float], length_differences: Sequence[float]) -> dict:
    """How much of a paired gain the length difference explains: least squares gain = a + b·Δlength.

    Returns the slope b, the intercept a (the gain at equal length), R² and the share of the mean gain that the
    mean length difference accounts for, b·mean(Δlength)/mean(gain).
    """
    y = np.asarray(gains, dtype=np.float64)
    x = np.asarray(length_differences, dtype=np.float64)
    if y.size < 3 or np.ptp(x) == 0:
        return {"slope": math.nan, "intercept": float(y.mean()) if y.size else math.nan, "r2": math.nan, "share": 0.0}
    fit = stats.linregress(x, y)
    mean_gain = float(y.mean())
    share = float(fit.slope * x.mean() / mean_gain) if mean_gain != 0 else math.nan
    return {"slope": float(fit.slope), "intercept": float(fit.intercept), "r2": float(fit.rvalue**2), "share": share}


def ratio_interval(numerators: Sequence[float], denominators: Sequence[float], confidence: float = 0.95) -> dict:
    """mean(numerators)/mean(denominators) over paired units, with Fieller's interval (Student's t, n − 1 df).

    Fieller's theorem inverts the t-test of mean(a) − ρ·mean(b) = 0, so it holds where the delta method fails at few
    units. When the denominator's mean is not clearly away from 0 the set is unbounded: low and high are then −inf and
    +inf.
    """
    a, b = np.asarray(numerators, np.float64), np.asarray(denominators, np.float64)
    n = a.size
    ratio = float(a.mean() / b.mean()) if n and b.mean() != 0 else math.nan
    if n < 2:
        return {"ratio": ratio, "low": math.nan, "high": math.nan, "n": int(n)}
    t2 = stats.t.ppf(0.5 + confidence / 2, n - 1) ** 2
    cov = np.cov(a, b, ddof=1) / n
    ma, mb = a.mean(), b.mean()
    qa, qb, qc = mb**2 - t2 * cov[1, 1], -2 * (ma * mb - t2 * cov[0, 1]), ma**2 - t2 * cov[0, 0]
    disc = qb**2 - 4 * qa * qc
    if qa <= 0 or disc < 0:
        return {"ratio": ratio, "low": -math.inf, "high": math.inf, "n": int(n)}
    root = math.sqrt(disc)
    return {"ratio": ratio, "low": float((-qb - root) / (2 * qa)), "high": float((-qb + root) / (2 * qa)), "n": int(n)}


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (scipy); (0, 1) when n = 0."""
    if n == 0:
        return 0.0, 1.0
    if not 0 <= successes <= n:
        raise ValueError(f"successes must lie in [0, n] (got {successes} of {n}).")
    ci = stats.binomtest(int(successes), int(n)).proportion_ci(confidence_level=confidence, method="wilson")
    return float(ci.low), float(ci.high)


def t_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): Student's t interval for a mean over a handful of seeds (n − 1 degrees of freedom).

    For n < 2 there is no interval: low and high are NaN.
    """
    array = np.asarray(values, dtype=np.float64)
    mean = float(array.mean()) if array.size else math.nan
    if array.size < 2:
        return mean, math.nan, math.nan
    half = float(stats.t.ppf(0.5 + confidence / 2, array.size - 1) * array.std(ddof=1) / math.sqrt(array.size))
    return mean, mean - half, mean + half


def bootstrap_mean_interval(
    values: Sequence[float],
    *,
    confidence: float = 0.95,
    n_resamples: int = 4999,
    rng: np.random.Generator | None = None,
) -> tuple[float, float]:
    """Bootstrap interval of the mean over units (prompts), BCa (scipy.stats.bootstrap).

    (nan, nan) for no values; (v, v) when every value is v, where the bootstrap has no spread.
    """
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return math.nan, math.nan
    if np.all(x == x[0]):
        return float(x[0]), float(x[0])
    result = stats.bootstrap(
        (x,),
        np.mean,
        confidence_level=confidence,
        n_resamples=n_resamples,
        method="BCa",
        rng=rng if rng is not None else np.random.default_rng(0),
    )
    return float(result.confidence_interval.low), float(result.confidence_interval.high)
