"""Dataset-level privatization, the privacy ledger and its persistence."""

from __future__ import annotations

import json
import math

import datasets
import numpy as np
import pytest

from squarechipo.privacy import (
    LabelPipeline,
    get_ledger,
    load_privatized,
    release_dataset,
    save_privatized,
)
from squarechipo.privacy.ledger.ledger import read_ledger_for_path
from squarechipo.privacy.mechanisms.calibration import debias_factor, flip_probability
from squarechipo.trust.seals import IntegrityError
from tests.helpers.stats import Z_TOLERANCE, binomial_se

CATEGORIES = ["Investments", "Debt Management", "Home Improvement & Maintenance"]


def release(data, mechanism, **kwargs):
    """``release_dataset`` with the test data's label-free metadata (category, row_id) declared public."""
    public = [c for c in ("category", "row_id") if c in data.column_names]
    return release_dataset(data, mechanism, public_columns=public, **kwargs)


def standard(n=2000):
    return datasets.Dataset.from_dict(
        {
            "prompt": [f"Question {i}: how should I use ${100 + i}?" for i in range(n)],
            "chosen": [f"Save it carefully, plan {i}." for i in range(n)],
            "rejected": [f"Bet it all on option {i} now, it cannot lose!" for i in range(n)],
            "category": [CATEGORIES[i % 3] for i in range(n)],
            "row_id": list(range(n)),
        }
    )


def conversational(n=600, explicit_prompt=True):
    rows = []
    for i in range(n):
        prompt = [{"role": "user", "content": f"Plan number {i}?"}]
        chosen = [{"role": "assistant", "content": f"Prudent plan {i}."}]
        rejected = [{"role": "assistant", "content": f"Risky plan {i}, all in."}]
        if explicit_prompt:
            rows.append({"prompt": prompt, "chosen": chosen, "rejected": rejected, "row_id": i})
        else:
            rows.append({"chosen": prompt + chosen, "rejected": prompt + rejected, "row_id": i})
    return datasets.Dataset.from_list(rows)


def swapped_mask(original, released):
    return np.array([c != o for c, o in zip(released["chosen"], original["chosen"])])


@pytest.mark.parametrize(
    "make", [standard, conversational, lambda: conversational(explicit_prompt=False)], ids=["std", "conv", "implicit"]
)
def test_swaps_rows_keeps_columns_and_pairs(make):
    data = make()
    out = release(data, LabelPipeline(epsilon=0.5), seed=0)
    assert out.column_names == data.column_names
    assert out.features == data.features
    for name in set(data.column_names) - {"chosen", "rejected"}:
        assert out[name] == data[name]
    for a, b, c, d in zip(out["chosen"], out["rejected"], data["chosen"], data["rejected"]):
        assert (a, b) in ((c, d), (d, c))
    q = flip_probability(0.5)
    rate = swapped_mask(data, out).mean()
    assert abs(rate - q) <= Z_TOLERANCE * binomial_se(q, len(data))


def test_no_trace_of_which_rows_were_swapped():
    data = standard()
    out = release(data, LabelPipeline(epsilon=1.0, corruption_rate=0.1), seed=3)
    assert out.column_names == data.column_names  # no index or original-label column
    assert out.cache_files == []  # not a view on the input's cache files
    assert out._indices is None
    ledger_text = json.dumps(get_ledger(out).to_dict())
    assert '"seed"' not in ledger_text and "swap" not in ledger_text
    assert out._fingerprint != data._fingerprint
    # What the proxies above stand for: the ledger is a function of public parameters and of the released rows
    # only (its row set, which binds it to them, is computed from the output). Another seed swaps other rows, yet
    # the ledgers are equal up to the time of the release and the row set.
    from squarechipo.data.fingerprint import _exact_row_hashes, encode_row_set

    other = release(data, LabelPipeline(epsilon=1.0, corruption_rate=0.1), seed=4)
    assert other["chosen"] != out["chosen"]
    for released in (out, other):
        assert get_ledger(released).releases[0].row_set == encode_row_set(_exact_row_hashes(released))

    def public(dataset):
        record = get_ledger(dataset).to_dict()
        record.pop("digest"), record.pop("signature")
        for release_record in record["releases"]:
            for varying in ("created_at", "row_set", "release_id"):  # the time, the rows, a random id
                release_record.pop(varying)
        return record

    assert public(other) == public(out)


