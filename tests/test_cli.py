"""The ``squarechipo`` command as a newcomer meets it: every subcommand and sub-subcommand, found from the parser and
the help itself (not from a list kept by hand), prints its help in-process, and its usage line names the command to
type; the project's own errors reach the user as one line."""

from __future__ import annotations

import contextlib
import io
import re

import pytest

from squarechipo.cli import _parser, main


def _help(argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([*argv, "--help"])
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 1
        except Exception as error:  # noqa: BLE001 - a help that crashes is a failure to report, with its error
            return 1, f"{type(error).__name__}: {error}"
    return code, out.getvalue() + err.getvalue()


def _subcommands() -> list[str]:
    (action,) = [a for a in _parser()._actions if a.dest == "command"]
    return sorted(action.choices)


def _choices(text: str) -> list[str]:
    """The sub-subcommands a help text offers: the first ``{a,b,c}`` group of its usage line."""
    usage = " ".join(text.split("\n\n", 1)[0].split())
    for found in re.finditer(r"(\S+) \[?\{([a-z0-9_,-]+)\}", usage):
        option = found.group(1).lstrip("[").startswith("-") and not found.group(1).endswith("]")
        if not option:  # a positional group (subcommands, steps), not an option's values
            return found.group(2).split(",")
    return []


def _commands() -> list[list[str]]:
    commands = []
    for name in _subcommands():
        commands.append([name])
        code, text = _help([name])
        commands += [[name, sub] for sub in _choices(text)] if code == 0 else []
    return commands


def test_every_subcommand_prints_its_help_and_its_usage_names_it():
    """`squarechipo train --help` (and self-play, lp2st) crashed on a % in a help text; judge's usage left out the
    subcommand; sim's spoke of `python -m`. Every command and sub-command, found from the parser, is formatted."""
    failures = {}
    commands = _commands()
    assert len(commands) > len(_subcommands())  # sub-subcommands were found (registry init/show, sim, ...)
    for argv in commands:
        code, text = _help(argv)
        usage = re.search(r"usage: (.*)", text)
        named = usage is not None and usage.group(1).startswith(f"squarechipo {argv[0]}")
        if code != 0 or not named or not all(word in text.split("\n\n", 1)[0] for word in argv):
            failures[" ".join(argv)] = text.strip().splitlines()[-1] if text.strip() else f"exit {code}"
    assert not failures, failures


def _run(argv: list[str], capsys) -> tuple[int, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.err


def test_the_projects_own_errors_are_one_line_naming_the_file_and_the_fix(tmp_path, monkeypatch, capsys):
    """`registry show` with no registry, `registry init` twice and `train --config` of a missing file printed
    tracebacks."""
    from squarechipo.privacy.release.registry import REGISTRY_ENV

    monkeypatch.setenv(REGISTRY_ENV, str(tmp_path / "r.sqlite"))
    cases = {
        ("registry", "show"): ("no registry of releases at", "squarechipo registry init"),
        ("train", "--config", str(tmp_path / "missing.yaml")): ("missing.yaml", "check the path"),
    }
    for argv, words in cases.items():
        code, err = _run(list(argv), capsys)
        assert code == 1 and err.count("\n") == 1 and err.startswith(f"squarechipo {argv[0]}: error: "), err
        assert all(word in err for word in words) and "Traceback" not in err, err
    assert main(["registry", "init"]) == 0
    code, err = _run(["registry", "init"], capsys)
    assert code == 1 and "already exists" in err and err.count("\n") == 1
    with pytest.raises(Exception, match="already exists"):  # --debug: the error itself, traceback and all
        main(["registry", "init", "--debug"])


@pytest.mark.parametrize(
    "error",
    ["ValueError", "RegistryError", "DatabaseError", "FileNotFoundError", "NotADirectoryError", "PermissionError"],
)
def test_every_error_type_the_cli_promises_prints_one_line(error, monkeypatch, capsys):
    """The handler dropped ValueError in a planted bug and no test saw it (two other types were driven through it).
    Every type it promises, raised inside a real subcommand, reaches the user as one line, never a traceback."""
    import squarechipo.cli as cli
    from squarechipo.data.database import DatabaseError
    from squarechipo.privacy.release.registry import RegistryError

    made = {
        "ValueError": ValueError("the field x is wrong: set it to y"),
        "RegistryError": RegistryError("the registry at /r refused: fix it"),
        "DatabaseError": DatabaseError("postgresql://u:***@/db", "cannot connect (no server)"),
        "FileNotFoundError": FileNotFoundError(2, "No such file", "/missing/config.yaml"),
        "NotADirectoryError": NotADirectoryError(20, "Not a directory", "/a/file"),
        "PermissionError": PermissionError(13, "Permission denied", "/root/secret"),
    }[error]
    assert isinstance(made, cli._user_errors())

    def fails(argv):
        raise made

    monkeypatch.setattr("squarechipo.scripts.key.main", fails)  # the subcommand the CLI runs raises it
    code, err = _run(["key", "show"], capsys)
    assert code == 1 and err.count("\n") == 1 and err.startswith("squarechipo key: error: "), err
    assert "Traceback" not in err and "--debug shows the traceback" in err


def test_dir_of_the_lazy_packages_lists_every_exported_name_before_any_is_loaded():
    """`dir()` omitted names not yet loaded in a planted bug; nothing tested it. In a fresh process, before any name
    is read, `dir()` lists every name the package exports."""
    import subprocess
    import sys

    code = (
        "import squarechipo, squarechipo.privacy as p\n"
        "for package in (squarechipo, p):\n"
        "    missing = set(package.__all__) - set(dir(package))\n"
        "    assert not missing, (package.__name__, missing)\n"
        "print('ok')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "ok", done.stderr[-2000:]


def test_a_misspelt_flag_or_config_key_is_refused_before_anything_launches_naming_the_closest(tmp_path, capsys):
    """A misspelt config key or flag ended in Accelerate's usage ("unrecognized arguments: --lable_epsilon")."""
    config = tmp_path / "c.yaml"
    config.write_text("model_name_or_path: embedded\ndataset_name: data/x\nlable_epsilon: 2.0\n")
    for argv in (["train", "--config", str(config)], ["train", "--config", str(config).replace("c.yaml", "d.yaml")]):
        if "d.yaml" in argv[-1]:
            (tmp_path / "d.yaml").write_text("model_name_or_path: embedded\ndataset_name: data/x\n")
            argv = [*argv, "--label_epsilonn", "2.0"]
        code, err = _run(argv, capsys)
        assert code == 1 and err.count("\n") == 1, err
        assert "did you mean --label_epsilon?" in err and "Traceback" not in err, err
