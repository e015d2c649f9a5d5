"""squarechipo.data.near_duplicates and the canonical form: edited copies of a comparison are copies.

The probe: 25 copies of a row, each with look-alike letters of other scripts, a changed final punctuation mark or a
sentence repeated, released at ε 0.5, let a majority recover 88–95% of the raw labels; and released one at a time
they passed the registry. Each kind of copy is now refused in one release and across releases.
"""

from __future__ import annotations

import hashlib

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from squarechipo.data.fingerprint import canonical_rows, canonical_text, skeleton
from squarechipo.data.near_duplicates import (
    NEAR_COPY_JACCARD,
    NUM_PERM,
    band_keys,
    copies,
    shingles,
    signatures,
    sketch,
)
from squarechipo.privacy import LabelPipeline, release_dataset

_LOOKALIKE = str.maketrans({"a": "а", "e": "е", "o": "о", "p": "р", "c": "с"})  # Cyrillic
_GREEK = str.maketrans({"o": "ο", "A": "Α", "E": "Ε", "I": "Ι"})


def _row(i: int) -> dict:
    return {
        "prompt": f"I have ${1000 + 250 * i} saved for a trip to city {i}. Should I book now or wait for a sale?",
        "chosen": f"Book once the price fits the budget for city {i}, and keep a cushion for surprises.",
        "rejected": f"Put the whole ${1000 + 250 * i} on a crypto tip and book first class to city {i} if it pays.",
    }


#: Ways to copy a comparison that retyping rules (NFKC, case, spaces) did not fold.
_EDITS = {
    "Cyrillic look-alikes": lambda t, k: t.translate(_LOOKALIKE) if k % 2 else t.replace("o", "о", k + 1),
    "Greek look-alikes": lambda t, k: t.translate(_GREEK),
    "changed final punctuation": lambda t, k: t.rstrip(".?!") + ["!", "?!", "…", ";", "!!"][k % 5],
    "a sentence repeated": lambda t, k: t + " " + t.split(". ")[0] + ("." * (k % 2)),
}


@pytest.mark.parametrize("edit", list(_EDITS))
def test_edited_copies_of_a_comparison_are_refused_together_and_apart(edit):
    change = _EDITS[edit]
    base = [_row(i) for i in range(8)]
    copies_of_row_0 = [{k: change(v, k_) for k, v in base[0].items()} for k_ in range(25)]
    together = datasets.Dataset.from_list(base + copies_of_row_0)
    with pytest.raises(ValueError, match=r"25 of 33 rows copy another row's comparison: row 8 copies row 0"):
        release_dataset(together, LabelPipeline(epsilon=0.5))
    # One release at a time: the registry knows the first, and the copy is refused as released before.
    release_dataset(datasets.Dataset.from_list(base), LabelPipeline(epsilon=0.5))
    one_copy = datasets.Dataset.from_list(copies_of_row_0[3:4])
    with pytest.raises(ValueError, match=r"1 row\(s\) were released before"):
        release_dataset(one_copy, LabelPipeline(epsilon=0.5))


def test_the_canonical_form_folds_look_alikes_case_and_punctuation_but_not_words():
    forms = ["How do I save? Plan A.", "Ноw dо I sаvе! Рlаn А", "ΗΟW DΟ Ι SΑVΕ ΡLΑΝ Α", "how do i save plan a…"]
    assert len(set(canonical_text(pa.array(forms)).to_pylist())) == 1
    assert skeleton("раураl") == skeleton("paypal")  # the TR39 example
    assert canonical_text(pa.array(["How do I spend?"])) != canonical_text(pa.array(["How do I save?"]))
    assert canonical_text(pa.array(["Illinois", "ILLINOIS", "illinois"])).to_pylist() == ["illinois"] * 3


def test_distinct_template_rows_are_not_near_copies_and_the_threshold_has_room(finance_splits):
    """The threshold is stated against data made from templates: the finance generator's rows share at most about
    0.6 of their shingles with any other row, well under 0.8; a repeated sentence or one changed word keeps ~0.9."""
    train = finance_splits["finance_preference"]["train"]
    rows = canonical_rows(train.with_format("arrow")[:])
    assert copies(rows) == []
    sets = [shingles(r) for r in rows[:120]]
    closest = max(len(a & b) / len(a | b) for i, a in enumerate(sets) for b in sets[i + 1 :])
    assert closest < NEAR_COPY_JACCARD - 0.1
    words = rows[0].split()
    changed = " ".join(words[:10] + ["quickly"] + words[11:])
    assert [c[:2] for c in copies([rows[0], changed])] == [(0, 1)]
    assert np.isclose(len(shingles(rows[0]) & shingles(changed)) / len(shingles(rows[0]) | shingles(changed)), 0.9,
                      atol=0.08)  # fmt: skip


