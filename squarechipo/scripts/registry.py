"""``squarechipo registry``: the registry of releases (a machine's file, or a team's PostgreSQL database).

    squarechipo registry init [--path P | --url postgresql://…]     # start one, explicitly
    squarechipo registry show                                        # where it is, its id, its releases and rows
    squarechipo registry migrate --to postgresql://… [--from FILE]   # a machine's file into a team's database
    squarechipo registry grant --url postgresql://… --custodian R --analyst R
    squarechipo registry audit RELEASE [RELEASE ...]                 # are these saved releases entered here?
    squarechipo registry budget set --epsilon E [--dataset NAME | --unit COLUMN]   # the custodian's cap on ε
    squarechipo registry budget show                                 # each budget, spent and remaining
    squarechipo registry server start --folder F [--port P]          # a throwaway PostgreSQL to try a team's setup
    squarechipo registry server stop --folder F                      # stop it and remove what it made

The registry is ``$SQUARECHIPO_RELEASE_REGISTRY`` (a path or a URL) or this machine's
``~/.squarechipo/releases.sqlite``. A URL's password is never printed. docs/team.md sets up a team's server.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from squarechipo.privacy.release.registry import REGISTRY_ENV, init_registry, registry_target

__all__ = ["main", "make_parser"]


def make_parser(prog: str = "squarechipo registry") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    start = commands.add_parser("init", help="start a new registry (refuses a file or a database that holds one)")
    where = start.add_mutually_exclusive_group()
    where.add_argument("--path", default=None, help=f"a SQLite file (default: ${REGISTRY_ENV} or this machine's)")
    where.add_argument("--url", default=None, help="a postgresql:// URL: the registry's tables in that database")
    start.add_argument("--budget", default=None, help="a privacy budget for every row from the start (an ε)")
    show = commands.add_parser(
        "show", help="where the registry is, its id, its releases and rows, and each budget's spent and remaining ε"
    )
    show.add_argument("--url", default=None, help=f"a postgresql:// URL or a SQLite file (default: ${REGISTRY_ENV})")
    budget = commands.add_parser("budget", help="the custodian's privacy budget: set | show")
    steps = budget.add_subparsers(dest="step", required=True)
    cap = steps.add_parser("set", help="set (or raise, or lower) a budget: a signed entry only the custodian makes")
    cap.add_argument("--epsilon", required=True, help="the largest composed ε of any one row (or unit)")
    scope = cap.add_mutually_exclusive_group()
    scope.add_argument("--dataset", default=None, help="only releases of this dataset (the last part of its name)")
    scope.add_argument("--unit", default=None, help="per privacy unit of this column (releases declaring it)")
    steps.add_parser("show", help="each budget in force, what its rows spent and what remains")
    move = commands.add_parser("migrate", help="copy a SQLite registry into a PostgreSQL database, then check it")
    move.add_argument("--to", required=True, help="the postgresql:// URL of the team's database")
    move.add_argument("--from", dest="source", default=None, help="the SQLite registry (default: the current one)")
    move.add_argument("--records", default=None, help="the SQLite store of model records (default: the current one)")
    grant = commands.add_parser("grant", help="who may read and who may write a team's registry (PostgreSQL roles)")
    grant.add_argument("--url", required=True, help="the registry's database, as the role that owns its tables")
    grant.add_argument("--custodian", default=None, help="the role that enters releases (SELECT, INSERT)")
    grant.add_argument("--analyst", default=None, help="the role that only reads the registry (SELECT)")
    server = commands.add_parser("server", help="a throwaway PostgreSQL server on this machine, to try docs/team.md")
    step = server.add_subparsers(dest="step", required=True)
    up = step.add_parser("start", help="start one in a new folder, with the database and roles docs/team.md names")
    up.add_argument("--folder", required=True, help="a new (or empty) folder for the server's data and socket")
    up.add_argument("--port", type=int, default=None, help="listen on localhost:PORT (default: the socket only)")
    down = step.add_parser("stop", help="stop the server started in a folder and remove what it made")
    down.add_argument("--folder", required=True, help="the folder given to server start")
    audit = commands.add_parser("audit", help="whether saved releases are entered here (after a restore: missing?)")
    audit.add_argument("releases", nargs="+", help="saved releases: folders, .jsonl or .parquet files")
    return parser


def main(argv: list[str] | None = None) -> int:
    from squarechipo.privacy.release import budget, registry_admin

    args = make_parser().parse_args(argv)
    if args.command == "init":
        _init(args)
    elif args.command == "show":
        if args.url:
            os.environ[REGISTRY_ENV] = args.url
        print(json.dumps({**registry_admin.describe(), "budgets": budget.budget_report()}, indent=2))
    elif args.command == "budget":
        found = (
            budget.set_budget(args.epsilon, dataset=args.dataset, unit=args.unit)
            if args.step == "set"
            else budget.budget_report()
        )
        print(json.dumps(found, indent=2))
    elif args.command == "migrate":
        source = Path(args.source) if args.source else registry_target()
        if not isinstance(source, Path):
            raise ValueError(f"--from names the SQLite registry to copy; {REGISTRY_ENV} is a URL here: pass --from.")
        from squarechipo.privacy.provenance.sketch import record_store_path

        records = Path(args.records) if args.records else record_store_path()
        records = records if isinstance(records, Path) else None
        print(json.dumps(registry_admin.migrate_to(args.to, source=source, records=records), indent=2))
    elif args.command == "server":
        _server(args)
    elif args.command == "grant":
        for statement in registry_admin.grant_roles(args.url, custodian=args.custodian, analyst=args.analyst):
            print(statement)
    else:
        found = registry_admin.audit_releases(args.releases)
        print(json.dumps(found, indent=2))
        missing = [f["release"] for f in found if not f["entered_here"] or f["under_counts"]]
        if missing:
            raise ValueError(
                f"{len(missing)} saved release(s) are not entered in this registry, or it counts less ε for their "
                f"rows than their signed ledgers state ({', '.join(missing)}): it under-counts (a backup older than "
                "them, or another registry). Restore a newer backup; if there is none, treat their rows as spent and "
                "never release them again (this registry cannot count them)."
            )
    return 0


def _server(args: argparse.Namespace) -> None:
    from squarechipo.data.local_server import TEAM_ROLES, start_local_server, stop_local_server

    if args.step == "stop":
        folder = stop_local_server(args.folder)
        left = "kept the folder: it holds files the server did not make" if folder.exists() else "removed the folder"
        print(f"stopped the server in {folder} and {left}")
        return
    server = start_local_server(args.folder, args.port, team=True)
    print(f"started PostgreSQL in {args.folder} (trust: every account of this machine may connect; for trying only)")
    print(f"administrator: {server.url('squarechipo')}")
    for role in TEAM_ROLES:
        print(f"{role}: {server.url('squarechipo', role)}")
    print(f"stop it with: squarechipo registry server stop --folder {args.folder}")


def _init(args: argparse.Namespace) -> None:
    from squarechipo.data.database import redact
    from squarechipo.privacy.release import budget
    from squarechipo.privacy.release.budget import parse_epsilon

    if args.budget is not None:  # a budget that could not be set is refused before anything is started
        parse_epsilon(args.budget)
        if args.url:
            raise ValueError(
                "--budget: on a team's server the administrator starts the registry and the custodian sets its "
                "budget, signed with the custodian's key (squarechipo registry budget set, after registry "
                "grant): a budget signed with the administrator's key would stop every custodian's release."
            )
        from squarechipo.trust.keys import signing_key

        if signing_key() is None:
            raise ValueError(
                "--budget: a budget is signed with the custodian's key, and this process holds none "
                "(SQUARECHIPO_TRUSTED_KEYS set, no SQUARECHIPO_SIGNING_KEY): the custodian starts the registry."
            )
    print(redact(init_registry(args.url or args.path)))
    if args.budget is not None:
        if args.url or args.path:
            os.environ[REGISTRY_ENV] = args.url or str(Path(args.path).expanduser().resolve())
        print(json.dumps(budget.set_budget(args.budget), indent=2))
