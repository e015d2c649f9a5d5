"""A reference log-prob cache on disk, shared across methods, seeds, label releases and re-runs.

The reference log-prob of a (prompt, response) sequence depends on the reference model and the tokens, never on
a label. So each sequence is keyed on its own: the reference model's hash, the settings that change the number
(``ld_alpha``, the dtype) and the sequence's token ids with its completion mask. A key is never built from a
(chosen, rejected) pair, and a response's key is the same whether it was chosen or rejected. The cache therefore
holds nothing about which response was preferred, and releases of the same rows (CTL and LTC, other seeds, other
ε) hit the same entries. TRL's own precompute cache is keyed by the dataset's fingerprint, labels included, and is
rebuilt for every release (huggingface/trl#3985 asks for a shared one).
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

import torch

from squarechipo.data.store import SqliteMap

__all__ = ["ReferenceLogpCache"]


class ReferenceLogpCache:
    """Summed reference log-probs of single sequences in the SQLite file ``path``."""

    def __init__(self, path: str | os.PathLike, model_hash: str, settings: dict[str, Any] | None = None) -> None:
        self.store = SqliteMap(path, "reference_logps", "real")
        self._prefix = json.dumps([model_hash, settings or {}], sort_keys=True, default=str)
        self.hits = 0
        self.misses = 0

    def keys(self, inputs: dict[str, torch.Tensor]) -> list[str]:
        """One key per row of a collated batch ([chosen; rejected] rows): the row's real tokens and completion mask."""
        ids, attention, completion = inputs["input_ids"], inputs["attention_mask"], inputs["completion_mask"]
        keys = []
        for row in range(ids.shape[0]):
            real = attention[row].bool()
            payload = [self._prefix, ids[row][real].tolist(), completion[row][real].tolist()]
            keys.append(hashlib.sha256(json.dumps(payload).encode("utf-8")).hexdigest())
        return keys

    def lookup(self, keys: list[str]) -> torch.Tensor | None:
        """The cached log-probs of every key, or None when any is missing (the batch is then computed)."""
        values = self.store.get_many(keys)
        if any(v is None for v in values):
            self.misses += len(keys)
            return None
        self.hits += len(keys)
        return torch.tensor(values, dtype=torch.float64)

    def store_batch(self, keys: list[str], logps: torch.Tensor) -> None:
        self.store.put_many(zip(keys, logps.detach().double().cpu().tolist()))
