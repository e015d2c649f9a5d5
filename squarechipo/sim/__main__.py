"""``python -m squarechipo.sim`` is ``squarechipo sim``; the command lives in
:mod:`squarechipo.scripts.sim`."""

from squarechipo.scripts.sim import main

if __name__ == "__main__":
    raise SystemExit(main())
