"""What binds a model's privacy record to the model: the record's subjects and its signer.

A record follows the shape of an in-toto statement (SLSA provenance): **subjects**, the sha256 of every file that is
the model (weights, shards, adapters, their configs), and a predicate (what the record states: the ledger it trained
on, its lineage), sealed and signed by the key of the process that trained it (its ``signer``). A check recomputes
each subject's digest first, as Sigstore's verify does: a record beside weights it does not name vouches for nothing.
"""

from __future__ import annotations

from pathlib import Path

from squarechipo.trust.keys import SigningKeyError, key_id_of, parse_public_key, trusted_keys, verify_with
from squarechipo.trust.seals import IntegrityError, Seal, check_seal, file_sha256

__all__ = [
    "adapter_base",
    "check_adapter_base",
    "check_record_seal",
    "check_subjects",
    "model_files",
    "model_subjects",
]

_RECORD_FIX = "Restore the folder as squarechipo saved it, or train the model again."

#: Files that are the model: weights of any format, and the configs that say how to read them (a model's or an
#: adapter's). What the Trainer saves beside them to resume (optimizer, scheduler, RNG states, arguments) is not.
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".h5", ".msgpack", ".onnx")
_MODEL_CONFIGS = ("config.json", "adapter_config.json")
_TRAINING_STATE = ("optimizer.", "scheduler.", "scaler.", "rng_state", "training_args.")


def model_files(folder: Path) -> list[Path]:
    """The files of ``folder`` a record describes (weights, shards, adapters, their configs), by name."""
    if not folder.is_dir():
        return []
    return sorted(
        item
        for item in folder.iterdir()
        if item.is_file()
        and (item.name in _MODEL_CONFIGS or item.name.endswith(_WEIGHT_SUFFIXES))
        and not item.name.startswith(_TRAINING_STATE)
    )


#: Digests this process wrote records with, by the file's identity and state (inode, size, change and modification
#: times): a run writes its record twice at its end (the card, then the save) and once per checkpoint, and a weight
#: file is gigabytes. Only the writer reuses one; every check reads the file again.
_WRITTEN: dict[tuple, str] = {}


