"""Aggregate several eval/judge.py runs (seeds) into mean ± std, in the form of Zhou et al. 2025 (Square-χPO)'s Table
1.

A thin wrapper kept at the path the project promises (``python eval/aggregate.py ...``): the script is
:mod:`squarechipo.scripts.aggregate`, with the same options.
"""

import sys

from squarechipo.cli import run

if __name__ == "__main__":
    run(["aggregate", *sys.argv[1:]])  # through the command: its errors are one line (--debug shows the traceback)