def test_ledger_records_public_parameters_only():
    data = standard(500)
    out = release(data, LabelPipeline(epsilon=0.5, corruption_rate=0.1, order="ltc"), seed=11)
    ledger = get_ledger(out)
    (record,) = ledger.releases
    assert record.mechanism == "randomized_response"
    assert record.epsilon == 0.5 and record.corruption_rate == 0.1
    assert record.adversary == "flip" and record.order == "ltc"
    assert record.n_rows == 500 and record.randomness == "fixed_seed"
    assert record.library_version and record.created_at
    assert "11" not in json.dumps(record.pipeline)
    # The seed leaves no trace: a release with another seed records the same public fields.
    again = get_ledger(release(data, LabelPipeline(epsilon=0.5, corruption_rate=0.1, order="ltc"), seed=12))
    varying = ("created_at", "row_set", "release_id")  # the time, the rows, a random id
    assert {k: v for k, v in vars(again.releases[0]).items() if k not in varying} == {
        k: v for k, v in vars(record).items() if k not in varying
    }
    assert ledger.total_epsilon == 0.5
    assert ledger.debias_factor == pytest.approx(debias_factor(0.5))
    default = release(data, LabelPipeline(epsilon=0.5))
    assert get_ledger(default).releases[0].randomness == "os_entropy"


def test_os_entropy_draws_differ_fixed_seed_reproduces():
    data = standard(1000)
    pipe = LabelPipeline(epsilon=0.5)
    a, b = release(data, pipe), release(data, pipe, rerelease=True)  # the second release of these rows opts in
    assert a["chosen"] != b["chosen"]
    c, d = release(data, pipe, seed=5), release(data, pipe, seed=5)
    assert c["chosen"] == d["chosen"]


def test_reprivatizing_raises_unless_composed():
    data = standard(800)
    once = release(data, LabelPipeline(epsilon=0.5), seed=1)
    with pytest.raises(
        ValueError, match=r"(?s)already privatized.*post-processing.*keep the first release's ε.*compose=True"
    ):
        release(once, LabelPipeline(epsilon=1.0), seed=2)
    twice = release(once, LabelPipeline(epsilon=1.0), seed=2, compose=True)
    ledger = get_ledger(twice)
    assert len(ledger.releases) == 2
    assert ledger.total_epsilon == pytest.approx(1.5)  # basic composition
    assert ledger.debias_factor == pytest.approx(debias_factor(0.5) * debias_factor(1.0))
    # The composed flip rate is what the data shows: 1 − 2ρ = (1 − 2q₁)(1 − 2q₂).
    rho = ledger.rr_flip_rate
    assert (1 - 2 * rho) == pytest.approx((1 - 2 * flip_probability(0.5)) * (1 - 2 * flip_probability(1.0)))
    rate = swapped_mask(data, twice).mean()
    assert abs(rate - rho) <= Z_TOLERANCE * binomial_se(rho, len(data))
    # Post-processing: the stored labels alone are one RR with flip rate ρ, tighter than either ε.
    assert ledger.stored_labels_epsilon == pytest.approx(math.log((1 - rho) / rho))
    assert ledger.stored_labels_epsilon < 0.5
    assert ledger.to_dict()["stored_labels_epsilon"] == pytest.approx(ledger.stored_labels_epsilon)