def _written_digest(path: Path) -> str:
    info = path.stat()
    key = (str(path.resolve()), info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
    if key not in _WRITTEN:
        _WRITTEN[key] = file_sha256(path)
    return _WRITTEN[key]


def model_subjects(folder: Path) -> list[dict]:
    """``[{"name", "digest": {"sha256"}}]`` of every model file in ``folder`` (in-toto's subject form)."""
    return [{"name": item.name, "digest": {"sha256": _written_digest(item)}} for item in model_files(folder)]


def check_subjects(values: dict, folder: Path, where: str, *, required: bool = False) -> list[dict] | None:
    """Refuse a record whose weights are not the files beside it: a named file missing or changed, or a model file
    it does not name (weights swapped in, or added). Returns the subjects checked; None for a record written before
    records named their weights (refused when ``required``)."""
    stated = values.get("subjects")
    if stated is None:
        if required:
            raise IntegrityError(
                f"{where}: the record names no digest of the weights it describes (written before squarechipo bound "
                "records to their weights), so it cannot vouch for the files beside it. Save the model again with "
                "this version (it writes the digests), or train it again."
            )
        return None
    named = {entry["name"]: entry["digest"]["sha256"] for entry in stated}
    present = {item.name: item for item in model_files(folder)}
    missing, extra = sorted(set(named) - set(present)), sorted(set(present) - set(named))
    changed = sorted(n for n in set(named) & set(present) if file_sha256(present[n]) != named[n])
    if missing or extra or changed:
        what = "; ".join(
            f"{label} {names}"
            for label, names in (("changed", changed), ("missing", missing), ("not named by the record", extra))
            if names
        )
        raise IntegrityError(
            f"{where}: the model files beside this record are not the ones it describes ({what}), so nothing it "
            "states holds for them. Use the weights the record names, or train the model again (its run writes its "
            "own record)."
        )
    if not named and required:
        raise IntegrityError(f"{where}: the record names no model file, and there are none beside it to vouch for.")
    return stated


def _base_folder(name: str) -> Path | None:
    """The local folder of an adapter's base model (PEFT records the folder the base was loaded from; the embedded
    model's is its converted copy); None for a Hub id (nothing local to recompute digests from)."""
    return Path(name) if name and Path(name).is_dir() else None


def adapter_base(folder: Path) -> dict | None:
    """An adapter folder's base model with the digests of its files (what the adapter's weights are a change of); None
    for a folder that holds no adapter."""
    config = folder / "adapter_config.json"
    if not config.is_file():
        return None
    import json

    name = json.loads(config.read_text(encoding="utf-8")).get("base_model_name_or_path") or ""
    located = _base_folder(name)
    return {"name_or_path": name, "subjects": None if located is None else model_subjects(located)}


def check_adapter_base(values: dict, folder: Path, where: str, *, required: bool = False) -> str | None:
    """For an adapter, the base it finds checked against the digests its record names, as the adapter's own files
    are: a base swapped (weights trained on raw labels put in its place) is refused. Returns what was checked; None
    for a full model. ``required`` (a third party's check) refuses a record that names no base digests, or a base
    that cannot be found here."""
    if not (folder / "adapter_config.json").is_file():
        return None
    stated = values.get("base")
    named = (stated or {}).get("subjects")
    if named is None:
        if required:
            raise IntegrityError(
                f"{where}: an adapter's record that binds no digest of its base model, so the base beside which it "
                "is loaded could be any weights. Save the adapter again with this version (it binds its base), or "
                "merge it and save the full model."
            )
        return None
    located = _base_folder(stated["name_or_path"])
    if located is None or not located.is_dir():
        raise IntegrityError(
            f"{where}: the adapter's base {stated['name_or_path']!r} is not a folder here, so its weights cannot be "
            "checked against the digests the record binds: put the base model there, or check where it is."
        )
    present = {item.name: file_sha256(item) for item in model_files(located)}
    expected = {entry["name"]: entry["digest"]["sha256"] for entry in named}
    if present != expected:
        changed = sorted(n for n in set(present) | set(expected) if present.get(n) != expected.get(n))
        raise IntegrityError(
            f"{where}: the adapter's base {located} is not the model it was trained on (files changed, missing or "
            f"added: {', '.join(changed)}), so nothing the record states holds for the adapter on it. Use the base "
            "the record binds, or train the adapter again."
        )
    return f"{stated['name_or_path']} ({len(expected)} files match)"


# ---------------------------------------------------------------------------------------------- the record's seal


def check_record_seal(values: dict, where: str) -> Seal:
    """A record's seal: signed by a trusted key, or signed by the key the record names as its signer (who trained:
    :class:`Seal` ``self-signed``; such a key vouches for who wrote the record, never that rows were released), or
    an unsigned digest (written where no key signs)."""
    signature, signer = values.get("signature"), values.get("signer")
    if not (isinstance(signature, str) and isinstance(signer, str)):
        return check_seal(values, where, "privacy record", _RECORD_FIX, signed_only=False)
    try:
        public = parse_public_key(signer, f"{where} (its signer)")
    except SigningKeyError as error:
        raise IntegrityError(str(error)) from None
    own = key_id_of(public)
    if own in trusted_keys() or not signature.startswith(f"ed25519:{own}:"):
        return check_seal(values, where, "privacy record", _RECORD_FIX, signed_only=False)
    unsigned = {k: v for k, v in values.items() if k != "signature"}
    found = check_seal(unsigned, where, "privacy record", _RECORD_FIX, signed_only=False)
    if found.kind != "unsigned" or not verify_with(public, signature, values["digest"]):
        raise IntegrityError(
            f"{where}: the privacy record's signature does not verify with the key it names: it was changed after it "
            f"was signed, or the signature was made up. {_RECORD_FIX}"
        )
    return Seal("self-signed", own)
