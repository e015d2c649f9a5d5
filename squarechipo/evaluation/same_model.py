"""Whether a comparison compares a model with itself: the policy holds the baseline's weights, or its own record says
its run changed no weight ("no update"). A judge that compares such a pair reports about 50% and identical answers,
which reads like a policy no better than its baseline; the evaluation commands say so before they run."""

from __future__ import annotations

from pathlib import Path

from squarechipo.trust.seals import file_sha256

__all__ = ["same_model_notes"]


def _weights(folder: Path) -> dict[str, str] | None:
    """name → sha256 of a model folder's weight files; None where it is not a folder holding any."""
    files = sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.bin")) if folder.is_dir() else []
    return {f.name: file_sha256(f) for f in files} or None


def _sizes(folder: Path) -> dict[str, int]:
    return {f.name: f.stat().st_size for f in folder.glob("*.safetensors")} if folder.is_dir() else {}


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
    same_sizes = _sizes(Path(policy)) and _sizes(Path(policy)) == _sizes(Path(baseline))
    if same_sizes and _weights(Path(policy)) == _weights(Path(baseline)):
        notes.append(
            f"{policy} and {baseline} hold the same weights: the comparison is of one model with itself (expect "
            "about 50% and identical answers); check that the policy folder holds the trained model."
        )
    return notes
