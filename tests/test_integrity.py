"""Tamper evidence and keys: an edited ledger, edited labels or a deleted ledger are refused; a signature verifies with
the public key and nobody else can make one; legacy seals are read and reported as such; keys are generated."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import datasets
import pytest

from squarechipo.data.integrity import MARKER
from squarechipo.privacy import LabelPipeline, get_ledger, release_dataset
from squarechipo.privacy.release.saved import load_release
from squarechipo.trust.seals import KEY_ENV, IntegrityError
from tests.helpers.keys import roles
from tests.helpers.rows import plan_rows


def _edit_ledger(folder: Path, change) -> None:
    """Edit the ledger inside a saved release as a hand with a text editor would (``change`` mutates its JSON)."""
    from squarechipo.data.metadata import BLOCK_MARKER

    info = json.loads((folder / "dataset_info.json").read_text())
    head, _, block = info["description"].partition(BLOCK_MARKER)
    ledger = json.loads(block)
    change(ledger)
    info["description"] = head + BLOCK_MARKER + "\n" + json.dumps(ledger)
    (folder / "dataset_info.json").write_text(json.dumps(info))


def test_an_edited_ledger_edited_labels_or_a_deleted_ledger_are_refused(tmp_path):
    rows = plan_rows()
    folder = tmp_path / "release"
    release_dataset(rows, LabelPipeline(epsilon=0.5, corruption_rate=0.1), folder, seed=0)
    clean = tmp_path / "clean"

    def fresh() -> Path:
        if clean.exists():
            shutil.rmtree(clean)
        shutil.copytree(folder, clean)
        return clean

    assert load_release(fresh()).num_rows == 40

    def epsilon_to_five(ledger):
        ledger["releases"][0]["epsilon"] = 5.0
        ledger["total_epsilon"] = 5.0

    for change, message in (
        (epsilon_to_five, "does not match its digest"),
        (lambda ledger: ledger["releases"][0].update(mechanism="none"), "does not match its digest"),
    ):
        _edit_ledger(fresh(), change)
        with pytest.raises(IntegrityError, match=message):
            load_release(clean)

    # A forger who recomputes the digest (here with the key, which a custodian holds) still has to keep the release
    # consistent with its own pipeline.
    from squarechipo.privacy.ledger.ledger import _sealed_view
    from squarechipo.trust.seals import seal

    def consistent_forgery(ledger):
        ledger["releases"][0]["mechanism"] = "none"
        ledger.update(seal(ledger, view=_sealed_view))

    _edit_ledger(fresh(), consistent_forgery)
    with pytest.raises(IntegrityError, match="the privacy ledger is not the one this release was saved with"):
        load_release(clean)  # the marker names the original ledger's digest
    marker = json.loads((clean / MARKER).read_text())
    marker["ledger_digest"] = json.loads(
        json.loads((clean / "dataset_info.json").read_text())["description"].split("\n", 1)[1]
    )["digest"]
    (clean / MARKER).write_text(json.dumps(seal(marker)))  # ... so the forger re-seals the marker too
    with pytest.raises(IntegrityError, match="disagrees with itself: mechanism 'none' for a pipeline of ε 0.5"):
        load_release(clean)

    # Edited labels: swap one row's chosen and rejected and save the table back.
    edited = datasets.load_from_disk(str(fresh()))
    table = edited.data.table.to_pydict()
    table["chosen"][0], table["rejected"][0] = table["rejected"][0], table["chosen"][0]
    tampered = datasets.Dataset.from_dict(table, info=edited.info)
    shutil.rmtree(clean)
    tampered.save_to_disk(str(clean))
    (clean / MARKER).write_text((folder / MARKER).read_text())
    with pytest.raises(IntegrityError, match="the released rows changed after the release was saved"):
        load_release(clean)

    # A deleted ledger beside released labels.
    fresh()
    info = json.loads((clean / "dataset_info.json").read_text())
    info["description"] = ""
    (clean / "dataset_info.json").write_text(json.dumps(info))
    with pytest.raises(IntegrityError, match="holds released labels .* but no privacy ledger"):
        load_release(clean)


def _legacy_hmac(record: dict, key: str) -> dict:
    """``record`` sealed as squarechipo 0.3 sealed it under SQUARECHIPO_LEDGER_KEY (HMAC-SHA256, the key named by an
    HMAC of a fixed string): the form of seals teams already hold."""
    import hashlib
    import hmac

    body = {k: v for k, v in record.items() if k not in ("digest", "signature")}
    payload = json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()
    named = hmac.new(key.encode(), b"squarechipo key id", hashlib.sha256).hexdigest()[:8]
    return {**body, "digest": f"hmac-sha256:{named}:" + hmac.new(key.encode(), payload, hashlib.sha256).hexdigest()}


_TEAM_KEY = "9c41e07bd25f8a36c1e94d7b02af58e3d6b17c904e2fa85d3b60c1e79a4f2d58"
_OTHER_KEY = "2be7d90c4a15f63e8d2b7a0c91f4e65d3a8c07b12e9f4d6a5c3b81e07d92f4a6"
_LEGACY_MODEL = Path(__file__).parent.parent / "results" / "main_job_releases" / "rel_n128_eps4.0_1"


def test_a_forger_without_the_private_key_can_neither_seal_nor_sign_a_release(tmp_path, monkeypatch):
    """HMAC keys were shared secrets: every process that verified a seal could forge one (a guessable key was found
    from one marker in about 1,000 guesses and an ε 0.05 release forged). The custodian signs with Ed25519; the
    analyst verifies with the public key, and whatever it seals itself is refused across the boundary."""
    from squarechipo.data import metadata
    from squarechipo.privacy.ledger.ledger import _sealed_view
    from squarechipo.trust.keys import generate_key_pair
    from squarechipo.trust.seals import seal

    keys = roles(tmp_path, monkeypatch)
    released = release_dataset(plan_rows(), LabelPipeline(epsilon=1.0), seed=0)
    keys.analyst()
    ledger = get_ledger(released)
    assert ledger.seal.signed and ledger.seal.key_id == keys.custodian_key.key_id and ledger.total_epsilon == 1.0
    record = json.loads(metadata.read_block(released))
    record["releases"][0]["epsilon"] = record["releases"][0]["pipeline"]["epsilon"] = 0.05
    record["total_epsilon"] = 0.05
    unsigned = seal(record, view=_sealed_view)  # the analyst holds no signing key: a plain digest
    assert "signature" not in unsigned
    with pytest.raises(IntegrityError, match=r"carries an unsigned digest.*only a seal signed by a trusted key"):
        get_ledger(metadata.with_block(released.select(range(40)), json.dumps(unsigned)))
    own = generate_key_pair(tmp_path / "analyst.pem")  # a key of its own signs, and is named as unknown
    monkeypatch.setenv("SQUARECHIPO_SIGNING_KEY", str(own.path))
    signed = seal(record, view=_sealed_view)
    keys.analyst()
    with pytest.raises(IntegrityError, match=rf"signed by key {own.key_id}, which is not among the keys"):
        get_ledger(metadata.with_block(released.select(range(40)), json.dumps(signed)))
    # A signature copied onto edited fields does not verify.
    copied = {**unsigned, "signature": json.loads(metadata.read_block(released))["signature"]}
    with pytest.raises(IntegrityError, match="signature does not verify"):
        get_ledger(metadata.with_block(released.select(range(40)), json.dumps(copied)))


def test_legacy_plain_and_hmac_seals_are_read_and_reported_as_such_and_refused_across_the_boundary(
    monkeypatch, tmp_path
):
    """Seals written by squarechipo 0.3 (plain sha256, or HMAC under SQUARECHIPO_LEDGER_KEY) are still read on one's
    own machine, reported as what they are; an analyst who trusts a custodian's key refuses them."""
    from squarechipo.privacy.provenance.record import verify_privacy_record

    found = verify_privacy_record(_LEGACY_MODEL)  # a model record and ledger written by 0.3, committed in results/
    assert found["record"].startswith("unsigned digest") and found["ledger"][0].startswith("unsigned digest")
    assert found["epsilon_backed_by_ledger"] and found["epsilon"] == 4.0
    from squarechipo.data import metadata

    released = release_dataset(plan_rows(), LabelPipeline(epsilon=1.0), seed=0)
    legacy = _legacy_hmac({k: v for k, v in json.loads(metadata.read_block(released)).items()}, _TEAM_KEY)
    with_hmac = metadata.with_block(released.select(range(40)), json.dumps(legacy))
    with pytest.raises(IntegrityError, match=rf"legacy HMAC seal \(key id [0-9a-f]{{8}}\).*set {KEY_ENV}"):
        get_ledger(with_hmac)
    monkeypatch.setenv(KEY_ENV, _TEAM_KEY)
    assert get_ledger(with_hmac).seal.describe().startswith("legacy HMAC-SHA256 seal (key id")
    monkeypatch.setenv(KEY_ENV, _OTHER_KEY)
    with pytest.raises(IntegrityError, match="sealed under another key") as refused:
        get_ledger(with_hmac)
    assert "Do not release the raw rows again" in str(refused.value)
    roles(tmp_path, monkeypatch).analyst()
    monkeypatch.setenv(KEY_ENV, _TEAM_KEY)
    with pytest.raises(IntegrityError, match="legacy HMAC-SHA256 seal.*Across the trust boundary"):
        get_ledger(with_hmac)
    with pytest.raises(IntegrityError, match="unsigned digest.*Across the trust boundary"):
        verify_privacy_record(_LEGACY_MODEL)


