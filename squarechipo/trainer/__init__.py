"""TRL glue: the config and trainer subclasses, and the lean LM head."""

from squarechipo.trainer.config import SquareChiPOConfig
from squarechipo.trainer.sft import LeanSFTTrainer
from squarechipo.trainer.trainer import PRIVACY_FILE, TRL_INTERNALS, SquareChiPOTrainer, check_hub_reachable

__all__ = [
    "PRIVACY_FILE",
    "LeanSFTTrainer",
    "SquareChiPOConfig",
    "SquareChiPOTrainer",
    "TRL_INTERNALS",
    "check_hub_reachable",
]
