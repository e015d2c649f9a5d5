"""Preference losses of Zhou et al. 2025 (Square-χPO), Algorithm 1 and its baselines: a *link* × a *loss* on the
margin.

All inputs are summed token log-probabilities of the stored ``chosen`` (a⁺) and ``rejected``
(a⁻) responses under the policy and the reference. Stored rows always read "chosen ≻ rejected"
(z̄ = +1): a privatized or corrupted label is a swapped row.

Numerics. Everything is computed in float32 at least (bf16/fp16 inputs are upcast; float64 stays
float64, which is what ``gradcheck`` and the simulation lab use). The χPO margin needs
e^{ℓ⁺} − e^{ℓ⁻}, and float32 e^ℓ overflows at ℓ ≈ 88.7. Clamping each ℓ before the exponential is
wrong when *both* log-ratios are large: the two frozen terms cancel and h degenerates to DPO's
ℓ⁺ − ℓ⁻ (e.g. ℓ⁺ = 25, ℓ⁻ = 22, β = 0.1, 2R_max = 10: the paper's m is +10, saturated; per-side
clamping at 20 gives 0.3 with a live gradient). So :func:`margins` computes the difference as
sign(d)·e^M·(1 − e^{−|d|}), M = max(ℓ⁺, ℓ⁻), d = ℓ⁺ − ℓ⁻, in log space (L = M + log(1 − e^{−|d|})),
and caps L only where the result cannot change:

- with a clip 2R_max, at log(2R_max/β) + 1: above it β·|h| > 2R_max, so m = ±2R_max exactly and the
  gradient is zero, as in the paper;
- without a clip, at :data:`CHIPO_LOG_RATIO_CLAMP` (= 20): β·e^20 saturates σ for any β ≥ 1e-7, so the
  log loss is unchanged; the capped part's gradient stops (the linear part keeps it);
- in the self-play margin (clipped at ±4 *after* two χPO margins are combined), at
  :data:`SELF_PLAY_LOG_CAP` (= 60): exact wherever float32 can represent the terms.

Up to M = 80 the difference is computed directly (exact value and gradient, including ℓ⁺ = ℓ⁻).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, NamedTuple

import torch
import torch.nn.functional as F

from squarechipo.privacy.mechanisms.calibration import (
    check_flip_rate,
    debias_factor_from_flip_rate,
)

__all__ = [
    "CHIPO_LOG_RATIO_CLAMP",
    "LINKS",
    "METHODS",
    "METHOD_NAMES",
    "Method",
    "PreferenceLossOutput",
    "chipo_difference",
    "chipo_link",
    "dpo_link",
    "log_loss",
    "margins",
    "SATURATED_MARGIN",
    "margin_clip",
    "saturation",
    "preference_loss",
    "plackett_luce_top1_loss",
    "preference_value",
    "robust_log_loss",
    "self_play_margin",
    "self_play_loss",
    "square_loss",
    "SELF_PLAY_CLIP",
    "SELF_PLAY_LOG_CAP",
]

#: Cap on log|e^{ℓ⁺} − e^{ℓ⁻}| in an unclipped χPO margin, and the largest max(ℓ⁺, ℓ⁻) computed directly
#: (see the module docstring).
CHIPO_LOG_RATIO_CLAMP = 20.0
#: Cap on log|e^{ℓ⁺} − e^{ℓ⁻}| inside the self-play margin, which is clipped only after combining two margins.
SELF_PLAY_LOG_CAP = 60.0

Link = Literal["dpo", "chipo"]
Loss = Literal["log", "robust_log", "square"]


@dataclass(frozen=True)
class Method:
    """A named method: which link and which loss."""

    link: Link
    loss: Loss


#: The six named methods.
METHODS: dict[str, Method] = {
    "dpo": Method("dpo", "log"),
    "chipo": Method("chipo", "log"),
    "square_chipo": Method("chipo", "square"),
    "square_dpo": Method("dpo", "square"),
    "rdpo": Method("dpo", "robust_log"),
    "robust_chipo": Method("chipo", "robust_log"),
}
#: Each method's name as the papers and every page write it (tables, claims, plots).
METHOD_NAMES: dict[str, str] = {
    "dpo": "DPO",
    "chipo": "χPO",
    "square_chipo": "Square-χPO",
    "square_dpo": "Square-DPO",
    "rdpo": "rDPO",
    "robust_chipo": "robust χPO",
}


class PreferenceLossOutput(NamedTuple):
    """Per-row ``losses`` and the clipped ``margins`` m = clip(β·h, ±2R_max) (for logging)."""

    losses: torch.Tensor
    margins: torch.Tensor


def _compute_dtype(*tensors: torch.Tensor) -> torch.dtype:
    dtype = torch.float32
    for tensor in tensors:
        dtype = torch.promote_types(dtype, tensor.dtype)
    return dtype


def dpo_link(log_ratio: torch.Tensor) -> torch.Tensor:
    """DPO's implicit reward link g(ℓ) = ℓ (Rafailov et al. 2023 (DPO); Zhou et al. 2025 (Square-χPO), §2, "DPO")."""
    return log_ratio


