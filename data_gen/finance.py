"""``python -m data_gen.finance``: the finance_preference generator, kept at the path the project promises.

The generator lives in the package (:mod:`squarechipo.data.finance`; the command is ``squarechipo data finance``);
this module re-exports it and runs the command with the same options.
"""

from squarechipo.data.finance import *  # noqa: F403
from squarechipo.data.finance import __all__  # noqa: F401
from squarechipo.scripts.data import main

if __name__ == "__main__":
    main()
