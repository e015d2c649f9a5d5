"""What the training scripts share: logging set-up, which labels the config declares public, and the script tail."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from pathlib import Path

import datasets

from squarechipo.data.label_roles import label_free
from squarechipo.models.runtime import end_run, readable_weights

__all__ = [
    "check_trackers",
    "declare_public_labels",
    "error_line",
    "model_kwargs",
    "finish_run",
    "keep_earlier_model",
    "script_main",
    "setup_logging",
    "training_parser",
    "unknown_options",
    "user_errors",
]

logger = logging.getLogger("squarechipo")


#: What ``squarechipo JOB --help`` says first: the options the docs use, which are the command's and Accelerate's, not
#: fields of a config (TRL's help lists a thousand lines of those after them).
_LAUNCH_HELP = """options the docs use:
  --config FILE                  a YAML config (TRL's TrlParser format, e.g. recipes/configs/*.yaml); every option
                                 listed below overrides the field of the same name
  --num_processes N              how many processes train (Accelerate's option; on a machine without a GPU they run
                                 through torch.distributed.run)
  --accelerate_config FILE|NAME  an Accelerate config file, or one that ships: cpu, ddp, fsdp2, zero2, zero3
  --debug                        an error's traceback instead of its one line
  Accelerate's other options (--mixed_precision, --num_machines, ...) pass through to accelerate launch.

every field of the config follows."""


class _HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The description as written (the options table above), the fields with their defaults, as TRL shows them."""


def training_parser(dataclass_types: tuple, prog: str | None):
    """A training job's TrlParser, whose ``--help`` leads with the options the docs use (:data:`_LAUNCH_HELP`)."""
    from trl import TrlParser

    name = prog or "squarechipo JOB"
    usage = f"{name} --config FILE [--num_processes N] [--accelerate_config FILE|NAME] [--debug] [--FIELD VALUE ...]"
    return TrlParser(dataclass_types, prog=prog, usage=usage, description=_LAUNCH_HELP, formatter_class=_HelpFormatter)


#: A saved model's weights at the top of its folder (whole, sharded, or a PEFT adapter).
_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "adapter_model.safetensors", "pytorch_model.bin")


def keep_earlier_model(training_args, state=None) -> Path | None:
    """A run never silently replaces a trained model: called just before training (a refused run changes nothing),
    where ``output_dir`` already holds one at its top and the run does not resume from a checkpoint, the main process
    moves that model's files (weights, card, record, metrics)
    into ``output_dir/earlier-<UTC time>`` and says so in one line. Folders stay where they are: the released labels
    (re-running reuses them, no fresh noise) and the checkpoints. Returns the folder the earlier model went to."""
    import datetime
    import shutil

    out = Path(training_args.output_dir)
    if getattr(training_args, "resume_from_checkpoint", None) or (state is not None and not state.is_main_process):
        return None
    if not any((out / name).is_file() for name in _WEIGHTS):
        return None
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    kept = out / f"earlier-{stamp}"
    kept.mkdir()
    for item in sorted(out.iterdir()):
        if item.is_file() and not item.is_symlink() and not item.name.startswith("."):  # a lock file stays
            shutil.move(item, kept / item.name)
    logger.warning("%s held a trained model: moved to %s (a run never replaces one); this run saves its own in %s",
                   out, kept, out)  # fmt: skip
    return kept


def setup_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


@label_free("sets the config's public flags; reads no row")
def declare_public_labels(script_args, training_args, eval_dataset, train=None) -> None:
    """Which raw labels the config declares public, for the trainer's label rule.

    Labels are private by default, on the command line as in Python. A config with no label pipeline
    (``label_epsilon`` unset and no corruption) trains on the labels as they are: on a release (a saved folder whose
    ledger the trainer reads), or on raw labels only where it declares them public (``train_labels_public: true``,
    simulated or public labels; no privacy is claimed, and the dataset's evaluation split counts as public too).
    Otherwise it is refused before anything is trained. An evaluation split listed in ``public_splits`` is public.
    Evaluation is turned off when the data has no evaluation split (the loader logged it)."""
    from squarechipo.privacy.ledger.binding import get_ledger

    pipeline = script_args.label_pipeline()
    if not (pipeline.is_private or pipeline.is_corrupted):
        released = train is not None and isinstance(train, datasets.Dataset) and get_ledger(train) is not None
        if not released and not training_args.train_labels_public:
            raise ValueError(
                f"{script_args.dataset_name}: the config releases no labels (label_epsilon unset, no corruption) and "
                "its training labels are raw, which are private by default. Release them (label_epsilon: 4.0, say), "
                "train on a saved release (dataset_name: <its folder>), or, if they are not private (simulated or "
                "public labels), declare it: train_labels_public: true."
            )
        if not released:
            logger.warning(
                "no label pipeline: the training labels are used as they are, declared public by this config "
                "(train_labels_public); no privacy is claimed for the model."
            )
            training_args.eval_labels_public = True
    if script_args.dataset_test_split in (script_args.public_splits or []):
        training_args.eval_labels_public = True
    if eval_dataset is None and training_args.eval_strategy != "no":
        training_args.eval_strategy = "no"
        training_args.do_eval = False


