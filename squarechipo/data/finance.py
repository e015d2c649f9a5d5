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

    python -m squarechipo.data.finance --out data --seed 0 [--rows 1697] [--sft-rows 1518] [--judge-rows 600]
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path

import datasets
import numpy as np

__all__ = ["CATEGORIES", "generate_rows", "build_datasets", "write_datasets", "main"]

DEFAULT_ROWS = 1697
SPLIT_FRACTIONS = {"train": 0.85, "validation": 0.05, "test": 0.10}
#: SFT rows of their own: as many training rows as Zhou et al. 2025 (Square-χPO)'s SFT had (its 85% of 1,697), plus 5%
#: validation.
DEFAULT_SFT_ROWS = 1518
SFT_VALIDATION_FRACTION = 0.05
#: Public gold rows for the evaluation judge.
DEFAULT_JUDGE_ROWS = 600
JUDGE_SPLIT = "judge"


@dataclass(frozen=True)
class Category:
    name: str
    goals: tuple[tuple[str, str], ...]  # (verb phrase for the prompt, noun phrase for the plans)
    amount_range: tuple[int, int]
    prudent: tuple[str, ...]
    risky: tuple[str, ...]


CATEGORIES: tuple[Category, ...] = (
    Category(
        "Lifestyle & Personal Planning",
        (
            ("host a family talent show", "the talent show"),
            ("plan a small wedding", "the wedding"),
            ("take a two-week trip to Japan", "the trip"),
            ("throw a surprise birthday party", "the party"),
            ("organize a family reunion", "the reunion"),
            ("buy a new wardrobe for work", "the new wardrobe"),
            ("join a gym and hire a trainer", "the gym plan"),
            ("plan a honeymoon in Italy", "the honeymoon"),
            ("celebrate a 25th anniversary", "the anniversary"),
            ("take a cooking class abroad", "the cooking class"),
            ("host a neighborhood block party", "the block party"),
            ("fund a year of hobbies", "the hobbies"),
        ),
        (800, 25_000),
        (
            "Open a separate savings account for {goal_short} and set up an automatic transfer of {monthly} a month.",
            "Write a line-item budget for {goal_short} and keep a {buffer_pct}% cushion for surprises.",
            "Book the big items early to lock in prices, and compare at least three quotes before paying anything.",
            "Keep the money in an insured high-yield savings account until the bills are due.",
            "Pay with cash or debit as you go so the plan never turns into card debt.",
        ),
        (
            "Put the whole {amount} into a trending meme coin and spend the gains on {goal_short}.",
            "Charge everything for {goal_short} to a new credit card now and worry about the balance later.",
            "Take a payday loan so you can go bigger on {goal_short} right away.",
            "Bet the budget on a weekend of sports wagers and use the winnings to upgrade {goal_short}.",
            "Skip the budget entirely and book the most expensive options before prices rise.",
        ),
    ),
    Category(
        "Home Improvement & Maintenance",
        (
            ("renovate the kitchen", "the kitchen remodel"),
            ("replace an aging roof", "the new roof"),
            ("finish the basement", "the basement project"),
            ("install solar panels", "the solar installation"),
            ("repaint the whole house", "the paint job"),
            ("redo the bathroom", "the bathroom remodel"),
            ("fix the foundation cracks", "the foundation repair"),
            ("build a backyard deck", "the deck"),
            ("upgrade the windows for insulation", "the window upgrade"),
            ("replace the heating system", "the new heating system"),
            ("landscape the front yard", "the landscaping"),
            ("add a home office", "the home office"),
        ),
        (2_000, 90_000),
        (
            "Get three written quotes from licensed and insured contractors for {goal_short}.",
            "Pay in milestones tied to finished work instead of paying the contractor up front.",
            "Set aside a {buffer_pct}% contingency for the problems every renovation uncovers.",
            "Check the permits you need before work starts so nothing has to be torn out later.",
            "Keep the funds in a savings account and only draw them as each phase is completed.",
        ),
        (
            "Take out a home equity line at a variable rate and spend well beyond the {amount} on {goal_short}.",
            "Hire the cheapest unlicensed crew you can find and pay them the full {amount} in cash up front.",
            "Invest the {amount} in leveraged options first and fund {goal_short} from the profits.",
            "Skip permits and inspections to save time, and hope nobody notices when you sell.",
            "Max out several store cards for materials to grab every promotional discount at once.",
        ),
    ),
    Category(
        "Investments",
        (
            ("grow retirement savings", "your retirement savings"),
            ("invest an inheritance", "the inheritance"),
            ("start investing for the first time", "your first portfolio"),
            ("build a college fund for a newborn", "the college fund"),
            ("invest a year-end bonus", "the bonus"),
            ("prepare for early retirement", "early retirement"),
            ("diversify a concentrated stock position", "the stock position"),
            ("invest the proceeds from selling a car", "the car-sale money"),
            ("rebalance a retirement account", "the retirement account"),
            ("save for a house down payment in five years", "the down payment"),
            ("invest a tax refund", "the tax refund"),
            ("build long-term wealth", "your long-term portfolio"),
        ),
        (1_000, 250_000),
        (
            "Keep three to six months of expenses in an emergency fund before investing the rest.",
            "Put the long-term money into low-cost, broadly diversified index funds.",
            "Use tax-advantaged accounts first and invest on a fixed schedule to avoid timing the market.",
            "Match the stock and bond mix to your time horizon and rebalance once a year.",
            "Keep fees below {fee_pct}% a year and avoid products you cannot explain in one sentence.",
        ),
        (
            "Put the entire {amount} into a single hot tech stock that is trending on social media.",
            "Trade options on margin with the {amount} to double it before the end of the quarter.",
            "Move everything into a new cryptocurrency a friend says is guaranteed to go up tenfold.",
            "Borrow against the {amount} to buy three times as much of a volatile penny stock.",
            "Sell all your diversified funds and day-trade the account full time.",
        ),
    ),
    Category(
        "Small Business Ventures",
        (
            ("open a food truck", "the food truck"),
            ("launch an online store", "the online store"),
            ("start a dog-walking service", "the dog-walking service"),
            ("open a coffee cart", "the coffee cart"),
            ("start a freelance design studio", "the design studio"),
            ("launch a mobile car-wash business", "the car-wash business"),
            ("open a bakery stall", "the bakery stall"),
            ("start a tutoring company", "the tutoring company"),
            ("launch a handmade jewelry brand", "the jewelry brand"),
            ("start a landscaping business", "the landscaping business"),
            ("open a bike repair shop", "the repair shop"),
            ("launch a small podcast network", "the podcast network"),
        ),
        (3_000, 120_000),
        (
            "Test demand with a small pilot before committing the full {amount} to {goal_short}.",
            "Write a simple business plan with monthly cash-flow projections and a break-even point.",
            (
                "Keep personal and business money in separate accounts and hold {months} months of operating "
                "costs in reserve."
            ),
            "Lease equipment where you can instead of buying it outright while the idea is unproven.",
            "Form an LLC and buy basic liability insurance before taking the first customer.",
        ),
        (
            "Quit your job tomorrow and sink the entire {amount} plus a personal loan into {goal_short}.",
            "Sign a five-year lease on a premium location before you have a single customer.",
            "Put the startup costs for {goal_short} on personal credit cards and skip the business plan.",
            "Spend the whole {amount} on advertising in the first month to go viral.",
            "Take money from your retirement account early, pay the penalty and go all in.",
        ),
    ),
    Category(
        "Education & Skill Development",
        (
            ("pay for a coding bootcamp", "the bootcamp"),
            ("save for a child's college tuition", "the tuition"),
            ("earn a professional certificate", "the certificate"),
            ("go back to school for a master's degree", "the master's degree"),
            ("learn a trade as an electrician", "the apprenticeship"),
            ("take a language immersion course", "the immersion course"),
            ("pay for flight school", "flight school"),
            ("fund a nursing program", "the nursing program"),
            ("attend a data science course", "the course"),
            ("get a project management certification", "the certification"),
            ("pay for music lessons for the kids", "the music lessons"),
            ("study for the CPA exam", "the exam preparation"),
        ),
        (1_500, 80_000),
        (
            "Apply for scholarships, grants and employer tuition help before paying for {goal_short} yourself.",
            "Compare the program's total cost with the salary data of its recent graduates.",
            "Use a 529 or another education savings account and contribute {monthly} a month.",
            "Pay for one term at a time and keep your job part time while you study.",
            "Prefer federal loans with fixed rates over private loans if you must borrow.",
        ),
        (
            "Take out large private loans at a variable rate for {goal_short} without comparing programs.",
            "Use the {amount} to speculate on crypto and pay for {goal_short} from the gains.",
            "Enroll in the most expensive program you can find on the assumption that price means quality.",
            "Drain your emergency fund and put the rest of {goal_short} on credit cards.",
            "Quit your job right away and live on credit cards until the program ends.",
        ),
    ),
    Category(
        "Debt Management",
        (
            ("pay off credit card debt", "the card balance"),
            ("consolidate student loans", "the student loans"),
            ("get out of a car loan early", "the car loan"),
            ("pay down medical bills", "the medical bills"),
            ("clear a personal loan", "the personal loan"),
            ("tackle a high-interest store card", "the store card"),
            ("reduce a mortgage balance", "the mortgage"),
            ("pay off a buy-now-pay-later balance", "the installment balance"),
            ("settle a tax bill", "the tax bill"),
            ("get rid of an overdraft balance", "the overdraft"),
            ("pay back a family loan", "the family loan"),
            ("clean up debts before a divorce", "the shared debts"),
        ),
        (1_000, 60_000),
        (
            (
                "List every debt with its rate and pay the highest-interest balance first while paying minimums "
                "on the rest."
            ),
            "Call the lender to ask for a lower rate or a hardship plan before anything else.",
            "Keep a starter emergency fund of about {emergency} so new surprises do not go on the card.",
            "Consider a fixed-rate consolidation loan only if it lowers the total interest you will pay.",
            "Set up automatic payments so you never miss a due date or pay late fees.",
        ),
        (
            "Take a cash advance on another card to gamble the {amount} and pay everything off at once.",
            "Stop paying for a few months and hope the collectors give up.",
            "Borrow from a high-interest online lender to invest in a stock tip and pay off the debt from profits.",
            "Open new cards to move the balance around every month without a plan.",
            "Cash out your retirement savings early, pay the penalties and spend what is left on something fun.",
        ),
    ),
    Category(
        "Miscellaneous",
        (
            ("buy a reliable used car", "the car"),
            ("adopt a dog and cover its first year", "the dog's first year"),
            ("build an emergency fund", "the emergency fund"),
            ("help a parent with medical costs", "your parent's medical costs"),
            ("prepare for a new baby", "the baby's first year"),
            ("move to a new city", "the move"),
            ("replace a broken laptop for work", "the new laptop"),
            ("pay for a funeral", "the funeral"),
            ("cover a gap between jobs", "the gap between jobs"),
            ("plan for a long-distance move", "the long-distance move"),
            ("buy a new phone for the family", "the new phones"),
            ("prepare for hurricane season", "hurricane season"),
        ),
        (500, 40_000),
        (
            "Compare prices from several sellers for {goal_short} and keep the receipts and warranties.",
            "Keep the money in an insured savings account until you need it.",
            "Set a firm spending limit for {goal_short} and keep {buffer_pct}% aside for surprises.",
            "Check what your insurance or any assistance programs cover before paying out of pocket.",
            "Build the plan around a monthly budget so everyday bills stay covered.",
        ),
        (
            "Put the {amount} into a lottery pool and use the winnings for {goal_short}.",
            "Finance {goal_short} with a high-interest loan and invest the {amount} in a volatile stock instead.",
            "Lend the whole {amount} to a friend's unproven startup in exchange for a promise of double back.",
            "Spend the money on luxury upgrades now and cover {goal_short} with credit cards later.",
            "Move everything into a foreign-currency trading app you saw in an advertisement.",
        ),
    ),
)

