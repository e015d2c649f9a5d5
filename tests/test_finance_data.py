"""The finance_preference generator (Zhou et al. 2025 (Square-χPO), App. E/F) and the preference-data loader."""

from __future__ import annotations

import sys
from pathlib import Path

import datasets
import numpy as np
import pytest

from squarechipo.data import load_preference_dataset, validate_preference_dataset
from squarechipo.data.finance import (
    CATEGORIES,
    DEFAULT_JUDGE_ROWS,
    DEFAULT_ROWS,
    DEFAULT_SFT_ROWS,
    build_datasets,
    generate_rows,
)
from squarechipo.privacy import LabelPipeline, get_ledger, save_privatized
from tests.helpers.launch import launch
from tests.helpers.rows import release_rows

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def full_rows():
    return generate_rows(DEFAULT_ROWS, seed=0)


def test_size_categories_and_unique_prompts(full_rows):
    assert len(full_rows) >= 1697
    assert {r["category"] for r in full_rows} == {c.name for c in CATEGORIES} and len(CATEGORIES) == 7
    assert len({r["prompt"] for r in full_rows}) == len(full_rows)
    counts = np.unique([r["category"] for r in full_rows], return_counts=True)[1]
    assert counts.max() - counts.min() <= 1


def test_deterministic_in_seed(full_rows):
    assert generate_rows(DEFAULT_ROWS, seed=0) == full_rows
    assert generate_rows(200, seed=1) != full_rows[:200]


def test_varied_amounts_goals_and_phrasing(full_rows):
    amounts = {r["prompt"].split("$")[1].split()[0] for r in full_rows if "$" in r["prompt"]}
    openings = {" ".join(r["prompt"].split()[:3]) for r in full_rows}
    assert len(amounts) > 150 and len(openings) >= 8
    assert len({r["chosen"] for r in full_rows}) > 0.9 * len(full_rows)


def _best_rule_accuracy(feature_says_chosen: np.ndarray) -> float:
    """Accuracy of the better of a rule and its negation (a one-bit classifier of the label)."""
    accuracy = feature_says_chosen.mean()
    return max(accuracy, 1 - accuracy)


def test_length_and_position_do_not_predict_the_label(full_rows):
    longer_is_chosen = np.array([len(r["chosen"]) > len(r["rejected"]) for r in full_rows])
    first_is_chosen = np.array([not r["rejected_shown_first"] for r in full_rows])
    assert _best_rule_accuracy(longer_is_chosen) <= 0.60
    assert _best_rule_accuracy(first_is_chosen) <= 0.60
    # Nor does length counted in words.
    more_words_is_chosen = np.array([len(r["chosen"].split()) > len(r["rejected"].split()) for r in full_rows])
    assert _best_rule_accuracy(more_words_is_chosen) <= 0.60


def test_splits_formats_and_sft():
    data = build_datasets(DEFAULT_ROWS, seed=0)
    pref = data["finance_preference"]
    sizes = {k: len(v) for k, v in pref.items()}
    assert sizes == {
        "train": round(0.85 * DEFAULT_ROWS),
        "validation": round(0.05 * DEFAULT_ROWS),
        "test": DEFAULT_ROWS - round(0.85 * DEFAULT_ROWS) - round(0.05 * DEFAULT_ROWS),
        "judge": DEFAULT_JUDGE_ROWS,
    }
    ids = [set(part["id"]) for part in pref.values()]
    assert all(not (ids[i] & ids[j]) for i in range(len(ids)) for j in range(i))
    for name in ("finance_preference", "finance_preference_conversational"):
        for part in data[name].values():
            validate_preference_dataset(part)
    conv = data["finance_preference_conversational"]["train"][0]
    assert conv["prompt"][0]["role"] == "user" and conv["chosen"][0]["role"] == "assistant"
    sft = data["finance_sft"]
    assert {k: len(v) for k, v in sft.items()} == {"train": 1442, "validation": DEFAULT_SFT_ROWS - 1442}
    assert set(sft["train"][0]) == {"id", "category", "prompt", "completion"}


def test_sft_and_judge_rows_share_no_prompt_with_the_preference_rows():
    data = build_datasets(DEFAULT_ROWS, seed=0)
    pref = data["finance_preference"]
    private = {p for split in ("train", "validation", "test") for p in pref[split]["prompt"]}
    private_responses = {r for split in ("train", "validation", "test") for r in pref[split]["chosen"]}
    sft_prompts = {p for part in data["finance_sft"].values() for p in part["prompt"]}
    judge_prompts = set(pref["judge"]["prompt"])
    assert not (sft_prompts & private) and not (judge_prompts & private) and not (sft_prompts & judge_prompts)
    # No SFT row is a (prompt, chosen) of a preference row: the SFT policy never sees a private label.
    sft_pairs = {(p, c) for part in data["finance_sft"].values() for p, c in zip(part["prompt"], part["completion"])}
    assert not any((p, c) in sft_pairs for p, c in zip(pref["train"]["prompt"], pref["train"]["chosen"]))
    assert len(private_responses) > 0.9 * len(private)


