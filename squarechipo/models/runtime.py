"""Where a run executes: the accelerator, Accelerate's process state, weight dtypes, and CPU-only defaults.

On a machine with no CUDA/XPU/NPU device (or with ``use_cpu`` set):

- ``use_cpu`` becomes True, so ``TrainingArguments`` asks Accelerate for a CPU state and a
  ``torchrun`` launch becomes a MULTI_CPU (gloo) run instead of two independent processes;
- an *unset* ``bf16`` (TRL defaults it to True, which ``TrainingArguments`` rejects on CPU) becomes
  False, said in one line on a CPU without bf16 kernels. An explicit value is always kept (on such a CPU with a line
  that bf16 is emulated there).

Commands with a weight ``dtype`` option default it to :func:`fast_dtype` through :func:`default_dtype`.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any

import torch

__all__ = [
    "WEIGHT_DTYPES",
    "accelerator_available",
    "adopt_checkpointing_name",
    "apply_cpu_defaults",
    "CHECKPOINT_COMPLETE",
    "check_resume",
    "check_weight_dtype",
    "cpu_runs_bf16_natively",
    "default_dtype",
    "distributed_state",
    "fast_dtype",
    "machine_record",
    "end_run",
    "readable_weights",
    "torch_dtype",
    "warn_emulated_bf16",
]

#: The weight dtypes a ``dtype`` option takes by name, besides ``auto`` (the checkpoint's own).
WEIGHT_DTYPES = ("bfloat16", "float16", "float32")

#: Written into a ``checkpoint-N`` folder once the Trainer has saved all of it (squarechipo.trainer.checkpoints): a
#: folder without it, beside folders with it, was cut off while saving.
CHECKPOINT_COMPLETE = "squarechipo_checkpoint.json"

#: Process groups held until the interpreter exits (see :func:`end_run`).
_KEPT_GROUPS: list = []


logger = logging.getLogger("squarechipo")


def check_weight_dtype(name: str | None) -> None:
    """A ``dtype`` option's value is None, ``auto`` or one of :data:`WEIGHT_DTYPES`, or a one-line error."""
    if name not in (None, "auto", *WEIGHT_DTYPES):
        raise ValueError(f"dtype must be one of {', '.join(WEIGHT_DTYPES)} (got {name!r}).")


def torch_dtype(name: str | None) -> torch.dtype | str | None:
    """``from_pretrained``'s ``dtype`` for an option's value: ``torch.<name>``; None and ``auto`` as they are."""
    check_weight_dtype(name)
    if name == "bfloat16" and not accelerator_available():
        warn_emulated_bf16("dtype bfloat16")
    return name if name in (None, "auto") else getattr(torch, name)


def cpu_runs_bf16_natively() -> bool:
    """Whether oneDNN runs bf16 matrix products on this CPU (AVX512 or AMX). Without it (an AVX2-only CPU) torch
    falls back to a generic kernel: the embedded model's forward pass took 5.6x as long as in float32 on a 2-core AVX2
    EPYC (docs/testing.md)."""
    check = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    return bool(check()) if check is not None else True


def machine_record() -> dict[str, Any]:
    """What a run's speed and its bf16 rounding depend on: the device, the CPU's torch capability (``AVX512``,
    ``AVX2``, ...) and whether oneDNN has bf16 kernels there. A study's cell records carry it: cells trained on other
    CPUs round bf16 differently."""
    return {
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_bf16_kernels": cpu_runs_bf16_natively(),
        "torch": torch.__version__,
    }


def fast_dtype() -> str:
    """The weight dtype this machine runs faster of the two the main job is tuned for: ``bfloat16`` on an accelerator
    with bf16 or a CPU with bf16 kernels, else ``float32`` (bf16 emulated: the main job's SFT step took 200 s on an
    AVX2 CPU, about 4 s with AVX512-BF16)."""
    if torch.cuda.is_available():
        return "bfloat16" if torch.cuda.is_bf16_supported() else "float32"
    if accelerator_available():
        return "bfloat16"
    return "bfloat16" if cpu_runs_bf16_natively() else "float32"


def default_dtype(name: str | None, option: str) -> str:
    """A weight-dtype option's value: ``name`` as given, else this machine's :func:`fast_dtype` (bf16 only where it is
    native), said in one line where that is float32 because this CPU has no bf16 kernels."""
    if name is not None:
        return name
    chosen = fast_dtype()
    if chosen == "float32" and not accelerator_available():
        say_float32_default(option)
    return chosen


@functools.cache
def say_float32_default(option: str) -> bool:
    """Say once per option, in one line, that an unset dtype became float32 because this CPU has no bf16 kernels, and
    how to ask for bf16 anyway. Returns whether it said so (nothing where bf16 is native)."""
    if cpu_runs_bf16_natively():
        return False
    asks = {"bf16": "bf16: true", "dtype": "--dtype bfloat16"}.get(option, option)
    logger.warning(
        "float32: this CPU has no bf16 kernels (%s, bf16 would be emulated, several times slower); %s asks for bf16 "
        "anyway.",
        torch.backends.cpu.get_cpu_capability(),
        asks,
    )
    return True


