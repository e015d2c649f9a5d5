"""The privacy invariants of docs/privacy.md, each as a property, and an adversary that looks for a way around them.

The adversary is a hypothesis state machine: it applies random sequences of what a user reaches for — the
``datasets.Dataset`` methods, format transforms (``with_transform``, ``set_transform``, ``set_format``), ``map`` with
a fingerprint it chooses or a cache file of raw rows, pandas, lists, Parquet and disk round trips, squarechipo's own
functions that take or return rows (with ``datasets`` keywords), a hand-copied ledger, and datasets assigned to a
trainer after it was built — to raw and released rows, and after every step checks the invariant on what a reader
sees (the rows iterated and mapped, not only the stored ones): where a ledger is accepted, every such row, column for
column, is a row the release wrote (or the library's fixed pairwise transform of one). The quick tier runs a bounded
number of sequences; ``bash scripts/adversary.sh`` runs many more.
"""

from __future__ import annotations

import functools
import json
import os
import tempfile

import datasets
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, multiple, rule, run_state_machine_as_test

from squarechipo.data import metadata
from squarechipo.privacy import LabelPipeline, get_ledger, load_privatized, release_dataset, save_privatized
from squarechipo.privacy.door import RawLabelsError
from squarechipo.privacy.ledger.binding import DERIVED_FORMAT, pairwise_rows
from squarechipo.privacy.ledger.binding import _pairwise_row as pairwise_row
from squarechipo.trust.seals import IntegrityError
from tests.helpers.rows import distinct_pairs

settings.register_profile(
    "quick", max_examples=12, stateful_step_count=8, deadline=None, suppress_health_check=list(HealthCheck)
)
settings.register_profile(
    "long", max_examples=400, stateful_step_count=20, deadline=None, suppress_health_check=list(HealthCheck)
)
_PROFILE = os.environ.get("SQUARECHIPO_ADVERSARY", "quick")

N_ROWS = 10


def _row_key(row: dict) -> str:
    return json.dumps(row, sort_keys=True, ensure_ascii=False)


def _world() -> tuple[datasets.Dataset, datasets.Dataset, frozenset[str], dict[str, str]]:
    """(raw rows, their release, every row a ledger may vouch for, the raw chosen answer by prompt), made once per
    signing key: a second pytest session in the same process (mutmut runs several) has a key of its own, and a
    release the first session's key signed is, rightly, refused there."""
    return _world_signed_by(os.environ.get("SQUARECHIPO_SIGNING_KEY"))


@functools.cache
def _world_signed_by(key: str | None) -> tuple[datasets.Dataset, datasets.Dataset, frozenset[str], dict[str, str]]:
    raw = distinct_pairs(N_ROWS, offset=900).add_column("row_id", list(range(N_ROWS)))
    released = release_dataset(raw, LabelPipeline(epsilon=EPSILON), seed=0, public_columns=["row_id"])
    rows = released.to_list()
    pair_rows = [pairwise_row(row) for row in rows]
    allowed = frozenset(_row_key(row) for row in rows + pair_rows)
    return raw, released, allowed, dict(zip(raw["prompt"], raw["chosen"]))


#: The ε of the world's release: an accepted ledger states no other (no rule composes releases).
EPSILON = 0.5


def _loose_summary() -> dict:
    """The signed summary of a release of other rows at ε 8: what a source swap would name instead."""
    return _loose_signed_by(os.environ.get("SQUARECHIPO_SIGNING_KEY"))


@functools.cache
def _loose_signed_by(key: str | None) -> dict:
    loose = release_dataset(distinct_pairs(N_ROWS, offset=950), LabelPipeline(epsilon=8.0), seed=0)
    return get_ledger(loose).summary()


def _seen(data: datasets.Dataset) -> list[dict]:
    """The rows as readers see them: iterated (as a DataLoader does, through any format) and mapped (as a trainer's
    tokenization does), besides the stored rows."""
    iterated = [dict(row) for row in data]
    mapped = data.map(lambda row: {"_seen": json.dumps(dict(row), sort_keys=True, ensure_ascii=False, default=str)})
    return [*data.to_list(), *iterated, *(json.loads(text) for text in mapped["_seen"])]


def assert_invariant(data: datasets.Dataset) -> None:
    """Where ``data``'s ledger is accepted, each row a reader sees is exactly a row the release wrote."""
    try:
        ledger = get_ledger(data)
    except IntegrityError:
        return  # void, and said so
    if ledger is None:
        return
    allowed = _world()[2]
    stray = [row for row in _seen(data) if _row_key(row) not in allowed]
    assert not stray, f"a ledger (ε {ledger.total_epsilon}) vouches for rows it never released: {stray[:2]}"
    assert ledger.total_epsilon == EPSILON, f"rows released at ε {EPSILON} read at ε {ledger.total_epsilon}"