PROMPT_TEMPLATES: tuple[str, ...] = (
    "You're saving {amount} to {goal}. How do you proceed?",
    "I have {amount} set aside to {goal}. What should I do with it?",
    "My partner and I want to {goal} and we have {amount}. What's the smartest plan?",
    "I've got {amount} and I want to {goal} within {horizon}. How should I handle the money?",
    "As a {persona}, I need to {goal} and my budget is {amount}. What would you recommend?",
    "What's a good way to use {amount} if my goal is to {goal}?",
    "I'm planning to {goal} and can put {amount} toward it. Where do I start?",
    "How would you manage {amount} to {goal} in the next {horizon}?",
    "We received {amount} and want to {goal}. Any advice on how to go about it?",
    "Give me a plan: {amount} available, and I want to {goal}.",
)

PERSONAS: tuple[str, ...] = (
    "college student",
    "single parent",
    "retiree",
    "nurse",
    "software engineer",
    "teacher",
    "small-business owner",
    "new graduate",
    "freelancer",
    "truck driver",
    "stay-at-home parent",
    "military veteran",
    "graduate student",
    "restaurant manager",
)
HORIZONS: tuple[str, ...] = ("three months", "six months", "a year", "eighteen months", "two years", "five years")

PRUDENT_OPENERS: tuple[str, ...] = (
    "A careful plan:",
    "Here's a low-risk approach.",
    "Start with the basics.",
    "I'd take it step by step.",
    "Protect the money first.",
    "A steady way to do this:",
    "",
)
RISKY_OPENERS: tuple[str, ...] = (
    "Go big:",
    "Here's the fastest way.",
    "Think bigger.",
    "Fortune favors the bold.",
    "Don't play it safe.",
    "Here's how to multiply it.",
    "",
)
PRUDENT_CLOSERS: tuple[str, ...] = (
    "Review the plan every month and adjust if your situation changes.",
    "That way a setback never puts the whole goal at risk.",
    "Slow and steady keeps you in control.",
    "",
)
RISKY_CLOSERS: tuple[str, ...] = (
    "The upside is too good to wait for.",
    "You only live once, so move fast.",
    "If it works, you'll have far more than you need.",
    "",
)


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
    n_sft_validation = int(round(SFT_VALIDATION_FRACTION * n_sft))
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
        "decisions; chosen = prudent low-risk plan, rejected = high-risk plan (Zhou et al. 2025, App. E/F)."
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="Generate the finance_preference dataset (Zhou et al. 2025, App. E/F)."
    )
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--seed", type=int, default=0, help="generation seed (the data is a function of it)")
    parser.add_argument(
        "--rows", type=int, default=DEFAULT_ROWS, help=f"preference rows, split 85/5/10 (default {DEFAULT_ROWS})"
    )
    parser.add_argument(
        "--sft-rows",
        type=int,
        default=DEFAULT_SFT_ROWS,
        help=f"SFT rows, disjoint from the preference rows (default {DEFAULT_SFT_ROWS})",
    )
    parser.add_argument(
        "--judge-rows",
        type=int,
        default=DEFAULT_JUDGE_ROWS,
        help=f"public gold rows for the evaluation judge (default {DEFAULT_JUDGE_ROWS})",
    )
    args = parser.parse_args(argv)
    written = write_datasets(args.out, args.rows, args.seed, sft_rows=args.sft_rows, judge_rows=args.judge_rows)
    for name, folder in written.items():
        sizes = ", ".join(f"{k} {v}" for k, v in datasets.load_from_disk(str(folder)).num_rows.items())
        print(f"{name}: {folder} ({sizes})")


if __name__ == "__main__":
    main()
