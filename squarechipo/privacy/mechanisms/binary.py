"""Label mechanisms of the local model as pure functions over binary label arrays.

A label array holds 0/1 values (``bool`` or integer dtype; the output keeps the input dtype).
What a label means is up to the caller: at the dataset level (:mod:`squarechipo.privacy.release.transaction`)
label 1 means "the stored ``rejected`` response is preferred", so the output is the swap mask of
Zhou et al. 2025 (Square-χPO), Appendix E.

Every function takes an explicit :class:`numpy.random.Generator`; none touches global state.
"""

from __future__ import annotations

import numpy as np

from squarechipo.privacy.mechanisms.calibration import check_corruption_rate, flip_probability

__all__ = ["ADVERSARIES", "check_generator", "check_labels", "ctl", "huber_corruption", "ltc", "randomized_response"]

ADVERSARIES: tuple[str, ...] = ("flip", "random", "targeted", "fixed")


def check_labels(labels, num_labels: int = 2, field: str = "labels") -> np.ndarray:
    """The one label coercer: 0..K−1 class indices of integer dtype (bool too when K = 2), unchanged.

    Raises a ValueError naming ``field`` for another dtype or a value outside 0..K−1.
    """
    array = np.asarray(labels)
    if array.dtype == np.bool_ and num_labels == 2:
        return array
    if not np.issubdtype(array.dtype, np.integer):
        kind = "a 0/1 array of bool or integer dtype" if num_labels == 2 else "integer class indices"
        raise ValueError(f"{field} must be {kind} (got dtype {array.dtype}).")
    if array.size and (array.min() < 0 or array.max() >= num_labels):
        if num_labels == 2:
            raise ValueError(f"{field} must contain only 0 and 1 (found values outside {{0, 1}}).")
        raise ValueError(f"{field} must lie in 0..{num_labels - 1} (K = {num_labels}).")
    return array


def check_generator(rng: np.random.Generator) -> None:
    if not isinstance(rng, np.random.Generator):
        raise TypeError(
            f"rng must be a numpy.random.Generator (got {type(rng).__name__}); "
            "use numpy.random.default_rng() for OS entropy or default_rng(seed) for simulation."
        )


def _restore_dtype(result_bool: np.ndarray, like: np.ndarray) -> np.ndarray:
    return result_bool if like.dtype == np.bool_ else result_bool.astype(like.dtype)


def randomized_response(labels: np.ndarray, epsilon: float | None, rng: np.random.Generator) -> np.ndarray:
    """Randomized response RR_ε: flip each label independently with probability 1/(1+e^ε).

    ε-label-LDP for binary labels (Zhou et al. 2025 (Square-χPO), §3, eq. (3);
    Chowdhury et al. 2024 (private reward estimation), §3). ``epsilon=None``/``inf`` returns a copy.
    """
    check_generator(rng)
    array = check_labels(labels)
    q = flip_probability(epsilon)
    if q == 0.0:
        return array.copy()
    flips = rng.random(array.shape) < q
    return _restore_dtype(array.astype(np.bool_) ^ flips, array)


def _adversary_labels(
    adversary: str,
    current: np.ndarray,
    truth: np.ndarray,
    rng: np.random.Generator,
    target: np.ndarray | None,
    fixed_labels: np.ndarray | None,
) -> np.ndarray:
    """The label each adversary writes into a contaminated row (boolean array)."""
    if adversary == "flip":
        return ~truth
    if adversary == "random":
        return rng.random(truth.shape) < 0.5
    if adversary == "targeted":
        if target is None:
            raise ValueError("adversary='targeted' needs target: a boolean row mask of the rows to attack.")
        mask = np.asarray(target)
        if mask.dtype != np.bool_ or mask.shape != truth.shape:
            raise ValueError(
                f"target must be a boolean mask with one entry per label (got dtype {mask.dtype}, "
                f"shape {mask.shape}, expected {truth.shape})."
            )
        return np.where(mask, ~truth, current)
    if adversary == "fixed":
        if fixed_labels is None:
            raise ValueError(
                "adversary='fixed' needs fixed_labels: the label the adversary always writes "
                "(e.g. the index of the longer or of the first response)."
            )
        fixed = check_labels(fixed_labels, field="fixed_labels").astype(np.bool_)
        if fixed.shape != truth.shape:
            raise ValueError(f"fixed_labels has shape {fixed.shape}; expected {truth.shape}.")
        return fixed
    raise ValueError(f"adversary must be one of {ADVERSARIES} (got {adversary!r}).")


