"""Gold accuracy of judges on every gold pair of a split, under the hard and the soft rule, side by side.

A thin wrapper kept at the path the project promises (``python eval/judge_accuracy.py ...``): the script is
:mod:`squarechipo.scripts.judge_accuracy`, with the same options.
"""

import sys

from squarechipo.cli import run

if __name__ == "__main__":
    run(["judge-accuracy", *sys.argv[1:]])  # through the command: its errors are one line (--debug: the traceback)
