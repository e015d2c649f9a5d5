"""A privacy budget a team shares: the registry refuses a release that would spend more ε than the custodian allowed.

A budget bounds the composed ε of every row (basic composition over the registry's releases of it, near-copies
counted, as :func:`squarechipo.privacy.release.registry.earlier_releases` sums them) or, with ``unit``, of every
privacy unit of that column. One applies to a release by scope, the narrowest first: the release's ``dataset``
(``--dataset NAME``), then its declared privacy unit (``--unit COLUMN``), then the registry's (no scope). With none
set, nothing is bounded (one release per rows, ``rerelease`` composes), as before budgets.

Only the custodian sets one: an entry is sealed and signed with the signing key (:mod:`squarechipo.trust.keys`),
names the registry it belongs to, and every reader checks its signature with the trusted keys, so an entry edited in
the file by hand, or copied from another registry, is refused (fail closed: no release is made against it). On a
team's server only the custodian's role may insert one (``registry grant``). Entries are appended, never replaced:
the newest of a scope is in force, so a budget is raised or lowered by setting it again; lowered below what was
spent, it keeps the earlier releases and refuses new ones. The check runs twice: before the noise is drawn (nothing
drawn for a refused release), and in the transaction that enters the release (two machines at once cannot both
pass). The ledger of every release made under a budget records its scope, its ε and what remained after it.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
from dataclasses import dataclass
from typing import Any

from squarechipo.data.database import Database
from squarechipo.privacy.release.registry_schema import RegistryError
from squarechipo.trust.keys import signing_key
from squarechipo.trust.seals import IntegrityError, check_seal, seal

__all__ = [
    "BUDGET_FORMAT",
    "BudgetAsk",
    "BUDGET_TABLES",
    "Budget",
    "budgets_in_force",
    "create_budget_tables",
    "enforce",
    "new_entry",
    "parse_epsilon",
    "pick",
    "scope_of",
]

BUDGET_FORMAT = "squarechipo.privacy_budget/1"
#: Budget entries (appended, never changed), and the dataset and unit each release named (what a scope reads).
BUDGET_TABLES = ("budgets", "release_scopes")
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS budgets (no {serial}, scope TEXT NOT NULL, entry TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS release_scopes (release BIGINT NOT NULL, dataset TEXT, unit TEXT)",
)
#: ε sums are compared with this slack: 0.1 + 0.2 spent against a budget of 0.3 is within it.
_SLACK = 1e-9


@dataclass(frozen=True)
class Budget:
    """A budget in force: its scope (``registry``, ``dataset:NAME`` or ``unit:COLUMN``), its ε and its entry's
    digest (what a ledger names it by)."""

    scope: str
    epsilon: float
    digest: str
    set_at: str


def create_budget_tables(db: Database) -> None:
    """The budgets' tables, where missing (a registry started before budgets has none: it has no budget)."""
    for statement in _SCHEMA:
        db.execute(statement)


def parse_epsilon(value) -> float:
    """A budget's ε: a finite number above 0 (a zero budget would refuse every release; set none instead)."""
    try:
        epsilon = float(value)
    except (TypeError, ValueError):
        epsilon = math.nan
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(
            f"budget ε {value!r}: give a finite number above 0 (e.g. --epsilon 4); to bound nothing, set no budget."
        )
    return epsilon


def scope_of(dataset: str | None = None, unit: str | None = None) -> str:
    if dataset and unit:
        raise ValueError("a budget is per dataset (--dataset) or per privacy unit (--unit), not both.")
    for name, value in (("--dataset", dataset), ("--unit", unit)):
        if value is not None and not str(value).strip():
            raise ValueError(f"{name} is empty: name the dataset or the unit column, or leave it out.")
    return f"dataset:{dataset}" if dataset else (f"unit:{unit}" if unit else "registry")


def new_entry(epsilon: float, scope: str, registry_id: str) -> dict:
    """A signed budget entry. Only a process holding the signing key (the custodian) can make one."""
    if signing_key() is None:  # an analyst holds none; one person on one machine gets the machine's
        raise RegistryError(
            "setting a privacy budget needs the custodian's signing key (SQUARECHIPO_SIGNING_KEY, or this machine's "
            "own key): a budget is signed so that nobody else can raise it. Ask the custodian to set it."
        )
    made = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    return seal(
        {"format": BUDGET_FORMAT, "scope": scope, "epsilon": epsilon, "set_at": made, "registry_id": registry_id}
    )