def finish_run(
    trainer,
    result,
    dataset_name: str | None,
    done: str,
    *,
    evaluate: bool,
    after_card: Callable[[], None] | None = None,
) -> None:
    """The end every training script shares, as TRL's scripts end: save the model, the train metrics, a final
    evaluation (``evaluate``), the card (then ``after_card``, e.g. a record of its own), the state, the push, and a
    clean exit: every process waits for the others, so none shuts the group down while the main one writes."""
    args = trainer.args
    trainer.save_model(args.output_dir)
    if trainer.is_world_process_zero():
        readable_weights(args.output_dir)
    if result is not None:
        trainer.log_metrics("train", result.metrics)
        trainer.save_metrics("train", result.metrics)
    if evaluate:
        metrics = trainer.evaluate()
        trainer.log_metrics("eval", metrics)
        trainer.save_metrics("eval", metrics)
    trainer.create_model_card(dataset_name=dataset_name)
    if after_card is not None:
        after_card()
    trainer.save_state()
    if args.push_to_hub:
        trainer.push_to_hub(dataset_name=dataset_name)
        trainer.accelerator.print(f"Pushed to https://huggingface.co/{trainer.hub_model_id}")
    trainer.accelerator.print(f"Done. {done} in {Path(args.output_dir).resolve()}")
    state = trainer.accelerator.state
    logger.info("rank %d/%d: finished; waiting for the other processes", state.process_index, state.num_processes)
    trainer.accelerator.wait_for_everyone()
    end_run(trainer)  # finishes trackers and shuts the process group down cleanly
    logger.info("rank %d/%d: process group closed", state.process_index, state.num_processes)


def user_errors() -> tuple[type[BaseException], ...]:
    """The errors that are the user's to fix (a missing file, a bad option or value, a refused release or ledger, a
    registry that cannot be reached, a model neither here nor on the Hub): each message names the file or field and
    the fix, so it is printed as one line."""
    import yaml

    from squarechipo.data.database import DatabaseError
    from squarechipo.privacy.release.registry import RegistryError

    return (
        ValueError, RegistryError, DatabaseError, OSError, MemoryError, yaml.YAMLError,
    )  # fmt: skip


def error_line(error: BaseException) -> str:
    """The one line an error is shown as."""
    if isinstance(error, FileNotFoundError) and error.filename:
        return f"no such file or folder: {error.filename}; check the path (configs live in recipes/configs/)"
    if type(error).__module__.startswith("yaml"):
        return f"a config is not valid YAML ({' '.join(str(error).split())}): fix the line it names"
    return " ".join(str(error).split()) or type(error).__name__


def unknown_options(given: list[str], known: set[str]) -> str | None:
    """A one-line error for the ``--options`` in ``given`` that are not in ``known`` (each with the closest known
    one, if any), or None."""
    import difflib

    unknown = [word.split("=", 1)[0] for word in given if word.startswith("--")]
    unknown = [word for word in unknown if word not in known]
    if not unknown:
        return None
    named = []
    for word in unknown:
        close = difflib.get_close_matches(word, sorted(known), n=1, cutoff=0.75)
        named.append(f"{word} (did you mean {close[0]}?)" if close else word)
    where = "check its spelling in the config or on the command line (--help lists every option)"
    return f"unknown option {', '.join(named)}: {where}"