def test_ledger_survives_datasets_operations(tmp_path):
    out = release(standard(300), LabelPipeline(epsilon=2.0), seed=0)
    expected = get_ledger(out)
    derived = [
        out.filter(lambda r: r["row_id"] % 2 == 0),
        out.select(range(10)),
        out.shuffle(seed=0),
        out.train_test_split(test_size=0.1, seed=0)["test"],
    ]
    for d in derived:
        assert get_ledger(d) == expected
    out.save_to_disk(str(tmp_path / "ds"))
    assert get_ledger(datasets.load_from_disk(str(tmp_path / "ds"))) == expected
    # An edit the copy check's canonical form folds (case, a look-alike letter) is still an edit of a released row.
    for edit in (str.upper, lambda text: text.replace("o", "\u043e", 1)):
        with pytest.raises(IntegrityError, match="300 of 300 rows"):
            get_ledger(out.map(lambda r, edit=edit: {"prompt": edit(r["prompt"])}))


@pytest.mark.parametrize("name", ["folder", "data.jsonl", "data.parquet"])
def test_save_and_load_privatized_round_trip(tmp_path, name):
    for make in (standard, conversational):
        data = make(200)
        out = release(data, LabelPipeline(epsilon=0.7, corruption_rate=0.05), seed=2)
        path = save_privatized(out, tmp_path / make.__name__ / name)
        back = load_privatized(path)
        assert get_ledger(back) == get_ledger(out)
        assert back["chosen"] == out["chosen"] and back["rejected"] == out["rejected"]
        if name != "folder":
            assert read_ledger_for_path(path) == get_ledger(out)


def test_load_privatized_refuses_files_without_ledger(tmp_path):
    standard(10).to_json(str(tmp_path / "plain.jsonl"))
    with pytest.raises(ValueError, match="no privacy ledger"):
        load_privatized(tmp_path / "plain.jsonl")


def test_targeted_adversary_on_a_category():
    data = standard(3000)
    pipe = LabelPipeline(
        corruption_rate=0.4, adversary="targeted", target_column="category", target_values=["Investments"]
    )
    out = release(data, pipe, seed=9)
    swapped = swapped_mask(data, out)
    in_target = np.array(data["category"]) == "Investments"
    assert not swapped[~in_target].any()
    assert abs(swapped[in_target].mean() - 0.4) <= Z_TOLERANCE * binomial_se(0.4, int(in_target.sum()))
    assert get_ledger(out).total_epsilon is None  # corruption only: no privacy spent


def test_fixed_adversary_prefers_longer():
    data = standard(3000)  # rejected is always the longer response here
    out = release(data, LabelPipeline(corruption_rate=0.2, adversary="fixed", fixed_preference="longer"), seed=1)
    swapped = swapped_mask(data, out)
    assert abs(swapped.mean() - 0.2) <= Z_TOLERANCE * binomial_se(0.2, len(data))
    assert all(len(c) > len(r) for c, r in zip(np.array(out["chosen"])[swapped], np.array(out["rejected"])[swapped]))


def test_bad_pipeline_inputs_name_the_field():
    data = standard(20)
    with pytest.raises(ValueError, match="target_column"):
        release(data, LabelPipeline(corruption_rate=0.1, adversary="targeted"), seed=0)
    with pytest.raises(ValueError, match="target_column 'nope'"):
        release(data, LabelPipeline(corruption_rate=0.1, adversary="targeted", target_column="nope"), seed=0)
    with pytest.raises(ValueError, match="fixed_preference"):
        release(data, LabelPipeline(corruption_rate=0.1, adversary="fixed", fixed_preference="category"), seed=0)
    with pytest.raises(ValueError, match="DatasetDict"):
        release(datasets.DatasetDict({"train": data}), LabelPipeline(epsilon=1.0))


