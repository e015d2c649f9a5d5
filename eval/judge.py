"""LLM-as-judge win rate of a policy against a baseline (Zhou et al. 2025 (Square-χPO), App. E).

A thin wrapper kept at the path the project promises (``python eval/judge.py ...``): the script is
:mod:`squarechipo.scripts.judge`, with the same options.
"""

import sys

from squarechipo.cli import run

if __name__ == "__main__":
    run(["judge", *sys.argv[1:]])  # through the command: its errors are one line (--debug shows the traceback)