def chipo_link(log_ratio: torch.Tensor) -> torch.Tensor:
    """χPO's link g(ℓ) = ϕ(e^ℓ) = e^ℓ + ℓ with ϕ(u) = u + log u (Zhou et al. 2025 (Square-χPO), §2, eq. (1), χPO of
    Huang et al. 2024 (χPO)).

    For one response. The exponential sees min(ℓ, 20). Margins do not use this per side: they use
    :func:`chipo_difference`, which stays exact when both log-ratios are large.
    """
    return torch.exp(torch.clamp(log_ratio, max=CHIPO_LOG_RATIO_CLAMP)) + log_ratio


def chipo_difference(chosen_ratio: torch.Tensor, rejected_ratio: torch.Tensor, log_cap: float) -> torch.Tensor:
    """h = g(ℓ⁺) − g(ℓ⁻) = (e^{ℓ⁺} − e^{ℓ⁻}) + (ℓ⁺ − ℓ⁻) for the χPO link (Zhou et al. 2025 (Square-χPO), §2), computed
    stably.

    log|e^{ℓ⁺} − e^{ℓ⁻}| = L = M + log(1 − e^{−|d|}), M = max(ℓ⁺, ℓ⁻), d = ℓ⁺ − ℓ⁻, and where L exceeds
    ``log_cap`` the term is ±e^{log_cap} (see the module docstring for the caps that keep the result exact).
    While M ≤ 80, where float32 holds e^M and its gradient, the difference itself is computed (exact
    value and gradient, d = 0 included); beyond, through L (at d = 0 exactly the term and its gradient
    are then 0: the true gradient e^M > e^80 is not representable anyway).
    """
    d = chosen_ratio - rejected_ratio
    top = torch.maximum(chosen_ratio, rejected_ratio)
    near = top <= _CHIPO_DIRECT_MAX
    direct = torch.exp(torch.where(near, chosen_ratio, 0.0)) - torch.exp(torch.where(near, rejected_ratio, 0.0))
    # log(1 − e^{−|d|}) → −∞ at d = 0: substitute 1 there (masked out of value and gradient), and keep
    # |d| ≥ 1e-18 so the masked-out gradient 1/|d| stays finite in float32.
    gap = torch.where(d == 0, torch.ones_like(d), d.abs().clamp(min=1e-18))
    log_magnitude = torch.where(near, 0.0, top) + torch.log(-torch.expm1(-gap))
    far = torch.where(d == 0, torch.zeros_like(d), torch.sign(d) * torch.exp(torch.clamp(log_magnitude, max=log_cap)))
    # The direct difference is capped the same way (a constant, so no gradient where the cap is active).
    direct = torch.where(direct.detach().abs() > math.exp(log_cap), torch.sign(d) * math.exp(log_cap), direct)
    return torch.where(near, direct, far) + d


#: Largest max(ℓ⁺, ℓ⁻) for which e^{ℓ⁺} − e^{ℓ⁻} is computed directly (float32 holds e^80 ≈ 5.5e34).
_CHIPO_DIRECT_MAX = 80.0
#: The links g by name (Zhou et al. 2025 (Square-χPO), §2): the one table ``Method``, :func:`margins`
#: and the selector check.
LINKS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"dpo": dpo_link, "chipo": chipo_link}