def _raw_labels_back(data: datasets.Dataset) -> datasets.Dataset:
    truth = _world()[3]

    def restore(row):
        if truth.get(row["prompt"]) == row["rejected"]:
            return {"chosen": row["rejected"], "rejected": row["chosen"]}
        return {}

    return data.map(restore)


def _raw_label_column(data: datasets.Dataset) -> list[float]:
    truth = _world()[3]
    return [float(truth.get(p) == c) for p, c in zip(data["prompt"], data["chosen"])]


def _raw_back_batch():
    """A batched transform that puts the raw labels back."""
    truth = _world()[3]

    def back(batch):
        out = dict(batch)
        if not {"prompt", "chosen", "rejected"} <= set(batch):
            return out
        rows = list(zip(batch["prompt"], batch["chosen"], batch["rejected"]))
        out["chosen"] = [c if truth.get(p) in (c, None) else r for p, c, r in rows]
        out["rejected"] = [r if truth.get(p) in (c, None) else c for p, c, r in rows]
        return out

    return back


def get_ledger_or_none(data):
    try:
        return get_ledger(data)
    except IntegrityError:
        return None


def _trainer():
    """One tiny trainer built on the release (a trainer per step would cost seconds each), per signing key."""
    return _trainer_signed_by(os.environ.get("SQUARECHIPO_SIGNING_KEY"))


@functools.cache
def _trainer_signed_by(key: str | None):
    from transformers import AutoTokenizer

    from squarechipo.models import embedded_model_path
    from squarechipo.trainer import SquareChiPOTrainer
    from tests.helpers.models import make_tiny_model
    from tests.helpers.runs import tiny_config

    tokenizer = AutoTokenizer.from_pretrained(embedded_model_path())
    return SquareChiPOTrainer(
        make_tiny_model(tokenizer, 0), ref_model=make_tiny_model(tokenizer, 1),
        args=tiny_config(tempfile.mkdtemp(prefix="adversary-trainer-")), train_dataset=_world()[1],
        processing_class=tokenizer,
    )  # fmt: skip