@pytest.mark.parametrize("value", ["", "   ", "k" * 32, "team-secret-" + "k" * 32])
def test_an_empty_or_patterned_legacy_key_is_refused_not_used(monkeypatch, value):
    """An empty key fell back to plain digests; a patterned one was recovered from one seal. The key of legacy HMAC
    seals is still checked before it is used to read one."""
    from squarechipo.data import metadata
    from squarechipo.trust.seals import LedgerKeyError

    released = release_dataset(plan_rows(), LabelPipeline(epsilon=1.0), seed=0)
    legacy = metadata.with_block(
        released.select(range(40)), json.dumps(_legacy_hmac(json.loads(metadata.read_block(released)), _TEAM_KEY))
    )
    monkeypatch.setenv(KEY_ENV, value)
    with pytest.raises(LedgerKeyError, match=f"{KEY_ENV} is (set but empty|not random)"):
        get_ledger(legacy)


def test_a_random_legacy_key_of_every_short_length_is_refused_by_its_length():
    """A 16-byte random key sealed when the length check was masked by the randomness check (the test fed only
    patterned keys). Random keys of every length below 32 bytes are refused by the length check itself."""
    import secrets

    from squarechipo.trust.seals import LedgerKeyError, _key

    for length in range(1, 32):  # written out, not from the module's constant: a lowered constant fails here
        key = secrets.token_urlsafe(32)[:length]
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv(KEY_ENV, key)
            with pytest.raises(LedgerKeyError, match=rf"is {length} byte\(s\) long; a key must be at least 32 bytes"):
                _key()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(KEY_ENV, secrets.token_hex(16))  # 32 random hex digits: accepted
        assert _key() is not None