def script_main(main: Callable, make_parser: Callable, name: str, argv: list[str] | None = None) -> None:
    """What ``python -m squarechipo.scripts.<name>`` and ``accelerate launch`` run: the config and flags parsed (an
    unknown key or flag is refused naming the closest known one), then ``main``. The project's own errors print as
    one line on the main process and exit 1; ``--debug`` shows the traceback. Run as a program (``argv`` None),
    glibc first keeps the memory the job frees, and the exit does not walk the job's objects
    (:mod:`squarechipo.models.memory`)."""
    import os
    import sys

    program = argv is None
    if program:
        from squarechipo.models.memory import keep_freed_memory

        try:
            keep_freed_memory()
        except ValueError as error:  # a misspelt SQUARECHIPO_MALLOC: one line
            print(f"squarechipo {name}: error: {error}", file=sys.stderr)
            sys.exit(2)
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    argv = [a for a in argv if a != "--debug"]
    from squarechipo.scripts._usage import one_line_usage_errors

    one_line_usage_errors()
    parser = make_parser(prog=f"squarechipo {name}")
    try:
        *parsed, rest = parser.parse_args_and_config(argv, return_remaining_strings=True)
        known = {option for action in parser._actions for option in action.option_strings}
        problem = unknown_options(rest, known) if rest else None
        if problem:
            raise ValueError(problem)
        main(*parsed)
        if program:
            from squarechipo.models.memory import skip_exit_collection

            skip_exit_collection()
    except user_errors() as error:
        if debug:
            raise
        if os.environ.get("LOCAL_RANK", "0") == "0":
            print(f"squarechipo {name}: error: {error_line(error)} (--debug shows the traceback)", file=sys.stderr)
        sys.exit(1)


def model_kwargs(model_args, training_args) -> dict:
    """What every script's ``from_pretrained`` takes from the config: revision, dtype, attention,
    ``trust_remote_code``, quantization, then ``model_init_kwargs`` (they win). Called before anything else runs, so
    an option that cannot work here is refused before any release: quantization needs bitsandbytes and a CUDA GPU (a
    QLoRA config would otherwise train at full precision without saying so)."""
    import torch

    from squarechipo.models.runtime import torch_dtype

    kwargs = {
        "revision": getattr(model_args, "model_revision", None),
        "dtype": torch_dtype(getattr(model_args, "dtype", None)),
        "attn_implementation": getattr(model_args, "attn_implementation", None),
    }
    if getattr(training_args, "trust_remote_code", False):
        kwargs["trust_remote_code"] = True
    if getattr(model_args, "load_in_4bit", False) or getattr(model_args, "load_in_8bit", False):
        flag = "load_in_4bit" if model_args.load_in_4bit else "load_in_8bit"
        if not torch.cuda.is_available():
            raise ValueError(
                f"{flag}: quantization loads the model through bitsandbytes on a CUDA GPU, and this machine has none. "
                f"Remove {flag} (the model then trains at the dtype it is given), or run on a GPU."
            )
        try:
            import bitsandbytes  # noqa: F401
        except ImportError:
            raise ValueError(f"{flag} needs bitsandbytes: pip install bitsandbytes, or remove {flag}.") from None
        from accelerate import PartialState
        from trl import get_quantization_config

        kwargs["quantization_config"] = get_quantization_config(model_args)
        kwargs["device_map"] = {"": PartialState().local_process_index}
    return {**kwargs, **(getattr(training_args, "model_init_kwargs", None) or {})}


#: Trackers the package installs as extras (pyproject.toml's optional dependencies).
TRACKER_EXTRAS = ("tensorboard", "wandb")


def check_trackers(training_args) -> None:
    """Refuse a ``report_to`` tracker whose package is not installed, before any release is drawn (the trainer found
    out only after it)."""
    from transformers.integrations.integration_utils import (
        INTEGRATION_TO_CALLBACK,
        get_available_reporting_integrations,
    )

    wanted = [t for t in (getattr(training_args, "report_to", None) or []) if t not in ("none", "all")]
    unknown = [t for t in wanted if t not in INTEGRATION_TO_CALLBACK]
    missing = [t for t in wanted if t in INTEGRATION_TO_CALLBACK and t not in get_available_reporting_integrations()]
    if unknown:
        raise ValueError(
            f"report_to {', '.join(unknown)}: no such tracker (known: {', '.join(INTEGRATION_TO_CALLBACK)})."
        )
    if missing:
        extras = ",".join(t for t in missing if t in TRACKER_EXTRAS)
        others = " ".join(t for t in missing if t not in TRACKER_EXTRAS)
        install = " ".join(x for x in (f"'squarechipo[{extras}]'" if extras else "", others) if x)
        raise ValueError(
            f"report_to {', '.join(missing)}: its package is not installed (pip install {install}), so the run would "
            "stop once training starts, after its labels were released. Install it, or set report_to: none."
        )
