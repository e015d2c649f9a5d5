"""The sizes of a Table 1 reproduction (Zhou et al. 2025 (Square-χPO), App. E): ``cpu`` (this 2-core
machine), ``paper``.

A scale is a dataclass, so a YAML file with any subset of its fields (plus ``base: cpu`` or ``base: paper``)
is a scale too: ``--scale my_scale.yaml``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

__all__ = ["SCALES", "Scale", "load_scale"]


@dataclass(frozen=True)
class Scale:
    """Every size and setting of a run. The label settings are Zhou et al. 2025 (Square-χPO)'s: ε = 0.5, α = 0.1, the
    flip adversary."""

    name: str
    #: Where the finance datasets live (``squarechipo data finance --out data`` writes them).
    data_dir: str = "data"
    base_model: str = "embedded"
    # SFT on finance_sft rows (disjoint from the preference rows: no preference label reaches the SFT policy).
    sft_rows: int | None = 256
    sft_epochs: float = 1.0
    sft_learning_rate: float = 2e-5
    # Alignment cells.
    seeds: tuple[int, ...] = (0, 1, 2)
    settings: tuple[str, ...] = ("CTL", "LTC")
    methods: tuple[str, ...] = ("chipo", "square_chipo", "dpo", "rdpo")
    epsilon: float = 0.5
    corruption_rate: float = 0.1
    #: Square-χPO under CTL at these extra ε (None = ∞, no RR), at the same α: the cost of privacy.
    sweep_epsilons: tuple[float | None, ...] = (1.0, 2.0, None)
    #: Square-χPO on clean labels (ε = ∞, α = 0): the upper reference.
    clean_reference: bool = True
    train_rows: int | None = 128
    epochs: float = 1.0
    batch_size: int = 8
    learning_rate: float = 5e-5
    beta: float = 0.1
    r_max: float = 5.0
    max_length: int = 256
    # Evaluation.
    test_prompts: int | None = 48
    max_new_tokens: int = 64
    #: Public gold rows (the ``judge`` split) the gold reward-model judge is fitted on.
    judge_rows: int | None = 256
    calibration_pairs: int | None = 170
    #: The debiased local judge (both orders, soft rule) as a second opinion: a causal LM, or None to skip.
    second_opinion: str | None = "embedded"
    #: Keep each cell's model weights (otherwise only its card, privacy record and metrics stay).
    keep_models: bool = False
    #: Minutes one cell takes on the machine the scale is meant for (for the estimate printed before a run).
    cell_minutes: float = 4.0
    setup_minutes: float = 12.0
    notes: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = set(self.settings) - {"CTL", "LTC"}
        if unknown:
            raise ValueError(f"settings must be CTL and/or LTC (got {sorted(unknown)}).")
        if not self.seeds:
            raise ValueError("seeds: give at least one seed.")
        from squarechipo.losses import METHODS

        bad = [m for m in self.methods if m not in METHODS]
        if bad:
            raise ValueError(f"methods {bad} are not squarechipo methods; pick from {sorted(METHODS)}.")

    def to_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()}


SCALES: dict[str, Scale] = {
    # Sized from one measured cell (README, "Reproducing Zhou et al. 2025 (Square-χPO)'s Table 1"): 128 rows and 48
    # prompts took 357 s a cell,
    # so 36 cells would take 3.6 h; 80 rows (10 steps) and 32 prompts were expected at 4.1 min a cell and took
    # 181–190 s (3.1 min) in the first run, about 2 h in all with the 10-minute set-up.
    "cpu": Scale(name="cpu", train_rows=80, test_prompts=32, cell_minutes=3.1, setup_minutes=10.0),
    # One cell at toy sizes on the embedded model, to check an installation end to end in a few minutes; its
    # figures mean nothing.
    "tiny": Scale(
        name="tiny",
        sft_rows=8,
        seeds=(0,),
        settings=("CTL",),
        methods=("square_chipo",),
        sweep_epsilons=(),
        clean_reference=False,
        train_rows=8,
        max_length=128,
        test_prompts=2,
        max_new_tokens=8,
        judge_rows=16,
        calibration_pairs=4,
        second_opinion=None,
        cell_minutes=2.0,
        setup_minutes=3.0,
    ),
    # Zhou et al. 2025 (Square-χPO), App. E: all 1,442 training rows, 5 seeds, every SFT row; for a GPU.
    "paper": Scale(
        name="paper",
        sft_rows=None,
        sft_epochs=3.0,
        seeds=(0, 1, 2, 3, 4),
        train_rows=None,
        epochs=3.0,
        learning_rate=5e-6,
        test_prompts=None,
        max_new_tokens=128,
        judge_rows=None,
        cell_minutes=15.0,
        setup_minutes=30.0,
    ),
}


def _tuple(value):
    return tuple(None if v is None or (isinstance(v, float) and math.isinf(v)) else v for v in value)


def load_scale(name_or_path: str) -> Scale:
    """A named scale, or a YAML file of Scale fields on top of ``base`` (default ``cpu``)."""
    if name_or_path in SCALES:
        return SCALES[name_or_path]
    path = Path(name_or_path)
    if not path.is_file():
        raise ValueError(f"--scale must be one of {sorted(SCALES)} or a YAML file of Scale fields (got {path}).")
    import yaml

    spec = yaml.safe_load(path.read_text()) or {}
    base = SCALES[spec.pop("base", "cpu")]
    known = {f.name for f in fields(Scale)}
    unknown = sorted(set(spec) - known)
    if unknown:
        raise ValueError(f"{path}: unknown Scale fields {unknown}; the fields are {sorted(known)}.")
    spec = {k: _tuple(v) if isinstance(v, list) else v for k, v in spec.items()}
    return replace(base, name=spec.pop("name", path.stem), **spec)
