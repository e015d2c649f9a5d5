"""Iterative Square-χPO for general (non-transitive) preferences (Zhou et al. 2025 (Square-χPO), Algorithm 3).

    accelerate launch recipes/self_play.py --config recipes/configs/<config>.yaml

A thin wrapper kept at the path the project promises: the script is :mod:`squarechipo.scripts.self_play`
(``squarechipo self-play --config ...`` launches it from an installed package), with the same options.
"""

from squarechipo.scripts._common import script_main
from squarechipo.scripts.self_play import main, make_parser

if __name__ == "__main__":
    script_main(main, make_parser, "self-play")
