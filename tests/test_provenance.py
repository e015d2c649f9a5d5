"""Claims bound to what they describe (docs/privacy.md, the threat model): a model's record names the sha256 of every
model file beside it and the key that signed it; a resumed run, a derived dataset and the store of model records
accept only what they can check; keys are canonical points of the prime-order group; the machine folder and the
trust store are the account's own. Each rule is reached by building the input an attacker or a careless user would.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import stat
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers import AutoModelForCausalLM

from squarechipo.cli import main
from squarechipo.privacy import LabelPipeline, get_ledger, release_dataset
from squarechipo.privacy.door import RawLabelsError
from squarechipo.privacy.ledger.debiasing import resolve_privacy
from squarechipo.privacy.provenance.record import (
    PRIVACY_FILE,
    PrivacyRecord,
    read_privacy_record,
    verify_privacy_record,
    write_privacy_record,
)
from squarechipo.trust.keys import (
    SIGNING_KEY_ENV,
    TRUSTED_KEYS_ENV,
    SigningKeyError,
    generate_key_pair,
    public_key_text,
    signing_key,
    trusted_keys,
)
from squarechipo.trust.seals import IntegrityError
from tests.helpers.keys import roles
from tests.helpers.rows import distinct_pairs

ROOT = Path(__file__).resolve().parents[1]


def _private_record(rows, epsilon: float = 0.5) -> PrivacyRecord:
    released = release_dataset(rows, LabelPipeline(epsilon=epsilon), seed=0)
    settings = resolve_privacy(get_ledger(released), epsilon=None, flip_rate=None, override=False)
    return PrivacyRecord.build({"stage": "preference_optimization", **settings.record(False)})


def _verify(path, capsys) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["key", "verify", str(path)])
    out = capsys.readouterr()
    return code, out.out + out.err


# ---------------------------------------------------------------------------------------- records and weights


def test_a_record_names_its_weights_and_key_verify_refuses_any_other_files(tmp_path, tiny_model_factory, capsys):
    """The record's subjects are the sha256 of every model file; key verify recomputes them and refuses weights
    swapped in from another model, a file added beside them (an adapter), a file removed, and a record that names
    no weights (written before records were bound)."""
    model_dir = tmp_path / "model"
    tiny_model_factory(0).save_pretrained(model_dir)
    write_privacy_record(model_dir, _private_record(distinct_pairs(16, offset=8100)))
    stored = json.loads((model_dir / PRIVACY_FILE).read_text())
    names = [s["name"] for s in stored["subjects"]]
    assert names == ["config.json", "model.safetensors"] and all(
        len(s["digest"]["sha256"]) == 64 for s in stored["subjects"]
    )
    code, out = _verify(model_dir, capsys)
    assert code == 0, out
    shown = json.loads(out)
    assert shown["weights"][1].startswith("model.safetensors sha256:") and shown["epsilon_backed_by_ledger"]
    code, out = _verify(tmp_path / "no_such_model", capsys)  # a typo: one line that says what to give
    assert code == 1 and "no_such_model: no such folder or file; give a model folder" in out
    assert shown["trained_by"].endswith("(trusted here)") and "does_not_prove" in shown

    other = tmp_path / "other"
    tiny_model_factory(7).save_pretrained(other)  # weights trained on anything, beside the untouched record
    original = (model_dir / "model.safetensors").read_bytes()
    shutil.copy(other / "model.safetensors", model_dir / "model.safetensors")
    code, out = _verify(model_dir, capsys)
    assert code == 1 and "not the ones it describes (changed ['model.safetensors'])" in out
    assert len(out.strip().splitlines()) == 1
    with pytest.raises(IntegrityError, match="changed"):
        read_privacy_record(model_dir)  # the lineage guard, a gold report and the selector read it the same way
    (model_dir / "model.safetensors").write_bytes(original)
    (model_dir / "adapter_model.safetensors").write_bytes(b"an adapter the record does not name")
    code, out = _verify(model_dir, capsys)
    assert code == 1 and "not named by the record ['adapter_model.safetensors']" in out
    (model_dir / "adapter_model.safetensors").unlink()
    (model_dir / "model.safetensors").unlink()
    code, out = _verify(model_dir, capsys)
    assert code == 1 and "missing ['model.safetensors']" in out

    from squarechipo.trust.seals import seal

    legacy = {k: v for k, v in stored.items() if k not in ("subjects", "signer", "digest", "signature")}
    (model_dir / "model.safetensors").write_bytes(original)
    (model_dir / PRIVACY_FILE).write_text(json.dumps(seal(legacy)))
    assert read_privacy_record(model_dir) is not None  # read on one's own machine, as before
    code, out = _verify(model_dir, capsys)
    assert code == 1 and "names no digest of the weights it describes" in out


def test_an_adapters_record_binds_its_base_and_key_verify_refuses_another_base(tmp_path, tiny_model_factory, capsys):
    """A LoRA adapter's record binds the digests of the base it was trained on: key verify finds the base, checks
    it, and refuses the adapter once the base is swapped for other weights (trained on anything), is gone, or the
    record binds none (written before adapters were bound)."""
    from peft import LoraConfig, get_peft_model

    base = tmp_path / "base"
    tiny_model_factory(0).save_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base)  # PEFT records the folder the base was loaded from
    adapter = tmp_path / "adapter"
    get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj"], task_type="CAUSAL_LM")).save_pretrained(adapter)
    write_privacy_record(adapter, _private_record(distinct_pairs(16, offset=8200)))
    code, out = _verify(adapter, capsys)
    assert code == 0, out
    assert json.loads(out)["base"] == f"{base} (2 files match)"
    original = (base / "model.safetensors").read_bytes()
    tiny_model_factory(7).save_pretrained(base)  # another model's weights where the base was
    code, out = _verify(adapter, capsys)
    assert code == 1 and "not the model it was trained on (files changed, missing or added: model.safetensors)" in out
    (base / "model.safetensors").write_bytes(original)
    assert _verify(adapter, capsys)[0] == 0
    shutil.rmtree(base)
    code, out = _verify(adapter, capsys)
    assert code == 1 and "is not a folder here, so its weights cannot be checked" in out
    stored = json.loads((adapter / PRIVACY_FILE).read_text())
    from squarechipo.trust.seals import seal

    unbound = {k: v for k, v in stored.items() if k not in ("base", "digest", "signature")}
    (adapter / PRIVACY_FILE).write_text(json.dumps(seal(unbound)))
    code, out = _verify(adapter, capsys)
    assert code == 1 and "binds no digest of its base model" in out


def test_key_verify_require_attested_admits_only_a_record_a_trusted_key_signed(
    tmp_path, tiny_model_factory, capsys, monkeypatch
):
    """A gate: `key verify --require-attested` exits 0 for a record signed by a trusted key and 1, in one line, for one
    signed only by the key it names (self-signed: who wrote it, not that the custodian's rows were released)."""
    keys = roles(tmp_path, monkeypatch)
    model_dir = tmp_path / "model"
    tiny_model_factory(0).save_pretrained(model_dir)
    write_privacy_record(model_dir, _private_record(distinct_pairs(16, offset=8300)))  # the custodian trains
    keys.analyst()
    capsys.readouterr()
    assert main(["key", "verify", "--require-attested", str(model_dir)]) == 0
    keys.custodian()
    record = _private_record(distinct_pairs(16, offset=8400))  # the custodian releases; a trainer signs the record
    monkeypatch.setenv(SIGNING_KEY_ENV, str(generate_key_pair(tmp_path / "trainer.pem").path))
    write_privacy_record(model_dir, record)
    keys.analyst()
    capsys.readouterr()
    assert main(["key", "verify", str(model_dir)]) == 0  # its ε is backed by the custodian's ledger
    code = main(["key", "verify", "--require-attested", str(model_dir)])
    err = capsys.readouterr().err
    assert code == 1 and "its training is not attested by a trusted key" in err and len(err.strip().splitlines()) == 1


def test_the_trainer_binds_its_record_to_the_saved_weights_and_each_checkpoint(
    tmp_path, tiny_model_factory, tokenizer
):
    """A private run's output folder and each checkpoint carry a record whose subjects are the files saved there
    (the optimizer's and scheduler's states are not the model); key verify passes on both."""
    from squarechipo.trainer import SquareChiPOTrainer
    from tests.helpers.runs import tiny_config

    train = release_dataset(distinct_pairs(8, offset=8200), LabelPipeline(epsilon=1.0))
    args = tiny_config(tmp_path / "run", max_steps=2, save_strategy="steps", save_steps=1)
    trainer = SquareChiPOTrainer(
        tiny_model_factory(0), ref_model=tiny_model_factory(0), args=args, train_dataset=train,
        processing_class=tokenizer,
    )  # fmt: skip
    trainer.train()
    trainer.save_model()
    for folder in (tmp_path / "run", tmp_path / "run" / "checkpoint-1"):
        named = {s["name"] for s in json.loads((folder / PRIVACY_FILE).read_text())["subjects"]}
        assert "model.safetensors" in named and not any(n.startswith(("optimizer", "scheduler")) for n in named)
        assert verify_privacy_record(folder, third_party=True)["epsilon_backed_by_ledger"]


def test_an_analysts_own_key_says_who_trained_and_never_vouches_for_a_release(
    tmp_path, monkeypatch, tiny_model_factory, capsys
):
    """An analyst may sign its model records with a key of its own: a verifier who trusts only the custodian sees
    the record signed by that (untrusted) key, who trained, and the ledger signed by the custodian. The analyst's
    key never signs a ledger the verifier accepts."""
    keys = roles(tmp_path, monkeypatch)
    record = _private_record(distinct_pairs(16, offset=8300))  # released and signed by the custodian
    analyst = generate_key_pair(tmp_path / "analyst.pem")
    monkeypatch.setenv(
        SIGNING_KEY_ENV, str(analyst.path)
    )  # the analyst's process: its own key, trusting the custodian
    monkeypatch.setenv(TRUSTED_KEYS_ENV, keys.public)
    model_dir = tmp_path / "model"
    tiny_model_factory(0).save_pretrained(model_dir)
    write_privacy_record(model_dir, record)
    assert read_privacy_record(model_dir).signer == public_key_text(analyst.public)
    keys.analyst()  # a verifier holding only the custodian's public key
    code, out = _verify(model_dir, capsys)
    assert code == 0, out
    shown = json.loads(out)
    assert shown["record"].startswith(f"signed by key {analyst.key_id}, which the record names and this account")
    assert shown["trained_by"] == f"key {analyst.key_id} (not a trusted key)"
    assert shown["ledger"][0].startswith(f"signed by key {keys.custodian_key.key_id}")
    stored = json.loads((model_dir / PRIVACY_FILE).read_text())
    forged = {**stored, "epsilon": 0.01}  # the signature no longer matches the fields
    (model_dir / PRIVACY_FILE).write_text(json.dumps(forged))
    code, out = _verify(model_dir, capsys)
    assert code == 1 and "does not match its digest" in out
    # A release the analyst signs itself is refused by the verifier: only the custodian's key vouches for rows.
    monkeypatch.setenv(SIGNING_KEY_ENV, str(analyst.path))
    monkeypatch.delenv(TRUSTED_KEYS_ENV)
    own = release_dataset(distinct_pairs(8, offset=8350), LabelPipeline(epsilon=0.01), seed=0)
    own_folder = tmp_path / "own_release"
    from squarechipo.privacy import save_release

    save_release(own, own_folder)
    keys.analyst()
    code, out = _verify(own_folder, capsys)
    assert code == 1 and f"signed by key {analyst.key_id}, which is not among" in out


# ---------------------------------------------------------------------------------------- inherited state


def test_a_private_run_resumes_only_from_its_own_checkpoint(tmp_path, tiny_model_factory, tokenizer, monkeypatch):
    """resume_from_checkpoint hands a checkpoint's weights to the run: a raw-label run's checkpoint, one of another
    release, one without a record or with its weights edited is refused before a step; the run's own resumes."""
    from squarechipo.trainer import SquareChiPOTrainer
    from tests.helpers.runs import tiny_config

    def trainer(folder, train, **options):
        args = tiny_config(tmp_path / folder, max_steps=2, save_strategy="steps", save_steps=1, **options)
        return SquareChiPOTrainer(
            tiny_model_factory(0), ref_model=tiny_model_factory(0), args=args, train_dataset=train,
            processing_class=tokenizer,
        )  # fmt: skip

    raw = distinct_pairs(8, offset=8400)
    trainer("raw", raw, train_labels_public=True).train()
    private = release_dataset(raw, LabelPipeline(epsilon=0.5))
    with pytest.raises(RawLabelsError, match=r"saved by another run \(the release \(ledger digest\), ε differ"):
        trainer("private", private).train(resume_from_checkpoint=str(tmp_path / "raw" / "checkpoint-1"))
    assert not (tmp_path / "private" / "checkpoint-2").exists()  # refused before any step
    own = trainer("private", private)
    own.train()
    checkpoint = tmp_path / "private" / "checkpoint-1"
    again = trainer("private", private)
    again.train(resume_from_checkpoint=str(checkpoint))  # its own checkpoint: resumed
    assert again.state.global_step == 2
    other = release_dataset(distinct_pairs(8, offset=8450), LabelPipeline(epsilon=8.0))
    with pytest.raises(RawLabelsError, match="saved by another run"):
        trainer("other", other).train(resume_from_checkpoint=str(checkpoint))
    # The same rows, ledger and ε, but the record re-signed by another process's key beside the weights it names.
    own_key = os.environ[SIGNING_KEY_ENV]
    stranger = generate_key_pair(tmp_path / "stranger.pem")
    kept = read_privacy_record(checkpoint)
    monkeypatch.setenv(SIGNING_KEY_ENV, str(stranger.path))
    write_privacy_record(checkpoint, kept)
    monkeypatch.setenv(SIGNING_KEY_ENV, own_key)
    with pytest.raises(RawLabelsError, match=r"signed by another key .*not by this run's key .*another process"):
        trainer("private", private).train(resume_from_checkpoint=str(checkpoint))
    # The same record written where no key signs (an unsigned digest: anyone can write one).
    monkeypatch.delenv(SIGNING_KEY_ENV)
    monkeypatch.setenv(TRUSTED_KEYS_ENV, public_key_text(stranger.public))  # trust named: no key made or used
    write_privacy_record(checkpoint, kept)
    assert "signature" not in json.loads((checkpoint / PRIVACY_FILE).read_text())
    monkeypatch.delenv(TRUSTED_KEYS_ENV)
    monkeypatch.setenv(SIGNING_KEY_ENV, own_key)
    with pytest.raises(RawLabelsError, match=r"not by this run's key"):
        trainer("private", private).train(resume_from_checkpoint=str(checkpoint))
    shutil.copy(tmp_path / "raw" / "checkpoint-1" / "model.safetensors", checkpoint / "model.safetensors")
    with pytest.raises(RawLabelsError, match=r"changed \['model.safetensors'\]"):
        trainer("private", private).train(resume_from_checkpoint=str(checkpoint))
    (checkpoint / PRIVACY_FILE).unlink()
    with pytest.raises(RawLabelsError, match="carries no privacy record"):
        trainer("private", private).train(resume_from_checkpoint=str(checkpoint))


def test_derived_rows_keep_the_sources_they_were_derived_from(tmp_path):
    """pairwise_rows of a release at ε 8 whose derivation block is rewritten to name a release at ε 0.5 (a signed
    summary, genuine, of other rows): refused."""
    from squarechipo.data import metadata
    from squarechipo.privacy.ledger.binding import pairwise_rows

    loose = release_dataset(distinct_pairs(12, offset=8500), LabelPipeline(epsilon=8.0), seed=0)
    tight = release_dataset(distinct_pairs(12, offset=8520), LabelPipeline(epsilon=0.5), seed=0)
    derived = pairwise_rows(loose)
    assert get_ledger(derived).total_epsilon == 8.0
    block = json.loads(metadata.read_block(derived))
    block["sources"] = [get_ledger(tight).summary()]
    swapped = metadata.with_block(derived, json.dumps(block, sort_keys=True))
    with pytest.raises(IntegrityError, match="derivation of these pairwise_rows rows was changed"):
        get_ledger(swapped)


def test_combining_parts_with_different_columns_is_refused_naming_them():
    from squarechipo.privacy import combine_parts

    first = release_dataset(
        distinct_pairs(8, offset=8600).add_column("source", ["a"] * 8), LabelPipeline(epsilon=1.0), part="a",
        public_columns=["source"],
    )  # fmt: skip
    second = release_dataset(distinct_pairs(8, offset=8620), LabelPipeline(epsilon=1.0), part="b")
    with pytest.raises(ValueError, match=r"only the first has \['source'\], only the second \[\]"):
        combine_parts(first, second)


def test_a_record_store_entry_is_never_replaced(tmp_path, tiny_model_factory, caplog):
    """Weights recorded by one run cannot be re-described by another: the first entry stands, and the attempt is
    logged."""
    from squarechipo.privacy.provenance.sketch import recorded_by_weights, remember_record

    model = tiny_model_factory(11)
    remember_record({"stage": "preference_optimization", "epsilon": None, "dataset_fingerprint": "raw"}, model, None)
    remember_record({"stage": "preference_optimization", "epsilon": 0.5, "dataset_fingerprint": "raw"}, model, None)
    assert recorded_by_weights(model)["epsilon"] is None
    assert "were recorded before by a preference_optimization run (ε None): that record stands" in caplog.text


# ---------------------------------------------------------------------------------------- keys


def _raw(text: str) -> bytes:
    return base64.b64decode(text.removeprefix("ed25519:"))


@pytest.mark.parametrize(
    "raw",
    [
        bytes([1]) + bytes(31),  # the identity point
        bytes(32),  # a point of order 4 (y = 0)
        bytes([0xEC]) + bytes([0xFF]) * 30 + bytes([0x7F]),  # order 2 (y = -1)
        (2**255 - 19 + 1).to_bytes(32, "little"),  # the identity, encoded non-canonically (y = p + 1)
    ],
    ids=["identity", "order-4", "order-2", "non-canonical"],
)
def test_small_order_and_non_canonical_public_keys_are_refused(raw, monkeypatch, tmp_path):
    """A trusted small-order key would make a forged signature (R = identity, S = 0) verify for every message."""
    text = "ed25519:" + base64.b64encode(raw).decode()
    monkeypatch.setenv(TRUSTED_KEYS_ENV, text)
    with pytest.raises(SigningKeyError, match="small-order or non-canonically encoded Ed25519 point"):
        trusted_keys()
    if raw == bytes([1]) + bytes(31):
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        forged = bytes([1]) + bytes(31) + bytes(32)  # what the refusal prevents: cryptography alone accepts it
        Ed25519PublicKey.from_public_bytes(raw).verify(forged, b"any message at all")


def test_key_verify_without_a_trust_anchor_refuses_and_writes_nothing(tmp_path, monkeypatch, capsys):
    """No trusted key named and no key of one's own: the genuine release and an unsigned forgery are both refused,
    and no key is made in the verifier's account."""
    from squarechipo.privacy import save_release
    from squarechipo.trust import machine

    released = release_dataset(distinct_pairs(8, offset=8700), LabelPipeline(epsilon=0.5), seed=0)
    folder = tmp_path / "release"
    save_release(released, folder)
    monkeypatch.delenv(SIGNING_KEY_ENV)
    monkeypatch.delenv(TRUSTED_KEYS_ENV, raising=False)
    before = sorted(machine.machine_dir().rglob("*")) if machine.machine_dir().exists() else []
    code, out = _verify(folder, capsys)
    assert code == 1 and "no trusted key here" in out and "SQUARECHIPO_TRUSTED_KEYS" in out
    after = sorted(machine.machine_dir().rglob("*")) if machine.machine_dir().exists() else []
    assert after == before and signing_key(create=False) is None


def test_the_first_key_is_made_whole_and_once_however_many_make_it_at_once(tmp_path):
    """Eight threads make one key file at once while readers read it: exactly one key is made, and no reader ever
    sees a file that is not a whole key."""
    path = tmp_path / "k.pem"
    made, refused, seen = [], [], []
    stop = threading.Event()

    def make():
        try:
            made.append(generate_key_pair(path))
        except SigningKeyError as error:
            refused.append(str(error))

    def read():
        while not stop.is_set():
            if path.exists():
                seen.append(path.read_bytes())

    readers = [threading.Thread(target=read) for _ in range(2)]
    makers = [threading.Thread(target=make) for _ in range(8)]
    for thread in readers + makers:
        thread.start()
    for thread in makers:
        thread.join()
    stop.set()
    for thread in readers:
        thread.join()
    assert len(made) == 1 and len(refused) == 7 and all("already exists" in r for r in refused)
    assert {bytes(s) for s in seen} <= {path.read_bytes()}  # every read saw the whole key
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".new")]


