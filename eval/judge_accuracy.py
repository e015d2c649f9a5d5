"""Gold accuracy of judges on every gold pair of a split, under the hard and the soft rule, side by side.

A thin wrapper kept at the path the project promises (``python eval/judge_accuracy.py ...``): the script is
:mod:`squarechipo.scripts.judge_accuracy`, with the same options.
"""

from squarechipo.scripts.judge_accuracy import main

if __name__ == "__main__":
    main()
