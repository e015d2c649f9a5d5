"""The ``squarechipo`` command: one subcommand per job, as ``trl dpo`` is for TRL.

    squarechipo train --config recipes/configs/square_chipo.yaml [--num_processes 2] [--accelerate_config F]
    squarechipo sft | gold-judge | reward-model | select | lp2st | self-play --config ...
    squarechipo judge | judge-accuracy | aggregate | gold-report ...
    squarechipo data finance --out data
    squarechipo reproduce table1 --scale tiny | squarechipo study pilot | squarechipo audit mechanisms
    squarechipo sim

Training subcommands launch their script (:mod:`squarechipo.scripts`) through ``accelerate launch``
(:mod:`squarechipo.scripts.launch` starts the processes; this module only parses the command): options the
script does not know (``--num_processes``, ``--mixed_precision``, ...) go to Accelerate, and
``--accelerate_config FILE`` (or a name: ``ddp``, ``fsdp2``, ``zero2``, ``zero3``, ``cpu``, the configs that ship with
the package) becomes Accelerate's ``--config_file``. On a machine without an accelerator each process gets every CPU
core (``--num_cpu_threads_per_process``), which Accelerate otherwise sets to one, and ``--num_processes N`` starts N
processes through ``torch.distributed.run``.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from squarechipo import __version__

__all__ = ["TOOLS", "TRAINING", "main", "run"]

#: Subcommand → script module launched through Accelerate (``main(script_args, training_args, model_args)``).
TRAINING = {
    "train": "train",
    "sft": "sft",
    "gold-judge": "gold_judge",
    "reward-model": "reward_model",
    "select": "select_policy",
    "lp2st": "lp2st",
    "self-play": "self_play",
}
#: What each training job does (its help line); each runs under ``accelerate launch``, on one or more processes.
TRAINING_HELP = {
    "train": "align a policy on preference labels (χPO, Square-χPO, DPO, rDPO), privatized or corrupted",
    "sft": "supervised fine-tuning: the reference policy the alignment starts from",
    "gold-judge": "fit the gold reward (a linear head) that the studies evaluate policies with",
    "reward-model": "train a pairwise preference model ℓ(x, a, b), debiased for private labels",
    "select": "pick one policy among candidates with central DP (the exponential mechanism)",
    "lp2st": "label privacy in two stages (Ghazi et al. 2021 (label DP)): a prior, then RRWithPrior",
    "self-play": "iterative Square-χPO for general preferences (Zhou et al. 2025 (Square-χPO), Alg. 3)",
}
#: Subcommand → (module, help): run in this process with ``main(argv)``.
TOOLS = {
    "judge": ("squarechipo.scripts.judge", "win rate of a policy against a baseline, judged pairwise"),
    "judge-accuracy": ("squarechipo.scripts.judge_accuracy", "judges' accuracy on gold pairs"),
    "aggregate": ("squarechipo.scripts.aggregate", "seeds of judge runs into one table"),
    "gold-report": ("squarechipo.scripts.gold_report", "a policy's gold-reward gain over the SFT policy"),
    "reproduce": ("squarechipo.reproduce.cli", "Table 1 of Zhou et al. 2025 (Square-χPO) at a named scale"),
    "study": ("squarechipo.reproduce.cli", "the controlled study: pilot, main run, report"),
    "audit": ("squarechipo.audit.cli", "empirical ε lower bounds for mechanisms and training runs"),
    "sim": ("squarechipo.sim.cli", "the simulation lab"),
    "data": ("squarechipo.scripts.data", "generate a dataset: data finance --out DIR"),
    "registry": (
        "squarechipo.scripts.registry",
        "the registry of releases: init | show | budget | migrate | grant | server | audit",
    ),
    "key": ("squarechipo.scripts.key", "the keys that sign releases and model records: new | show | verify"),
    "records": ("squarechipo.scripts.records", "the store of model records the lineage guard reads: show | forget"),
    "shards": (
        "squarechipo.scripts.shards",
        "copies across Parquet shards too big for one machine: split | sketch | copies",
    ),
    "env": ("squarechipo.scripts.env", "versions, the machine, and where the registry, records and key live"),
}


#: ``squarechipo data --help``: the generators (each takes ``--help`` of its own).
_DATA_HELP = """usage: squarechipo data {finance} [options]

