"""Train a reward model (Chowdhury et al. 2024 (private reward estimation)) or a pairwise preference model
(Zhou et al. 2025 (Square-χPO), §4) on privatized labels.

    accelerate launch recipes/reward_model.py --config recipes/configs/<config>.yaml

A thin wrapper kept at the path the project promises: the script is :mod:`squarechipo.scripts.reward_model`
(``squarechipo reward-model --config ...`` launches it from an installed package), with the same options.
"""

from squarechipo.scripts._common import script_main
from squarechipo.scripts.reward_model import main, make_parser

if __name__ == "__main__":
    script_main(main, make_parser, "reward-model")
