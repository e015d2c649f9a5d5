"""``python -m squarechipo.sim`` is ``squarechipo sim``: the command lives in its own package
(:mod:`squarechipo.sim.cli`), so this entry point imports nothing above it."""

from squarechipo.sim.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
