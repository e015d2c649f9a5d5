"""Frozen-feature linear reward heads with label DP (000): features from a frozen LM, heads from :mod:`linear`.

φ(x, a) is the frozen model's last-layer hidden state at the last token of prompt + response (chat
template for conversational rows). A comparison's feature is the difference φ(x, a⁺) − φ(x, a⁻),
clipped to ‖·‖ ≤ L (the L of 000's guarantees). The head θ is then fitted by
:func:`~squarechipo.reward.linear.sgd_debiased` on RR-released rows (local label DP, 000 Alg. 1) or by
:func:`~squarechipo.reward.linear.objective_perturbation` on the raw rows (central label DP, Alg. 2).
"""

from __future__ import annotations

import math

import datasets
import numpy as np
import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from squarechipo.reward.linear import mle, objective_perturbation, sgd_debiased
from squarechipo.trainer.privacy_settings import PrivacySettings

__all__ = ["response_features", "comparison_features", "fit_linear_head", "LINEAR_ESTIMATORS"]

LINEAR_ESTIMATORS = ("sgd_rr", "objective_perturbation", "mle")


def _texts(tokenizer, prompts, responses) -> list[str]:
    texts = []
    for prompt, response in zip(prompts, responses):
        if isinstance(prompt, str):
            texts.append(prompt + response)
        else:
            texts.append(tokenizer.apply_chat_template(list(prompt) + list(response), tokenize=False))
    return texts


@torch.no_grad()
def response_features(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: list, responses: list,
                      batch_size: int = 8, max_length: int = 512) -> np.ndarray:
    """φ(x, a): last-layer hidden state at the last real token, float64 (n, hidden)."""
    model.eval()
    device = next(model.parameters()).device
    side = tokenizer.padding_side
    tokenizer.padding_side = "right"
    texts = _texts(tokenizer, prompts, responses)
    out = []
    try:
        for start in tqdm(range(0, len(texts), batch_size), desc="frozen features", unit="batch"):
            batch = tokenizer(texts[start : start + batch_size], return_tensors="pt", padding=True, truncation=True,
                              max_length=max_length).to(device)
            hidden = model(**batch, output_hidden_states=True, use_cache=False).hidden_states[-1]
            last = batch["attention_mask"].sum(dim=1) - 1
            out.append(hidden[torch.arange(hidden.shape[0]), last].double().cpu())
    finally:
        tokenizer.padding_side = side
    return torch.cat(out).numpy()


def comparison_features(model, tokenizer, dataset: datasets.Dataset, feature_bound: float, **kwargs) -> np.ndarray:
    """x_i = φ(x, chosen) − φ(x, rejected), clipped to ‖x_i‖ ≤ L (rows as stored: released or raw)."""
    chosen = response_features(model, tokenizer, dataset["prompt"], dataset["chosen"], **kwargs)
    rejected = response_features(model, tokenizer, dataset["prompt"], dataset["rejected"], **kwargs)
    diff = chosen - rejected
    norms = np.linalg.norm(diff, axis=1, keepdims=True)
    return diff * np.minimum(1.0, feature_bound / np.maximum(norms, 1e-300))


def fit_linear_head(features: np.ndarray, estimator: str, privacy: PrivacySettings | None, *, radius: float,
                    feature_bound: float, epsilon: float | None = None, delta: float = 1e-5,
                    rng: np.random.Generator | None = None, step: float = 1.0) -> np.ndarray:
    """θ (d,) for stored rows (every label reads chosen ≻ rejected).

    - ``sgd_rr``: the rows were released by RR (``privacy`` from their ledger): one debiased SGD pass.
    - ``objective_perturbation``: raw rows under central label DP with (``epsilon``, ``delta``); needs ``rng``.
    - ``mle``: no privacy (a baseline).
    """
    x = np.asarray(features, dtype=np.float64)[None]
    y = np.ones(x.shape[:2])
    if estimator == "sgd_rr":
        if privacy is None or privacy.epsilon is None:
            raise ValueError("estimator='sgd_rr' needs rows released by randomized response (a ledger with ε).")
        return sgd_debiased(x, y, privacy.epsilon, radius, [x.shape[1]], step)[x.shape[1]][0]
    if estimator == "objective_perturbation":
        if epsilon is None or not (0 < epsilon < math.inf) or rng is None:
            raise ValueError("estimator='objective_perturbation' needs a finite epsilon > 0 and an rng.")
        if privacy is not None and privacy.ledger is not None:
            raise ValueError("objective perturbation is the central model: give it the raw rows, not released ones.")
        return objective_perturbation(x, y, epsilon, delta, feature_bound, radius, rng)[0]
    if estimator == "mle":
        return mle(x, y, radius)[0]
    raise ValueError(f"estimator must be one of {LINEAR_ESTIMATORS} (got {estimator!r}).")
