"""``squarechipo env``: what this installation is, for a bug report (as ``trl env`` does), and where its privacy state
lives: the registry of releases, the store of model records and the signing key (never the key itself).

    squarechipo env
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform

__all__ = ["environment", "main"]

_PACKAGES = (
    "squarechipo",
    "torch",
    "transformers",
    "trl",
    "accelerate",
    "datasets",
    "peft",
    "cryptography",
    "psycopg",
)


def environment() -> dict[str, str]:
    """Versions, the machine, and where this process's privacy state lives (URLs without their password)."""
    from squarechipo.data.database import redact
    from squarechipo.data.signing import signing_key, trust_is_explicit
    from squarechipo.models.memory import ENV
    from squarechipo.models.runtime import accelerator_available
    from squarechipo.privacy.provenance.sketch import record_store_path
    from squarechipo.privacy.release.registry import registry_target

    found = {"Platform": platform.platform(), "Python": platform.python_version()}
    for package in _PACKAGES:
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = "not installed"
    found["Accelerator"] = "yes" if accelerator_available() else "none (CPU)"
    found["Memory allocator"] = os.environ.get(ENV, "keep") + f" ({ENV}; keep: glibc keeps the memory a job frees)"
    found["Registry of releases"] = redact(registry_target())
    found["Store of model records"] = redact(record_store_path())
    key = signing_key(create=False)
    found["Signing key"] = f"{key.path} (id {key.key_id})" if key is not None else "none yet"
    found["Trusted keys"] = "SQUARECHIPO_TRUSTED_KEYS" if trust_is_explicit() else "this machine's own key"
    return found


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(prog="squarechipo env", description=__doc__.splitlines()[0]).parse_args(argv)
    print("\n".join(f"- {name}: {value}" for name, value in environment().items()))
    return 0