_WORDS = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=0, max_size=6)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(_WORDS, max_size=40).map(" ".join), min_size=1, max_size=12))
def test_the_vectorised_minhash_is_datasketchs_affine32_minhash_of_the_same_shingles(rows):
    """Signatures are computed for a chunk of rows at once (release at scale). In the legacy scheme they must stay
    the values datasketch 2's default MinHash gives (registries started before keep them); in the current scheme,
    datasketch's MinHash of the same shingles with the scheme's shingle hash, computed here from its definition."""
    from datasketch import MinHash

    from squarechipo.data.near_duplicates import LEGACY_SCHEME

    reference = MinHash.bulk([shingles(row) for row in rows], num_perm=NUM_PERM, seed=1)
    legacy = signatures(rows, LEGACY_SCHEME)
    assert np.array_equal(legacy, np.stack([m.hashvalues for m in reference]).astype(np.uint32))
    current = MinHash.bulk([shingles(row) for row in rows], num_perm=NUM_PERM, seed=1, hashfunc=_scheme_hash)
    assert np.array_equal(signatures(rows), np.stack([m.hashvalues for m in current]).astype(np.uint32))
    keys = sketch(rows).keys
    assert all(keys[i].tolist() == band_keys(signatures(rows)[i]) for i in range(len(rows)))


def _scheme_hash(shingle: bytes) -> int:
    """The current scheme's shingle hash from its definition (docs/privacy.md), in Python integers: SHA-1 of each
    word (8 bytes, little-endian); h = fmix64(words + φ), then fmix64(h xor word) per word; the low 32 bits."""
    words = shingle.decode("utf-8").split()
    h = _fmix64((len(words) + 0x9E3779B97F4A7C15) & _M64)
    for word in words:
        h = _fmix64(h ^ int.from_bytes(hashlib.sha1(word.encode("utf-8")).digest()[:8], "little"))
    return h & 0xFFFFFFFF


def test_both_schemes_find_the_same_planted_near_copies():
    """The faster shingle hash must keep the guarantee: on distinct rows with planted near-copies (an added word, a
    changed word, a repeated sentence, retyped text), both schemes find exactly the same copies."""
    from squarechipo.data.fingerprint import canonical_text
    from squarechipo.data.near_duplicates import LEGACY_SCHEME

    rng = np.random.default_rng(7)
    vocabulary = [f"w{i}" for i in range(4000)]
    rows = [" ".join(rng.choice(vocabulary, 60)) for _ in range(1500)]
    planted = {}
    for k, source in enumerate(rng.choice(1400, 40, replace=False).tolist()):
        words = rows[source].split()
        edits = [[*words, "extra"], [*words[:30], "changed", *words[31:]], [*words, *words[:12]], words]
        planted[len(rows)] = source
        rows.append(" ".join(edits[k % 4]) if k % 4 != 3 else rows[source].upper())
    rows = canonical_text(pa.array(rows)).to_pylist()
    new, old = copies(rows, sketch(rows)), copies(rows, sketch(rows, LEGACY_SCHEME))
    assert new == old
    assert {(c[0], c[1]) for c in new} == {(source, row) for row, source in planted.items()}


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=40))
def test_ascii_text_folds_in_one_pass_exactly_as_the_full_fold(text):
    """The canonical form's fast path for ASCII text (one translate) must equal the TR39 fold it stands for."""
    from squarechipo.data.fingerprint import _fold, fold

    assert fold(text) == _fold(text)
    assert fold(text + "é") == _fold(text + "é")  # and non-ASCII text takes the full fold


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(st.none(), st.text(alphabet=st.characters(max_codepoint=127), max_size=30),
                          st.text(max_size=12)), max_size=8))  # fmt: skip
