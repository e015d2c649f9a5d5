"""``python -m squarechipo.audit`` is ``squarechipo audit``; the command lives in
:mod:`squarechipo.scripts.audit`."""

from squarechipo.scripts.audit import main

if __name__ == "__main__":
    raise SystemExit(main())