def test_a_public_key_named_as_the_signing_key_is_refused_before_any_noise_is_drawn(tmp_path, monkeypatch):
    """SQUARECHIPO_SIGNING_KEY naming the .pub file: one line that says so (no chmod advice), before the release
    draws or stages anything; the retry with the right key releases."""
    key = generate_key_pair(tmp_path / "c.pem")
    monkeypatch.setenv(SIGNING_KEY_ENV, f"{key.path}.pub")
    out = tmp_path / "released"
    with pytest.raises(SigningKeyError, match=r"holds a public key \(the \.pub line\), not the private key") as error:
        release_dataset(distinct_pairs(8, offset=8800), LabelPipeline(epsilon=1.0), str(out))
    assert "chmod" not in str(error.value)
    left = sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock"))  # the folder's lock stays
    assert left == ["c.pem", "c.pem.pub"]  # nothing drawn, nothing staged
    monkeypatch.setenv(SIGNING_KEY_ENV, str(key.path))
    assert get_ledger(release_dataset(distinct_pairs(8, offset=8800), LabelPipeline(epsilon=1.0), str(out)))


# ---------------------------------------------------------------------------------------- the account's folders


def test_the_machine_folder_is_the_accounts_own(tmp_path):
    """Made 0700 under umask 000; refused when it is a symlink, writable by others or owned by another uid."""
    from squarechipo.trust.machine import FolderError, own_folder

    old = os.umask(0)
    try:
        made = own_folder(tmp_path / "home" / ".squarechipo", "machine folder")
    finally:
        os.umask(old)
    assert stat.S_IMODE(made.stat().st_mode) == 0o700
    planted = tmp_path / "planted"
    planted.mkdir()
    link = tmp_path / "linked"
    link.symlink_to(planted)
    with pytest.raises(FolderError, match=r"linked \(machine folder\) is a symbolic link"):
        own_folder(link, "machine folder")
    planted.chmod(0o777)
    with pytest.raises(FolderError, match=r"may be written by other users \(mode 777\).*chmod go-w"):
        own_folder(planted, "machine folder")
    if os.geteuid() == 0:
        planted.chmod(0o700)
        os.chown(planted, 65534, 65534)
        with pytest.raises(FolderError, match="is owned by uid 65534, not this account"):
            own_folder(planted, "machine folder")