def margins(
    policy_chosen_logps: torch.Tensor,
    policy_rejected_logps: torch.Tensor,
    ref_chosen_logps: torch.Tensor,
    ref_rejected_logps: torch.Tensor,
    *,
    beta: float,
    link: Link,
    clip: float | None = None,
    log_cap: float | None = None,
) -> torch.Tensor:
    """m = clip_{2R_max}(β·h), h = g(ℓ⁺) − g(ℓ⁻), ℓ± = log π(a±|x) − log π_ref(a±|x) (Zhou et al. 2025 (Square-χPO),
    Alg. 1).

    ``clip`` is the full bound 2·R_max (None = no clip); it acts on the difference, as in Zhou et al. 2025 (Square-χPO)
    . ``log_cap`` overrides the χPO cap of the module docstring (default: exact under ``clip``).
    """
    if link not in LINKS:
        raise ValueError(f"link must be one of {tuple(LINKS)} (got {link!r}); chipo is Square-χPO's link.")
    if not (isinstance(beta, (int, float)) and math.isfinite(beta) and beta > 0):
        raise ValueError(f"beta must be a positive finite number (got {beta!r}); a typical value is 0.1.")
    if clip is not None and not (isinstance(clip, (int, float)) and clip > 0):
        raise ValueError(f"clip (= 2·R_max) must be positive or None for no clip (got {clip!r}).")
    dtype = _compute_dtype(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps)
    chosen_ratio = policy_chosen_logps.to(dtype) - ref_chosen_logps.to(dtype)
    rejected_ratio = policy_rejected_logps.to(dtype) - ref_rejected_logps.to(dtype)
    if link == "chipo":
        if log_cap is None:
            log_cap = math.log(clip / beta) + 1.0 if clip is not None else CHIPO_LOG_RATIO_CLAMP
        margin = beta * chipo_difference(chosen_ratio, rejected_ratio, log_cap)
    else:
        margin = beta * (chosen_ratio - rejected_ratio)
    if clip is not None:
        margin = torch.clamp(margin, -clip, clip)
    return margin


def log_loss(margin: torch.Tensor) -> torch.Tensor:
    """−log σ(m): the DPO and χPO loss (Zhou et al. 2025 (Square-χPO), §2; Rafailov et al. 2023 (DPO))."""
    return -F.logsigmoid(margin)


def robust_log_loss(margin: torch.Tensor, flip_rate: float) -> torch.Tensor:
    """[−(1−ρ)·log σ(m) + ρ·log σ(−m)] / (1 − 2ρ): rDPO (Chowdhury et al. 2024 (rDPO)).

    With ρ = 1/(1+e^ε) it is the RR-debiased Bradley–Terry loss of Chowdhury et al. 2024 (private reward estimation)
    (§4, eq. (4)) up to the positive factor 1/(1−2ρ). Unbiased for the clean log loss under flips at rate ρ; unbounded
    below as m → +∞, so use the margin clip (or a norm bound) with it.
    """
    rho = check_flip_rate(flip_rate)
    return (-(1.0 - rho) * F.logsigmoid(margin) + rho * F.logsigmoid(-margin)) / (1.0 - 2.0 * rho)