@functools.cache
def warn_emulated_bf16(setting: str) -> bool:
    """Say once per setting, in one line, that bf16 is emulated on this CPU (the value is kept: it changes the
    figures). Returns whether it warned."""
    if cpu_runs_bf16_natively():
        return False
    logger.warning(
        "%s on a CPU without native bf16 (no AVX512 or AMX): its matrix products are emulated, several times slower "
        "than float32. Kept as set; for speed set it to float32 (bf16: false, --dtype float32), which gives other "
        "figures.",
        setting,
    )
    return True


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


def end_run(trainer) -> None:
    """End a trainer's run: finish its trackers and shut the process group down.

    The default process group is first referenced from Python until the interpreter exits. DDP's C++ Reducer also
    holds the group; when the Reducer drops the last reference (the caller frees the trainer), gloo's destructor
    joins its worker threads with the GIL held while a worker may still be freeing the last collective's tensors,
    which needs the GIL, and the process never exits (PyTorch issue 56297; here a two-rank torchrun run that never
    returned after both ranks had finished). Freed from Python, at exit, the group releases the GIL first.
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        _KEPT_GROUPS.append(dist.group.WORLD)
    if hasattr(trainer, "end"):
        trainer.end()


def apply_cpu_defaults(config) -> None:
    """On CPU-only machines set ``use_cpu`` and turn an unset ``bf16`` off (see the module docstring)."""
    if config.use_cpu or not accelerator_available():
        config.use_cpu = True
        if config.bf16 is None and not config.fp16:
            config.bf16 = False
            say_float32_default("bf16")
        if config.bf16:
            warn_emulated_bf16("bf16: true")


def adopt_checkpointing_name(config) -> None:
    """Carry TRL's ``gradient_checkpointing`` (its configs default it, and it is TRL's option name) over to
    transformers' ``activation_checkpointing``, which replaced it: transformers otherwise warns on every config, so no
    run's errors, on the command line, came in one line."""
    for old, new in (
        ("gradient_checkpointing", "activation_checkpointing"),
        ("gradient_checkpointing_kwargs", "activation_checkpointing_kwargs"),
    ):
        if hasattr(config, new) and getattr(config, new) is None and getattr(config, old, None) is not None:
            setattr(config, new, getattr(config, old))


def check_resume(config) -> None:
    """Make ``resume_from_checkpoint`` mean what a user typed: ``true`` is the last ``checkpoint-N`` in
    ``output_dir`` saved whole (an error names the folder when there is none), ``false`` is no resuming, and a path
    must exist.
    """
    value = config.resume_from_checkpoint
    if value is None or value is False:
        return
    text = str(value).strip()
    if text.lower() in ("false", "no", "0", ""):
        config.resume_from_checkpoint = None
        return
    if value is True or text.lower() in ("true", "yes", "1", "last"):
        last = _last_checkpoint(Path(config.output_dir))
        if last is None:
            raise ValueError(
                f"resume_from_checkpoint={value!r}: {config.output_dir} holds no checkpoint-N folder to resume from. "
                "Train with save_strategy 'steps' or 'epoch' to write checkpoints, or drop resume_from_checkpoint."
            )
        config.resume_from_checkpoint = last
        return
    if not Path(text).is_dir():
        raise ValueError(
            f"resume_from_checkpoint={value!r} is not a folder: give a checkpoint-N folder, or true for the last one "
            f"in output_dir ({config.output_dir})."
        )


def _last_checkpoint(output_dir: Path) -> str | None:
    """The newest ``checkpoint-N`` saved whole: among the folders with :data:`CHECKPOINT_COMPLETE` when any has it
    (a later one without it was cut off mid-save), else the Trainer's own choice (checkpoints of other trainers)."""
    from transformers.trainer_utils import get_last_checkpoint

    if not output_dir.is_dir():
        return None
    marked = [
        f for f in output_dir.glob("checkpoint-*") if f.name[11:].isdigit() and (f / CHECKPOINT_COMPLETE).is_file()
    ]
    if marked:
        return str(max(marked, key=lambda f: int(f.name[11:])))
    return get_last_checkpoint(str(output_dir))


def readable_weights(folder: str | Path) -> None:
    """The weight files of a saved model with the modes the process's umask gives its other files: safetensors
    writes them through a private temporary file (mode 0600), so a model saved for a team was readable by its owner
    alone while its config and card were not."""
    mask = _umask()
    for path in Path(folder).glob("*.safetensors"):
        if path.is_file() and not path.is_symlink() and path.stat().st_mode & 0o777 == 0o600:
            path.chmod(0o666 & ~mask)


def _umask() -> int:
    """The process's umask, read where Linux shows it (setting it to read it back races other threads)."""
    import os

    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0)
    os.umask(mask)
    return mask