def test_a_uid_without_a_password_entry_is_refused_unless_the_stores_are_named(tmp_path, monkeypatch):
    """A container's anonymous uid has no home that $HOME cannot move: machine_dir refuses (the real password
    database has no entry for the uid), naming the variables, and makes nothing under $HOME."""
    import pwd

    from squarechipo.trust import machine

    uid = next(u for u in range(54321, 60000) if u not in {e.pw_uid for e in pwd.getpwall()})
    monkeypatch.setattr(os, "getuid", lambda: uid)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(
        machine.FolderError, match=rf"uid {uid} has no entry in the password database.*RELEASE_REGISTRY"
    ):
        machine.own_folder(machine._account_home() / ".squarechipo", "this machine's squarechipo folder")
    assert not (tmp_path / ".squarechipo").exists()


def test_a_trusted_keys_file_others_may_write_is_refused(tmp_path, monkeypatch):
    """An analyst who may append to the verifier's trusted-keys file could get its own release verified: a file (or
    its folder) writable by others, or owned by another uid, is refused."""
    keys_dir = tmp_path / "trust"
    keys_dir.mkdir(mode=0o700)
    custodian = generate_key_pair(tmp_path / "c.pem")
    trust = keys_dir / "trusted"
    trust.write_text(public_key_text(custodian.public) + " custodian\n")
    trust.chmod(0o644)
    monkeypatch.setenv(TRUSTED_KEYS_ENV, str(trust))
    assert list(trusted_keys()) == [custodian.key_id]
    trust.chmod(0o664)
    with pytest.raises(SigningKeyError, match=r"trusted-keys file\) may be written by other users \(mode 664\)"):
        trusted_keys()
    trust.chmod(0o644)
    for mode in (0o777, 0o770):  # world- or group-writable: either lets another user replace the file
        keys_dir.chmod(mode)
        refusal = rf"may be written by other users \(mode {mode:o}\).*replace the file"
        with pytest.raises(SigningKeyError, match=refusal):
            trusted_keys()
    keys_dir.chmod(0o700)
    if os.geteuid() == 0:
        os.chown(trust, 65534, 65534)
        with pytest.raises(SigningKeyError, match="is owned by uid 65534"):
            trusted_keys()