def square_loss(margin: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """(2σ(m) − 1 − c·z̄)² with z̄ = +1: the Square-χPO loss of Zhou et al. 2025 (Square-χPO), Algorithm 1.

    ``scale`` is c(ε) = (e^ε+1)/(e^ε−1) under randomized response (1 without privacy). Bounded by
    (1 + c)² since 2σ(m) − 1 ∈ [−1, 1].
    """
    return (2.0 * torch.sigmoid(margin) - 1.0 - scale) ** 2


def preference_loss(
    method: str,
    policy_chosen_logps: torch.Tensor,
    policy_rejected_logps: torch.Tensor,
    ref_chosen_logps: torch.Tensor,
    ref_rejected_logps: torch.Tensor,
    *,
    beta: float,
    clip: float | None = None,
    flip_rate=None,
) -> PreferenceLossOutput:
    """Per-row loss of a named method (Zhou et al. 2025 (Square-χPO), Algorithm 1) and its margins.

    Args: method: one of :data:`METHODS` — ``dpo``, ``chipo``, ``square_chipo``, ``square_dpo``, ``rdpo``,
        ``robust_chipo``. policy_*_logps, ref_*_logps: summed log-probs of the stored chosen/rejected responses. beta:
        KL (χ²) regularisation strength β. clip: 2·R_max, the bound on |β·h| (None = no clip): :func:`margin_clip`.
        flip_rate: the one way to say how noisy the labels are: the probability ρ that a label is wrong (None or 0:
        clean), or a :class:`squarechipo.privacy.ledger.ledger.Debiasing` (a ledger's answer). Square losses use c =
        1/(1 − 2ρ) (c(ε) = (e^ε+1)/(e^ε−1) for randomized response at ε, ρ = 1/(1+e^ε):
        :func:`squarechipo.privacy.mechanisms.calibration.flip_probability`); the robust losses use ρ. The plain log
        losses (``dpo``, ``chipo``) do not debias: they are the non-private baselines and ignore it.

    Returns:
        :class:`PreferenceLossOutput` (per-row losses, margins), in float32 or wider.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {tuple(METHODS)} (got {method!r}).")
    rho = _flip_rate(flip_rate)
    spec = METHODS[method]
    margin = margins(
        policy_chosen_logps,
        policy_rejected_logps,
        ref_chosen_logps,
        ref_rejected_logps,
        beta=beta,
        link=spec.link,
        clip=clip,
    )
    if spec.loss == "log":
        losses = log_loss(margin)
    elif spec.loss == "robust_log":
        losses = robust_log_loss(margin, rho)
    else:
        losses = square_loss(margin, debias_factor_from_flip_rate(rho))
    return PreferenceLossOutput(losses=losses, margins=margin)


def _flip_rate(value) -> float:
    """ρ from a flip rate or a ledger's ``Debiasing`` (anything with ``method`` and ``flip_rate``)."""
    if value is None:
        return 0.0
    if hasattr(value, "method") and hasattr(value, "flip_rate"):
        if value.method not in ("flip_rate", "none"):
            raise ValueError(f"these labels are debiased by {value.method}, not a flip rate: use their analyzer.")
        value = value.flip_rate
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"flip_rate must be a number in [0, 0.5) or a Debiasing (got {type(value).__name__}).")
    return check_flip_rate(float(value))


# ----------------------------------------------------------------------------- general preferences

#: clip_4 of Zhou et al. 2025 (Square-χPO), eq. (11): the self-play regression compares clip(f, ±4) with r̂ differences
#: in [−2, 2].
SELF_PLAY_CLIP = 4.0


def preference_value(margin: torch.Tensor) -> torch.Tensor:
    """ℓ = 2σ(m) − 1 = tanh(m/2) ∈ [−1, 1]: a preference score from an antisymmetric margin.

    With m(x, a, b) = s(x, a, b) − s(x, b, a) for any scorer s, ℓ(x, a, b) = −ℓ(x, b, a) by construction: the general
    preference model of Zhou et al. 2025 (Square-χPO), §4 (ℓ = 2P(a ≻ b | x) − 1). The square loss (ℓ − c(ε)·z̄)² of
    Zhou et al. 2025 (Square-χPO), eq. (10) is then :func:`square_loss` on m.
    """
    return 2.0 * torch.sigmoid(margin) - 1.0


