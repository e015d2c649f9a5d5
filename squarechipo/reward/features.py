"""Frozen-feature linear reward heads with label DP (Chowdhury et al. 2024 (private reward estimation)): features from
a frozen LM, heads from :mod:`linear`.

φ(x, a) is the frozen model's last-layer hidden state at the last token of prompt + response (chat template for
conversational rows). A comparison's feature is the difference φ(x, a⁺) − φ(x, a⁻), clipped to ‖·‖ ≤ L (the L of
Chowdhury et al. 2024 (private reward estimation)'s guarantees). The head θ is then fitted by
:func:`~squarechipo.reward.linear.rr_debiased_mle` on RR-released rows (local label DP,
Chowdhury et al. 2024 (private reward estimation), §4) or by :func:`~squarechipo.reward.linear.objective_perturbation`
on the raw rows (central label DP, Alg. 2).
"""

from __future__ import annotations

import datasets
import numpy as np
import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from squarechipo.privacy.door import reads_labels
from squarechipo.privacy.ledger.debiasing import PrivacySettings
from squarechipo.privacy.mechanisms.calibration import check_epsilon
from squarechipo.reward.linear import (
    mle,
    objective_perturbation,
    rr_debiased_mle,
    sgd_debiased,
    sgd_debiased_averaged,
    strong_convexity,
)

__all__ = [
    "response_features",
    "comparison_features",
    "fit_linear_head",
    "LINEAR_ESTIMATORS",
    "reward_texts",
    "sequence_scores",
]

LINEAR_ESTIMATORS = ("rr_mle", "sgd_rr", "sgd_rr_averaged", "objective_perturbation", "mle")
_LOCAL_ESTIMATORS = ("rr_mle", "sgd_rr", "sgd_rr_averaged")


def reward_texts(tokenizer, prompts, responses, *, append_eos: bool = False) -> list[str]:
    """The text a reward model scores for (x, a): the chat template for messages, prompt + response for strings.

    This is TRL's ``RewardTrainer`` layout for conversational and standard rows; ``append_eos`` ends a
    standard row with the EOS token as that trainer does (the chat template ends conversational rows).
    """
    eos = (tokenizer.eos_token or "") if append_eos else ""
    texts = []
    for prompt, response in zip(prompts, responses):
        if isinstance(prompt, str):
            texts.append(prompt + response + ("" if response.endswith(eos) else eos))
        else:
            texts.append(tokenizer.apply_chat_template(list(prompt) + list(response), tokenize=False))
    return texts


def _last_hidden_states(model: PreTrainedModel, batch) -> torch.Tensor:
    """The last layer's hidden states (after the final norm), from the decoder alone where the model has one: the
    language-model head's logits (positions × vocabulary, 800 MB for 8 × 512 tokens of SmolLM2) would be discarded.
    ``get_decoder`` (not ``base_model_prefix``) also finds the decoder inside a PEFT model."""
    get_decoder = getattr(model, "get_decoder", None)
    decoder = get_decoder() if callable(get_decoder) else None
    if isinstance(decoder, torch.nn.Module) and decoder is not model:
        hidden = getattr(decoder(**batch, use_cache=False), "last_hidden_state", None)
        if hidden is not None:
            return hidden
    return model(**batch, output_hidden_states=True, use_cache=False).hidden_states[-1]


@torch.no_grad()
def response_features(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: list,
    responses: list,
    batch_size: int = 8,
    max_length: int = 512,
) -> np.ndarray:
    """φ(x, a): last-layer hidden state at the last real token, float64 (n, hidden)."""
    model.eval()
    device = next(model.parameters()).device
    side = tokenizer.padding_side
    tokenizer.padding_side = "right"
    texts = reward_texts(tokenizer, prompts, responses)
    out = []
    try:
        for start in tqdm(range(0, len(texts), batch_size), desc="frozen features", unit="batch"):
            batch = tokenizer(
                texts[start : start + batch_size],
                return_tensors="pt",
                padding=True,
                truncation=True,
                max_length=max_length,
            ).to(device)
            hidden = _last_hidden_states(model, batch)
            last = batch["attention_mask"].sum(dim=1) - 1
            out.append(hidden[torch.arange(hidden.shape[0]), last].double().cpu())
    finally:
        tokenizer.padding_side = side
    return torch.cat(out).numpy()


