"""Multi-stage training with RRWithPrior for preferences (Ghazi et al. 2021 (label DP) LP-2ST) around Square-χPO.

    accelerate launch recipes/lp2st.py --config recipes/configs/<config>.yaml

A thin wrapper kept at the path the project promises: the script is :mod:`squarechipo.scripts.lp2st`
(``squarechipo lp2st --config ...`` launches it from an installed package), with the same options.
"""

from squarechipo.scripts._common import script_main
from squarechipo.scripts.lp2st import main, make_parser

if __name__ == "__main__":
    script_main(main, make_parser, "lp2st")
