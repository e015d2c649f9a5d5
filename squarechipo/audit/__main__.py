"""``python -m squarechipo.audit`` is ``squarechipo audit``: the command lives in its own package
(:mod:`squarechipo.audit.cli`), so this entry point imports nothing above it."""

from squarechipo.audit.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
