"""Generator for the finance_preference dataset of Zhou et al. 2025 (Square-χPO), Appendix E/F.

Each row is a prompt about a financial decision ("You're saving $3,000 to host a family talent show. How do you
proceed?"), a prudent low-risk plan (``chosen``) and a high-risk plan (``rejected``), in one of the seven categories of
Zhou et al. 2025 (Square-χPO). The original data set is not public; this generator rebuilds one of the same shape from
templates, deterministically from a seed.

Guarantees (tested): at least 1,697 rows; no two prompts identical; the label is not predictable
from response length (the longer response is the chosen one about half the time) nor from the
position the responses were shown in (column ``rejected_shown_first``, balanced).

Outputs under ``--out``::

    finance_preference/                 DatasetDict train/validation/test = 85/5/10, standard format,
                                        plus a ``judge`` split (see below)
    finance_preference_conversational/  the same rows as chat messages
    finance_sft/                        prompt + chosen as prompt/completion (standard), train/validation
    finance_sft_conversational/         the same as chat messages
    finance_sft_mixed_conversational/   the SFT rows with the prudent or the risky plan (a fair coin per row):
                                        unlabelled completions, for a starting policy that answers both ways
    jsonl/<name>/<split>.jsonl          every split of the above as JSON Lines

Three disjoint row pools, so that no label leaks between them (no two rows share a prompt):

- the preference rows (train/validation/test): the labels a private pipeline protects;
- the SFT rows: prompt + prudent plan from rows of their own. Zhou et al. 2025 (Square-χPO), App. E builds its SFT data
  from the chosen responses of the *preference* rows; an SFT model trained that way has seen every raw label that the
  pipeline later privatizes, so the ε of the aligned model would be false. Here the SFT policy (the initial policy and
  reference of alignment) never sees a preference row;
- the ``judge`` rows: raw, public labels for training an evaluation instrument (the gold reward-model
  judge of ``recipes/gold_judge.py``). They are never part of a private pipeline.

The three pools are drawn one after another from the same seeded stream, so the preference rows
are the same whatever the sizes of the other two.

Usage::

    squarechipo data finance --out data --seed 0 [--rows 1697] [--sft-rows 1518] [--judge-rows 600]
"""

from __future__ import annotations

import math
from pathlib import Path

import datasets
import numpy as np

from squarechipo.data.finance_templates import (
    CATEGORIES,
    HORIZONS,
    PERSONAS,
    PROMPT_TEMPLATES,
    PRUDENT_CLOSERS,
    PRUDENT_OPENERS,
    RISKY_CLOSERS,
    RISKY_OPENERS,
    Category,
)

__all__ = ["CATEGORIES", "generate_rows", "build_datasets", "write_datasets"]

DEFAULT_ROWS = 1697
SPLIT_FRACTIONS = {"train": 0.85, "validation": 0.05, "test": 0.10}
#: SFT rows of their own: as many training rows as Zhou et al. 2025 (Square-χPO)'s SFT had (its 85% of 1,697), plus 5%
#: validation.
DEFAULT_SFT_ROWS = 1518
SFT_VALIDATION_FRACTION = 0.05
#: Public gold rows for the evaluation judge.
DEFAULT_JUDGE_ROWS = 600
JUDGE_SPLIT = "judge"


def _money(value: float) -> str:
    return f"${value:,.0f}"


def _round_amount(value: float) -> int:
    step = 50 if value < 2_000 else 100 if value < 10_000 else 500 if value < 50_000 else 1_000
    return int(max(step, round(value / step) * step))


def _fill(template: str, amount: int, goal_noun: str, rng: np.random.Generator) -> str:
    return template.format(
        amount=_money(amount),
        goal_short=goal_noun,
        monthly=_money(_round_amount(amount / rng.integers(6, 25))),
        buffer_pct=int(rng.choice([10, 15, 20])),
        fee_pct=rng.choice(["0.2", "0.3", "0.5"]),
        months=int(rng.choice([3, 6, 9])),
        emergency=_money(_round_amount(min(2_000, amount * 0.2))),
    )