def test_a_registry_lost_with_its_marker_is_found_from_the_machines_records(tmp_path, monkeypatch):
    """The machine's registry and its marker deleted: the store of model records still names the registry that
    counted the releases its models trained on, so no fresh registry is started silently."""
    from squarechipo.privacy.provenance.sketch import RECORD_STORE_ENV
    from squarechipo.privacy.release.registry import REGISTRY_ENV, RegistryError, default_registry_path
    from squarechipo.trust import machine

    monkeypatch.delenv(REGISTRY_ENV)
    monkeypatch.delenv(RECORD_STORE_ENV)
    released = release_dataset(distinct_pairs(8, offset=8900), LabelPipeline(epsilon=0.5))  # starts the registry
    settings = resolve_privacy(get_ledger(released), epsilon=None, flip_rate=None, override=False)
    record = PrivacyRecord.build({"stage": "preference_optimization", **settings.record(False)})
    registry_id = record.ledger["releases"][0]["registry_id"]
    from squarechipo.data.store import RecordTable

    with RecordTable(machine.machine_dir() / "records.sqlite", "records") as records:
        records.put("sha256:trained", json.dumps(record.to_dict()))
    path = default_registry_path()
    noted = machine.machine_dir() / "registries_entered"  # the folder's note gone too: the records alone tell
    for lost in (path, path.with_name(f".{path.name}.started"), Path(f"{path}-wal"), Path(f"{path}-shm"), noted):
        lost.unlink(missing_ok=True)
    with pytest.raises(RegistryError, match=rf"missing with the marker .*registry {registry_id}, .*: it was lost"):
        release_dataset(distinct_pairs(8, offset=8950), LabelPipeline(epsilon=0.5))
    assert not path.exists()