def test_squarechipo_key_new_writes_a_private_key_only_its_owner_reads_and_verify_needs_the_public_key(
    tmp_path, monkeypatch, capsys
):
    """Keys are generated, never typed; the private file is 0600; a typed secret, a readable key file or an existing
    path is refused; `key verify` checks a model's record with the public key alone."""
    import os
    import stat

    from squarechipo.cli import main
    from squarechipo.trust.keys import _parse_public, key_id_of, public_key_text, signing_key

    def signing_key_id(text: str) -> str:
        return key_id_of(_parse_public(text, "printed"))

    assert main(["key", "new", "--out", str(tmp_path / "custodian.pem")]) == 0
    printed = capsys.readouterr().out.splitlines()[0]
    assert printed.startswith("ed25519:") and (tmp_path / "custodian.pem.pub").read_text().startswith(printed)
    assert stat.S_IMODE(os.stat(tmp_path / "custodian.pem").st_mode) == 0o600
    assert main(["key", "new", "--out", str(tmp_path / "custodian.pem")]) == 1  # never overwritten
    assert "already exists" in capsys.readouterr().err
    monkeypatch.setenv("SQUARECHIPO_SIGNING_KEY", str(tmp_path / "custodian.pem"))
    assert public_key_text(signing_key().public) == printed
    release_dataset(plan_rows(), LabelPipeline(epsilon=0.5), tmp_path / "release", seed=0)
    monkeypatch.delenv("SQUARECHIPO_SIGNING_KEY")  # an analyst: the public key only
    monkeypatch.setenv("SQUARECHIPO_TRUSTED_KEYS", str(tmp_path / "custodian.pem.pub"))
    assert main(["key", "verify", str(tmp_path / "release")]) == 0
    verified = json.loads(capsys.readouterr().out)["splits"]["release"]
    assert verified["epsilon"] == 0.5 and verified["ledger"].startswith(f"signed by key {signing_key_id(printed)}")
    monkeypatch.delenv("SQUARECHIPO_TRUSTED_KEYS")
    typed = tmp_path / "typed.pem"
    typed.write_text("finance-team-ledger-key-2026-11-29\n")
    typed.chmod(0o600)
    monkeypatch.setenv("SQUARECHIPO_SIGNING_KEY", str(typed))
    with pytest.raises(ValueError, match="is not an Ed25519 private key written by `squarechipo key new`"):
        signing_key()
    (tmp_path / "custodian.pem").chmod(0o644)
    monkeypatch.setenv("SQUARECHIPO_SIGNING_KEY", str(tmp_path / "custodian.pem"))
    with pytest.raises(ValueError, match=r"may be read by other users \(mode 644\).*chmod 600"):
        signing_key()


