"""``python -m squarechipo.reproduce`` is ``squarechipo reproduce``; the command lives in
:mod:`squarechipo.scripts.reproduce`."""

from squarechipo.scripts.reproduce import main

if __name__ == "__main__":
    raise SystemExit(main())
