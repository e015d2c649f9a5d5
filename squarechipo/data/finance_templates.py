"""The finance generator's templates: seven categories of Zhou et al. 2025 (Square-χPO), App. E/F, each with its goals,
amount range and prudent and risky plans, and the phrases that open and close a plan. Data only; the generator is
:mod:`squarechipo.data.finance`."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "Category",
    "CATEGORIES",
    "PROMPT_TEMPLATES",
    "PERSONAS",
    "HORIZONS",
    "PRUDENT_OPENERS",
    "RISKY_OPENERS",
    "PRUDENT_CLOSERS",
    "RISKY_CLOSERS",
]


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
