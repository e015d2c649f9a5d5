"""The two roles of docs/privacy.md in one test process: the custodian (holds the private key, releases) and the
analyst (trusts the custodian's public key, holds no private key), switched through the environment."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from squarechipo.trust.keys import SIGNING_KEY_ENV, TRUSTED_KEYS_ENV, SigningKey, generate_key_pair, public_key_text


@dataclass
class Roles:
    custodian_key: SigningKey
    monkeypatch: object

    @property
    def public(self) -> str:
        return public_key_text(self.custodian_key.public)

    def custodian(self) -> None:
        self.monkeypatch.setenv(SIGNING_KEY_ENV, str(self.custodian_key.path))
        self.monkeypatch.setenv(TRUSTED_KEYS_ENV, self.public)

    def analyst(self) -> None:
        self.monkeypatch.delenv(SIGNING_KEY_ENV, raising=False)
        self.monkeypatch.setenv(TRUSTED_KEYS_ENV, self.public)


def roles(folder: Path, monkeypatch) -> Roles:
    """A custodian key pair written in ``folder``; the process starts as the custodian."""
    found = Roles(generate_key_pair(Path(folder) / "custodian.pem"), monkeypatch)
    found.custodian()
    return found
