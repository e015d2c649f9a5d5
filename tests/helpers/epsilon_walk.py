"""The walk of ε: from ``squarechipo train`` to the noise, which modules hold the label ε on the way.

A reader following ε from the command to the draw visits every function that receives it (as a number, or inside an
object, mapping or list it is passed). This runs the real command (``squarechipo train`` through the CLI's entry
point, on 40 rows of the README's data and a tiny model) under a profiler and records, in the order they run, the
package's calls whose arguments hold the ε given on the command line, up to the call that draws the noise
(``randomized_response``); nothing is released. A *stay* is a run of consecutive calls in one
module; a module visited twice, with another between, counts twice. Fewer stays is a shorter route to read.
``pytest tests/test_architecture.py -k walk -s`` prints it.
"""

from __future__ import annotations

import sys
from dataclasses import fields, is_dataclass
from pathlib import Path

#: An ε no other number in the run equals by chance.
EPSILON = 1.2345678
ROOT = Path(__file__).resolve().parents[2]
PACKAGE = Path(__import__("squarechipo").__file__).resolve().parent
NOISE = ("randomized_response", PACKAGE / "privacy" / "mechanisms" / "binary.py")


class _Reached(Exception):
    """Raised by the profiler at the noise: the walk ends there, before anything is released."""


def _holds(value, depth: int = 2) -> bool:
    """Whether ``value`` is ε, or holds it in a field, attribute, item or element (``depth`` levels down)."""
    if isinstance(value, float):
        return value == EPSILON
    if isinstance(value, str) or depth == 0:
        return isinstance(value, str) and value == str(EPSILON)
    if isinstance(value, dict):
        return any(_holds(v, depth - 1) for v in list(value.values())[:64])
    if isinstance(value, (list, tuple)):
        return any(_holds(v, depth - 1) for v in value[:64])
    if is_dataclass(value) and not isinstance(value, type):
        return any(_holds(getattr(value, f.name, None), depth - 1) for f in fields(value))
    attributes = getattr(value, "__dict__", None)
    return isinstance(attributes, dict) and any(_holds(v, depth - 1) for v in list(attributes.values())[:64])


def walk(argv: list[str]) -> list[tuple[str, str]]:
    """(module, function) of each call holding ε, in order, up to the noise; ``argv`` runs ``squarechipo``."""
    import squarechipo.cli

    calls: list[tuple[str, str]] = []

    def profile(frame, event, _arg):
        if event != "call":
            return
        path = Path(frame.f_code.co_filename)
        if PACKAGE not in path.parents or frame.f_code.co_name == "<module>":  # an import is not a step of the walk
            return
        if (frame.f_code.co_name, path) == NOISE:
            calls.append((str(path.relative_to(PACKAGE.parent)), frame.f_code.co_name))
            raise _Reached
        arguments = frame.f_code.co_varnames[: frame.f_code.co_argcount + frame.f_code.co_kwonlyargcount]
        if any(_holds(frame.f_locals.get(name)) for name in arguments):
            calls.append((str(path.relative_to(PACKAGE.parent)), frame.f_code.co_name))

    sys.setprofile(profile)
    try:
        squarechipo.cli.main(argv)
    except _Reached:
        return calls
    finally:
        sys.setprofile(None)
    raise RuntimeError("the run ended without drawing noise: the walk did not reach randomized_response")


def stays(calls: list[tuple[str, str]]) -> list[dict]:
    """Consecutive calls in one module, merged: each stay's module and the functions it ran."""
    merged: list[dict] = []
    for module, function in calls:
        if merged and merged[-1]["module"] == module:
            merged[-1]["functions"].append(function)
        else:
            merged.append({"module": module, "functions": [function]})
    return merged


def command(folder: Path, tokenizer) -> list[str]:
    """The README's training command on 40 rows of its data and a tiny model, with the sentinel ε."""
    from squarechipo.scripts.data import main as make_data
    from tests.helpers.models import make_tiny_model

    make_data(["--out", str(folder / "data"), "--rows", "60", "--sft-rows", "10", "--judge-rows", "10"])
    make_tiny_model(tokenizer).save_pretrained(folder / "model")
    tokenizer.save_pretrained(folder / "model")
    return [
        "train", "--config", str(ROOT / "recipes/configs/square_chipo.yaml"),
        "--dataset_name", str(folder / "data/finance_preference_conversational"),
        "--model_name_or_path", str(folder / "model"), "--output_dir", str(folder / "out"),
        "--label_epsilon", str(EPSILON), "--max_train_samples", "40", "--report_to", "none",
        "--max_length", "128", "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "1",
    ]  # fmt: skip


def epsilon_walk(folder: Path, tokenizer) -> list[dict]:
    """The walk's stays (module, functions), from the command to the noise."""
    return stays(walk(command(folder, tokenizer)))


def describe(found: list[dict]) -> str:
    lines = [f"{number:3d}  {stay['module']}: {', '.join(stay['functions'])}" for number, stay in enumerate(found, 1)]
    return "\n".join([*lines, f"the walk of ε: {len(found)} stays in {len({s['module'] for s in found})} modules"])