def test_the_canonical_form_over_arrow_buffers_is_the_fold_of_each_string(texts):
    """A release folds its text in Arrow (ASCII strings by a byte table, the others one by one): every string must
    come out as :func:`fold` makes it, and the canonical form's NFKC and invisible-character steps, skipped for ASCII
    text, must be the identity there."""
    from squarechipo.data.fingerprint import _INVISIBLE, _fold_array, fold

    array = pa.array(texts, pa.large_string())
    assert _fold_array(array).to_pylist() == [None if t is None else fold(t) for t in texts]
    ascii_only = pa.array([t for t in texts if t is not None and t.isascii()], pa.large_string())
    assert pc.utf8_normalize(pc.replace_substring_regex(ascii_only, _INVISIBLE, ""), "NFKC").equals(ascii_only)


def test_near_copies_across_many_rows_are_found_by_one_sorted_pass():
    """The LSH buckets are found by sorting every row's keys at once: a near-copy placed far from its original, and
    several copies of one row, are all found among many distinct rows."""
    rng = np.random.default_rng(0)
    vocabulary = [f"w{i}" for i in range(3000)]
    rows = [" ".join(rng.choice(vocabulary, 40)) for _ in range(3000)]
    base = rows[10].split()
    rows[2500] = " ".join([*base, "extra"])
    rows[2900] = " ".join([*base[:-1], "changed"])
    found = {(c[0], c[1]) for c in copies(rows)}
    assert found == {(10, 2500), (10, 2900)}


def test_shingles_are_the_rows_word_trigrams_or_the_whole_short_row():
    """The shingle is part of the registry's format (its SHA-1 makes the signatures): defined here, not by itself."""
    assert shingles("a b c d") == {b"a b c", b"b c d"}
    assert shingles("a b") == {b"a b"} and shingles("a b c") == {b"a b c"} and shingles("") == {b""}
    assert shingles("é\x1fb c") == {"é b c".encode()}  # the row's separator splits words like a space


@pytest.mark.parametrize("block", [1, 5, 64])
def test_signatures_do_not_depend_on_the_block_they_are_computed_in(block, monkeypatch):
    """Rows are processed in blocks of shingles (about 64 MB at a time): every block size gives datasketch's
    values, in uint32, and no rows give an empty (0, NUM_PERM) table."""
    from datasketch import MinHash

    from squarechipo.data import near_duplicates

    rng = np.random.default_rng(block)
    rows = [" ".join(f"w{i}" for i in rng.integers(0, 50, rng.integers(0, 30))) for _ in range(25)]
    sets = [shingles(r) for r in rows]
    reference = np.stack([m.hashvalues for m in MinHash.bulk(sets, num_perm=NUM_PERM, seed=1)])
    current = np.stack([m.hashvalues for m in MinHash.bulk(sets, num_perm=NUM_PERM, seed=1, hashfunc=_scheme_hash)])
    monkeypatch.setattr(near_duplicates, "_BLOCK", block)
    found = signatures(rows, near_duplicates.LEGACY_SCHEME)
    assert found.dtype == np.uint32 and np.array_equal(found, reference.astype(np.uint32))
    assert np.array_equal(signatures(rows), current.astype(np.uint32))
    empty = signatures([])
    assert empty.shape == (0, NUM_PERM) and empty.dtype == np.uint32


_M64 = (1 << 64) - 1


def _fmix64(h: int) -> int:
    """MurmurHash3's 64-bit finaliser, from its definition (Appleby, MurmurHash3.cpp, fmix64)."""
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & _M64
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & _M64
    return h ^ (h >> 33)


def _band_key(values: list[int], band: int) -> int:
    """A band's key as docs/privacy.md's format 3 defines it, in Python integers."""
    h = _fmix64(band + 0x9E3779B97F4A7C15)
    for j, value in enumerate(values):
        h = _fmix64(h ^ ((value * 0x100000001B3 + j) & _M64))
    key = (h & ~31 & _M64) | band
    return key - (1 << 64) if key >= 1 << 63 else key


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 2**32 - 1), min_size=NUM_PERM, max_size=NUM_PERM))
def test_band_keys_are_the_registrys_format_3_keys(values):
    """Band keys are stored in users' registries: a key computed another way would stop finding near-copies of
    released rows. They must equal the format's definition, and keys of different bands never meet."""
    from squarechipo.data.near_duplicates import BANDS, ROWS_PER_BAND

    keys = band_keys(np.array(values, dtype=np.uint32))
    expected = [_band_key(values[b * ROWS_PER_BAND : (b + 1) * ROWS_PER_BAND], b) for b in range(BANDS)]
    assert keys == expected and [k & 31 for k in keys] == list(range(BANDS))


def _words(n: int, start: int = 0) -> list[str]:
    return [f"t{start + i}" for i in range(n)]


