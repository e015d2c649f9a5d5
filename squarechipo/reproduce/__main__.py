"""``python -m squarechipo.reproduce`` is ``squarechipo reproduce``: the command lives in its own package
(:mod:`squarechipo.reproduce.cli`), so this entry point imports nothing above it."""

from squarechipo.reproduce.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