def test_preference_rows_do_not_depend_on_the_other_pools():
    small = build_datasets(140, seed=0, sft_rows=10, judge_rows=5)["finance_preference"]
    large = build_datasets(140, seed=0, sft_rows=40, judge_rows=30)["finance_preference"]
    for split in ("train", "validation", "test"):
        assert small[split].to_list() == large[split].to_list()
    assert len(large["judge"]) == 30


@pytest.mark.integration
def test_cli_writes_every_dataset(tmp_path):
    out = launch(
        [
            sys.executable,
            "-m",
            "data_gen.finance",
            "--out",
            str(tmp_path),
            "--seed",
            "3",
            "--rows",
            "140",
            "--sft-rows",
            "40",
            "--judge-rows",
            "20",
        ],
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "finance_sft_conversational" in out.stdout
    # Every dataset and split the command wrote holds exactly the rows build_datasets makes with those arguments, in
    # the saved folder and in its JSONL copy.
    import json

    built = build_datasets(140, seed=3, sft_rows=40, judge_rows=20)
    splits = {"preference": {"train", "validation", "test", "judge"}, "sft": {"train", "validation"}}
    for name, expected in built.items():
        saved = datasets.load_from_disk(str(tmp_path / name))
        assert set(saved) == set(expected) == splits[name.split("_")[1]], name
        for split in expected:
            assert saved[split].to_list() == expected[split].to_list(), (name, split)
            lines = (tmp_path / "jsonl" / name / f"{split}.jsonl").read_text().splitlines()
            assert [json.loads(line) for line in lines] == expected[split].to_list(), (name, split)


# --------------------------------------------------------------------------- loader


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fin")
    data = build_datasets(140, seed=0, sft_rows=20, judge_rows=10)
    data["finance_preference"].save_to_disk(str(folder / "saved"))
    train = data["finance_preference"]["train"]
    train.to_json(str(folder / "train.jsonl"))
    train.to_parquet(str(folder / "train.parquet"))
    train.remove_columns(["rejected_shown_first"]).to_csv(str(folder / "train.csv"), index=False)
    implicit = (
        data["finance_preference_conversational"]["train"]
        .map(lambda r: {"chosen": r["prompt"] + r["chosen"], "rejected": r["prompt"] + r["rejected"]})
        .remove_columns("prompt")
    )
    implicit.to_json(str(folder / "implicit.jsonl"))
    (folder / "files").mkdir()
    for split in ("train", "test"):
        data["finance_preference"][split].to_json(str(folder / "files" / f"{split}.jsonl"))
    return folder, data


@pytest.mark.parametrize("name", ["train.jsonl", "train.parquet", "train.csv"])
def test_loads_local_files(small, name):
    folder, data = small
    loaded = load_preference_dataset(folder / name)
    assert loaded["chosen"] == data["finance_preference"]["train"]["chosen"]


def test_loads_saved_folders_splits_and_implicit_prompts(small):
    folder, data = small
    assert set(load_preference_dataset(folder / "saved")) == {"train", "validation", "test", "judge"}
    assert len(load_preference_dataset(folder / "saved", split="test")) == len(data["finance_preference"]["test"])
    assert set(load_preference_dataset(folder / "files")) == {"train", "test"}
    implicit = load_preference_dataset(folder / "implicit.jsonl")
    assert "prompt" not in implicit.column_names and implicit[0]["chosen"][0]["role"] == "user"


def test_loader_keeps_ledgers_of_privatized_files(small, tmp_path):
    folder, data = small
    released = release_rows(data["finance_preference"]["train"], LabelPipeline(epsilon=1.0), seed=0)
    for name in ("r.jsonl", "r.parquet"):
        save_privatized(released, tmp_path / name)
        assert get_ledger(load_preference_dataset(tmp_path / name)) == get_ledger(released)


def test_loader_errors_are_clear(small, tmp_path, monkeypatch):
    folder, _ = small
    with pytest.raises(ValueError, match="does not exist"):
        load_preference_dataset(tmp_path / "missing.jsonl")
    with pytest.raises(ValueError, match="split 'dev' not in"):
        load_preference_dataset(folder / "saved", split="dev")
    datasets.Dataset.from_dict({"prompt": ["p"], "answer": ["a"]}).to_json(str(tmp_path / "bad.jsonl"))
    with pytest.raises(ValueError, match=r"bad.jsonl \[data\]: dataset has no 'chosen', 'rejected' column"):
        load_preference_dataset(tmp_path / "bad.jsonl")
    # Offline, as this machine is: datasets reads HF_HUB_OFFLINE when imported, so the setting itself is switched (an
    # environment variable set now made it wait about 20 s for a network that is not there).
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    with pytest.raises(ValueError, match="not a local path, and loading it from the Hugging Face Hub failed"):
        load_preference_dataset("nobody/no-such-preference-dataset")