def test_copies_are_found_at_the_threshold_after_an_exact_copy_and_listed_by_their_later_row():
    """Near-copies at exactly J = 0.8 count; an exact copy earlier in the candidates does not stop the search;
    copies are listed in the order of their later row, each with why, and described in words."""
    base = _words(6)
    at_threshold = " ".join([*base, "x"])  # 4 of 5 shingles shared: J = 0.8
    long = _words(24, start=100)
    close = " ".join([*long, "y"])  # 22 of 23 shingles shared: J = 0.957
    rows = [" ".join(long), " ".join(base), at_threshold, " ".join(long), close, " ".join(base)]
    found = copies(rows)
    assert [(c[0], c[1]) for c in found] == [(1, 2), (0, 3), (0, 4), (1, 5)]  # by the later row
    exact, shared = "the same text once retyping is folded", "of their 3-word shingles shared"
    assert [c[2] for c in found] == [f"80% {shared}", exact, f"96% {shared}", exact]
    from squarechipo.data.near_duplicates import describe_copies, near_copy_pairs

    assert (0, 4, 0.957) in near_copy_pairs(rows)
    assert describe_copies(found) == (
        f"row 2 copies row 1 (80% {shared}); row 3 copies row 0 ({exact}); row 4 copies row 0 (96% {shared}); ..."
    )
    assert describe_copies(found[:3]) == describe_copies(found)[: -len("; ...")]
    moved = copies(["save\x1fnow", "save now"])  # a word moved between prompt and response: one shingle, the same
    assert [(c[0], c[1]) for c in moved] == [(0, 1)]


# ----------------------------------------------------------------------------- conversations and released rows
# The finance rows are conversations: their canonical form must read each turn's role and content, row by row, over
# several chunks and with missing content, or a look-alike copy of a conversation escapes and an edited one passes.

_SEP = "\x1f"


def _turns(*pairs) -> list[dict]:
    return [{"role": role, "content": content} for role, content in pairs]


def _conversation(text: str, turns: int = 1) -> list[dict]:
    return _turns(*(("user" if t % 2 == 0 else "assistant", f"{text} part {t}") for t in range(turns)))


def _one(text) -> str:
    return "" if text is None else canonical_text(pa.array([text], pa.large_string())).to_pylist()[0]


def _expected(conversation: list[dict]) -> str:
    """The documented canonical form of a conversation: ``role: canonical content`` per turn, in order."""
    return _SEP.join(f"{m['role']}: {_one(m['content'])}" for m in conversation)


def _conversation_rows() -> datasets.Dataset:
    rows = [
        {"prompt": _conversation("Book the TRIP now?", 3), "chosen": _turns(("assistant", "Wait  for a SALE.")),
         "rejected": _turns(("assistant", None))},
        {"prompt": _conversation("Pay the card", 1), "chosen": _turns(("assistant", "Pay it all")),
         "rejected": _turns(("assistant", "Pay the minimum"), ("user", "why?"))},
    ]  # fmt: skip
    more = [{"prompt": _conversation("Save more", 2), "chosen": _turns(("assistant", "Yes, 10%.")),
             "rejected": _turns(("assistant", "No."))}]  # fmt: skip
    return datasets.concatenate_datasets([datasets.Dataset.from_list(rows), datasets.Dataset.from_list(more)])


def test_a_conversations_canonical_form_is_each_turns_role_and_content_row_by_row():
    dataset = _conversation_rows()
    table = dataset.with_format("arrow")[:]
    assert table["prompt"].num_chunks == 2  # rows stored in two chunks are read as one column
    got = canonical_rows(table)
    for row, value in zip(dataset, got):
        chosen, rejected = _expected(row["chosen"]), _expected(row["rejected"])
        assert value == _SEP.join([_expected(row["prompt"]), *sorted([chosen, rejected])])
    # Roles are part of a turn: the same words said by the other party are another conversation.
    swapped = [{**m, "role": "assistant" if m["role"] == "user" else "user"} for m in dataset[0]["prompt"]]
    other = datasets.Dataset.from_list([{**dataset[0], "prompt": swapped}])
    assert canonical_rows(other.with_format("arrow")[:])[0] != got[0]