def self_play_margin(
    policy_a_logps: torch.Tensor,
    policy_b_logps: torch.Tensor,
    previous_a_logps: torch.Tensor,
    previous_b_logps: torch.Tensor,
    ref_a_logps: torch.Tensor,
    ref_b_logps: torch.Tensor,
    *,
    beta: float,
    eta: float,
) -> torch.Tensor:
    """f = (1 + 1/η)·β·h_χPO,π(x, a, b) − (β/η)·h_χPO,π^t(x, a, b) (Zhou et al. 2025 (Square-χPO), eq. (8)), unclipped.

    h_χPO,π is the χPO margin of π against π_ref (:func:`margins` with the ``chipo`` link);
    ``previous_*`` are the log-probs of the frozen iterate π^t.
    """
    if not (isinstance(eta, (int, float)) and math.isfinite(eta) and eta > 0):
        raise ValueError(
            f"eta (the mirror-descent step size η of Zhou et al. 2025 (Square-χPO), Alg. 3) must be positive and "
            f"finite (got {eta!r})."
        )
    # Unclipped until the combination is clipped at ±4, so both margins keep their large terms (exact
    # cancellation) up to SELF_PLAY_LOG_CAP.
    current = margins(
        policy_a_logps, policy_b_logps, ref_a_logps, ref_b_logps, beta=beta, link="chipo", log_cap=SELF_PLAY_LOG_CAP
    )
    previous = margins(
        previous_a_logps,
        previous_b_logps,
        ref_a_logps,
        ref_b_logps,
        beta=beta,
        link="chipo",
        log_cap=SELF_PLAY_LOG_CAP,
    )
    return (1.0 + 1.0 / eta) * current - previous.to(current.dtype) / eta


def self_play_loss(margin: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """(clip_4(f) − r̂ᵗ_diff)² per row (Zhou et al. 2025 (Square-χPO), Algorithm 3, eq. (11)); ``target`` = r̂ᵗ(x,a) −
    r̂ᵗ(x,b) ∈ [−2, 2]."""
    clipped = torch.clamp(margin, -SELF_PLAY_CLIP, SELF_PLAY_CLIP)
    return (clipped - target.to(clipped.dtype)) ** 2


def plackett_luce_top1_loss(scores: torch.Tensor, label_weights: torch.Tensor) -> torch.Tensor:
    """−Σ_k a_k·log softmax(s)_k per row: the top-1 Plackett–Luce (best-of-K) loss, debiased.

    ``scores`` (n, K) are rewards or implicit rewards of the K responses; ``label_weights`` (n, K) are the one-hot best
    response (clean) or a label-DP analyzer's unbiased weights
    (:func:`squarechipo.privacy.mechanisms.label_dp.k_rr_weights`,
    :func:`~squarechipo.privacy.mechanisms.label_dp.subset_weights`): the loss is linear in the label, so E[loss | y]
    is the clean loss (Chua et al. 2024 (local label DP), §3, the analyzer trick). Like the debiased BT loss it is
    unbounded below; bound the scores (clip or a norm bound).
    """
    if scores.shape != label_weights.shape or scores.ndim != 2:
        raise ValueError(
            f"scores and label_weights must both be (n, K) (got {tuple(scores.shape)} and "
            f"{tuple(label_weights.shape)})."
        )
    dtype = _compute_dtype(scores)
    return -(label_weights.to(dtype) * torch.log_softmax(scores.to(dtype), dim=-1)).sum(dim=-1)


def margin_clip(r_max: float | None) -> float | None:
    """The bound on the margin, 2·R_max (Zhou et al. 2025 (Square-χPO), Alg. 1: m = clip(β·h, ±2R_max)); None for no
    clip. The one definition the trainer, the central selector and the lab use."""
    return None if r_max is None else 2.0 * float(r_max)


#: |m| above which σ'(m) < 1e-4: the logistic and square losses of the table pass (almost) no gradient to the row.
SATURATED_MARGIN = math.log(1e4)


def saturation(margins: torch.Tensor, clip: float | None) -> tuple[float, float]:
    """(the share of rows whose margin sits at the clip ±2R_max, the share that gets no gradient: clipped, or
    |m| > :data:`SATURATED_MARGIN` where σ'(m) < 1e-4). Both the logistic loss −log σ(m) and the square loss
    (2σ(m) − 1 − c)² reach the margin through σ'(m), and the clip's own derivative is 0 outside it."""
    m = margins.detach().float().abs()
    clipped = (m >= clip * (1 - 1e-6)) if clip is not None else torch.zeros_like(m, dtype=torch.bool)
    flat = clipped | (m > SATURATED_MARGIN)
    return float(clipped.float().mean()), float(flat.float().mean())
