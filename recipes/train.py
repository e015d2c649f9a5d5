"""Align a causal LM on privatized and/or corrupted preference labels.

    accelerate launch recipes/train.py --config recipes/configs/<config>.yaml

A thin wrapper kept at the path the project promises: the script is :mod:`squarechipo.scripts.train`
(``squarechipo train --config ...`` launches it from an installed package), with the same options.
"""

from squarechipo.scripts._common import script_main
from squarechipo.scripts.train import main, make_parser

if __name__ == "__main__":
    script_main(main, make_parser, "train")