def test_released_row_hashes_read_the_stored_labels_in_a_fixed_column_order():
    from squarechipo.data.fingerprint import _released_row_hashes

    dataset = _conversation_rows()
    hashes = _released_row_hashes(dataset)
    for row, digest in zip(dataset, hashes):
        text = _SEP.join(_expected(row[name]) for name in ("prompt", "chosen", "rejected"))
        assert digest == hashlib.sha256(text.encode("utf-8")).digest()
    flipped = dataset.map(lambda r: {"chosen": r["rejected"], "rejected": r["chosen"]})
    assert all(a != b for a, b in zip(_released_row_hashes(flipped), hashes))  # bound to the released labels
    reordered = dataset.select_columns(["rejected", "prompt", "chosen"])
    assert _released_row_hashes(reordered) == hashes
    no_prompt = dataset.remove_columns("prompt")
    assert (
        _released_row_hashes(no_prompt)[0]
        == hashlib.sha256(
            _SEP.join(["", _expected(dataset[0]["chosen"]), _expected(dataset[0]["rejected"])]).encode("utf-8")
        ).digest()
    )
    assert _released_row_hashes(datasets.Dataset.from_dict({"input_ids": [[1, 2]]})) is None


def test_best_of_k_released_rows_are_bound_to_their_released_label_columns():
    from squarechipo.data.fingerprint import _released_row_hashes

    rows = datasets.Dataset.from_dict(
        {"prompt": ["Which plan?", "Which fund?"], "responses": [["a", "b", "c"], ["x", "y", "z"]],
         "released_best": [0, 2], "label_weights": [[0.5, 0.25, 0.25], [0.2, 0.2, 0.6]]}
    )  # fmt: skip
    hashes = _released_row_hashes(rows)
    assert len(set(hashes)) == 2
    changed = rows.map(lambda r, i: {"released_best": (r["released_best"] + 1) % 3 if i == 0 else r["released_best"]},
                       with_indices=True)  # fmt: skip
    assert _released_row_hashes(changed)[0] != hashes[0] and _released_row_hashes(changed)[1] == hashes[1]
    weighted = rows.map(lambda r: {"label_weights": r["label_weights"][::-1]})
    assert _released_row_hashes(weighted) != hashes
    order = rows.map(lambda r: {"responses": r["responses"][::-1]})
    assert _released_row_hashes(order) != hashes  # a released row's responses keep their order (its label)
    assert (
        _released_row_hashes(rows.select_columns(["label_weights", "released_best", "responses", "prompt"])) == hashes
    )


def test_a_conversational_prompt_and_its_text_copy_have_one_prompt_hash():
    from squarechipo.data.fingerprint import fingerprint_of, prompt_hashes

    turns = _turns(("system", "You advise on money."), ("user", "Should I save 10%?"))
    messages = datasets.Dataset.from_list([{"messages": [*turns, {"role": "assistant", "content": "Yes."}]}])
    conversational = datasets.Dataset.from_list([{"prompt": turns, "completion": _turns(("assistant", "Yes."))}])
    text = datasets.Dataset.from_list([{"prompt": "You advise on money.\x1fShould I SAVE 10%?", "completion": "Yes."}])
    assert prompt_hashes(messages) == prompt_hashes(conversational) == prompt_hashes(text)
    assert len(prompt_hashes(messages)) == 1
    assert prompt_hashes(datasets.Dataset.from_dict({"text": ["no prompt here"]})) is None
    # The fingerprint of rows does not depend on their order, and counts repeated rows.
    hashes = [bytes([i]) * 32 for i in (3, 1, 2, 1)]
    assert fingerprint_of(hashes) == (fingerprint_of(hashes[::-1])[0], 1)
    assert fingerprint_of(hashes)[0] != fingerprint_of(hashes[:3])[0]


def test_a_fingerprint_is_the_sha256_of_the_sorted_row_hashes_and_rows_outside_read_whole_hashes():
    import base64

    from squarechipo.data.fingerprint import encode_row_set, fingerprint_of, rows_outside

    hashes = [bytes([i]) * 32 for i in (3, 1, 2)]
    assert fingerprint_of(hashes)[0] == "sha256:" + hashlib.sha256(b"".join(sorted(hashes))).hexdigest()
    first, second = bytes(range(32)), bytes(range(100, 132))
    encoded = encode_row_set([first, second])
    assert base64.b64decode(encoded) == first[:16] + second[:16]
    straddling = first[8:16] + second[:8] + bytes(16)  # bytes of the set, but not one of its 16-byte entries
    assert rows_outside([first, straddling, second], [encoded]).tolist() == [1]


