"""Setting and reading a registry's privacy budgets (:mod:`squarechipo.privacy.release.budget`): ``squarechipo registry
budget set`` and ``registry budget show``, and the spent and remaining ε that ``registry show`` reports."""

from __future__ import annotations

import json
import logging

from squarechipo.data.database import Database, DatabaseError
from squarechipo.privacy.release.budget import (
    Budget,
    BudgetAsk,
    budgets_in_force,
    chain_head,
    create_budget_tables,
    new_entry,
    parse_epsilon,
    scope_of,
)
from squarechipo.privacy.release.registry import EarlierReleases, _refused, open_registry
from squarechipo.privacy.release.registry_schema import RegistryError

__all__ = ["budget_report", "check_budget", "refuse_seeded_under_budget", "set_budget"]

logger = logging.getLogger("squarechipo")


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
    from squarechipo.data.database import is_url
    from squarechipo.privacy.release.registry import registry_target

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