@torch.no_grad()
def sequence_scores(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    texts: list[str],
    *,
    batch_size: int = 16,
    max_length: int = 1024,
    desc: str = "scoring",
) -> np.ndarray:
    """The outputs of a sequence-classification model on each text, float64 (n, num_outputs).

    The model pools at the last non-pad token itself (transformers' ``*ForSequenceClassification``),
    so these are exactly the rewards it would report. Texts are sorted by length before batching to
    keep padding small, and the results come back in the input order.
    """
    model.eval()
    device = next(model.parameters()).device
    order = np.argsort([len(t) for t in texts], kind="stable")
    out: np.ndarray | None = None
    for start in tqdm(range(0, len(texts), batch_size), desc=desc, unit="batch", disable=len(texts) <= batch_size):
        index = order[start : start + batch_size]
        batch = tokenizer(
            [texts[i] for i in index],
            return_tensors="pt",
            padding=True,
            truncation=True,
            max_length=max_length,
            add_special_tokens=False,
        ).to(device)
        values = model(**batch, use_cache=False).logits.double().cpu().numpy()
        if out is None:
            out = np.zeros((len(texts), values.shape[1]))
        out[index] = values
    if out is None:
        out = np.zeros((0, 0))
    return out


@reads_labels("dataset", public="labels_public", reader="comparison_features", declare="labels_public=True")
def comparison_features(
    model, tokenizer, dataset: datasets.Dataset, feature_bound: float, *, labels_public: bool = False, **kwargs
) -> np.ndarray:
    """x_i = φ(x, chosen) − φ(x, rejected), clipped to ‖x_i‖ ≤ L. The sign follows the stored label, so the rows
    must be released or their labels declared public (``labels_public``)."""
    chosen = response_features(model, tokenizer, dataset["prompt"], dataset["chosen"], **kwargs)
    rejected = response_features(model, tokenizer, dataset["prompt"], dataset["rejected"], **kwargs)
    diff = chosen - rejected
    norms = np.linalg.norm(diff, axis=1, keepdims=True)
    return diff * np.minimum(1.0, feature_bound / np.maximum(norms, 1e-300))


def fit_linear_head(
    features: np.ndarray,
    estimator: str,
    privacy: PrivacySettings | None,
    *,
    radius: float,
    feature_bound: float,
    epsilon: float | None = None,
    delta: float = 1e-5,
    rng: np.random.Generator | None = None,
    step: float = 1.0,
    strong_convexity_lambda: float | None = None,
) -> np.ndarray:
    """θ (d,) for stored rows (every label reads chosen ≻ rejected).

    Local label DP, on rows released by RR (``privacy`` from their ledger):

    - ``rr_mle``: θ̂_RR of Chowdhury et al. 2024 (private reward estimation), §4, the debiased log loss minimised
      exactly over ‖θ‖ ≤ radius (Thm 4.2);
    - ``sgd_rr``: Chowdhury et al. 2024 (private reward estimation), Algorithm 1 with Theorem 4.5's η_t = 1/(λt), last
      iterate; λ defaults to γ_ε·κ with κ the smallest eigenvalue of the features' second moment (features are public
      under label DP);
    - ``sgd_rr_averaged``: η₀/√t (``step``) with Polyak–Ruppert averaging.

    Central label DP: ``objective_perturbation`` on raw rows with (``epsilon``, ``delta``); needs ``rng``.
    No privacy: ``mle`` (a baseline).
    """
    x = np.asarray(features, dtype=np.float64)[None]
    y = np.ones(x.shape[:2])
    n = x.shape[1]
    if estimator in _LOCAL_ESTIMATORS:
        if privacy is None or privacy.epsilon is None:
            raise ValueError(f"estimator={estimator!r} needs rows released by randomized response (a ledger with ε).")
        if estimator == "rr_mle":
            return rr_debiased_mle(x, y, privacy.epsilon, radius)[0]
        if estimator == "sgd_rr_averaged":
            return sgd_debiased_averaged(x, y, privacy.epsilon, radius, [n], step)[n][0]
        if strong_convexity_lambda is None:
            coverage = float(np.linalg.eigvalsh(x[0].T @ x[0] / n).min())
            strong_convexity_lambda = strong_convexity(privacy.epsilon, feature_bound, radius, coverage)
        return sgd_debiased(x, y, privacy.epsilon, radius, [n], strong_convexity_lambda=strong_convexity_lambda)[n][0]
    if estimator == "objective_perturbation":
        check_epsilon(epsilon, finite=True)
        if rng is None:
            raise ValueError("estimator='objective_perturbation' needs an rng (numpy.random.Generator).")
        if privacy is not None and privacy.ledger is not None:
            raise ValueError("objective perturbation is the central model: give it the raw rows, not released ones.")
        return objective_perturbation(x, y, epsilon, delta, feature_bound, radius, rng)[0]
    if estimator == "mle":
        return mle(x, y, radius)[0]
    raise ValueError(f"estimator must be one of {LINEAR_ESTIMATORS} (got {estimator!r}).")