@pytest.mark.parametrize("make", [standard, conversational], ids=["std", "conv"])
def test_fingerprint_ignores_labels_and_order_not_content(make):
    from squarechipo.data.fingerprint import preference_fingerprint

    data = make(300)
    released = release(data, LabelPipeline(epsilon=0.1), seed=4)
    assert released["chosen"] != data["chosen"]
    fingerprint = preference_fingerprint(data)
    assert fingerprint.startswith("sha256:")
    assert preference_fingerprint(released) == fingerprint
    assert preference_fingerprint(data.shuffle(seed=1)) == fingerprint
    assert get_ledger(released).releases[0].data_fingerprint == fingerprint
    assert preference_fingerprint(data.select(range(299))) != fingerprint

    def edit_first_prompt(change):
        def edit(row, index):
            if index:
                return {"prompt": row["prompt"]}
            if isinstance(row["prompt"], str):
                return {"prompt": change(row["prompt"])}
            return {"prompt": [{"role": "user", "content": change(row["prompt"][0]["content"])}]}

        return data.map(edit, with_indices=True)

    # Content, not bytes: how a text is typed does not change it; a changed word does.
    for typed in (lambda t: t + " ", lambda t: t.replace(" ", "  \u200b"), str.upper, lambda t: "\ufeff" + t):
        assert preference_fingerprint(edit_first_prompt(typed)) == fingerprint
    assert preference_fingerprint(edit_first_prompt(lambda t: t + "!")) == fingerprint  # punctuation is folded
    assert preference_fingerprint(edit_first_prompt(lambda t: t + " now")) != fingerprint


def test_ledger_answers_how_to_debias_each_part():
    """Two disjoint parts released at different ε: each part's answer is its own RR flip rate and c(ε); the
    whole-dataset answer refuses (no single flip rate is right for every row); the saved ledger lists both."""
    from squarechipo.privacy.release.rows import combine_parts

    data = standard(400)
    first = release(data.select(range(200)), LabelPipeline(epsilon=0.5), seed=0, part="a")
    second = release(data.select(range(200, 400)), LabelPipeline(epsilon=2.0), seed=1, part="b")
    ledger = get_ledger(combine_parts(first, second))
    assert ledger.parts == ("a", "b")
    for part, epsilon in (("a", 0.5), ("b", 2.0)):
        answer = ledger.debiasing_for(part)
        assert answer.method == "flip_rate" and answer.part == part
        assert answer.flip_rate == pytest.approx(flip_probability(epsilon))
        assert answer.debias_factor == pytest.approx(debias_factor(epsilon))
    with pytest.raises(ValueError, match="debias each part separately"):
        ledger.debiasing()
    with pytest.raises(ValueError, match="part 'c' is not in this ledger"):
        ledger.debiasing_for("c")
    recorded = ledger.summary()["debiasing"]  # what a model trained on them records
    assert recorded["a"]["flip_rate"] == pytest.approx(flip_probability(0.5))
    assert recorded["b"]["debias_factor"] == pytest.approx(debias_factor(2.0))
    # Equal parts agree, and the whole-dataset answer is theirs.
    same = release(data.select(range(200, 400)), LabelPipeline(epsilon=0.5), seed=1, part="b")
    assert get_ledger(combine_parts(first, same)).debiasing().flip_rate == pytest.approx(flip_probability(0.5))


def test_ledger_debiasing_of_public_and_composed_labels():
    """No noise: method none, c = 1. RR twice: one flip rate ρ with 1 − 2ρ = (1 − 2q₁)(1 − 2q₂)."""
    public = get_ledger(release(standard(50), LabelPipeline(), seed=0)).debiasing()
    assert (public.method, public.flip_rate, public.debias_factor) == ("none", 0.0, 1.0)
    once = release(standard(50), LabelPipeline(epsilon=0.5), seed=0)
    twice = get_ledger(release(once, LabelPipeline(epsilon=1.0), seed=1, compose=True)).debiasing()
    q1, q2 = flip_probability(0.5), flip_probability(1.0)
    assert twice.flip_rate == pytest.approx((1 - (1 - 2 * q1) * (1 - 2 * q2)) / 2)