def test_a_registry_lost_with_its_marker_on_an_account_that_trained_no_model_is_found_from_its_folder(monkeypatch):
    """No model trained: the machine folder notes each registry a release of this machine was entered into, so the
    registry and its marker deleted still stop the next release instead of a fresh count."""
    from squarechipo.privacy.provenance.sketch import RECORD_STORE_ENV
    from squarechipo.privacy.release.registry import REGISTRY_ENV, RegistryError, default_registry_path

    monkeypatch.delenv(REGISTRY_ENV)
    monkeypatch.delenv(RECORD_STORE_ENV)
    released = release_dataset(distinct_pairs(8, offset=8700), LabelPipeline(epsilon=0.5))  # starts the registry
    registry_id = get_ledger(released).releases[0].registry_id
    path = default_registry_path()
    for lost in (path, path.with_name(f".{path.name}.started"), Path(f"{path}-wal"), Path(f"{path}-shm")):
        lost.unlink(missing_ok=True)
    with pytest.raises(RegistryError, match=rf"has entered releases into it \(registry {registry_id},"):
        release_dataset(distinct_pairs(8, offset=8750), LabelPipeline(epsilon=0.5))
    assert not path.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="folders of another account need root to make")
def test_every_folder_on_the_way_to_the_machine_folder_must_be_root_s_or_the_account_s_and_not_others_writable(
    tmp_path,
):
    """As OpenSSH's StrictModes: a folder on the way that others may write (not a sticky one of root's), one owned by
    another account, or a link another account owns, refuses the machine folder in one line; a sticky /tmp passes."""
    from squarechipo.trust.machine import FolderError, check_path

    root = tmp_path / "chain"
    home = root / "home" / "user"
    home.mkdir(parents=True)
    for folder in (tmp_path, root, root / "home", home):
        folder.chmod(0o755)
    check_path(home, "a home")
    (root / "home").chmod(0o777)
    with pytest.raises(FolderError, match=r"home, on the way to .*user \(a home\), may be written by other users"):
        check_path(home, "a home")
    (root / "home").chmod(0o1777)  # sticky, root's: as /tmp
    check_path(home, "a home")
    (root / "home").chmod(0o755)
    os.chown(root / "home", 65534, 65534)
    with pytest.raises(FolderError, match=r"is owned by uid 65534, not this account"):
        check_path(home, "a home")
    os.chown(root / "home", 0, 0)
    link = tmp_path / "link"
    link.symlink_to(home)
    os.lchown(link, 65534, 65534)
    with pytest.raises(FolderError, match=r"is a link owned by uid 65534, who may point it elsewhere"):
        check_path(link / ".squarechipo", "a machine folder")
    os.lchown(link, 0, 0)
    check_path(link / ".squarechipo", "a machine folder")  # a link of root's: its target's folders are checked
    (root / "home").chmod(0o775)
    with pytest.raises(FolderError, match=r"may be written by other users \(mode 775\)"):
        check_path(link / ".squarechipo", "a machine folder")