def _plan(
    category: Category, amount: int, goal_noun: str, prudent: bool, sentences: int, rng: np.random.Generator
) -> str:
    pool = category.prudent if prudent else category.risky
    openers = PRUDENT_OPENERS if prudent else RISKY_OPENERS
    closers = PRUDENT_CLOSERS if prudent else RISKY_CLOSERS
    picked = rng.choice(len(pool), size=min(sentences, len(pool)), replace=False)
    body = [_fill(pool[i], amount, goal_noun, rng) for i in picked]
    parts = [str(rng.choice(openers)), *body, str(rng.choice(closers))]
    return " ".join(p for p in parts if p)


def _prompt(category: Category, amount: int, goal: str, rng: np.random.Generator) -> str:
    template = PROMPT_TEMPLATES[int(rng.integers(len(PROMPT_TEMPLATES)))]
    return template.format(
        amount=_money(amount), goal=goal, horizon=str(rng.choice(HORIZONS)), persona=str(rng.choice(PERSONAS))
    )


def generate_rows(n_rows: int = DEFAULT_ROWS, seed: int = 0) -> list[dict]:
    """``n_rows`` unique preference rows, deterministic in ``seed``, balanced over the seven categories.

    Length is decoupled from the label: for each row a fair coin decides whether the chosen (prudent)
    plan is the longer one, and plans are redrawn (bounded) until they agree with the coin.
    """
    if n_rows < len(CATEGORIES):
        raise ValueError(f"n_rows must be at least {len(CATEGORIES)} (one per category), got {n_rows}.")
    rng = np.random.default_rng(seed)
    rows: list[dict] = []
    seen: set[str] = set()
    attempts = 0
    while len(rows) < n_rows:
        attempts += 1
        if attempts > 50 * n_rows:
            raise RuntimeError("could not generate enough unique prompts; lower n_rows.")
        category = CATEGORIES[len(rows) % len(CATEGORIES)]
        goal, goal_noun = category.goals[int(rng.integers(len(category.goals)))]
        low, high = category.amount_range
        amount = _round_amount(math.exp(rng.uniform(math.log(low), math.log(high))))
        prompt = _prompt(category, amount, goal, rng)
        if prompt in seen:
            continue
        chosen_longer = bool(rng.random() < 0.5)
        for _ in range(20):
            chosen = _plan(category, amount, goal_noun, True, int(rng.integers(2, 5)), rng)
            rejected = _plan(category, amount, goal_noun, False, int(rng.integers(2, 5)), rng)
            if len(chosen) != len(rejected) and (len(chosen) > len(rejected)) == chosen_longer:
                break
        seen.add(prompt)
        rows.append(
            {
                "id": f"finance-{len(rows):05d}",
                "category": category.name,
                "prompt": prompt,
                "chosen": chosen,
                "rejected": rejected,
                # The order the two plans were shown to the labeller: balanced, so position carries no label.
                "rejected_shown_first": bool(rng.random() < 0.5),
            }
        )
    return rows


def _split(rows: list[dict], seed: int) -> dict[str, list[dict]]:
    order = np.random.default_rng(seed + 1).permutation(len(rows))
    n_train = int(round(SPLIT_FRACTIONS["train"] * len(rows)))
    n_val = int(round(SPLIT_FRACTIONS["validation"] * len(rows)))
    parts = {
        "train": order[:n_train],
        "validation": order[n_train : n_train + n_val],
        "test": order[n_train + n_val :],
    }
    return {name: [rows[i] for i in sorted(idx)] for name, idx in parts.items()}


def _conversational(row: dict) -> dict:
    return {
        **row,
        "prompt": [{"role": "user", "content": row["prompt"]}],
        "chosen": [{"role": "assistant", "content": row["chosen"]}],
        "rejected": [{"role": "assistant", "content": row["rejected"]}],
    }


def _sft(row: dict, conversational: bool, response: str = "chosen") -> dict:
    completion = row[response]
    if conversational:
        return {
            "id": row["id"],
            "category": row["category"],
            "prompt": [{"role": "user", "content": row["prompt"]}],
            "completion": [{"role": "assistant", "content": completion}],
        }
    return {"id": row["id"], "category": row["category"], "prompt": row["prompt"], "completion": completion}


