"""``squarechipo records``: the store of model records the lineage guard reads (a machine's file, or a team's server).

    squarechipo records show                       # where it is, how many records, the latest ones
    squarechipo records forget outputs/smoke --yes  # a model's record out of the store (its folder or its identity)

Every model squarechipo saves enters its record here under its weights' identity, so a copy saved elsewhere is still
recognised as trained on its rows. ``forget`` takes a record out, for a model that should not count (a test run whose
weights were deleted): a model it forgets is then read as unrecorded. It asks first, or takes ``--yes``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

__all__ = ["main", "make_parser"]


def make_parser(prog: str = "squarechipo records") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    show = commands.add_parser("show", help="where the store is, how many records it holds, the latest ones")
    show.add_argument("--latest", type=int, default=5, help="how many of the latest records to list (default 5)")
    forget = commands.add_parser("forget", help="take a model's record out of the store (asks first)")
    forget.add_argument("model", help="a model folder (its squarechipo_privacy.json names its weights) or an identity")
    forget.add_argument("--yes", action="store_true", help="do not ask")
    return parser


def _identity(target: str) -> str:
    from squarechipo.privacy.provenance.record import PRIVACY_FILE

    path = Path(target)
    if (path / PRIVACY_FILE).is_file():
        found = json.loads((path / PRIVACY_FILE).read_text(encoding="utf-8")).get("weights_fingerprint")
        if not found:
            raise ValueError(f"{path / PRIVACY_FILE} names no weights identity: its model was never entered.")
        return found
    if target.startswith("sketch-sha256:"):
        return target
    raise ValueError(f"{target}: give a model folder holding {PRIVACY_FILE}, or an identity (sketch-sha256:…).")


def main(argv: list[str] | None = None) -> int:
    from squarechipo.data.database import redact
    from squarechipo.data.store import RecordTable
    from squarechipo.privacy.provenance.sketch import record_store_path

    args = make_parser().parse_args(argv)
    target = record_store_path()
    with RecordTable(target, "records") as records, RecordTable(target, "weight_sketches_by_name", "blob") as sketches:
        if args.command == "show":
            entries = records.items()
            latest = [{"identity": key, **_summary(json.loads(value))} for key, value in entries[-args.latest :]]
            shown = {"store": redact(target), "records": len(entries), "weight_sketches": len(sketches)}
            print(json.dumps({**shown, "latest": latest}, indent=2))
            return 0
        identity = _identity(args.model)
        held = [key for key, _ in sketches.items() if key.endswith(f":{identity}")]
        if records.get(identity) is None and not held:
            raise ValueError(f"the store at {redact(target)} holds no record of {identity}.")
        if not args.yes:
            if not sys.stdin.isatty():
                raise ValueError(f"forgetting {identity} from {redact(target)} needs a confirmation: pass --yes.")
            if input(f"forget the record of {identity} (and {len(held)} weight sketch(es))? [y/N] ").lower() != "y":
                print("nothing forgotten")
                return 0
        gone = records.delete([identity]) + sketches.delete(held)
        print(f"forgot {gone} entr{'y' if gone == 1 else 'ies'} of {identity} in {redact(target)}")
    return 0


def _summary(record: dict) -> dict:
    return {key: record.get(key) for key in ("stage", "epsilon", "dataset_fingerprint", "library_version")}