def _score_head(model: PreTrainedModel) -> torch.nn.Linear:
    head = getattr(model, "score", None)
    if not isinstance(head, torch.nn.Linear):
        raise ValueError(
            f"{type(model).__name__} has no linear `score` head; use a decoder *ForSequenceClassification model."
        )
    return head


def pooled_features(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, texts: list[str], **kwargs
) -> np.ndarray:
    """What the classification head of a sequence classifier sees: the hidden state it pools, (n, hidden)."""
    head = _score_head(model)
    model.score = torch.nn.Identity()
    try:
        return sequence_scores(model, tokenizer, texts, **kwargs)
    finally:
        model.score = head


@reads_labels("dataset", public="labels_public", reader="fit_linear_reward_model", declare="labels_public=True")
def fit_linear_reward_model(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    dataset: datasets.Dataset,
    *,
    radius: float,
    labels_public: bool = False,
    **kwargs,
) -> dict:
    """Fit the ``score`` head of a one-output sequence classifier, in place, as a Bradley–Terry MLE on frozen features.

    x_i = (φ(x, a⁺) − φ(x, a⁻))/s with φ the pooled hidden state and s the median ‖φ(x, a⁺) − φ(x, a⁻)‖;
    θ = :func:`~squarechipo.reward.linear.mle` over ‖θ‖ ≤ ``radius``, and the head's weight is θ/s, so
    r(x, a⁺) − r(x, a⁻) = ⟨θ, x_i⟩. The rows' labels are used as stored and without privacy: this is for
    public labels (an evaluation judge), not a private pipeline. Returns the fit's summary.
    """
    if _score_head(model).out_features != 1:
        raise ValueError(f"a reward model has one output; this one has num_labels={model.config.num_labels}.")
    chosen = pooled_features(model, tokenizer, reward_texts(tokenizer, dataset["prompt"], dataset["chosen"]), **kwargs)
    rejected = pooled_features(
        model, tokenizer, reward_texts(tokenizer, dataset["prompt"], dataset["rejected"]), **kwargs
    )
    diff = chosen - rejected
    scale = float(np.median(np.linalg.norm(diff, axis=1)))
    if not scale > 0:
        raise ValueError("chosen and rejected responses have the same features; nothing to fit.")
    theta = mle(diff[None] / scale, np.ones((1, len(diff))), radius)[0]
    with torch.no_grad():
        model.score.weight.copy_(torch.as_tensor(theta / scale, dtype=model.score.weight.dtype).reshape(1, -1))
        if model.score.bias is not None:
            model.score.bias.zero_()
    margins = diff @ theta / scale
    return {
        "n_rows": len(diff),
        "radius": radius,
        "feature_scale": scale,
        "theta_norm": float(np.linalg.norm(theta)),
        "train_accuracy": float(np.mean(margins > 0)),
    }
