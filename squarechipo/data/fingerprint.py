"""A content fingerprint of preference data that ignores labels and row order.

Two datasets with the same (prompt, {response, response}) rows get the same fingerprint whether
or not their labels were privatized, corrupted or shuffled. The central-DP selector uses it to
refuse candidates trained on the private data; model cards record it.
"""

from __future__ import annotations

import hashlib
import json

import datasets

__all__ = ["preference_fingerprint"]


def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def preference_fingerprint(dataset: datasets.Dataset) -> str:
    """``sha256:<hex>`` over the sorted hashes of (prompt, sorted(chosen, rejected)) per row."""
    prompts = dataset["prompt"] if "prompt" in dataset.column_names else [None] * len(dataset)
    row_hashes = sorted(
        hashlib.sha256(_canonical([prompt, sorted([_canonical(c), _canonical(r)])]).encode("utf-8")).hexdigest()
        for prompt, c, r in zip(prompts, dataset["chosen"], dataset["rejected"])
    )
    digest = hashlib.sha256("\n".join(row_hashes).encode("ascii")).hexdigest()
    return f"sha256:{digest}"