def test_missing_and_null_prompts_hash_as_empty_text_and_best_of_k_rows_read_their_prompt():
    from squarechipo.data.fingerprint import _released_row_hashes

    text = datasets.Dataset.from_dict({"prompt": [None, ""], "chosen": ["a", "a"], "rejected": ["b", "b"]})
    assert len(set(_released_row_hashes(text))) == 1
    pair = {"chosen": _turns(("assistant", "a")), "rejected": _turns(("assistant", "b"))}
    null_conversation = datasets.Dataset.from_list(
        [{"prompt": None, **pair}, {"prompt": _turns(("user", "hi")), **pair}]
    )
    no_prompt = null_conversation.remove_columns("prompt")
    assert _released_row_hashes(null_conversation)[0] == _released_row_hashes(no_prompt)[0]
    assert canonical_rows(null_conversation.with_format("arrow")[:])[1].startswith("user: hi" + _SEP)
    best = datasets.Dataset.from_dict(
        {"prompt": ["Which plan?", "Which fund?"], "responses": [["a", "b"], ["a", "b"]], "released_best": [0, 0]}
    )
    assert len(set(_released_row_hashes(best))) == 2  # the prompt is part of a released best-of-K row


def test_exact_row_hashes_tell_apart_values_json_has_no_type_for():
    import datetime

    from squarechipo.data.fingerprint import _exact_row_hashes

    blob = datasets.Dataset.from_dict({"value": [b"ab"]})
    hexed = datasets.Dataset.from_dict({"value": ["6162"]})
    day = datasets.Dataset.from_dict({"value": [datetime.date(2026, 11, 29)]})
    text = datasets.Dataset.from_dict({"value": ["2026-11-29"]})
    assert _exact_row_hashes(blob) != _exact_row_hashes(hexed)
    assert _exact_row_hashes(day) != _exact_row_hashes(text)
    assert _exact_row_hashes(day) != _exact_row_hashes(
        datasets.Dataset.from_dict({"value": [datetime.date(2026, 11, 30)]})
    )
    assert _exact_row_hashes(blob) != _exact_row_hashes(datasets.Dataset.from_dict({"value": [b"ac"]}))


def test_signatures_taken_a_chunk_of_rows_at_a_time_find_the_same_near_copies(monkeypatch):
    """MinHash signatures are computed a chunk of rows at a time and without a set of each row's shingles (a repeated
    shingle cannot change a minimum): on rows with planted near-copies across chunk boundaries, the signatures and
    the copies found equal those of one pass over every row."""
    import squarechipo.data.near_duplicates as nd

    rows = [f"row {i} " + " ".join(f"w{(i * 7 + k) % 97}" for k in range(40)) for i in range(30)]
    rows += [rows[3] + " and again", rows[11].replace("w", "v", 1), "short", "", rows[20] + " " + rows[20][:20]]
    one_pass = nd.signatures(rows)
    found = nd.copies(rows)
    monkeypatch.setattr(nd, "_CHUNK", 4)
    assert np.array_equal(nd.signatures(rows), one_pass)
    assert nd.copies(rows) == found and {c.later for c in found} >= {30, 31}


def test_a_release_scan_a_chunk_at_a_time_finds_what_the_whole_list_finds():
    """A release keeps each row's hash and sketch, never its text, and reads again only the candidates' rows: with
    chunks far smaller than the rows, its hashes are the rows' content hashes and its copies (exact, retyped and
    near, across chunk boundaries) are those found over the whole list of canonical rows."""
    from squarechipo.data.fingerprint import row_hashes
    from squarechipo.data.row_scan import row_copies, scan_rows

    rng = np.random.default_rng(3)
    vocabulary = [f"w{i}" for i in range(500)]
    text = [" ".join(rng.choice(vocabulary, 30)) for _ in range(60)]
    text += [text[4] + " again", text[17].upper(), text[33], " ".join(text[50].split()[:-1])]
    rows = datasets.Dataset.from_dict(
        {"prompt": [f"p {i % 7}" for i in range(len(text))], "chosen": text, "rejected": ["no"] * len(text)}
    )
    scan = scan_rows(rows, sketched=True, chunk=7)
    assert scan.hashes == row_hashes(rows)
    whole = copies(canonical_rows(rows.with_format("arrow")[:]))
    assert row_copies(rows, scan) == whole
    assert {(c[0], c[1]) for c in whole} >= {(4, 60), (33, 62)} and len(whole) == 4
    with pytest.raises(ValueError, match="needs the rows' sketch"):
        row_copies(rows, scan_rows(rows, sketched=False))
