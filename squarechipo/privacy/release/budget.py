"""A privacy budget a team shares: the registry refuses a release that would spend more ε than the custodian allowed.

**What a budget bounds: rows and units, never names.** A budget bounds the composed ε of every row (its content key,
near-copies counted, as :func:`squarechipo.privacy.release.registry.earlier_releases` sums them) or, per unit, of
every privacy-unit value. Its scope says which rows:

- ``registry``: every row;
- ``dataset:NAME``: the rows entered under that dataset name (written canonically: case, width and spacing folded),
  so the same rows released again under another name, or none, still count against it, as does a release naming it;
- ``unit:COLUMN``: every value of that privacy unit (a labeller). A release under a unit budget must declare that
  unit; the registry keeps each released row's unit value, so rows released before with their unit count against it
  whatever column a later release renames, copies or drops (a row's earlier units follow its content).

**Every budget that applies to a row holds at once; the strictest wins.** A release is refused when any of its rows
or units would pass any budget that applies to it, naming the strictest one passed; its ledger records the budget
that leaves the least ε (scope, ε, the entry's digest, what remains after it).

**One line of entries.** Only the custodian sets a budget: an entry is sealed and signed with the signing key
(:mod:`squarechipo.trust.keys`), names its registry and the digest of the entry it follows (the head when it was
set; the first names none). The entries in force are an unbroken chain of trusted signatures from the first to the
one head: an entry replayed (its digest again), reordered or forked (two entries following one), an entry whose
predecessor was deleted, one edited, unsigned or copied from another registry, fails closed: no release is made
against budgets that cannot be trusted. The table refuses a second entry with the same digest or predecessor on
SQLite and on PostgreSQL alike (UNIQUE), so a role that may only INSERT cannot bring an older, higher budget back.
The newest entry of a scope along the chain is in force: a budget is raised or lowered by setting it again; lowered
below what was spent, it keeps the earlier releases and refuses new ones.

The check runs before the noise is drawn (nothing drawn for a refused release), in the transaction that enters the
release (two machines at once cannot both pass), and when a release cut off before it was entered is completed.
Registries that kept budgets in the format before chains (a ``budgets`` table) refuse releases until the custodian
sets them again.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from squarechipo.data.columns import NOT_A_UNIT
from squarechipo.data.database import Database, DatabaseError, is_url
from squarechipo.privacy.release.registry import EarlierReleases, _refused, open_registry, registry_target
from squarechipo.privacy.release.registry_schema import RegistryError, canonical_dataset, create_budget_tables
from squarechipo.trust.keys import signing_key
from squarechipo.trust.seals import IntegrityError, check_seal, seal

__all__ = [
    "BUDGET_FORMAT",
    "Budget",
    "BudgetAsk",
    "budget_report",
    "budgets_in_force",
    "chain_head",
    "check_budget",
    "enforce",
    "new_entry",
    "parse_epsilon",
    "refuse_seeded_under_budget",
    "scope_of",
    "set_budget",
]

logger = logging.getLogger("squarechipo")

BUDGET_FORMAT = "squarechipo.privacy_budget/2"
#: Entries before chains (format /1), in a table of their own: refused until set again.
_LEGACY_TABLE = "budgets"
#: ε sums are compared with this slack: 0.1 + 0.2 spent against a budget of 0.3 is within it.
_SLACK = 1e-9
#: What the first entry of a chain follows.
_FIRST = ""


@dataclass(frozen=True)
class Budget:
    """A budget in force: its scope (``registry``, ``dataset:NAME`` or ``unit:COLUMN``), its ε and its entry's
    digest (what a ledger names it by)."""

    scope: str
    epsilon: float
    digest: str
    set_at: str


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
    if unit in NOT_A_UNIT:
        raise ValueError(
            f"--unit {unit}: {unit!r} is a column of the comparison itself, which a release rewrites, not a unit of "
            "privacy; name the column that identifies whose privacy it is (a labeller id), or set a budget per row "
            "(no --unit)."
        )
    return f"dataset:{canonical_dataset(dataset)}" if dataset else (f"unit:{unit}" if unit else "registry")


def new_entry(epsilon: float, scope: str, registry_id: str, replaces: str) -> dict:
    """A signed budget entry following the entry whose digest is ``replaces`` (the chain's head; ``""`` for the first).
    Only a process holding the signing key (the custodian) can make one."""
    if signing_key() is None:  # an analyst holds none; one person on one machine gets the machine's
        raise RegistryError(
            "setting a privacy budget needs the custodian's signing key (SQUARECHIPO_SIGNING_KEY, or this machine's "
            "own key): a budget is signed so that nobody else can raise it. Ask the custodian to set it."
        )
    made = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="microseconds")
    return seal(
        {
            "format": BUDGET_FORMAT,
            "scope": scope,
            "epsilon": epsilon,
            "set_at": made,
            "registry_id": registry_id,
            "replaces": replaces,
        }
    )


def _refuse(where: str, why: str) -> RegistryError:
    return RegistryError(
        f"{where}: {why} No release is made against budgets that cannot be trusted: the custodian sets the budget "
        "again (squarechipo registry budget set)."
    )


def _entries(db: Database, registry_id: str) -> list[dict]:
    """Every chained entry, its seal and signature checked and its columns matching what it signs."""
    checked = []
    for no, digest, replaces, text in db.execute(
        "SELECT no, digest, replaces, entry FROM budget_entries ORDER BY no"
    ).fetchall():
        where = f"{db.where} [budget entry {no}]"
        try:
            entry = json.loads(text)
            check_seal(entry, where, "privacy budget", "Set the budget again (squarechipo registry budget set).",
                       signed_only=True)  # fmt: skip
        except IntegrityError as error:
            raise _refuse(where, str(error)) from None
        except ValueError as error:
            raise _refuse(where, f"not a budget entry ({error}).") from None
        if entry.get("format") != BUDGET_FORMAT or entry.get("digest") != digest or entry.get("replaces") != replaces:
            raise _refuse(where, "its columns do not match the entry it signs (written by hand).")
        if entry.get("registry_id") != registry_id:
            raise _refuse(where, f"an entry of another registry ({entry.get('registry_id')}): copied in by hand.")
        checked.append(entry)
    return checked


def _chain(entries: list[dict], where: str) -> list[dict]:
    """The entries in chain order, first to head; a fork, a replay, a gap or an entry off the chain fails closed."""
    following: dict[str, list[dict]] = defaultdict(list)
    for entry in entries:
        following[entry["replaces"]].append(entry)
    if len({e["digest"] for e in entries}) != len(entries):
        raise _refuse(where, "a budget entry appears twice (an entry replayed).")
    forked = [d for d, nexts in following.items() if len(nexts) > 1]
    if forked:
        raise _refuse(where, f"two budget entries follow one entry ({forked[0] or 'the start'}): a fork or a replay.")
    order, at = [], _FIRST
    while following.get(at):
        order.append(following[at][0])
        at = order[-1]["digest"]
    if len(order) != len(entries):
        raise _refuse(
            where,
            f"{len(entries) - len(order)} budget entr(ies) are off the chain from the first entry to the head (an "
            "entry deleted, or one added that follows none in force).",
        )
    return order


def chain_head(db: Database, registry_id: str) -> str:
    """The digest a new entry follows: the head of the checked chain (``""`` where none is set)."""
    if "budget_entries" not in db.tables():
        return _FIRST
    order = _chain(_entries(db, registry_id), db.where)
    return order[-1]["digest"] if order else _FIRST


def budgets_in_force(db: Database, registry_id: str) -> dict[str, Budget]:
    """Scope → the budget in force (the newest entry of that scope along the checked chain); empty where none is
    set. Budgets kept in the format before chains refuse, until the custodian sets them again."""
    tables = db.tables()
    chained = _chain(_entries(db, registry_id), db.where) if "budget_entries" in tables else []
    if not chained and _LEGACY_TABLE in tables and db.execute(f"SELECT 1 FROM {_LEGACY_TABLE}").fetchone():
        raise RegistryError(
            f"{db.where} holds privacy budgets set before budgets were chained (squarechipo 0.4): their order is not "
            "signed, so an older entry could be brought back. No release is made until the custodian sets each "
            "budget again (squarechipo registry budget set --epsilon E [--dataset NAME | --unit COLUMN])."
        )
    found: dict[str, Budget] = {}
    for entry in chained:
        found[entry["scope"]] = Budget(entry["scope"], float(entry["epsilon"]), entry["digest"], entry["set_at"])
    return found


def enforce(limits: list[tuple[Budget, float, float]], n_rows: int) -> dict | None:
    """The ledger's record of the budget that leaves least (scope, ε, the entry's digest, what remains after this
    release), or :class:`RegistryError` naming the strictest budget passed: how many rows would pass it, the spent,
    asked and remaining ε. ``limits``: one (budget, spent so far, ε asked) for each row or unit a budget bounds."""
    if not limits:
        return None
    over = [(b, spent, asked) for b, spent, asked in limits if spent + asked > b.epsilon + _SLACK]
    if over:
        strictest = min(over, key=lambda item: item[0].epsilon)[0]
        hit = [(spent, asked) for b, spent, asked in over if b == strictest]
        most = max(spent for spent, _ in hit)
        asked = max(asked for _, asked in hit)
        rows, left = min(len(hit), n_rows), max(0.0, strictest.epsilon - most)
        raise RegistryError(
            f"privacy budget ({strictest.scope}, ε {strictest.epsilon:g}) would be passed: {rows} of {n_rows} rows "
            f"have spent up to ε {most:g}, this release asks ε {asked:g}, and ε {left:g} "
            "remains for them. Release other rows or a smaller ε; only the custodian raises a budget (squarechipo "
            "registry budget set). Nothing was released."
        )
    budget, spent, asked = min(limits, key=lambda item: item[0].epsilon - item[1] - item[2])
    return {
        "scope": budget.scope,
        "epsilon": budget.epsilon,
        "entry": budget.digest,
        "remaining": round(budget.epsilon - spent - asked, 12),
    }


@dataclass(frozen=True)
class BudgetAsk:
    """What a release asks of the budgets: the dataset it names, its declared unit, its rows' columns, how many rows,
    the ε it spends on one row or unit (the most rows of one unit × the mechanism's ε) and on one row."""

    dataset: str | None
    unit: str | None
    columns: tuple[str, ...]
    n_rows: int
    epsilon: float
    row_epsilon: float | None = None

    def check(self, db: Database, registry_id: str, earlier: Any) -> dict | None:
        """The budget record for the ledger, or :class:`RegistryError` (see :func:`enforce`). ``earlier``: the rows'
        earlier releases as the registry found them (:class:`squarechipo.privacy.release.registry.EarlierReleases`:
        what each row and unit spent, the datasets each row was released under, each row's earlier units)."""
        budgets = budgets_in_force(db, registry_id)
        if not budgets:
            return None
        return enforce(self.limits(budgets, earlier), self.n_rows)

    def limits(self, budgets: dict[str, Budget], earlier: Any) -> list[tuple[Budget, float, float]]:
        """(budget, spent, asked) for every row and unit that a budget in ``budgets`` bounds."""
        row_epsilon = self.epsilon if self.row_epsilon is None else self.row_epsilon
        unit = self._unit_budget(budgets)
        named = canonical_dataset(self.dataset)
        limits = []
        for i in range(self.n_rows):
            spent = earlier.spent.get(i, 0.0)
            names = {d for d in earlier.datasets.get(i, ()) if d} | ({named} if named else set())
            scopes = {f"dataset:{d}" for d in names}
            for scope in ("registry", *sorted(scopes)):
                if scope in budgets:
                    limits.append((budgets[scope], spent, row_epsilon))
        if unit is not None:
            if self.unit is not None:  # the declared units: keys n .. 2n − 1, each asking ε × its rows
                for i in range(self.n_rows, 2 * self.n_rows):
                    limits.append((unit, earlier.spent.get(i, 0.0), self.epsilon))
            for key, rows in earlier.followed_units.items():  # units the rows were released with before
                limits.append((unit, earlier.unit_spent.get(key, 0.0), row_epsilon * rows))
        return limits

    def _unit_budget(self, budgets: dict[str, Budget]) -> Budget | None:
        """The unit budget this release answers to; a release that declares no unit, or another one, under a unit
        budget is refused: its units would go uncounted."""
        units = sorted(s.split(":", 1)[1] for s in budgets if s.startswith("unit:"))
        if not units:
            return None
        if self.unit in units:
            return budgets[f"unit:{self.unit}"]
        declared = "declares no privacy unit" if self.unit is None else f"declares privacy unit {self.unit!r}"
        held = [u for u in units if u in self.columns]
        column = held[0] if held else units[0]
        raise RegistryError(
            f"the registry's privacy budget is per unit of {column!r} and this release {declared}: declare "
            f"privacy_unit={column!r} (label_privacy_unit in a config), on a column holding each row's {column}, so "
            "that each unit's ε is counted."
        )


# Setting, reading and checking budgets in the registry (`squarechipo registry budget`, every release).


def _registry_id(db: Database) -> str:
    return db.execute("SELECT value FROM meta WHERE key = 'registry_id'").fetchone()[0]


def set_budget(epsilon, *, dataset: str | None = None, unit: str | None = None) -> dict:
    """Append a signed budget entry (the custodian's key signs it; on a server only the custodian's role may insert
    one). Returns the budget in force for its scope with what was spent: lowered below that, new releases of those
    rows are refused and the earlier ones stay."""
    epsilon, scope = parse_epsilon(epsilon), scope_of(dataset, unit)
    with open_registry() as db:

        def append(db: Database) -> None:
            """The new entry follows the chain's head, read in this transaction: another entry set meanwhile makes the
            insert fail (its predecessor is taken) and the transaction is retried on the new head."""
            if "budget_entries" not in db.tables():
                create_budget_tables(db)
            registry_id = _registry_id(db)
            entry = new_entry(epsilon, scope, registry_id, chain_head(db, registry_id))
            db.execute(
                "INSERT INTO budget_entries (digest, replaces, entry) VALUES (?, ?, ?)",
                (entry["digest"], entry["replaces"], json.dumps(entry)),
            )

        try:
            db.retried(append, write=True)
        except DatabaseError as error:
            if error.sqlstate == "42501":
                raise RegistryError(
                    f"the registry at {db.where} refused the budget ({error.detail}): only the custodian's role sets "
                    "or raises a budget (docs/team.md); an analyst's role reads it."
                ) from None
            raise
        shown = _scope_report(db, budgets_in_force(db, _registry_id(db))[scope])
    if shown["spent"] > epsilon:
        logger.warning(
            "the budget (%s, ε %g) is below what was spent (ε %g): the earlier releases stay, new releases of those "
            "rows are refused",
            scope,
            epsilon,
            shown["spent"],
        )
    return shown


def budget_report() -> list[dict]:
    """Every budget in force with its spent and remaining ε and the releases closest to it."""
    with open_registry() as db:
        return _refused(db, lambda: [_scope_report(db, b) for b in budgets_in_force(db, _registry_id(db)).values()])


def _scope_report(db: Database, budget: Budget) -> dict:
    """A budget, what its rows have spent (the largest composed ε over one row or unit of the releases it covers,
    exact copies counted; near-copies are counted by a release's own check) and the releases holding that row."""
    kind, _, name = budget.scope.partition(":")
    releases = "SELECT no FROM releases"
    values: tuple = ()
    if kind in ("dataset", "unit"):
        releases, values = f"SELECT release FROM release_scopes WHERE {kind} = ?", (name,)
    top = db.execute(
        "SELECT u.unit, SUM(r.epsilon * COALESCE(u.count, 1)) AS spent FROM released_units u "
        "JOIN releases r ON r.no = u.release "
        f"WHERE u.unit IN (SELECT unit FROM released_units WHERE release IN ({releases})) "
        "GROUP BY u.unit ORDER BY spent DESC LIMIT 1",
        values,
    ).fetchone()
    spent = float(top[1]) if top else 0.0
    closest = []
    if top:
        closest = [
            {"release": id_, "epsilon": eps, "made": made, "folder": folder}
            for id_, eps, made, folder in db.execute(
                "SELECT r.id, r.epsilon, r.made, r.folder FROM released_units u JOIN releases r ON r.no = u.release "
                "WHERE u.unit = ? ORDER BY r.made DESC LIMIT 3",
                (top[0],),
            ).fetchall()
        ]
    return {
        "scope": budget.scope,
        "epsilon": budget.epsilon,
        "set_at": budget.set_at,
        "spent": spent,
        "remaining": max(0.0, budget.epsilon - spent),
        "closest_releases": closest,
    }


def check_budget(ask: BudgetAsk, earlier: EarlierReleases) -> dict | None:
    """The budget check before any noise is drawn (the one in :func:`register_release` decides)."""
    with open_registry() as db:
        registry_id = db.execute("SELECT value FROM meta WHERE key = 'registry_id'").fetchone()[0]
        return _refused(db, lambda: ask.check(db, registry_id, earlier))


def refuse_seeded_under_budget(seed: int) -> None:
    """A seeded release (a simulation: whoever knows the seed knows the noise) is refused where the registry holds a
    budget, in one line; it is never counted, so it would pass any budget. A registry that does not exist yet is not
    started for it."""
    target = registry_target()
    if not is_url(target) and not target.is_file():
        return
    with open_registry() as db:
        budgets = _refused(db, lambda: budgets_in_force(db, _registry_id(db)))
    if budgets:
        scopes = ", ".join(sorted(budgets))
        raise RegistryError(
            f"seed={seed}: a seeded release is a simulation (its noise is known to whoever knows the seed) and is "
            f"not counted, and the registry at {db.where} holds privacy budgets ({scopes}). Release from OS entropy "
            "(no seed), or simulate on a registry without budgets (SQUARECHIPO_RELEASE_REGISTRY)."
        )