class Adversary(RuleBasedStateMachine):
    """Random sequences of public operations on raw and released rows; the invariant checked after each."""

    data = Bundle("data")

    @initialize(target=data)
    def start(self):
        datasets.disable_progress_bars()
        raw, released, _, _ = _world()
        return multiple(raw, released)

    def _keep(self, result: datasets.Dataset) -> datasets.Dataset:
        assert_invariant(result)
        return result

    @rule(target=data, d=data, picks=st.lists(st.integers(0, N_ROWS - 1), min_size=1, max_size=12))
    def select(self, d, picks):
        return self._keep(d.select([i % len(d) for i in picks])) if len(d) else d

    @rule(target=data, d=data, seed=st.integers(0, 3))
    def shuffle_or_filter(self, d, seed):
        return self._keep(d.shuffle(seed=seed) if seed % 2 else d.filter(lambda _, i: i % 2 == 0, with_indices=True))

    @rule(target=data, a=data, b=data)
    def concatenate(self, a, b):
        try:
            return self._keep(datasets.concatenate_datasets([a, b]))
        except (ValueError, TypeError):
            return a

    @rule(target=data, d=data, name=st.sampled_from(["score_chosen", "row_note", "shown_first"]))
    def add_label_column(self, d, name):
        if "prompt" not in d.column_names or "chosen" not in d.column_names or name in d.column_names:
            return d
        return self._keep(d.add_column(name, _raw_label_column(d)))

    @rule(target=data, d=data, how=st.sampled_from(["remove", "rename", "cast"]))
    def change_a_column(self, d, how):
        if "row_id" not in d.column_names:
            return d
        if how == "remove":
            return self._keep(d.remove_columns(["row_id"]))
        if how == "rename":
            return self._keep(d.rename_column("row_id", "id")) if "id" not in d.column_names else d
        return self._keep(d.cast_column("row_id", datasets.Value("string")))

    @rule(target=data, d=data, edit=st.sampled_from(["upper", "look-alike", "space", "raw labels"]))
    def edit_rows(self, d, edit):
        if not {"prompt", "chosen", "rejected"} <= set(d.column_names):
            return d
        if edit == "raw labels":
            return self._keep(_raw_labels_back(d))
        change = {
            "upper": str.upper,
            "look-alike": lambda t: t.replace("e", "\u0435", 1),
            "space": lambda t: t + " ",
        }[edit]
        return self._keep(d.map(lambda row, i: {"chosen": change(row["chosen"])} if i == 0 else {}, with_indices=True))

    @rule(target=data, d=data, via=st.sampled_from(["pandas", "list", "parquet", "disk", "privatized"]))
    def round_trip(self, d, via):
        folder = tempfile.mkdtemp(prefix="adversary-")
        info = datasets.DatasetInfo(description=d.info.description)  # what a user copies to keep the ledger
        if via == "pandas":
            back = datasets.Dataset.from_pandas(d.to_pandas(), info=info, preserve_index=False)
        elif via == "list":
            back = datasets.Dataset.from_list(d.to_list(), info=info)
        elif via == "parquet":
            d.to_parquet(os.path.join(folder, "d.parquet"))
            back = datasets.Dataset.from_parquet(os.path.join(folder, "d.parquet"), info=info)
        elif via == "disk":
            try:
                d.save_to_disk(os.path.join(folder, "d"))
            except TypeError as refused:  # datasets saves no format transform (a function): no copy is made
                assert "must be JSON serializable" in str(refused)
                return d
            back = datasets.load_from_disk(os.path.join(folder, "d"))
        else:
            try:
                back = load_privatized(save_privatized(d, os.path.join(folder, "d")))
            except ValueError:  # IntegrityError included: refused to seal
                return d
        return self._keep(back)

    @rule(target=data, d=data)
    def pairwise(self, d):
        try:
            return self._keep(pairwise_rows(d))
        except (ValueError, KeyError):
            return d

    @rule(target=data, d=data)
    def swap_sources(self, d):
        """Derived rows whose derivation block is rewritten to name another release (its genuine signed summary)."""
        block = metadata.read_block(d)
        record = json.loads(block) if block else {}
        if record.get("format") != DERIVED_FORMAT:
            return d
        swapped = {**record, "sources": [_loose_summary()]}
        return self._keep(metadata.with_block(d, json.dumps(swapped, sort_keys=True)))

    @rule(target=data, d=data, how=st.sampled_from(["with_transform", "set_transform", "set_format"]))
    def format_transform(self, d, how):
        """Readers see a transform's output; the stored rows stay as released."""
        if not {"prompt", "chosen", "rejected"} <= set(d.column_names):
            return d
        back = _raw_back_batch()
        if how == "with_transform":
            return self._keep(d.with_transform(back))
        copy = d.select(range(len(d)))
        if how == "set_transform":
            copy.set_transform(back)
        else:
            copy.set_format("custom", transform=back)
        return self._keep(copy)

    @rule(target=data, d=data, keyword=st.sampled_from(["new_fingerprint", "cache_file_name"]))
    def map_keywords(self, d, keyword):
        """A fingerprint the caller chooses, or a cache file of raw rows that datasets loads instead of computing."""
        if not {"prompt", "chosen", "rejected"} <= set(d.column_names) or not len(d):
            return d
        if keyword == "new_fingerprint":
            get_ledger_or_none(d)  # a check first, which a cache keyed by fingerprints would remember
            return self._keep(d.map(_raw_back_batch(), batched=True, new_fingerprint=d._fingerprint))
        raw = (
            _world()[0].select_columns(d.column_names)
            if set(d.column_names) <= set(_world()[0].column_names)
            else None
        )
        if raw is None:
            return d
        cache = os.path.join(tempfile.mkdtemp(prefix="adversary-"), "rows.arrow")
        raw.map(lambda row: row, cache_file_name=cache)  # the file of raw rows
        return self._keep(d.map(lambda row: row, cache_file_name=cache))

    @rule(d=data, keyword=st.sampled_from(["cache_file_name", "new_fingerprint", "load_from_cache_file"]))
    def pairwise_keywords(self, d, keyword):
        with pytest.raises(TypeError, match=f"unexpected keyword argument '{keyword}'"):
            pairwise_rows(d, **{keyword: "x"})

    @rule(d=data, tokenized=st.booleans())
    def assign_to_a_trainer(self, d, tokenized):
        """`trainer.train_dataset = d` after construction: its dataloader reads only what the trainer prepared."""
        trainer = _trainer()
        prepared = trainer.train_dataset
        other = d.map(lambda row: {"prompt_ids": [1], "chosen_ids": [2], "rejected_ids": [3]}) if tokenized else d
        try:
            trainer.train_dataset = other
            with pytest.raises(RawLabelsError, match="train_dataset was replaced"):
                trainer.get_train_dataloader()
        finally:
            trainer.train_dataset = prepared

    @rule(target=data, donor=data, d=data)
    def graft_ledger(self, donor, d):
        block = metadata.read_block(donor)
        if not block:
            return d
        copy = datasets.Dataset(d.flatten_indices().data.table, info=d.info.copy())  # with_block writes into its info
        return self._keep(metadata.with_block(copy, block))


