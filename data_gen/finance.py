"""``python -m data_gen.finance``: the finance_preference generator, kept at the path the project promises.

The generator lives in the package (:mod:`squarechipo.data.finance`, also ``squarechipo data finance``); this
module re-exports it and runs it with the same options.
"""

from squarechipo.data.finance import *  # noqa: F403
from squarechipo.data.finance import __all__, main  # noqa: F401

if __name__ == "__main__":
    main()
