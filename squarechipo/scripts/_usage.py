"""Argument errors in one line, for every command (imported by the ``squarechipo`` command before anything heavy)."""

from __future__ import annotations

__all__ = ["one_line_usage_errors"]


def one_line_usage_errors() -> None:
    """Argument errors as one line naming the option and where the list is (argparse prints its whole usage first,
    which for a training job is 150 lines of TRL's options). Set in the ``squarechipo`` process and in each job's."""
    import argparse

    def error(self: argparse.ArgumentParser, message: str) -> None:
        self.exit(2, f"{self.prog}: error: {message} (`{self.prog} --help` lists the options)\n")

    argparse.ArgumentParser.error = error
