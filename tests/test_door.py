"""squarechipo.privacy.door and the private-trainer base: one door for private labels, whatever the entry point.

The entry points are found by introspection, not listed by hand: every public callable of the package that takes a
dataset declares its label role, and every one that reads labels is called here with raw labels and must refuse them
unless they are declared public. The next entry point is covered the day it is added.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import itertools
import json
import pkgutil
import re
import textwrap

import datasets
import numpy as np
import pytest
import torch

import squarechipo
from squarechipo.data import metadata
from squarechipo.data.integrity import MARKER
from squarechipo.data.label_roles import label_role
from squarechipo.privacy import LabelPipeline, get_ledger, release_dataset
from squarechipo.privacy.door import RawLabelsError
from squarechipo.trainer.private_base import PrivateTrainerMixin
from squarechipo.trust.seals import IntegrityError
from tests.helpers.rows import distinct_pairs, plan_rows
from tests.helpers.runs import SingleProcessState, train_tiny

_DATASET_NAMES = {"dataset", "train_dataset", "eval_dataset", "test_dataset"}


def _takes_a_dataset(function) -> str | None:
    """The name of the parameter through which ``function`` takes a dataset, or None."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return None
    for parameter in parameters:
        annotation = str(parameter.annotation)
        typed = "Dataset" in annotation and "DatasetInfo" not in annotation
        untyped = parameter.annotation is inspect.Parameter.empty and parameter.name in _DATASET_NAMES
        if typed or untyped:
            return parameter.name
    return None


#: Annotations of rows in any form: datasets, Arrow tables, data frames, lists or sequences of row dicts.
_ROWS = re.compile(r"Dataset(?!Info)|pa\.Table|DataFrame|CheckedRows|(list|Sequence|Iterable)\[(dict|Mapping)")
#: What a callable reads that makes it a reader of labels: the orientation of a pair, or a best-of-K label.
_LABEL_KEYS = {"chosen", "rejected", "best"}


def _reads_rows(function) -> str | None:
    """Why ``function`` takes rows, by what it reads (a row-typed parameter, or a row's label key), or None."""
    named = _takes_a_dataset(function)
    if named:
        return named
    try:
        parameters = inspect.signature(function).parameters.values()
        source = textwrap.dedent(inspect.getsource(function))
    except (TypeError, ValueError, OSError):
        return None  # generated code (a dataclass's __init__) reads nothing
    for parameter in parameters:
        if parameter.annotation is not inspect.Parameter.empty and _ROWS.search(str(parameter.annotation)):
            return parameter.name
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.slice, ast.Constant)
            and node.slice.value in _LABEL_KEYS
        ):
            return f"reads [{node.slice.value!r}]"
    return None


