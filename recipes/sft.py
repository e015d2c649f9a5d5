"""Supervised fine-tuning on finance_sft (prompt + chosen) with TRL's SFTTrainer.

    accelerate launch recipes/sft.py --config recipes/configs/<config>.yaml

A thin wrapper kept at the path the project promises: the script is :mod:`squarechipo.scripts.sft`
(``squarechipo sft --config ...`` launches it from an installed package), with the same options.
"""

from squarechipo.scripts._common import script_main
from squarechipo.scripts.sft import main, make_parser

if __name__ == "__main__":
    script_main(main, make_parser, "sft")
