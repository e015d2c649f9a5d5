"""Mixed-precision defaults that work on a CPU-only machine.

TRL's configs default ``bf16`` to True, which ``TrainingArguments`` rejects on a machine without an
accelerator unless ``use_cpu`` is set. Here an *unset* ``bf16`` becomes False when no CUDA/XPU/NPU
device is visible (or ``use_cpu`` is set); an explicit value is always kept.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from trl import SFTConfig

__all__ = ["accelerator_available", "cpu_aware_bf16", "SFTRecipeConfig"]


def accelerator_available() -> bool:
    if torch.cuda.is_available():
        return True
    for name in ("xpu", "npu"):
        backend = getattr(torch, name, None)
        if backend is not None and getattr(backend, "is_available", lambda: False)():
            return True
    return False


def cpu_aware_bf16(config) -> None:
    """Set ``config.bf16 = False`` when it is unset and training will run on the CPU."""
    if config.bf16 is None and not config.fp16 and (config.use_cpu or not accelerator_available()):
        config.bf16 = False


@dataclass
class SFTRecipeConfig(SFTConfig):
    """TRL's ``SFTConfig`` with the CPU-aware bf16 default (used by ``recipes/sft.py``)."""

    def __post_init__(self) -> None:
        cpu_aware_bf16(self)
        super().__post_init__()