def _public_callables():
    """(qualified name, callable, owner class or None) of every public function and public class's constructor or
    method defined in the package."""
    for info in pkgutil.walk_packages(squarechipo.__path__, "squarechipo."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if name.startswith("_") or getattr(value, "__module__", None) != module.__name__:
                continue
            if inspect.isfunction(value):
                yield f"{module.__name__}.{name}", value, None
            elif inspect.isclass(value):
                for attribute, member in vars(value).items():
                    if inspect.isfunction(member) and (attribute == "__init__" or not attribute.startswith("_")):
                        yield f"{module.__name__}.{name}.{attribute}", member, value


def _entry_points():
    return [(q, f, owner) for q, f, owner in _public_callables() if _takes_a_dataset(f)]


def test_every_public_callable_that_takes_a_dataset_declares_its_label_role():
    found = _entry_points()
    assert len(found) > 40  # the scan sees the package (fingerprints, releases, trainers, evaluation, selection)
    missing = [name for name, function, _ in found if label_role(function) is None]
    assert not missing, (
        "these public callables take a dataset but declare no label role (squarechipo.data.label_roles / "
        f"squarechipo.privacy.door.reads_labels): {missing}"
    )
    roles = {label_role(f)["role"] for _, f, _ in found}
    assert roles == {"reads_labels", "releases_labels", "label_free"}


def test_every_public_callable_that_reads_rows_in_any_form_declares_its_label_role():
    """score_candidates, model_logps, GoldEvaluator.logps and the study's label helpers took rows as lists: a scan by
    parameter name did not see them. What a callable reads decides: row-typed parameters, or a row's label key."""
    found = [(q, f, _reads_rows(f)) for q, f, _ in _public_callables() if _reads_rows(f)]
    assert len(found) > len(_entry_points())  # it sees more than the dataset-taking entry points
    missing = [f"{name} ({why})" for name, function, why in found if label_role(function) is None]
    assert not missing, f"these public callables read rows but declare no label role: {missing}"
    assert {label_role(f)["role"] for _, f, _ in found} >= {"reads_labels", "reads_checked_rows", "label_free"}
    probe = textwrap.dedent(
        """
        def probe(items):
            return [item["chosen"] for item in items]
        """
    )
    scope: dict = {}
    exec(compile(probe, "<probe>", "exec"), scope)  # noqa: S102 - the scan itself, on a function it never saw
    scope["probe"].__module__ = "probe"
    assert _reads_rows(scope["probe"]) is None  # no source file: nothing to read ...
    assert _ROWS.search("list[dict]") and not _ROWS.search("datasets.DatasetInfo")  # ... and the annotations it sees


def _raw() -> datasets.Dataset:
    return distinct_pairs(8, offset=700)


def test_every_function_that_reads_labels_refuses_raw_ones_unless_declared_public():
    readers = [
        (q, owner if owner is not None else f, f)
        for q, f, owner in _entry_points()
        if label_role(f)["role"] == "reads_labels" and not label_role(f).get("trainer")
    ]
    names = {q.replace(".__init__", "").rsplit(".", 1)[1] for q, _, _ in readers}
    assert {"calibrate_judge", "evaluate_win_rate", "comparison_features", "labels_digest", "GoldEvaluator"} <= names
    released = release_dataset(_raw(), LabelPipeline(epsilon=1.0), seed=0)
    rebound = released.map(lambda row: {"chosen": row["rejected"], "rejected": row["chosen"]})
    assert metadata.read_block(rebound)  # it carries the release's ledger block
    for qualified, function, tagged in readers:
        role = label_role(tagged)
        parameters = inspect.signature(function).parameters
        blank = {n: None for n, p in parameters.items() if p.default is inspect.Parameter.empty}
        call = {**blank, **role["trigger"], role["dataset"]: _raw()}
        with pytest.raises(RawLabelsError, match="holds raw labels"):
            function(**call)
        for allowed in [{role["public"]: True}] if role["public"] else []:
            try:
                function(**call, **allowed)
            except RawLabelsError:
                pytest.fail(f"{qualified} refused labels declared public")
            except Exception:  # noqa: BLE001 - the blank arguments fail later: the door let the call through
                pass
        try:
            function(**{**call, role["dataset"]: released})
        except RawLabelsError:
            pytest.fail(f"{qualified} refused released labels")
        except Exception:  # noqa: BLE001
            pass
        # A ledger block is not enough: the release's ledger over other rows (its labels mapped back) is refused by
        # the reader itself, not only by get_ledger.
        with pytest.raises(IntegrityError, match="are not rows its privacy ledger released"):
            function(**{**call, role["dataset"]: rebound})


def test_every_trainer_goes_through_the_private_trainer_base():
    trainers = {owner for _, f, owner in _entry_points() if owner is not None and label_role(f).get("trainer")}
    assert {t.__name__ for t in trainers} >= {
        "SquareChiPOTrainer", "PrivateRewardTrainer", "BestOfKRewardTrainer", "SelfPlayTrainer",
    }  # fmt: skip
    assert all(issubclass(t, PrivateTrainerMixin) for t in trainers)


@pytest.fixture
def trainer_parts(tmp_path, tokenizer, tiny_model_factory):
    from squarechipo.trainer import SquareChiPOConfig, SquareChiPOTrainer

    def build(train, eval_dataset=None, **config):
        args = SquareChiPOConfig(
            output_dir=str(tmp_path / "run"), per_device_train_batch_size=4, max_length=64, max_steps=1,
            report_to="none", save_strategy="no", **config,
        )  # fmt: skip
        return SquareChiPOTrainer(
            tiny_model_factory(), ref_model=tiny_model_factory(), args=args, train_dataset=train,
            eval_dataset=eval_dataset, processing_class=tokenizer,
        )  # fmt: skip

    return build


def test_the_trainers_refuse_raw_labels_on_every_path(trainer_parts, tokenizer):
    """Training, evaluation at construction, evaluate(), predict() and an eval split assigned by hand; a streamed
    or pre-tokenised copy of the released rows; a DatasetDict."""
    released = release_dataset(distinct_pairs(8), LabelPipeline(epsilon=1.0), seed=0)
    raw_eval = _raw()
    with pytest.raises(RawLabelsError, match="training labels are raw"):
        trainer_parts(distinct_pairs(8))
    with pytest.raises(RawLabelsError, match="split 'eval', but it holds raw labels"):
        trainer_parts(released, raw_eval)
    trainer = trainer_parts(released)
    for read in (lambda: trainer.evaluate(eval_dataset=raw_eval), lambda: trainer.predict(raw_eval)):
        with pytest.raises(RawLabelsError, match="holds raw labels"):
            read()
    trainer.eval_dataset = trainer._prepare_dataset(
        release_dataset(_raw(), LabelPipeline(epsilon=1.0), seed=1), tokenizer, trainer.args, "eval"
    )
    trainer.evaluate()  # a released split, prepared: passes
    trainer.eval_dataset = raw_eval.map(lambda row: {"prompt_ids": [1], "chosen_ids": [2], "rejected_ids": [3]})
    with pytest.raises(RawLabelsError, match="holds raw labels"):
        trainer.evaluate()  # assigned by hand, prepared by hand: still read through the door
    streamed = released.to_iterable_dataset()  # the ledger does not survive the conversion
    with pytest.raises(RawLabelsError, match=r"training labels are raw \(a IterableDataset carries no ledger\)"):
        trainer_parts(streamed)
    tokenised = released.map(lambda row: {"prompt_ids": [1, 2], "chosen_ids": [3], "rejected_ids": [4]})
    from squarechipo.trust.seals import IntegrityError

    with pytest.raises(IntegrityError, match=r"columns changed after the release \(added \['chosen_ids'"):
        trainer_parts(tokenised.remove_columns(["prompt", "chosen", "rejected"]))
    with pytest.raises(ValueError, match="train_dataset is a DatasetDict .* pass the split"):
        trainer_parts(datasets.DatasetDict({"train": released}))


def test_a_model_trained_on_streamed_rows_cannot_launder_them(trainer_parts, tmp_path, tokenizer):
    """A model trained from an IterableDataset had an empty record, so a later private run on the same rows started
    from it was accepted. Its rows are now recorded as unknown, and a private run refuses it."""
    from transformers import AutoModelForCausalLM

    from squarechipo.privacy.provenance.lineage import ModelLineage, check_lineage, mark_source

    rows = distinct_pairs(8, offset=40)
    first = trainer_parts(rows.to_iterable_dataset(), train_labels_public=True)
    first.train()
    first.save_model(str(tmp_path / "streamed"))
    model = mark_source(AutoModelForCausalLM.from_pretrained(tmp_path / "streamed"), tmp_path / "streamed")
    private = release_dataset(rows, LabelPipeline(epsilon=1.0), seed=2)
    with pytest.raises(ValueError, match="trained on rows it could not record"):
        check_lineage([("policy", ModelLineage.of_model(model))], private, private=True, override=False,
                      override_field="override_lineage_guard", context="test")  # fmt: skip


def test_the_threat_models_table_names_tests_that_exist():
    """docs/privacy.md states each guarantee with where it holds (one person holding both roles, across the boundary)
    and the test that shows it: every test it names exists."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    rows = [line for line in (root / "docs" / "privacy.md").read_text().splitlines() if line.startswith("| **")]
    assert len(rows) >= 10
    for row in rows:
        cells = row.split(" | ")
        assert cells[1].strip() and "tests/" not in cells[1], f"say where it holds: {row}"
        named = re.findall(r"`(tests/[\w/]+\.py)((?:::\w+)?)`|`::(\w+)`", cells[2])
        assert named, row
        current = None
        for path, function, continued in named:
            current = path or current
            text = (root / current).read_text()
            name = (function or "::" + continued)[2:] if (function or continued) else ""
            assert not name or f"def {name}(" in text, f"{current}::{name} (named in docs/privacy.md) does not exist"


def test_evaluation_splits_are_released_or_declared_public_and_raw_ones_are_refused(tmp_path):
    from squarechipo.privacy.door import RawLabelsError, require_released_or_public
    from squarechipo.scripts.script_args import TrainScriptArguments
    from squarechipo.scripts.splits import load_training_splits

    data = datasets.DatasetDict(
        {"train": plan_rows(40), "validation": plan_rows(12).map(lambda r: {"prompt": "v" + r["prompt"]})}
    )
    data.save_to_disk(str(tmp_path / "data"))
    args = TrainScriptArguments(
        dataset_name=str(tmp_path / "data"), dataset_test_split="validation", label_epsilon=0.5, label_seed=0
    )
    train, validation = load_training_splits(args, str(tmp_path / "out"), SingleProcessState(), with_eval=True)
    assert get_ledger(validation).total_epsilon == 0.5  # a release of its own
    assert (tmp_path / "out" / "released_train_validation" / MARKER).is_file()
    args.public_splits = ["validation"]
    _, public = load_training_splits(args, str(tmp_path / "out2"), SingleProcessState(), with_eval=True)
    assert get_ledger(public) is None and public["chosen"] == data["validation"]["chosen"]
    rule = dict(split="eval", reader="SquareChiPOTrainer", declare="eval_labels_public=True")
    with pytest.raises(RawLabelsError, match=r"reads the labels of the split 'eval', but it holds raw labels"):
        require_released_or_public(public, public=False, **rule)
    require_released_or_public(public, public=True, **rule)
    require_released_or_public(validation, public=False, **rule)


def test_what_a_run_saves_gives_back_the_released_eval_labels_at_best_never_the_raw_ones(
    tmp_path, tiny_model_factory, tokenizer
):
    """The probe's attack: from the saved eval metric (the mean margin over a small validation split), the saved
    model and the public reference, try every labelling of the split and keep the one that reproduces the saved
    figure. On released eval labels it finds the released labelling, wrong wherever randomized response flipped."""
    from squarechipo.models.logprobs import model_logps, preference_collator, tokenize_preferences

    raw_validation = plan_rows(8).map(lambda r: {"prompt": "v: " + r["prompt"]})
    train = release_dataset(plan_rows(16), LabelPipeline(epsilon=0.5), seed=4)
    validation = release_dataset(raw_validation, LabelPipeline(epsilon=0.5), seed=5)
    trainer = train_tiny(tmp_path, tiny_model_factory, tokenizer, train, validation, max_steps=20, method="dpo")
    saved = trainer.evaluate()["eval_rewards/margins"]
    flipped = np.array(validation["chosen"]) != np.array(raw_validation["chosen"])
    assert flipped.any() and not flipped.all()
    from squarechipo.privacy.door import rows_without_labels

    # The attacker scores each pair in a fixed order and then tries every labelling: the order carries nothing.
    pairs = rows_without_labels(raw_validation, "each pair in a fixed order the attack then relabels")
    rows, collator = tokenize_preferences(pairs, tokenizer), preference_collator(tokenizer)
    policy = model_logps(trainer.model, rows, collator, 8, "policy")
    reference = model_logps(tiny_model_factory(), rows, collator, 8, "reference")  # the public starting model
    margins = (trainer.beta * ((policy[0] - reference[0]) - (policy[1] - reference[1]))).numpy()
    best = min(itertools.product([1, -1], repeat=8), key=lambda signs: abs(float(np.mean(margins * signs)) - saved))
    guessed_raw_chosen_preferred = np.array(best) == 1
    assert np.array_equal(guessed_raw_chosen_preferred, ~flipped)
    # The same attack on raw labels, through evaluate(eval_dataset=...) after construction: refused, naming the fix.
    with pytest.raises(ValueError, match=r"reads the labels of the split 'eval', but it holds raw labels.*public"):
        trainer.evaluate(eval_dataset=raw_validation)


def test_training_on_a_release_folder_whose_ledger_was_deleted_is_refused(tmp_path):
    from squarechipo.scripts.script_args import TrainScriptArguments
    from squarechipo.scripts.splits import load_training_splits

    folder = tmp_path / "release"
    release_dataset(plan_rows(), LabelPipeline(epsilon=0.5), folder, seed=0)
    args = TrainScriptArguments(dataset_name=str(folder))
    train, _ = load_training_splits(args, str(tmp_path / "out"), SingleProcessState(), with_eval=False)
    assert get_ledger(train).total_epsilon == 0.5
    info = json.loads((folder / "dataset_info.json").read_text())
    info["description"] = ""
    (folder / "dataset_info.json").write_text(json.dumps(info))
    with pytest.raises(IntegrityError, match="but no privacy ledger: the ledger was deleted"):
        load_training_splits(args, str(tmp_path / "out"), SingleProcessState(), with_eval=False)


def _flip(dataset: datasets.Dataset) -> datasets.Dataset:
    return dataset.map(lambda row: {"chosen": row["rejected"], "rejected": row["chosen"]})


def _outcome(function, argument: str, dataset: datasets.Dataset, flipped: bool):
    """What ``function(dataset)`` gives; with ``flipped``, rows it passes through are put back in their first
    orientation (a function that passes rows through returns them flipped: that is its input, not a label it read).
    An error by its type and message."""

    def normal(value):
        if isinstance(value, datasets.Dataset):
            value = value.to_list()
        if isinstance(value, np.ndarray):
            value = np.round(value.astype(float), 6).tolist()
        if isinstance(value, (list, tuple)):
            return [normal(item) for item in value]
        if isinstance(value, dict) and flipped and {"chosen", "rejected"} <= set(value):
            return {**value, "chosen": value["rejected"], "rejected": value["chosen"]}
        return value if not hasattr(value, "__dict__") else repr(sorted(vars(value).items(), key=str))

    try:
        return normal(function(**{argument: dataset}))
    except Exception as error:  # noqa: BLE001 - refusing both alike is the same behaviour
        return (type(error).__name__, str(error).replace("rejected", "chosen"))


def test_every_label_free_callable_returns_the_same_on_rows_with_flipped_labels(tokenizer, tiny_model_factory):
    """A role is checked by what a function does, not what it declares: a label-free function given the same rows
    with every label flipped returns the same (rows it passes through come back flipped, as they went in). A function
    declared label-free that read labels (fitting on them, hashing them) fails here: a planted bug tagged
    fit_linear_reward_model label-free and the introspection test accepted it. Arguments besides the rows are filled
    by name (a tiny model and the real tokenizer, a radius, a method); a callable that needs others is left to its own
    tests."""
    from tests.helpers.models import make_tiny_classifier

    policy = tiny_model_factory()
    fillers = {  # made anew for each call: a function may change a model in place (fitting its head)
        "model": lambda: make_tiny_classifier(tokenizer), "policy": lambda: policy, "reference": lambda: policy,
        "tokenizer": lambda: tokenizer, "radius": lambda: 1.0, "method": lambda: "square_chipo",
        "beta": lambda: 0.1, "clip": lambda: None, "rng": lambda: np.random.default_rng(0),
    }  # fmt: skip
    raw = _raw()
    checked = []
    for qualified, function, owner in _entry_points():
        if label_role(function)["role"] != "label_free" or owner is not None:
            continue
        argument = _takes_a_dataset(function)
        parameters = inspect.signature(function).parameters.values()
        needed = [p.name for p in parameters if p.default is inspect.Parameter.empty and p.name != argument
                  and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]  # fmt: skip
        if any(name not in fillers for name in needed):
            continue  # it needs more than rows (a ledger, a path): its own tests call it

        def call(function=function, needed=needed, **rows):
            """What it returns, and what it left in the models it was given (a head fitted in place)."""
            values = {name: fillers[name]() for name in needed}
            returned = function(**values, **rows)
            models = [v for v in values.values() if isinstance(v, torch.nn.Module) and v is not policy]
            return returned, [[round(float(p.sum()), 5) for p in m.parameters()] for m in models]

        same = _outcome(call, argument, raw, False)
        flipped = (_outcome(call, argument, _flip(raw), back) for back in (False, True))
        assert same in flipped, f"{qualified} reads labels"
        checked.append(qualified.rsplit(".", 1)[1])
    assert {"preference_fingerprint", "validate_preference_dataset", "pairwise_rows", "policy_prior"} <= set(
        checked
    ), checked
    assert len(checked) >= 19


def test_a_function_that_reads_labels_fails_the_behaviour_check():
    """The check itself, on a function that fits on labels while declaring it reads none."""
    from squarechipo.data.label_roles import label_free

    @label_free("claims to read no label")
    def share_chosen_longer(dataset: datasets.Dataset) -> float:
        return float(np.mean([len(c) > len(r) for c, r in zip(dataset["chosen"], dataset["rejected"])]))

    raw = _raw()
    same = _outcome(share_chosen_longer, "dataset", raw, False)
    assert same not in [_outcome(share_chosen_longer, "dataset", _flip(raw), back) for back in (False, True)]


def test_every_reader_of_rows_in_memory_refuses_rows_that_did_not_go_through_the_door():
    """score_candidates returned L(π) of raw rows under a tag that checked nothing. Readers of rows held in memory
    take only rows the door made; a list or a dataset is refused, and nobody makes CheckedRows by hand."""
    from squarechipo.privacy.door import CheckedRows, checked_rows

    readers = [(q, f) for q, f, _ in _public_callables() if (label_role(f) or {}).get("role") == "reads_checked_rows"]
    assert {q.rsplit(".", 1)[1] for q, _ in readers} >= {"model_logps", "tokenize_preferences"}
    for _, function in readers:
        argument = label_role(function)["rows"]
        blank = {n: None for n, p in inspect.signature(function).parameters.items() if p.default is p.empty}
        for rows in (_raw(), _raw().to_list()):
            with pytest.raises(RawLabelsError, match="holds raw labels as far as it can tell"):
                function(**{**blank, argument: rows})
    with pytest.raises(TypeError, match="made by squarechipo.privacy.door"):
        CheckedRows(_raw().to_list(), "released", object())
    with pytest.raises(RawLabelsError, match="holds raw labels"):
        checked_rows(_raw(), split="test", public=False, reader="a reader", declare="public=True")
    released = release_dataset(_raw(), LabelPipeline(epsilon=1.0), seed=0)
    assert len(checked_rows(released, split="test", public=False, reader="a reader", declare="-")) == 8
    import squarechipo.select.scoring as scoring

    assert not [name for name in vars(scoring) if name == "score_candidates"]  # the scores have no public door
