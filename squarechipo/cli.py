"""The ``squarechipo`` command: one subcommand per job, as ``trl dpo`` is for TRL.

    squarechipo train --config recipes/configs/square_chipo.yaml [--num_processes 2] [--accelerate_config F]
    squarechipo sft | gold-judge | reward-model | select | lp2st | self-play --config ...
    squarechipo judge | judge-accuracy | aggregate | gold-report ...
    squarechipo data finance --out data
    squarechipo reproduce table1 --scale tiny | squarechipo study pilot | squarechipo audit mechanisms
    squarechipo sim

Training subcommands launch their script (:mod:`squarechipo.scripts`) through ``accelerate launch``: options the
script does not know (``--num_processes``, ``--mixed_precision``, ...) go to Accelerate, and
``--accelerate_config FILE`` (or a name: ``ddp``, ``fsdp2``, ``zero2``, ``zero3``, ``cpu``, the configs that ship with
the package) becomes Accelerate's ``--config_file``. On a machine without an accelerator each process gets every CPU
core (``--num_cpu_threads_per_process``), which Accelerate otherwise sets to one, and ``--num_processes N`` starts N
processes through ``torch.distributed.run``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys

from squarechipo import __version__

__all__ = ["ACCELERATE_CONFIGS", "TOOLS", "TRAINING", "accelerate_config", "main", "run"]

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
    "registry": ("squarechipo.scripts.registry", "the registry of releases: init | show | migrate | grant"),
    "key": ("squarechipo.scripts.key", "the keys that sign releases and model records: key new | show | verify"),
    "records": ("squarechipo.scripts.records", "the store of model records the lineage guard reads: show | forget"),
    "shards": ("squarechipo.scripts.shards", "copies across Parquet shards too big for one machine: sketch | copies"),
    "env": ("squarechipo.scripts.env", "versions, the machine, and where the registry, records and key live"),
}


def _subtract(items: list[str], remove: list[str]) -> list[str]:
    """``items`` without the ordered subsequence ``remove`` (TRL's rule for splitting launch arguments)."""
    rest, it = [], iter(remove)
    current = next(it, None)
    for item in items:
        if current is not None and item == current:
            current = next(it, None)
        else:
            rest.append(item)
    return rest


#: The Accelerate configs that ship with the package, by name (``--accelerate_config zero2``), as TRL names its own.
ACCELERATE_CONFIGS = ("cpu", "ddp", "fsdp2", "zero2", "zero3")


def accelerate_config(name: str) -> str:
    """A config file's path: the file named, or one of the package's configs by name (:data:`ACCELERATE_CONFIGS`)."""
    from pathlib import Path

    if Path(name).is_file():
        return name
    if name in ACCELERATE_CONFIGS:
        return str(Path(__file__).parent / "scripts" / "accelerate_configs" / f"{name}.yaml")
    raise ValueError(
        f"--accelerate_config {name}: no such file, and not one of the configs that ship with squarechipo "
        f"({', '.join(ACCELERATE_CONFIGS)})."
    )


def launch_arguments(unknown: list[str]) -> list[str]:
    """Accelerate's options from the ones the script did not know, with the CPU thread default added."""
    from pathlib import Path

    from accelerate.commands.config import default_config_file

    from squarechipo.models.runtime import accelerator_available

    args = list(unknown)
    if "--accelerate_config" in args:
        index = args.index("--accelerate_config")
        if index + 1 >= len(args):
            raise SystemExit(f"--accelerate_config needs a file or a name ({', '.join(ACCELERATE_CONFIGS)})")
        args = ["--config_file", accelerate_config(args[index + 1]), *args[:index], *args[index + 2 :]]
    if accelerator_available():
        return args  # Accelerate's own defaults (every device) and its note about them
    given = {a.split("=", 1)[0] for a in args if a.startswith("--")}
    cpu = {"--num_cpu_threads_per_process": str(os.cpu_count() or 1)}
    if "--config_file" not in given and not Path(default_config_file).is_file():
        # What Accelerate would pick on a CPU machine, said explicitly so it prints no warning about defaults.
        cpu |= {"--num_processes": "1", "--num_machines": "1", "--mixed_precision": "no", "--dynamo_backend": "no"}
    return args + [word for flag, value in cpu.items() if flag not in given for word in (flag, value)]


def _train(name: str, argv: list[str], *, debug: bool = False) -> int:
    """Check the config and the flags (an unknown one is refused naming the closest), then launch the script: through
    Accelerate, or on a machine without an accelerator with N > 1 processes through ``torch.distributed.run`` (gloo),
    since Accelerate's multi-CPU launcher needs MPI. A failed run has printed its own one line: its exit code is
    returned, without Accelerate's traceback."""
    import subprocess

    from accelerate.commands.launch import launch_command, launch_command_parser

    from squarechipo.scripts._common import unknown_options

    module = importlib.import_module(f"squarechipo.scripts.{TRAINING[name]}")
    parser = module.make_parser(prog=f"squarechipo {name}")
    *parsed, config_rest, cli_rest = parser.parse_args_and_config(
        argv, return_remaining_strings=True, separate_remaining_strings=True
    )
    _check_models(parsed)
    accelerate_parser = launch_command_parser()
    launcher = {o for action in accelerate_parser._actions for o in action.option_strings} | {"--accelerate_config"}
    script = {o for action in parser._actions for o in action.option_strings}
    problem = unknown_options([w for w in config_rest + cli_rest if w.split("=")[0] not in launcher], script)
    if problem:
        raise ValueError(problem)
    script_args = _subtract(argv, cli_rest) + (["--debug"] if debug else [])  # the job's error line promises it
    launch = launch_arguments(config_rest + cli_rest)
    processes = _processes(launch)
    try:
        if "--config_file" not in launch and not _accelerator():
            if processes > 1:
                return _torchrun(module.__file__, script_args, processes)
            launcher = accelerate_parser.parse_args([*launch, module.__file__])
            return _in_this_process(module, name, launcher, script_args)
        launch_command(accelerate_parser.parse_args([*launch, str(module.__file__), *script_args]))
    except subprocess.CalledProcessError as failed:
        return failed.returncode or 1
    return 0


def _check_models(parsed) -> None:
    """The models a job starts from, checked before any process is launched: a missing local folder (training before
    its SFT model exists) is one line here, not one line per rank and the launcher's traceback after it."""
    from squarechipo.models.embedded import resolve_model_path

    for arguments in parsed:
        for field in ("model_name_or_path", "ref_model", "sft_model_path"):
            value = getattr(arguments, field, None)
            if isinstance(value, str) and value:
                resolve_model_path(value)  # raises, naming the folder and how to make it


def _in_this_process(module, name: str, launch, script_args: list[str]) -> int:
    """One process on a machine without an accelerator: the job runs in this process, in the environment Accelerate's
    simple launcher gives the process it would start (a second interpreter cost about 6 s of imports and exit)."""
    import torch
    from accelerate.commands.launch import _validate_launch_command
    from accelerate.utils.launch import prepare_simple_launcher_cmd_env

    from squarechipo.scripts._common import script_main

    _, env = prepare_simple_launcher_cmd_env(_validate_launch_command(launch)[0])
    before, threads = dict(os.environ), torch.get_num_threads()
    os.environ.update(env)
    if "OMP_NUM_THREADS" in env:  # torch is loaded already: the variable alone would not reach its thread pool
        torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
    try:
        script_main(module.main, module.make_parser, name, script_args)
    finally:  # a caller of main() in Python keeps its own environment and threads
        os.environ.clear()
        os.environ.update(before)
        torch.set_num_threads(threads)
    return 0


def _processes(launch: list[str]) -> int:
    """The ``--num_processes`` Accelerate was given (1 when none)."""
    for index, word in enumerate(launch):
        if word == "--num_processes" and index + 1 < len(launch):
            return int(launch[index + 1])
        if word.startswith("--num_processes="):
            return int(word.split("=", 1)[1])
    return 1


def _accelerator() -> bool:
    from squarechipo.models.runtime import accelerator_available

    return accelerator_available()


def _torchrun(script: str, script_args: list[str], processes: int) -> int:
    """N CPU processes over gloo (each with its share of the cores); the exit code of the group. Once a process has
    printed the job's one error line, what follows (the other ranks' tracebacks as the group falls apart, the
    launcher's failure report) is held back and counted; with --debug everything is shown."""
    import subprocess

    threads = max(1, (os.cpu_count() or 1) // processes)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}"]
    debug = "--debug" in script_args
    with subprocess.Popen([*command, script, *script_args], env=env, stderr=subprocess.PIPE, text=True) as job:
        held, errors = 0, []
        for line in job.stderr:
            error = re.match(r"squarechipo [\w-]+: error: ", line) is not None
            if debug or not (errors or error):
                sys.stderr.write(line)
            elif error and line not in errors:
                sys.stderr.write(line)
            else:
                held += 1
            if error and line not in errors:
                errors.append(line)
        code = job.wait()
    if held and code:
        print(f"({held} lines of the other processes' output after the error held back; --debug shows them)",
              file=sys.stderr)  # fmt: skip
    return code


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
        parser.parse_args(argv or ["--help"])  # --help, --version, or an error naming the choices
        return 2
    name, rest = argv[0], argv[1:]
    try:
        return _train(name, rest, debug=debug) if name in TRAINING else _tool(name, rest)
    except _user_errors() as error:
        if debug:
            raise
        from squarechipo.scripts._common import error_line

        print(f"squarechipo {name}: error: {error_line(error)} (--debug shows the traceback)", file=sys.stderr)
        return 1


def run() -> None:
    """The ``squarechipo`` program: glibc keeps the memory the job frees (:mod:`squarechipo.models.memory`), then
    :func:`main`, then an exit that does not walk the job's objects."""
    from squarechipo.models.memory import keep_freed_memory, skip_exit_collection

    try:
        keep_freed_memory()
    except ValueError as error:  # a misspelt SQUARECHIPO_MALLOC: one line, as every other error of the command
        print(f"squarechipo: error: {error}", file=sys.stderr)
        sys.exit(2)
    code = main()
    skip_exit_collection()
    sys.exit(code)


if __name__ == "__main__":
    run()