def test_an_edited_record_or_release_is_met_with_its_own_fix_never_a_second_release(tmp_path):
    """An edited model record advised "release the raw rows again", which spends ε a second time and cannot repair
    a model; an edited release advised the same."""
    import json

    from squarechipo.privacy.provenance.record import PRIVACY_FILE, read_privacy_record
    from squarechipo.trust.seals import seal

    model = tmp_path / "model"
    model.mkdir()
    (model / PRIVACY_FILE).write_text(json.dumps({**seal({"stage": "training", "epsilon": 0.5}), "epsilon": 5.0}))
    with pytest.raises(IntegrityError, match="does not match its digest") as refused:
        read_privacy_record(model)
    assert "train the model again" in str(refused.value) and "raw rows again" not in str(refused.value)
    folder = tmp_path / "release"
    release_dataset(plan_rows(), LabelPipeline(epsilon=0.5), folder, seed=0)
    _edit_ledger(folder, lambda ledger: ledger["releases"][0].update(epsilon=5.0))
    with pytest.raises(IntegrityError, match="does not match its digest") as refused:
        load_release(folder)
    assert "Restore the release as it was saved" in str(refused.value) and "a second time" in str(refused.value)


def test_the_rows_digest_fed_a_chunk_at_a_time_is_the_digest_of_the_whole_columns(monkeypatch):
    """The marker's rows digest is computed a chunk of values at a time (memory flat in the rows); it must be the
    sha256 of the same bytes as one join of each whole column (strings as they are, other values as JSON), as every
    saved release's marker was written, or no release saved before would load."""
    import hashlib

    import datasets

    import squarechipo.data.integrity as integrity

    def whole(dataset) -> str:
        table, digest = dataset.with_format("arrow")[:], hashlib.sha256()
        for name in sorted(table.column_names):
            values = table.column(name).to_pylist()
            plain = all(isinstance(v, str) for v in values)
            text = "\x1f".join(v if plain else json.dumps(v, sort_keys=True, ensure_ascii=False) for v in values)
            digest.update(name.encode() + b"\0" + text.encode() + b"\0")
        return "sha256:" + digest.hexdigest()

    monkeypatch.setattr(integrity, "_DIGEST_CHUNK", 3)
    cases = [
        [{"prompt": f"p{i}", "score": i} for i in range(8)],
        [{"prompt": "x" if i % 4 else None, "tags": [str(i), "é"]} for i in range(7)],  # a null: the column turns JSON
        [{"prompt": "ünïcode\x1f", "chosen": "a"}] * 3,
    ]
    for rows in cases:
        data = datasets.Dataset.from_list(rows)
        assert integrity._rows_digest(data) == whole(data), rows
