"""squarechipo.trust.keys, function by function: keys are generated and kept private, trust is explicit or the
machine's own, and a signature verifies only with a trusted key over exactly what was signed."""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import stat

import pytest
from cryptography.hazmat.primitives import serialization

from squarechipo.trust import keys as signing
from squarechipo.trust.keys import (
    SIGNING_KEY_ENV,
    TRUSTED_KEYS_ENV,
    SigningKeyError,
    generate_key_pair,
    key_id_of,
    public_key_text,
    signing_key,
    trust_is_explicit,
    trusted_keys,
    verify,
)


@pytest.fixture
def bare(monkeypatch):
    """No key named and no trust named: the machine's own key pair is the one (this test's machine folder)."""
    monkeypatch.delenv(SIGNING_KEY_ENV, raising=False)
    monkeypatch.delenv(TRUSTED_KEYS_ENV, raising=False)


def test_a_key_pair_is_written_private_with_its_public_key_beside_it(tmp_path):
    key = generate_key_pair(tmp_path / "k.pem")
    assert stat.S_IMODE(os.stat(tmp_path / "k.pem").st_mode) == 0o600
    raw = key.public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert public_key_text(key.public) == "ed25519:" + base64.b64encode(raw).decode()
    assert key.key_id == key_id_of(key.public) == hashlib.sha256(raw).hexdigest()[:16]
    line = (tmp_path / "k.pem.pub").read_text()
    assert line.startswith(public_key_text(key.public) + " squarechipo ") and line.endswith("\n")
    with pytest.raises(SigningKeyError, match=r"already exists: .*another path \(squarechipo key new --out PATH\)"):
        generate_key_pair(tmp_path / "k.pem")
    nested = generate_key_pair(tmp_path / "keys" / "team" / "k.pem")  # folders made as needed
    assert nested.path.is_file() and (tmp_path / "keys" / "team" / "k.pem.pub").is_file()
    with pytest.raises(SigningKeyError, match="give the key file as an absolute path"):
        generate_key_pair("relative.pem")
    signature = key.sign("sha256:abc")
    named, _, encoded = signature.removeprefix("ed25519:").partition(":")
    assert named == key.key_id
    key.public.verify(base64.b64decode(encoded), b"sha256:abc")  # the signature is of exactly the digest string


def test_the_named_key_is_read_only_when_it_is_a_private_ed25519_key_file(tmp_path, monkeypatch):
    path = tmp_path / "k.pem"
    made = generate_key_pair(path)
    monkeypatch.setenv(SIGNING_KEY_ENV, str(path))
    assert signing_key().key_id == made.key_id and signing_key().path == path
    monkeypatch.setenv(SIGNING_KEY_ENV, "k.pem")
    with pytest.raises(SigningKeyError, match=rf"{SIGNING_KEY_ENV}='k.pem' is relative"):
        signing_key()
    monkeypatch.setenv(SIGNING_KEY_ENV, str(tmp_path / "missing.pem"))
    with pytest.raises(
        SigningKeyError, match=r"missing\.pem, which does not exist.*`squarechipo key new` wrote, or write"
    ):
        signing_key()
    for mode in (0o640, 0o604):
        path.chmod(mode)
        monkeypatch.setenv(SIGNING_KEY_ENV, str(path))
        with pytest.raises(SigningKeyError, match=rf"may be read by other users \(mode {mode:o}\)"):
            signing_key()
    path.chmod(0o600)
    other = tmp_path / "rsa.pem"
    from cryptography.hazmat.primitives.asymmetric import ec

    pem = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    other.write_bytes(pem)
    other.chmod(0o600)
    monkeypatch.setenv(SIGNING_KEY_ENV, str(other))
    with pytest.raises(
        SigningKeyError, match=r"not an Ed25519 private key .*typed.*Write one: squarechipo key new\.$"
    ):
        signing_key()


def test_without_any_setting_the_machine_key_is_made_once_and_trusted_alone(bare, caplog):
    from squarechipo.trust import machine

    assert not trust_is_explicit()
    assert signing_key(create=False) is None  # not made until it is needed
    with caplog.at_level(logging.WARNING, logger="squarechipo"):
        first = signing_key()
    assert (
        first.path == machine.machine_dir() / "signing_key.pem"
        and "generated this machine's signing key" in caplog.text
    )
    assert (
        first.key_id in caplog.text and public_key_text(first.public) in caplog.text and str(first.path) in caplog.text
    )
    assert "A team names its custodian's key instead (docs/privacy.md)" in caplog.text
    assert signing_key().key_id == first.key_id and signing_key(create=False).key_id == first.key_id
    assert list(trusted_keys()) == [first.key_id]


def test_a_machine_key_another_process_wrote_first_is_read_not_replaced(bare, monkeypatch):
    """Two processes making a machine's first release at once: the one whose key file lost the race reads the
    winner's key instead of failing (generate_key_pair never overwrites)."""
    from squarechipo.trust import machine

    made = []

    def lost_the_race(path):
        made.append(generate_key_pair(path))  # the other process's key lands first ...
        raise SigningKeyError("already exists")  # ... so this process's write is refused

    monkeypatch.setattr(signing, "generate_key_pair", lost_the_race)
    assert signing_key().key_id == made[0].key_id and made[0].path == machine.machine_dir() / "signing_key.pem"


