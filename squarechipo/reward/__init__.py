"""Private reward models (Chowdhury et al. 2024 (private reward estimation)) and pairwise preference models for general
preferences (Zhou et al. 2025 (Square-χPO), §4)."""

from squarechipo.reward.best_of_k import BestOfKRewardTrainer
from squarechipo.reward.config import MODEL_TYPES, REWARD_LOSSES, PrivateRewardConfig
from squarechipo.reward.pairs import PreferenceModel, pair_text, to_pairwise_dataset
from squarechipo.reward.trainer import PrivateRewardTrainer, reward_loss

__all__ = [
    "BestOfKRewardTrainer",
    "MODEL_TYPES",
    "REWARD_LOSSES",
    "PreferenceModel",
    "PrivateRewardConfig",
    "PrivateRewardTrainer",
    "pair_text",
    "reward_loss",
    "to_pairwise_dataset",
]