# ---------------------------------------------------------------------------------------- branches built as inputs


def _with_block(dataset, block: dict):
    from squarechipo.data import metadata

    return metadata.with_block(dataset, json.dumps(block, sort_keys=True))


def test_a_summary_ledger_vouches_for_no_rows_in_any_reader():
    """The ledger a model record keeps (no row sets) put on released rows: every reader refuses it."""
    from squarechipo.privacy import combine_parts
    from squarechipo.privacy.door import checked_rows
    from squarechipo.privacy.ledger.binding import pairwise_rows

    released = release_dataset(distinct_pairs(8, offset=9000), LabelPipeline(epsilon=1.0), seed=0, part="a")
    other = release_dataset(distinct_pairs(8, offset=9020), LabelPipeline(epsilon=1.0), seed=0, part="b")
    summarised = _with_block(released, get_ledger(released).summary())
    readers = {
        "get_ledger": lambda: get_ledger(summarised),
        "pairwise_rows": lambda: pairwise_rows(summarised),
        "combine_parts": lambda: combine_parts(summarised, other),
        "the door": lambda: checked_rows(summarised, split="train", public=False, reader="t", declare="public=True"),
    }
    for name, read in readers.items():
        with pytest.raises(IntegrityError, match="has no row sets"):
            read()
        assert name


