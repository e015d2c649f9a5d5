"""Central DP: release one of several candidate policies with the exponential mechanism (Zhou et al. 2025 (Square-χPO),
Algorithm 2).

    accelerate launch recipes/select_policy.py --config recipes/configs/<config>.yaml

A thin wrapper kept at the path the project promises: the script is :mod:`squarechipo.scripts.select_policy`
(``squarechipo select-policy --config ...`` launches it from an installed package), with the same options.
"""

from squarechipo.scripts._common import script_main
from squarechipo.scripts.select_policy import main, make_parser

if __name__ == "__main__":
    script_main(main, make_parser, "select")
