"""Train the gold reward-model judge on public gold pairs: a linear head on frozen embedded-model features.

    accelerate launch recipes/gold_judge.py --config recipes/configs/<config>.yaml

A thin wrapper kept at the path the project promises: the script is :mod:`squarechipo.scripts.gold_judge`
(``squarechipo gold-judge --config ...`` launches it from an installed package), with the same options.
"""

from squarechipo.scripts._common import script_main
from squarechipo.scripts.gold_judge import main, make_parser

if __name__ == "__main__":
    script_main(main, make_parser, "gold-judge")