def _mixed_sft(row: dict, seed: int) -> dict:
    """An SFT row whose completion is the prudent or the risky plan, by a fair coin seeded by the row's id.

    It carries no preference (one unlabelled completion), so it can train a starting policy that answers both
    ways: the controlled study's SFT policy, which leaves alignment room to move as in DPO's IMDb experiment.
    """
    coin = np.random.default_rng([seed, int(row["id"].rsplit("-", 1)[1])]).random() < 0.5
    return _sft(row, conversational=True, response="chosen" if coin else "rejected")


def _row_pools(n_rows: int, n_sft: int, n_judge: int, seed: int) -> tuple[dict, dict]:
    """(preference splits incl. ``judge``, SFT splits): disjoint prompts, one seeded stream."""
    rows = generate_rows(n_rows + n_sft + n_judge, seed)
    preference = _split(rows[:n_rows], seed)
    preference[JUDGE_SPLIT] = rows[n_rows + n_sft :]
    sft_rows = rows[n_rows : n_rows + n_sft]
    n_sft_validation = max(1, int(round(SFT_VALIDATION_FRACTION * n_sft)))  # an empty split cannot be saved
    sft = {"train": sft_rows[: n_sft - n_sft_validation], "validation": sft_rows[n_sft - n_sft_validation :]}
    return preference, sft


def build_datasets(
    n_rows: int = DEFAULT_ROWS,
    seed: int = 0,
    *,
    sft_rows: int = DEFAULT_SFT_ROWS,
    judge_rows: int = DEFAULT_JUDGE_ROWS,
) -> dict[str, datasets.DatasetDict]:
    """The DatasetDicts: preference (85/5/10 + ``judge``) and SFT (own rows), standard and conversational, and the
    mixed SFT rows (prudent or risky completion by a fair coin)."""
    if sft_rows < 2 or judge_rows < 1:
        raise ValueError(f"sft_rows must be at least 2 and judge_rows at least 1 (got {sft_rows}, {judge_rows}).")
    splits, sft_splits = _row_pools(n_rows, sft_rows, judge_rows, seed)
    description = (
        f"finance_preference (squarechipo.data.finance, seed {seed}): synthetic prompts about financial "
        "decisions; chosen = prudent low-risk plan, rejected = high-risk plan "
        "(Zhou et al. 2025 (Square-χPO), App. E/F)."
    )

    def make(transform, parts: dict[str, list[dict]]) -> datasets.DatasetDict:
        return datasets.DatasetDict(
            {
                name: datasets.Dataset.from_list(
                    [transform(r) for r in part], info=datasets.DatasetInfo(description=description)
                )
                for name, part in parts.items()
            }
        )

    return {
        "finance_preference": make(lambda r: dict(r), splits),
        "finance_preference_conversational": make(_conversational, splits),
        "finance_sft": make(lambda r: _sft(r, conversational=False), sft_splits),
        "finance_sft_conversational": make(lambda r: _sft(r, conversational=True), sft_splits),
        "finance_sft_mixed_conversational": make(lambda r: _mixed_sft(r, seed), sft_splits),
    }


def write_datasets(
    out: str | Path,
    n_rows: int = DEFAULT_ROWS,
    seed: int = 0,
    *,
    sft_rows: int = DEFAULT_SFT_ROWS,
    judge_rows: int = DEFAULT_JUDGE_ROWS,
) -> dict[str, Path]:
    """Write every dataset as a ``save_to_disk`` folder and as JSONL; returns the folders."""
    out = Path(out)
    written: dict[str, Path] = {}
    for name, data in build_datasets(n_rows, seed, sft_rows=sft_rows, judge_rows=judge_rows).items():
        folder = out / name
        data.save_to_disk(str(folder))
        for split, part in data.items():
            path = out / "jsonl" / name / f"{split}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            part.to_json(str(path), lines=True, force_ascii=False)
        written[name] = folder
    return written
