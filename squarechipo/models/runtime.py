"""Where a run executes: the accelerator, Accelerate's process state, and defaults for CPU-only machines.

On a machine with no CUDA/XPU/NPU device (or with ``use_cpu`` set):

- ``use_cpu`` becomes True, so ``TrainingArguments`` asks Accelerate for a CPU state and a
  ``torchrun`` launch becomes a MULTI_CPU (gloo) run instead of two independent processes;
- an *unset* ``bf16`` (TRL defaults it to True, which ``TrainingArguments`` rejects on CPU) becomes
  False. An explicit value is always kept.
"""

from __future__ import annotations

import torch

__all__ = ["accelerator_available", "apply_cpu_defaults", "distributed_state"]


def accelerator_available() -> bool:
    if torch.cuda.is_available():
        return True
    for name in ("xpu", "npu"):
        backend = getattr(torch, name, None)
        if backend is not None and getattr(backend, "is_available", lambda: False)():
            return True
    return False


def distributed_state():
    """Accelerate's process state; on CPU-only machines a CPU one, so torchrun gives a real gloo world.

    ``PartialState`` is shared: when a trainer or script created it first, that state is returned.
    """
    from accelerate import PartialState

    return PartialState(cpu=not accelerator_available())


def apply_cpu_defaults(config) -> None:
    """On CPU-only machines set ``use_cpu`` and turn an unset ``bf16`` off (see the module docstring)."""
    if config.use_cpu or not accelerator_available():
        config.use_cpu = True
        if config.bf16 is None and not config.fp16:
            config.bf16 = False
