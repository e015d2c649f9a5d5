"""The gold-reward protocol: a frozen scalar reward r* defines the truth, for the labels and for the evaluation.

As in the controlled experiments of Gao et al. 2022 (reward over-optimisation) and of Rafailov et al. 2023 (DPO, the
IMDb sentiment experiment), a fixed reward model stands in for the human:

- **labels**: a training pair's clean label comes from the dataset, from argmax r*, or is drawn from
  Bradley–Terry(r*), P(a⁰ ≻ a¹) = σ(r*(x, a⁰) − r*(x, a¹)) (seeded), so the law of the clean label is known
  exactly; the labels then go through the usual release path (RR, Huber corruption, CTL/LTC);
- **evaluation**: a trained policy is scored by r* on its own samples (:mod:`squarechipo.evaluation.policy`).

r* is by default the gold judge of ``recipes/gold_judge.py`` (a Bradley–Terry head on frozen features, fitted
once on public gold pairs); any one-output sequence-classification reward model works.
"""

from __future__ import annotations

import re

import datasets
import numpy as np
from scipy.special import expit

from squarechipo.data.label_roles import releases_labels
from squarechipo.data.text import prompt_text, response_text
from squarechipo.judge.reward_model import RewardModelJudge

__all__ = ["LABEL_SOURCES", "draw_gold_labels", "gold_rewards", "has_loop", "label_with_gold", "relabel"]

#: Where a clean training label comes from.
LABEL_SOURCES = ("dataset", "argmax", "bt")
#: A unit of 2–80 characters repeated back to back at least three times ("1.1.1.", "the the the ").
_LOOP = re.compile(r"(.{2,80}?)\1{2,}", re.DOTALL)


def has_loop(text: str) -> bool:
    """Whether a response falls into a repetition loop: some 2–80-character unit three or more times in a row."""
    return _LOOP.search(text) is not None


def gold_rewards(gold: RewardModelJudge, prompts: list, responses: list) -> np.ndarray:
    """r*(x, a) for each (prompt, response), either format (strings or messages), float64."""
    return gold.rewards([prompt_text(p) for p in prompts], [response_text(r) for r in responses])


def draw_gold_labels(
    reward_first: np.ndarray, reward_second: np.ndarray, source: str, rng: np.random.Generator | None = None
) -> np.ndarray:
    """True where the first response is the preferred one, for each pair.

    ``dataset``: the stored order (all True); ``argmax``: r*(first) ≥ r*(second) (a tie keeps the stored order);
    ``bt``: a Bradley–Terry draw, True with probability σ(r*(first) − r*(second)); it needs ``rng``.
    """
    first, second = np.asarray(reward_first, np.float64), np.asarray(reward_second, np.float64)
    if source == "dataset":
        return np.ones(first.shape, dtype=bool)
    if source == "argmax":
        return first >= second
    if source == "bt":
        if rng is None:
            raise ValueError("label source 'bt' draws the labels: pass a numpy Generator (rng=).")
        return rng.random(first.shape) < expit(first - second)
    raise ValueError(f"label source must be one of {LABEL_SOURCES} (got {source!r}).")


@releases_labels("sets simulated labels (the study's committed draws)")
def relabel(dataset: datasets.Dataset, first_is_chosen: np.ndarray) -> datasets.Dataset:
    """The rows with ``chosen``/``rejected`` swapped where ``first_is_chosen`` is False; other columns kept."""
    keep = np.asarray(first_is_chosen, dtype=bool)
    if keep.shape != (len(dataset),):
        raise ValueError(f"first_is_chosen has shape {keep.shape}; the dataset has {len(dataset)} rows.")
    chosen, rejected = list(dataset["chosen"]), list(dataset["rejected"])
    new_chosen = [c if k else r for c, r, k in zip(chosen, rejected, keep)]
    new_rejected = [r if k else c for c, r, k in zip(chosen, rejected, keep)]
    return (
        dataset.remove_columns(["chosen", "rejected"])
        .add_column("chosen", new_chosen)
        .add_column("rejected", new_rejected, feature=dataset.features["rejected"])
    )


@releases_labels("simulates labels from the gold reward for a study: simulated, public by construction")
def label_with_gold(
    dataset: datasets.Dataset, gold: RewardModelJudge, source: str, rng: np.random.Generator | None = None
) -> tuple[datasets.Dataset, dict]:
    """The rows labelled by r* (``source``: dataset, argmax or bt) and a summary of the labels' law.

    The summary is label-free: the mean |r* gap| of a pair and the mean probability that a BT(r*) labeller
    prefers the higher-reward response, σ(|gap|) (how noisy the clean labels are). Nothing in it depends on
    which response is stored as chosen, so it may be published beside a release; the labels are raw and private.
    """
    if source == "dataset":
        return dataset, {"source": source, "rows": len(dataset)}
    prompts = list(dataset["prompt"])
    first = gold_rewards(gold, prompts, list(dataset["chosen"]))
    second = gold_rewards(gold, prompts, list(dataset["rejected"]))
    keep = draw_gold_labels(first, second, source, rng)
    summary = {
        "source": source,
        "rows": len(dataset),
        "mean_abs_gap": float(np.abs(first - second).mean()),
        "mean_bt_probability_of_the_better": float(expit(np.abs(first - second)).mean()),
    }
    return relabel(dataset, keep), summary
