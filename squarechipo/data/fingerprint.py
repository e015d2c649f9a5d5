"""A content fingerprint of preference data that ignores labels and row order.

Two datasets with the same (prompt, {response, response}) rows get the same fingerprint whether
or not their labels were privatized, corrupted or shuffled. The central-DP selector uses it to
refuse candidates trained on the private data; model cards and ledgers record it.
"""

from __future__ import annotations

import hashlib
import json

import datasets
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["preference_fingerprint"]

_SEPARATOR = "\x1f"


def _canonical_rows(table: pa.Table) -> list:
    """One canonical value per row: prompt, then the two responses in sorted order."""
    chosen, rejected = table["chosen"], table["rejected"]
    prompt = table["prompt"] if "prompt" in table.column_names else None
    strings = all(pa.types.is_string(c.type) or pa.types.is_large_string(c.type) for c in (chosen, rejected))
    if strings and (prompt is None or pa.types.is_string(prompt.type) or pa.types.is_large_string(prompt.type)):
        first = pc.less_equal(chosen, rejected)
        low, high = pc.if_else(first, chosen, rejected), pc.if_else(first, rejected, chosen)
        prompt = prompt if prompt is not None else pa.array([""] * table.num_rows, pa.string())
        return pc.binary_join_element_wise(prompt, low, high, _SEPARATOR).to_pylist()
    dump = lambda value: json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))  # noqa: E731
    prompts = prompt.to_pylist() if prompt is not None else [None] * table.num_rows
    return [
        dump([p, sorted([dump(c), dump(r)])]) for p, c, r in zip(prompts, chosen.to_pylist(), rejected.to_pylist())
    ]


def preference_fingerprint(dataset: datasets.Dataset) -> str:
    """``sha256:<hex>`` over the sorted per-row hashes of (prompt, sorted(chosen, rejected))."""
    table = dataset.with_format("arrow")[:]
    row_hashes = sorted(hashlib.sha256(row.encode("utf-8")).digest() for row in _canonical_rows(table))
    return "sha256:" + hashlib.sha256(b"".join(row_hashes)).hexdigest()