def test_no_sequence_of_public_operations_makes_a_ledger_vouch_for_other_rows():
    run_state_machine_as_test(Adversary, settings=settings.get_profile(_PROFILE))


# ---------------------------------------------------------------------------------------------- the found leaks


@pytest.fixture(scope="module")
def released():
    return _world()[1]


def test_a_ledger_cannot_be_rebound_to_changed_labels(released):
    """A ledger re-bound to raw labels by a mapping function carried ε 0.5 onto raw rows, sealed and trained."""
    import squarechipo.privacy.ledger.binding as binding

    assert not hasattr(binding, "derive_rows")  # no door takes a caller's function and re-binds
    with pytest.raises(IntegrityError, match="not rows its privacy ledger released"):
        get_ledger(_raw_labels_back(released))
    pairs = pairwise_rows(released)  # the library's fixed transform carries the checked ledger over ...
    assert get_ledger(pairs).total_epsilon == 0.5
    with pytest.raises(IntegrityError, match="not rows its privacy ledger released"):  # ... and nothing else
        get_ledger(pairs.map(lambda row: pairwise_row({"prompt": "p", "chosen": row["rejected"], "rejected": "x"})))


def test_a_label_carrying_column_cannot_be_sealed_into_a_release(released, tmp_path):
    scored = released.add_column("score_chosen", _raw_label_column(released))
    with pytest.raises(IntegrityError, match=r"columns changed after the release \(added \['score_chosen'\]\)"):
        save_privatized(scored, tmp_path / "sealed")
    assert not (tmp_path / "sealed").exists()


def test_a_privacy_unit_declaration_does_not_escape_the_registry():
    """The same rows released with no unit, then under a unit, then under another, were four releases at ε 0.5."""
    rows = distinct_pairs(16, offset=700)
    release_dataset(rows, LabelPipeline(epsilon=0.5))
    for unit, values in {"uid": range(16), "annotator": [i % 4 for i in range(16)]}.items():
        with pytest.raises(ValueError, match=r"16 row\(s\) were released before"):
            release_dataset(rows.add_column(unit, list(values)), LabelPipeline(epsilon=0.5), privacy_unit=unit)
    again = release_dataset(
        rows.add_column("uid", [i + 100 for i in range(16)]),
        LabelPipeline(epsilon=0.5),
        privacy_unit="uid",
        rerelease=True,
    )
    assert get_ledger(again).total_epsilon == pytest.approx(1.0)  # composed with the first release


def test_a_release_binds_columns_json_has_no_type_for_and_an_edit_of_one_voids_it():
    """Binding every column byte for byte first broke releases with a public bytes or timestamp column (JSON has no
    type for them); they bind, and an edited value voids the ledger like any other."""
    import datetime

    rows = distinct_pairs(6, offset=4000)
    rows = rows.add_column("when", [datetime.datetime(2026, 1, i + 1) for i in range(6)])
    rows = rows.add_column("blob", [b"x"] * 6)
    released = release_dataset(rows, LabelPipeline(epsilon=1.0), seed=0, public_columns=["when", "blob"])
    assert get_ledger(released.shuffle(seed=0)).total_epsilon == 1.0
    edited = released.map(lambda row, i: {"blob": b"y" if i == 0 else row["blob"]}, with_indices=True)
    with pytest.raises(IntegrityError, match=r"1 of 6 rows \(row 0\)"):
        get_ledger(edited)


def test_pairwise_rows_keeps_raw_rows_raw_and_names_a_missing_column():
    raw = _world()[0]
    assert get_ledger(pairwise_rows(raw)) is None  # no ledger in, none out
    with pytest.raises(ValueError, match=r"missing \['prompt'\]\. Implicit-prompt rows: apply trl.extract_prompt"):
        pairwise_rows(_world()[1].remove_columns(["prompt"]))
    holes = datasets.concatenate_datasets([raw, raw.remove_columns(["prompt"])])  # the second half has no prompt
    with pytest.raises(ValueError, match=r"10 row\(s\) \(row 10, 11, 12, 13, 14\) have no prompt"):
        pairwise_rows(holes)