def budgets_in_force(db: Database, registry_id: str) -> dict[str, Budget]:
    """Scope → the budget in force (its newest entry), every entry's seal checked; empty where none is set."""
    if "budgets" not in db.tables():
        return {}
    found: dict[str, Budget] = {}
    for no, scope, text in db.execute("SELECT no, scope, entry FROM budgets ORDER BY no").fetchall():
        where = f"{db.where} [budget entry {no}]"
        try:
            entry = json.loads(text)
            check_seal(entry, where, "privacy budget", "Set the budget again (squarechipo registry budget set).",
                       signed_only=True)  # fmt: skip
        except (ValueError, IntegrityError) as error:
            raise RegistryError(
                f"{error if isinstance(error, IntegrityError) else f'{where}: not a budget entry ({error})'} No "
                "release is made against a budget that cannot be trusted: the custodian sets it again."
            ) from None
        if entry.get("registry_id") != registry_id or entry.get("scope") != scope:
            raise RegistryError(
                f"{where}: a budget entry of another registry or scope (it names {entry.get('registry_id')} / "
                f"{entry.get('scope')}): copied in by hand. The custodian sets the budget again."
            )
        found[scope] = Budget(scope, float(entry["epsilon"]), entry["digest"], entry["set_at"])
    return found


def pick(budgets: dict[str, Budget], *, dataset: str | None, unit: str | None, columns) -> Budget | None:
    """The budget a release answers to: its dataset's, its declared unit's, or the registry's. A unit budget on a
    column these rows hold, for a release that declares no unit, is refused: its units would go uncounted."""
    if dataset and f"dataset:{dataset}" in budgets:
        return budgets[f"dataset:{dataset}"]
    if unit and f"unit:{unit}" in budgets:
        return budgets[f"unit:{unit}"]
    undeclared = [s.split(":", 1)[1] for s in budgets if s.startswith("unit:") and s.split(":", 1)[1] in columns]
    if undeclared and unit is None:
        raise RegistryError(
            f"the registry's privacy budget is per unit of {undeclared[0]!r}, a column these rows hold, and this "
            f"release declares no privacy unit: declare it (privacy_unit={undeclared[0]!r}, label_privacy_unit in a "
            "config) so that each unit's ε is counted."
        )
    return budgets.get("registry")


def enforce(budget: Budget | None, spent: dict[int, float], n_rows: int, asked: float) -> dict | None:
    """The ledger's record of the budget (scope, ε, the entry's digest, what remains after this release), or
    :class:`RegistryError` naming how many rows would pass it, the spent, asked and remaining ε. ``spent``: each
    row's (or unit's) composed ε so far, by its index (rows repeat every ``n_rows`` for their unit keys)."""
    if budget is None:
        return None
    most = max(spent.values(), default=0.0)
    over = {i % max(n_rows, 1) for i, e in spent.items() if e + asked > budget.epsilon + _SLACK}
    if asked > budget.epsilon + _SLACK:
        over = set(range(n_rows))
    if over:
        left = max(0.0, budget.epsilon - most)
        raise RegistryError(
            f"privacy budget ({budget.scope}, ε {budget.epsilon:g}) would be passed: {len(over)} of {n_rows} rows "
            f"have spent up to ε {most:g}, this release asks ε {asked:g}, and ε {left:g} remains for them. Release "
            "other rows or a smaller ε; only the custodian raises a budget (squarechipo registry budget set). "
            "Nothing was released."
        )
    return {
        "scope": budget.scope,
        "epsilon": budget.epsilon,
        "entry": budget.digest,
        "remaining": round(budget.epsilon - most - asked, 12),
    }


@dataclass(frozen=True)
class BudgetAsk:
    """What a release asks of the budgets: the dataset it names, its declared unit, its rows' columns, how many rows,
    and the ε it spends on one row or unit."""

    dataset: str | None
    unit: str | None
    columns: tuple[str, ...]
    n_rows: int
    epsilon: float

    def check(self, db: Database, registry_id: str, earlier: Any) -> dict | None:
        """The budget record for the ledger, or :class:`RegistryError` (see :func:`enforce`). ``earlier``: the rows'
        earlier releases as the registry found them (:class:`squarechipo.privacy.release.registry.EarlierReleases`,
        whose ``spent`` the budget bounds)."""
        budgets = budgets_in_force(db, registry_id)
        chosen = pick(budgets, dataset=self.dataset, unit=self.unit, columns=self.columns)
        return enforce(chosen, earlier.spent, self.n_rows, self.epsilon)
