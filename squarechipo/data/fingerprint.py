"""A content fingerprint of preference data that ignores labels and row order.

Two datasets with the same (prompt, {response, response}) rows get the same fingerprint whether
or not their labels were privatized, corrupted or shuffled. The central-DP selector uses it to
refuse candidates trained on the private data; model cards and ledgers record it.

:func:`prompt_sketch` is a bottom-k sample of the prompt hashes of a training set (any data with a
``prompt`` or ``messages`` column, SFT included). The selector checks every sketched prompt against
the private prompts, so a candidate trained on a set that overlaps the private data — not only one
trained on exactly it — is caught: with k = 64 an overlap of 5% of the training prompts is missed
with probability ≤ 0.95^64 ≈ 4%, 10% with ≤ 0.1%.
"""

from __future__ import annotations

import hashlib
import json

import datasets
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "PROMPT_HASH_CHARS",
    "canonical_rows",
    "fingerprint_and_repeats",
    "preference_fingerprint",
    "prompt_hashes",
    "prompt_sketch",
    "training_data_record",
]

_SEPARATOR = "\x1f"
#: Hex characters kept from each prompt hash in a sketch (64 bits: collisions are negligible).
PROMPT_HASH_CHARS = 16


def _dump(value) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def canonical_rows(table: pa.Table) -> list:
    """One canonical value per row: prompt, then the responses in sorted order (2, or K for best-of-K rows)."""
    prompt = table["prompt"] if "prompt" in table.column_names else None
    prompts = prompt.to_pylist() if prompt is not None else [None] * table.num_rows
    if "chosen" not in table.column_names and "responses" in table.column_names:
        # Best-of-K rows: the order of `responses` carries the label (`best`), so sort it away.
        return [
            _dump([p, sorted(_dump(r) for r in responses)])
            for p, responses in zip(prompts, table["responses"].to_pylist())
        ]
    chosen, rejected = table["chosen"], table["rejected"]
    strings = all(pa.types.is_string(c.type) or pa.types.is_large_string(c.type) for c in (chosen, rejected))
    if strings and (prompt is None or pa.types.is_string(prompt.type) or pa.types.is_large_string(prompt.type)):
        first = pc.less_equal(chosen, rejected)
        low, high = pc.if_else(first, chosen, rejected), pc.if_else(first, rejected, chosen)
        prompt = prompt if prompt is not None else pa.array([""] * table.num_rows, pa.string())
        return pc.binary_join_element_wise(prompt, low, high, _SEPARATOR).to_pylist()
    return [
        _dump([p, sorted([_dump(c), _dump(r)])]) for p, c, r in zip(prompts, chosen.to_pylist(), rejected.to_pylist())
    ]


def preference_fingerprint(dataset: datasets.Dataset) -> str:
    """``sha256:<hex>`` over the sorted per-row hashes of (prompt, sorted(chosen, rejected)), or of
    (prompt, sorted(responses)) for best-of-K rows."""
    return fingerprint_and_repeats(dataset)[0]


def fingerprint_and_repeats(dataset: datasets.Dataset) -> tuple[str, int]:
    """(:func:`preference_fingerprint`, how many rows repeat an earlier row's prompt and responses), from one pass
    over the canonical rows: a release needs both and computes them here, once."""
    table = dataset.with_format("arrow")[:]
    row_hashes = [hashlib.sha256(row.encode("utf-8")).digest() for row in canonical_rows(table)]
    repeats = len(row_hashes) - len(set(row_hashes))
    return "sha256:" + hashlib.sha256(b"".join(sorted(row_hashes))).hexdigest(), repeats


def _prompts(dataset: datasets.Dataset) -> list | None:
    if "prompt" in dataset.column_names:
        return dataset["prompt"]
    if "messages" in dataset.column_names:  # conversational SFT: everything before the last turn
        return [messages[:-1] for messages in dataset["messages"]]
    return None


def prompt_hashes(dataset: datasets.Dataset) -> set[str] | None:
    """Truncated sha256 of each prompt (a conversation as the text of its turns); None without a prompt."""
    prompts = _prompts(dataset)
    if prompts is None:
        return None

    # A conversation counts as the text of its turns, so a standard and a conversational copy of a prompt match.
    def canon(p):
        return p if isinstance(p, str) else _SEPARATOR.join(str(m.get("content", "")) for m in p)

    return {hashlib.sha256(canon(p).encode("utf-8")).hexdigest()[:PROMPT_HASH_CHARS] for p in prompts}


def prompt_sketch(dataset: datasets.Dataset, k: int = 64) -> list[str] | None:
    """The k smallest prompt hashes (a uniform sample of the distinct prompts); None if no prompt column."""
    hashes = prompt_hashes(dataset)
    return None if hashes is None else sorted(hashes)[:k]


def training_data_record(dataset: datasets.Dataset | None) -> dict:
    """What a trained model records about its training data, for the central selector's guard."""
    if not isinstance(dataset, datasets.Dataset):
        return {"dataset_fingerprint": None, "prompt_sketch": None}
    columns = set(dataset.column_names)
    is_preference = {"chosen", "rejected"} <= columns or "responses" in columns
    return {
        "dataset_fingerprint": preference_fingerprint(dataset) if is_preference else None,
        "prompt_sketch": prompt_sketch(dataset),
    }
