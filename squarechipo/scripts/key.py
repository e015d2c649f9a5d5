"""``squarechipo key``: the Ed25519 keys that sign releases and model records, and a check anyone can run.

    squarechipo key new --out /secure/custodian.pem     # a key pair (private file 0600); prints the public key
    squarechipo key show                                 # the key this process signs with, and the keys it trusts
    squarechipo key verify outputs/square_chipo          # a model's privacy record, or a saved release

The custodian keeps the private key (``SQUARECHIPO_SIGNING_KEY``); analysts trust its public key
(``SQUARECHIPO_TRUSTED_KEYS``: a file of keys, or the key itself) and never hold the private one. ``verify`` needs the
public key only: it says who signed what a card states, and refuses what no trusted key signed.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from squarechipo.privacy.provenance.record import SEEDED
from squarechipo.trust.keys import (
    SIGNING_KEY_ENV,
    TRUSTED_KEYS_ENV,
    SigningKeyError,
    generate_key_pair,
    public_key_text,
    signing_key,
    trust_anchor,
    trust_is_explicit,
    trusted_keys,
)

__all__ = ["main", "require_attested", "verify_folder"]


def make_parser(prog: str = "squarechipo key") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    new = commands.add_parser("new", help="write a new key pair: the private key (mode 0600) and <out>.pub")
    new.add_argument("--out", required=True, help="where the private key goes (an absolute path; never overwritten)")
    commands.add_parser("show", help="the key this process signs with and the keys whose seals it accepts")
    check = commands.add_parser("verify", help="check a model folder's privacy record or a saved release")
    check.add_argument("path", help="a model folder (squarechipo_privacy.json), a release folder, .jsonl or .parquet")
    check.add_argument(
        "--require-attested",
        action="store_true",
        help="for a gate (CI, a registry's admission): exit 1, in one line, unless a model's training is attested by "
        "a trusted key (its record signed by one) and every ε it states is backed by a trusted ledger",
    )
    return parser


def _new(out: str) -> None:
    key = generate_key_pair(Path(out).expanduser().resolve())
    print(public_key_text(key.public))
    print(
        f"# private key: {key.path} (mode 0600; the custodian keeps it: export {SIGNING_KEY_ENV}={key.path})\n"
        f"# public key:  {key.path}.pub, id {key.key_id} (analysts trust it: export {TRUSTED_KEYS_ENV}=<a file "
        "holding that line>)"
    )


def _show() -> dict:
    own = signing_key(create=False)
    shown = {
        "signs_with": None if own is None else {"path": str(own.path), "key_id": own.key_id},
        "trusts": sorted(trusted_keys()) if (own is not None or trust_is_explicit()) else [],
        "trust": "explicit (SQUARECHIPO_TRUSTED_KEYS)" if trust_is_explicit() else "this machine's own key",
    }
    print(json.dumps(shown, indent=2))
    return shown


def verify_folder(path: str | os.PathLike) -> dict:
    """What the seals of a model's privacy record or of a saved release say, each checked with the trusted keys
    (:mod:`squarechipo.trust.keys`), as a third party checks them: a trust anchor must exist (nothing is written
    where none does), a model's weights must be the files its record names, and every ledger must be signed by a
    trusted key. Raises on anything that does not hold."""
    from squarechipo.privacy.provenance.record import PRIVACY_FILE, verify_privacy_record
    from squarechipo.trust.seals import IntegrityError

    try:
        trust_anchor()
    except SigningKeyError as error:
        raise IntegrityError(str(error)) from None
    path = Path(path)
    if not path.exists():
        raise ValueError(
            f"{path}: no such folder or file; give a model folder (holding {PRIVACY_FILE}) or a saved release (its "
            "folder, .jsonl or .parquet file)."
        )
    if (path / PRIVACY_FILE).is_file():
        return verify_privacy_record(path, third_party=True)
    from squarechipo.privacy.ledger.binding import get_ledger
    from squarechipo.privacy.release.saved import load_privatized

    data = load_privatized(path)
    splits = data.items() if hasattr(data, "items") else [("release", data)]
    found = {}
    for name, split in splits:
        ledger = get_ledger(split, f"{path} [{name}]")
        if ledger is None:
            continue
        if not ledger.seal.signed:
            raise IntegrityError(
                f"{path} [{name}]: its ledger carries an {ledger.seal.describe()}; a third party accepts only a "
                "ledger signed by a trusted key (the custodian's)."
            )
        budgets = [r.budget for r in ledger.releases if r.budget] or "none: no privacy budget applied"
        found[name] = {
            "epsilon": ledger.total_epsilon, "ledger": ledger.seal.describe(), "rows": len(split), "budget": budgets,
            "randomness": sorted({r.randomness for r in ledger.releases}),
        }  # fmt: skip
        if "fixed_seed" in found[name]["randomness"]:
            found[name]["warning"] = SEEDED
    return {"release": str(path), "splits": found}


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    if args.command == "new":
        _new(args.out)
    elif args.command == "show":
        _show()
    else:
        found = verify_folder(args.path)
        if args.require_attested:
            require_attested(found)
        print(json.dumps(found, indent=2, sort_keys=True))
    return 0


def require_attested(found: dict) -> None:
    """For a gate: refuse (:class:`IntegrityError`, one line) a model whose training no trusted key attests: an
    unsigned record, or one signed only by the key it names (who wrote it, not who released the rows)."""
    from squarechipo.trust.seals import IntegrityError

    if "model" not in found:
        return  # a release: verify_folder already refused any ledger not signed by a trusted key
    if not str(found.get("trained_by", "")).endswith("(trusted here)"):
        raise IntegrityError(
            f"{found['model']}: its training is not attested by a trusted key ({found.get('trained_by')}): the gate "
            "admits models whose record a trusted key signed. Train it where the custodian's key signs records, or "
            "add the trainer's public key to SQUARECHIPO_TRUSTED_KEYS if that key is trusted."
        )
