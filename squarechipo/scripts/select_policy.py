"""Central DP: release one of several candidate policies with the exponential mechanism (Zhou et al. 2025 (Square-χPO),
Algorithm 2).

    accelerate launch recipes/select_policy.py --config recipes/configs/select_policy.yaml
    torchrun --nproc_per_node 2 recipes/select_policy.py --config ...      # scoring sharded over two processes

The candidates must have been trained without the private dataset (the guard checks the record
squarechipo writes next to every model it trains). Each candidate is scored with the square loss on
the raw private labels; one is sampled with P ∝ exp(−ε·L/8) and copied to ``output_dir`` with a card
and ``squarechipo_privacy.json`` recording ε, n and |Π|. Scores are never printed or saved.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from trl import TrlParser

from squarechipo.data import load_preference_dataset
from squarechipo.models import resolve_model_path
from squarechipo.models.runtime import default_dtype, distributed_state, torch_dtype
from squarechipo.scripts._common import setup_logging
from squarechipo.select import select_policy


@dataclass
class SelectConfig:
    """YAML keys of ``recipes/configs/select_policy.yaml``."""

    candidates: list[str] = field(metadata={"help": "Candidate policies: model or adapter folders, or 'embedded'."})
    ref_model: str = field(metadata={"help": "Reference policy π_ref of the margins (usually the SFT model)."})
    dataset_name: str = field(metadata={"help": "The private preference dataset (folder, file or DatasetDict)."})
    output_dir: str = field(metadata={"help": "Where the selected policy, its card and its ledger are written."})
    central_epsilon: float | None = field(
        default=None, metadata={"help": "Central ε of the release (whole rows are protected). Required."}
    )
    dataset_train_split: str = field(
        default="train", metadata={"help": "The private split the candidates are scored on."}
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "Score the first N private rows only."})
    beta: float = field(default=0.1, metadata={"help": "β of the margins (as in training)."})
    r_max: float | None = field(default=5.0, metadata={"help": "Margins are clipped to ±2·R_max."})
    link: str = field(default="chipo", metadata={"help": "chipo (Square-χPO) or dpo."})
    max_length: int | None = field(default=512, metadata={"help": "Truncate prompt+completion to this many tokens."})
    truncation_mode: str = field(default="keep_start", metadata={"help": "keep_start or keep_end."})
    batch_size: int = field(default=8, metadata={"help": "Preference pairs per forward pass."})
    dtype: str | None = field(
        default=None,
        metadata={
            "help": "float32, bfloat16 or float16 (default: bfloat16 where this machine runs it natively, else "
            "float32; the selection's guarantee does not depend on precision: the margins are clipped)."
        },
    )
    seed: int | None = field(
        default=None, metadata={"help": "Sampling seed. Leave unset (OS entropy): a known seed voids the guarantee."}
    )
    allow_unrecorded_candidates: bool = field(
        default=False, metadata={"help": "Accept candidates with no training-data record (recorded in the ledger)."}
    )
    override_candidate_guard: bool = field(
        default=False, metadata={"help": "Accept candidates trained on the private data: the guarantee does not hold."}
    )
    override_reference_guard: bool = field(
        default=False,
        metadata={
            "help": "Accept a reference trained on the private rows or their prompts: the guarantee does not "
            "hold (recorded in the ledger and card)."
        },
    )

    def __post_init__(self) -> None:
        if self.central_epsilon is None:
            raise ValueError(
                "central_epsilon is required: the ε of the exponential mechanism, e.g. central_epsilon: 1.0"
            )


def main(config: SelectConfig):
    setup_logging()
    state = distributed_state()
    with state.main_process_first():  # the embedded model is converted once, by the main process
        for name in [config.ref_model, *config.candidates]:
            resolve_model_path(name)
    private = load_preference_dataset(config.dataset_name, split=config.dataset_train_split)
    if config.max_train_samples is not None:
        private = private.select(range(min(config.max_train_samples, len(private))))
    selection = select_policy(
        config.candidates,
        config.ref_model,
        private,
        epsilon=config.central_epsilon,
        beta=config.beta,
        r_max=config.r_max,
        link=config.link,
        max_length=config.max_length,
        truncation_mode=config.truncation_mode,
        batch_size=config.batch_size,
        dtype=torch_dtype(default_dtype(config.dtype, "dtype")),
        output_dir=config.output_dir,
        seed=config.seed,
        allow_unrecorded_candidates=config.allow_unrecorded_candidates,
        override_candidate_guard=config.override_candidate_guard,
        override_reference_guard=config.override_reference_guard,
    )
    state.print(
        f"Selected {selection.candidate} (candidate {selection.index + 1} of {selection.num_candidates}) with "
        f"central ε = {selection.epsilon} over n = {selection.num_rows} private rows "
        f"-> {Path(config.output_dir).resolve()}"
    )
    return selection


def make_parser(prog: str | None = None) -> TrlParser:
    from squarechipo.scripts._common import training_parser

    return training_parser((SelectConfig,), prog)


if __name__ == "__main__":
    from squarechipo.scripts._common import script_main

    script_main(main, make_parser, "select")