def test_trusted_keys_come_from_a_file_or_the_variable_and_exclude_the_own_key(tmp_path, monkeypatch, bare):
    a, b = generate_key_pair(tmp_path / "a.pem"), generate_key_pair(tmp_path / "b.pem")
    monkeypatch.setenv(TRUSTED_KEYS_ENV, f"{public_key_text(a.public)}, {public_key_text(b.public)}")
    assert trust_is_explicit() and set(trusted_keys()) == {a.key_id, b.key_id}
    assert signing_key() is None  # an analyst: nothing it writes is signed
    listing = tmp_path / "trusted"
    listing.write_text(f"# the team's custodians\n\n{public_key_text(a.public)} custodian one\n")
    monkeypatch.setenv(TRUSTED_KEYS_ENV, str(listing))
    assert list(trusted_keys()) == [a.key_id]
    listing.write_text("# nobody\n")
    with pytest.raises(SigningKeyError, match="holds no public key, so no seal could be accepted"):
        trusted_keys()
    monkeypatch.setenv(TRUSTED_KEYS_ENV, str(tmp_path / "none"))
    with pytest.raises(SigningKeyError, match=r"none, which does not exist"):
        trusted_keys()
    listing.write_text("rsa:AAAA a key of another kind\n")
    monkeypatch.setenv(TRUSTED_KEYS_ENV, str(listing))
    with pytest.raises(SigningKeyError, match=r"trusted: 'rsa:AAAA' is not a public key; each key reads ed25519"):
        trusted_keys()
    monkeypatch.setenv(TRUSTED_KEYS_ENV, "ed25519:AAAA")
    with pytest.raises(SigningKeyError, match=r"'ed25519:AAAA' is not a valid Ed25519 public key \(32 bytes"):
        trusted_keys()
    listing.write_bytes(public_key_text(a.public).encode() + b" caf\xe9\n")  # Latin-1, not UTF-8
    monkeypatch.setenv(TRUSTED_KEYS_ENV, str(listing))
    with pytest.raises(SigningKeyError, match=r"cannot be read as a trusted-keys file \(not UTF-8 text\)"):
        trusted_keys()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another account needs root")
def test_a_signing_key_of_another_account_is_refused_in_one_line_before_it_is_read(tmp_path, monkeypatch):
    path = tmp_path / "theirs.pem"
    generate_key_pair(path)
    os.chown(path, 65534, 65534)  # nobody's, mode 600: root reads it, an ordinary account could not
    monkeypatch.setenv(SIGNING_KEY_ENV, str(path))
    with pytest.raises(SigningKeyError, match=r"theirs\.pem is owned by uid 65534, not this account"):
        signing_key()


def test_a_signature_verifies_only_by_a_trusted_key_over_what_was_signed(tmp_path, monkeypatch, bare):
    a, b = generate_key_pair(tmp_path / "a.pem"), generate_key_pair(tmp_path / "b.pem")
    monkeypatch.setenv(TRUSTED_KEYS_ENV, public_key_text(a.public))
    assert verify(a.sign("sha256:1"), "sha256:1", "here", "ledger") == a.key_id
    assert verify(a.sign("sha256:1"), "sha256:2", "here", "ledger") is None  # signed other fields
    named, _, encoded = a.sign("sha256:1").removeprefix("ed25519:").partition(":")
    assert verify(f"ed25519:{named}:{encoded[:-4]}AAA=", "sha256:1", "here", "ledger") is None
    with pytest.raises(SigningKeyError, match=rf"^here: the ledger is signed by key {b.key_id}, which is not among "):
        verify(b.sign("sha256:1"), "sha256:1", "here", "ledger")
    for malformed in ("ed25519:", "ed25519:abc", "hmac:abc:def", "", "12345678" + a.sign("sha256:1")[8:]):
        with pytest.raises(SigningKeyError, match="signature .* is malformed"):
            verify(malformed, "sha256:1", "here", "ledger")
    # Characters outside base64 are not dropped: a signature with them is not the one that was made.
    assert verify(a.sign("sha256:1") + "!", "sha256:1", "here", "ledger") is None
    assert verify(a.sign("sha256:1") + ":more", "sha256:1", "here", "ledger") is None  # the key id ends at the first :
    monkeypatch.setenv(TRUSTED_KEYS_ENV, f"{public_key_text(a.public)},{public_key_text(b.public)}")
    stranger = generate_key_pair(tmp_path / "c.pem")
    with pytest.raises(SigningKeyError, match=rf"names \({', '.join(sorted([a.key_id, b.key_id]))}\)"):
        verify(stranger.sign("sha256:1"), "sha256:1", "here", "ledger")
    text = public_key_text(a.public)
    for damaged in (text[:-2] + "!=", text[:20] + "!" + text[20:]):  # base64 with a stray character is not a key
        monkeypatch.setenv(TRUSTED_KEYS_ENV, damaged)
        with pytest.raises(SigningKeyError, match="is not a valid Ed25519 public key"):
            trusted_keys()
    monkeypatch.setenv(TRUSTED_KEYS_ENV, public_key_text(a.public))
    monkeypatch.delenv(TRUSTED_KEYS_ENV)
    with pytest.raises(SigningKeyError, match=r"not among this machine's own key"):
        verify(b.sign("sha256:1"), "sha256:1", "here", "ledger")
    monkeypatch.setattr(signing, "signing_key", lambda create=True: None)  # no key at all on this machine yet
    with pytest.raises(SigningKeyError, match=r"\(none\)"):
        verify(a.sign("sha256:1"), "sha256:1", "here", "ledger")
