"""Whether a comparison compares a model with itself: the policy holds the baseline's weights, or its own record says
its run changed no weight ("no update"). A judge that compares such a pair reports about 50% and identical answers,
which reads like a policy no better than its baseline; the evaluation commands say so before they run."""

from __future__ import annotations

from pathlib import Path

from squarechipo.trust.seals import file_sha256

__all__ = ["same_model_notes"]


def _weight_files(folder: Path) -> dict[str, Path]:
    """name → path of a model folder's weight files (safetensors or PyTorch bins); empty where it is no folder."""
    if not folder.is_dir():
        return {}
    return {f.name: f for f in sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.bin"))}


def _same_weights(a: Path, b: Path) -> bool:
    """The same weight files, byte for byte: names and sizes first (cheap), then their sha256."""
    mine, theirs = _weight_files(a), _weight_files(b)
    if not mine or mine.keys() != theirs.keys():
        return False
    if any(mine[n].stat().st_size != theirs[n].stat().st_size for n in mine):
        return False
    return all(file_sha256(mine[n]) == file_sha256(theirs[n]) for n in mine)


def same_model_notes(policy: str, baseline: str) -> list[str]:
    """One line each: the policy's record says "no update"; the two folders hold the same weight files."""
    from squarechipo.privacy.provenance.record import PRIVACY_FILE, read_privacy_record

    notes = []
    if (Path(policy) / PRIVACY_FILE).is_file():
        record = read_privacy_record(policy)
        if record is not None and record.details.get("no_update"):
            notes.append(
                f"{policy}: its record says 'no update' (the run that saved it changed no weight): it is the model "
                "that run started from, so this compares that model, not a trained one."
            )
    if _same_weights(Path(policy), Path(baseline)):
        notes.append(
            f"{policy} and {baseline} hold the same weights: the comparison is of one model with itself (expect "
            "about 50% and identical answers); check that the policy folder holds the trained model."
        )
    return notes