def test_the_seal_covers_each_releases_row_set():
    """A ledger's row set swapped for another release's (a well-formed set of other rows, which would vouch for
    those rows) no longer matches the seal."""
    from squarechipo.data import metadata

    released = release_dataset(distinct_pairs(8, offset=9100), LabelPipeline(epsilon=1.0), seed=0)
    other = release_dataset(distinct_pairs(8, offset=9120), LabelPipeline(epsilon=1.0), seed=0)
    block = json.loads(metadata.read_block(released))
    block["releases"][0]["row_set"] = json.loads(metadata.read_block(other))["releases"][0]["row_set"]
    with pytest.raises(IntegrityError, match="does not match its digest"):
        get_ledger(_with_block(other, block))  # the other rows under the edited ledger


def test_parts_sharing_exactly_one_comparison_or_with_an_unsigned_ledger_are_not_combined():
    from squarechipo.privacy import combine_parts

    rows = distinct_pairs(15, offset=9200)
    first = release_dataset(rows.select(range(8)), LabelPipeline(epsilon=0.5), seed=1, part="a")
    second = release_dataset(rows.select(range(7, 15)), LabelPipeline(epsilon=0.5), seed=2, part="b")
    with pytest.raises(ValueError, match=r"the two parts share 1 comparison\(s\)"):
        combine_parts(first, second)
    from squarechipo.data import metadata

    disjoint = release_dataset(distinct_pairs(8, offset=9250), LabelPipeline(epsilon=0.5), seed=3, part="c")
    unsigned = {k: v for k, v in json.loads(metadata.read_block(disjoint)).items() if k != "signature"}
    with pytest.raises(ValueError, match="the second part's ledger carries an unsigned digest"):
        combine_parts(first, _with_block(disjoint, unsigned))


