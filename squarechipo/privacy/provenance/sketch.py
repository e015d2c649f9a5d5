"""Weight sketches: recognise a copy of a private run's weights however it was saved, cast, merged or reshaped.

Every private run records, in this machine's record store (``$SQUARECHIPO_RECORD_STORE``, default
``records.sqlite`` in :func:`squarechipo.trust.machine.machine_dir`), a sketch of the model it trained and of the model
it started from: the
values of :data:`SKETCH_SIZE` weights at positions drawn per tensor, keyed by the tensor's name. A model a later
run starts from is sketched at the same positions and matched:

- **exactly** by its identity (:func:`weights_identity`: a digest of its tensor names, shapes and sampled values in
  their own dtype), which costs no copy of the model;
- **as a copy** when it holds the trained weights at bfloat16 precision (:data:`COPY_AGREEMENT` of the positions
  round to the same bf16 value) and projects onto the run's update (start → trained) at t in :data:`COPY_RANGE`
  (the starting model itself projects at 0). A bf16 or fp16 cast, a nudge below bf16 precision, a copy with added
  vocabulary rows or a padded vocabulary (matched on the overlapping shape, by tensor name), a model saved through
  another wrapper (PEFT, DDP, ``torch.compile`` prefixes) all match.

A PEFT (LoRA) model is sketched as its merged weights, base plus each active adapter's update, so a private LoRA
run's merged model is recognised like a full fine-tune's. The positions are drawn once, from the names and shapes of
the model that is recorded; the sampled values are gathered on the model's device and only they are copied to the
host (no float32 copy of the model).

What a sketch does not recognise: a copy trained further, perturbed beyond bf16 precision, or with its tensors renamed
to other names.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

logger = logging.getLogger("squarechipo")

__all__ = [
    "COPY_AGREEMENT",
    "COPY_RANGE",
    "RECORD_STORE_ENV",
    "SKETCH_SIZE",
    "Sketch",
    "bf16_agreement",
    "copy_projection",
    "recorded_by_weights",
    "record_store_path",
    "remember_record",
    "sketch_model",
    "weights_identity",
]

#: Weights sampled per model: the projection below then has a relative error of about (cast noise / training update)
#: / 256 per coordinate of the update.
SKETCH_SIZE = 65_536
#: A copy projects onto a recorded run's update (start → trained) at t in this range ...
COPY_RANGE = (0.5, 1.5)
#: ... and holds the trained weights at bfloat16 precision: at least this share of the sketched positions round to
#: the same bfloat16 value as the trained weights'. A bf16 or fp16 cast (and back) agrees at every position, a nudge
#: of 1e-6 at about 96% (the tiny test model); a public ancestor of the run's start (the base model a public SFT
#: started from) at about 50%, although it can lie as close in L2 as a cast and project anywhere on the update.
COPY_AGREEMENT = 0.9
#: The share of a recorded sketch's positions a model must hold (by name and shape) to be compared with it.
_MIN_OVERLAP = 0.5
RECORD_STORE_ENV = "SQUARECHIPO_RECORD_STORE"
#: Wrapper prefixes and PEFT's layer names, dropped from tensor names (a copy saved through another wrapper matches).
_PREFIXES = re.compile(r"^(?:(?:module|_orig_mod|base_model\.model|base_model)\.)+")
_ADAPTER = re.compile(r"\.lora_|\.lora_magnitude_vector|\.modules_to_save\.")


@dataclass(frozen=True)
class Sketch:
    """Sampled weights by tensor name: ``positions[name]`` are multi-dimensional indices (one row per position) into
    the tensor as it was when sketched, ``values`` the weights there (float64, in the order of ``names``)."""

    names: tuple[str, ...]
    positions: dict[str, np.ndarray]
    values: np.ndarray

    @property
    def architecture(self) -> str:
        """A key for the tensor names (not their shapes): models that differ only in shape share it."""
        return hashlib.sha256("\n".join(self.names).encode()).hexdigest()[:16]

    def to_bytes(self, *also: np.ndarray) -> bytes:
        """The sketch and extra value vectors at its positions (the trained and the starting weights), as a blob."""
        buffer = io.BytesIO()
        arrays = {f"p{i}": self.positions[n] for i, n in enumerate(self.names)}
        arrays.update({f"v{i}": v for i, v in enumerate((self.values, *also))})
        np.savez_compressed(buffer, names=np.array(json.dumps(self.names)), **arrays)
        return buffer.getvalue()

    @classmethod
    def from_bytes(cls, blob: bytes) -> tuple[Sketch, list[np.ndarray]]:
        stored = np.load(io.BytesIO(blob))
        names = tuple(json.loads(str(stored["names"])))
        vectors = [stored[f"v{i}"] for i in range(sum(k.startswith("v") for k in stored.files))]
        positions = {n: stored[f"p{i}"] for i, n in enumerate(names)}
        return cls(names, positions, vectors[0]), vectors[1:]


def _canonical_name(name: str) -> str:
    return _PREFIXES.sub("", name).replace(".base_layer.", ".")


def _merged_tensors(model) -> dict[str, object]:
    """The model's floating-point tensors by canonical name; a PEFT model's LoRA layers as base + update."""
    import torch

    tensors = {}
    for name, tensor in model.state_dict().items():
        if torch.is_floating_point(tensor) and not _ADAPTER.search(name):
            tensors.setdefault(_canonical_name(name), tensor.detach())
    for module_name, module in model.named_modules():
        delta = getattr(module, "get_delta_weight", None)
        base = getattr(module, "base_layer", None)
        if delta is None or base is None or getattr(module, "merged", False):
            continue
        key = _canonical_name(f"{module_name}.weight")
        for adapter in getattr(module, "active_adapters", []):
            if adapter in getattr(module, "lora_A", {}) or adapter in getattr(module, "lora_embedding_A", {}):
                with torch.no_grad():
                    tensors[key] = tensors[key] + delta(adapter).to(tensors[key].dtype)
    return tensors


def _positions(tensors: dict[str, object], size: int) -> dict[str, np.ndarray]:
    """Positions drawn per tensor (about ``size`` in all, in proportion to each tensor's size), from its name."""
    total = sum(t.numel() for t in tensors.values())
    chosen = {}
    for name, tensor in tensors.items():
        count = min(tensor.numel(), max(1, round(size * tensor.numel() / max(total, 1))))
        seed = int.from_bytes(hashlib.sha256(f"{name}:{tuple(tensor.shape)}".encode()).digest()[:8], "little")
        flat = np.sort(np.random.default_rng(seed).choice(tensor.numel(), size=count, replace=False))
        chosen[name] = np.stack(np.unravel_index(flat, tuple(tensor.shape)), axis=1).astype(np.int64)
    return chosen


def _gather(tensors: dict[str, object], positions: dict[str, np.ndarray], names) -> tuple[np.ndarray, np.ndarray]:
    """(the values at ``positions`` of the tensors that hold them, on the overlapping shape; a mask of the positions
    found). Gathered on the tensors' device; only the sampled values reach the host."""
    import torch

    values, found = [], []
    for name in names:
        where = positions[name]
        tensor = tensors.get(name)
        if tensor is None or tensor.dim() != where.shape[1]:
            values.append(np.zeros(len(where)))
            found.append(np.zeros(len(where), dtype=bool))
            continue
        inside = np.all(where < np.asarray(tensor.shape), axis=1)
        flat = np.ravel_multi_index(tuple(where[inside].T), tuple(tensor.shape)) if inside.any() else np.zeros(0, int)
        index = torch.as_tensor(flat, dtype=torch.long, device=tensor.device)
        picked = np.zeros(len(where))
        picked[inside] = tensor.reshape(-1).index_select(0, index).to(torch.float64).cpu().numpy()
        values.append(picked)
        found.append(inside)
    return np.concatenate(values) if values else np.zeros(0), np.concatenate(found) if found else np.zeros(0, bool)


def sketch_model(model, size: int = SKETCH_SIZE, *, at: Sketch | None = None) -> tuple[Sketch, np.ndarray]:
    """(the model's sketch, the mask of positions it holds). With ``at``, it is sampled at that sketch's positions
    (on the overlapping shape: the mask says which it holds); otherwise at positions drawn from its own tensors."""
    tensors = _merged_tensors(model)
    if at is None:
        names = tuple(sorted(tensors))
        positions = _positions({n: tensors[n] for n in names}, size)
    else:
        names, positions = at.names, at.positions
    values, found = _gather(tensors, positions, names)
    return Sketch(names, positions, values), found


def weights_identity(model) -> str:
    """A digest of the model's tensor names, shapes and sampled weights in their own dtype (exact copies share it)."""
    import torch

    tensors = _merged_tensors(model)
    names = tuple(sorted(tensors))
    positions = _positions({n: tensors[n] for n in names}, SKETCH_SIZE)
    digest = hashlib.sha256()
    for name in names:
        tensor = tensors[name]
        flat = np.ravel_multi_index(tuple(positions[name].T), tuple(tensor.shape))
        index = torch.as_tensor(flat, dtype=torch.long, device=tensor.device)
        picked = tensor.reshape(-1).index_select(0, index).cpu()
        digest.update(f"{name}:{tuple(tensor.shape)}:{tensor.dtype}".encode())
        digest.update(picked.view(torch.uint8).numpy().tobytes() if picked.numel() else b"")
    return "sketch-sha256:" + digest.hexdigest()


def copy_projection(sketch: np.ndarray, trained: np.ndarray, start: np.ndarray) -> float | None:
    """t such that ``sketch`` − start ≈ t·(trained − start) (least squares), or None where training moved nothing.

    A cast (bf16, fp16) or a small perturbation of the trained weights adds noise that is independent of the
    update, so t stays near 1; the starting model itself gives 0, a model trained elsewhere from the same start a
    value set by how much its own update resembles this one, and an ancestor of the start (whose distance to it
    can be many times the update) almost any value."""
    update = trained - start
    norm = float(update @ update)
    return None if norm == 0.0 else float((sketch - start) @ update / norm)


def bf16_agreement(sketch: np.ndarray, trained: np.ndarray) -> float:
    """The share of positions where the two sketches round to the same bfloat16 value."""
    import torch

    def rounded(values):
        return torch.as_tensor(np.array(values, dtype=np.float32)).to(torch.bfloat16)

    return float((rounded(sketch) == rounded(trained)).double().mean()) if len(trained) else 0.0


def record_store_path() -> Path | str:
    """The store of privacy records and weight sketches (what the lineage guard matches copies to):
    ``$SQUARECHIPO_RECORD_STORE`` (an absolute path, or a ``postgresql://`` URL a team shares) or ``records.sqlite``
    in :func:`squarechipo.trust.machine.machine_dir`, which neither ``$HOME`` nor ``$SQUARECHIPO_CACHE`` moves."""
    from squarechipo.data import store

    return store.store_target(RECORD_STORE_ENV, "records.sqlite", "store of model records")


def _records():
    from squarechipo.data.store import RecordTable

    return RecordTable(record_store_path(), "records")


def _sketches():
    from squarechipo.data.store import RecordTable

    return RecordTable(record_store_path(), "weight_sketches_by_name", "blob")


def remember_record(record: dict, model, start: Sketch | None) -> str:
    """Enter a saved model's record into the store under its weights' identity (returned); with the sketch of the
    model its private run started from, also the trained and starting weights at those positions."""
    identity = weights_identity(model)
    with _records() as records:
        if not records.put(identity, json.dumps(record)):
            earlier = json.loads(records.get(identity))
            if _described(earlier) != _described(record):
                logger.warning(
                    "these weights (%s) were recorded before by a %s run (ε %s): that record stands, and this run's "
                    "(ε %s) is not entered. A store entry is never replaced, so no run can re-describe another's "
                    "weights.",
                    identity,
                    earlier.get("stage"),
                    earlier.get("epsilon"),
                    record.get("epsilon"),
                )
    if start is not None:
        trained, found = sketch_model(model, at=start)
        if found.mean() >= _MIN_OVERLAP:
            with _sketches() as sketches:
                sketches.put(f"{start.architecture}:{identity}", start.to_bytes(trained.values, found.astype(float)))
    return identity


def _described(record: dict) -> tuple:
    """What a record says the weights were trained on (two saves of one run's weights say the same)."""
    return (record.get("stage"), record.get("epsilon"), record.get("dataset_fingerprint"), str(record.get("ledger")))


def recorded_by_weights(model) -> dict | None:
    """The record (as stored, a JSON object) of a model squarechipo saved into this store whose weights ``model``
    holds, or None: exactly, by identity; or as a cast, perturbed, merged or reshaped copy, by sketch."""
    identity = weights_identity(model)
    with _records() as records:
        found = records.get(identity)
    if found:
        return json.loads(found)
    names = tuple(sorted(_merged_tensors(model)))
    architecture = hashlib.sha256("\n".join(names).encode()).hexdigest()[:16]
    with _sketches() as sketches:
        stored = sketches.items(prefix=f"{architecture}:")
    for key, blob in stored:
        start, (trained, held) = Sketch.from_bytes(blob)
        candidate, found_here = sketch_model(model, at=start)
        both = found_here & (held > 0)
        if both.mean() < _MIN_OVERLAP:
            continue
        values, trained_values, start_values = candidate.values[both], trained[both], start.values[both]
        if bf16_agreement(values, trained_values) < COPY_AGREEMENT:
            continue
        t = copy_projection(values, trained_values, start_values)
        if t is not None and COPY_RANGE[0] <= t <= COPY_RANGE[1]:
            with _records() as records:
                record = records.get(key.split(":", 1)[1])
            if record:
                return {**json.loads(record), "matched_by_sketch": round(t, 4)}
    return None