def huber_corruption(
    labels: np.ndarray,
    corruption_rate: float,
    rng: np.random.Generator,
    *,
    adversary: str = "flip",
    true_labels: np.ndarray | None = None,
    target: np.ndarray | None = None,
    fixed_labels: np.ndarray | None = None,
) -> np.ndarray:
    """α-Huber contamination: each label is replaced independently, w.p. α, by the adversary's label.

    Zhou et al. 2025 (Square-χPO), §3 (corruption model; Appendix E uses ``flip``). Adversaries:

    - ``flip``: the wrong label with respect to ``true_labels`` (default: ``labels``);
    - ``random``: a fair coin;
    - ``targeted``: the wrong label on rows where ``target`` is True; contaminated rows outside
      the target keep their label (the adversary does not pick which rows are contaminated —
      that is the Huber model — it only decides what to write);
    - ``fixed``: always ``fixed_labels`` (e.g. "prefer the longer response").

    ``true_labels`` matters in LTC, where the adversary acts on privatized labels but its
    ``flip`` still means "wrong with respect to the truth", as in the mask of Zhou et al. 2025 (Square-χPO), App. E.
    """
    check_generator(rng)
    array = check_labels(labels)
    alpha = check_corruption_rate(corruption_rate)
    if alpha == 0.0:
        return array.copy()
    truth = array if true_labels is None else check_labels(true_labels, field="true_labels")
    if truth.shape != array.shape:
        raise ValueError(f"true_labels has shape {truth.shape}; expected {array.shape}.")
    current = array.astype(np.bool_)
    contaminated = rng.random(array.shape) < alpha
    written = _adversary_labels(adversary, current, truth.astype(np.bool_), rng, target, fixed_labels)
    return _restore_dtype(np.where(contaminated, written, current), array)


def ctl(
    true_labels: np.ndarray, epsilon: float | None, corruption_rate: float, rng: np.random.Generator, **adversary
) -> np.ndarray:
    """CTL — corruption, then local DP (Zhou et al. 2025 (Square-χPO), §3; App. E: mask = 1 w.p. α, then flip w.p.
    1/(1+e^ε)).

    ``adversary`` takes the keyword arguments of :func:`huber_corruption` (``adversary``, ``target``,
    ``fixed_labels``). With the ``flip`` adversary the final wrong-label rate is α + q − 2αq, q = 1/(1+e^ε).
    """
    corrupted = huber_corruption(true_labels, corruption_rate, rng, **adversary)
    return randomized_response(corrupted, epsilon, rng)


def ltc(
    true_labels: np.ndarray, epsilon: float | None, corruption_rate: float, rng: np.random.Generator, **adversary
) -> np.ndarray:
    """LTC — local DP, then corruption (Zhou et al. 2025 (Square-χPO), §3; App. E: flip w.p. 1/(1+e^ε), then mask = 1
    w.p. α).

    ``adversary`` as in :func:`ctl`. The adversary's ``flip`` is wrong with respect to the true
    labels. With it the final wrong-label rate is α + q − αq: worse than CTL by αq.
    """
    privatized = randomized_response(true_labels, epsilon, rng)
    return huber_corruption(privatized, corruption_rate, rng, true_labels=true_labels, **adversary)