_FILES = ("config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "optimizer.pt")


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    edits=st.lists(
        st.tuples(
            st.sampled_from(["flip a byte", "delete", "add", "swap two", "rewrite the same"]),
            st.sampled_from(_FILES + ("adapter_model.safetensors", "pytorch_model.bin")),
            st.integers(0, 63),
        ),
        max_size=4,
    )
)
def test_a_record_is_read_exactly_when_its_model_files_are_the_ones_it_was_written_for(edits):
    """The invariant behind every reader of a record: after any sequence of edits to a model folder (a byte flipped,
    a file deleted, added, two swapped, one rewritten as it was), the record is accepted exactly when every model
    file (not the optimizer's state) holds the bytes it held when the record was written."""
    import random
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        rng = random.Random(len(edits))
        for name in _FILES:
            (folder / name).write_bytes(bytes(rng.randrange(256) for _ in range(64)))
        write_privacy_record(folder, PrivacyRecord.build({"stage": "sft"}))
        model = {n for n in _FILES if n != "optimizer.pt"}

        def snapshot():
            return {
                p.name: p.read_bytes()
                for p in folder.iterdir()
                if p.name in model | {"adapter_model.safetensors", "pytorch_model.bin"}
            }

        before = snapshot()
        for what, name, at in edits:
            path = folder / name
            if what == "flip a byte" and path.exists():
                data = bytearray(path.read_bytes())
                data[at % len(data)] ^= 1
                path.write_bytes(bytes(data))
            elif what == "delete":
                path.unlink(missing_ok=True)
            elif what == "add" and not path.exists():
                path.write_bytes(b"weights of another model")
            elif what == "swap two" and path.exists() and (folder / "config.json").exists():
                a, b = path.read_bytes(), (folder / "config.json").read_bytes()
                path.write_bytes(b)
                (folder / "config.json").write_bytes(a)
            elif what == "rewrite the same" and path.exists():
                path.write_bytes(path.read_bytes())
        unchanged = snapshot() == before
        try:
            read_privacy_record(folder)
            accepted = True
        except IntegrityError:
            accepted = False
        assert accepted == unchanged, (edits, accepted)


def test_an_evaluation_checks_its_policys_record_before_it_loads_or_generates(
    tmp_path, monkeypatch, tiny_model_factory
):
    """A policy trained on another machine (its ledger signed by a key not trusted here): the gold report refuses it
    first, before it loads the SFT policy or samples anything (it used to fail only at its end)."""
    from squarechipo.evaluation.gold_report import gold_comparison

    other = generate_key_pair(tmp_path / "other_machine.pem")
    monkeypatch.setenv(SIGNING_KEY_ENV, str(other.path))
    model_dir = tmp_path / "policy"
    tiny_model_factory(0).save_pretrained(model_dir)
    write_privacy_record(model_dir, _private_record(distinct_pairs(8, offset=10000)))
    here = generate_key_pair(tmp_path / "this_machine.pem")
    monkeypatch.setenv(SIGNING_KEY_ENV, str(here.path))
    with pytest.raises(IntegrityError, match=rf"signed by key {other.key_id}, which is not among"):
        gold_comparison(str(model_dir), str(tmp_path / "no_sft"), str(tmp_path / "no_gold"), str(tmp_path / "no_data"))