generators:
  finance   finance_preference (Zhou et al. 2025 (Square-χPO), App. E/F): preference pairs, SFT rows and public
            gold pairs, e.g. squarechipo data finance --out data (squarechipo data finance --help for options)"""


def _tool(name: str, argv: list[str]) -> int:
    module = importlib.import_module(TOOLS[name][0])
    if name == "data":
        if argv[:1] in (["-h"], ["--help"]):
            print(_DATA_HELP)
            return 0
        if argv[:1] != ["finance"]:
            raise SystemExit(f"squarechipo data: name a generator.\n{_DATA_HELP}")
        argv = argv[1:]
    if name == "study":
        argv = ["study", *argv]
    elif name == "reproduce" and argv[:1] not in (["table1"], ["study"]):
        argv = ["table1", *argv]  # `squarechipo reproduce --scale tiny` is Table 1
    result = module.main(argv, prog="squarechipo") if name == "study" else module.main(argv)
    return result if isinstance(result, int) else 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="squarechipo", description=__doc__.splitlines()[0], add_help=True)
    parser.add_argument("--version", action="version", version=f"squarechipo {__version__}")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error (anywhere on the line)")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in TRAINING:
        commands.add_parser(name, help=TRAINING_HELP[name], add_help=False)
    for name, (_, text) in TOOLS.items():
        commands.add_parser(name, help=text, add_help=False)
    return parser


def _no_command(name: str) -> str:
    """One line for a command that does not exist: the closest one, or where the list is."""
    import difflib

    close = difflib.get_close_matches(name, [*TRAINING, *TOOLS], n=1, cutoff=0.6)
    hint = f"did you mean '{close[0]}'? " if close else ""
    return f"no command '{name}': {hint}squarechipo --help lists the commands."


def _user_errors() -> tuple[type[BaseException], ...]:
    """The errors that are the user's to fix (:func:`squarechipo.scripts._common.user_errors`): the CLI prints each as
    one line."""
    from squarechipo.scripts._common import user_errors

    return user_errors()


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand. The project's own errors print as one line (``--debug`` anywhere shows the traceback)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    argv = [a for a in argv if a != "--debug"]
    from squarechipo.scripts._usage import one_line_usage_errors

    one_line_usage_errors()
    parser = _parser()
    if not argv or argv[0] not in {*TRAINING, *TOOLS}:
        if argv and not argv[0].startswith("-"):
            print(f"squarechipo: error: {_no_command(argv[0])}", file=sys.stderr)
            return 2
        parser.parse_args(argv or ["--help"])  # --help, --version, or an error naming the choices
        return 2
    name, rest = argv[0], argv[1:]
    try:
        if name in TRAINING:
            from squarechipo.scripts.launch import train

            return train(f"squarechipo.scripts.{TRAINING[name]}", name, rest, debug=debug)
        return _tool(name, rest)
    except _user_errors() as error:
        if debug:
            raise
        from squarechipo.scripts._common import error_line

        print(f"squarechipo {name}: error: {error_line(error)} (--debug shows the traceback)", file=sys.stderr)
        return 1


def run(argv: list[str] | None = None) -> None:
    """The ``squarechipo`` program: glibc keeps the memory the job frees (:mod:`squarechipo.models.memory`), then
    :func:`main` (on ``argv``, default the command line), then an exit that does not walk the job's objects. The
    ``eval/`` wrappers run their tool through it, so their errors are the command's one line too."""
    from squarechipo.models.memory import keep_freed_memory, skip_exit_collection

    try:
        keep_freed_memory()
    except ValueError as error:  # a misspelt SQUARECHIPO_MALLOC: one line, as every other error of the command
        print(f"squarechipo: error: {error}", file=sys.stderr)
        sys.exit(2)
    code = main(argv)
    skip_exit_collection()
    sys.exit(code)


if __name__ == "__main__":
    run()
