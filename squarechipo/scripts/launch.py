"""How ``squarechipo <training job>`` starts its processes (:mod:`squarechipo.cli` parses the command): the job's
config and flags checked, then the script run through ``accelerate launch``, in this process on a machine without an
accelerator, or as N CPU processes through ``torch.distributed.run``.

``--accelerate_config FILE`` (or a name: ``ddp``, ``fsdp2``, ``zero2``, ``zero3``, ``cpu``, the configs that ship with
the package) becomes Accelerate's ``--config_file``. On a machine without an accelerator each process gets every CPU
core (``--num_cpu_threads_per_process``), which Accelerate otherwise sets to one.
"""

from __future__ import annotations

import importlib
import os
import re
import sys

__all__ = ["ACCELERATE_CONFIGS", "accelerate_config", "launch_arguments", "train"]


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
        return str(Path(__file__).parent / "accelerate_configs" / f"{name}.yaml")
    raise ValueError(
        f"--accelerate_config {name}: no such file, and not one of the configs that ship with squarechipo "
        f"({', '.join(ACCELERATE_CONFIGS)})."
    )


def launch_arguments(unknown: list[str]) -> list[str]:
    """Accelerate's options from the ones the script did not know, with the CPU thread default added."""
    from pathlib import Path

    from accelerate.commands.config import default_config_file

    from squarechipo.models.runtime import accelerator_available

    args = [part for word in unknown for part in _split_equals(word, "--accelerate_config")]
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


def _split_equals(word: str, flag: str) -> list[str]:
    """``--flag=value`` as ``--flag value`` (both spellings a command line may use), any other word as it is."""
    return [flag, word[len(flag) + 1 :]] if word.startswith(f"{flag}=") else [word]


def train(module_name: str, name: str, argv: list[str], *, debug: bool = False) -> int:
    """Check the config and the flags (an unknown one is refused naming the closest), then launch the script: through
    Accelerate, or on a machine without an accelerator with N > 1 processes through ``torch.distributed.run`` (gloo),
    since Accelerate's multi-CPU launcher needs MPI. A failed run has printed its own one line: its exit code is
    returned, without Accelerate's traceback."""
    import subprocess

    from accelerate.commands.launch import launch_command, launch_command_parser

    from squarechipo.scripts._common import unknown_options

    module = importlib.import_module(module_name)
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
