"""``squarechipo env``: what this installation is, for a bug report (as ``trl env`` does), and where its privacy state
lives: the registry of releases, the store of model records and the signing key (never the key itself).

    squarechipo env
    squarechipo env --fast-dtype     # bfloat16 or float32: the faster weight dtype on this machine
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform

__all__ = ["environment", "main"]

_PACKAGES = (
    "squarechipo",
    "torch",
    "transformers",
    "trl",
    "accelerate",
    "datasets",
    "peft",
    "cryptography",
    "psycopg",
)


def environment() -> dict[str, str]:
    """Versions, the machine, and where this process's privacy state lives (URLs without their password)."""
    from squarechipo.data.database import redact
    from squarechipo.models.memory import ENV
    from squarechipo.models.runtime import accelerator_available, cpu_runs_bf16_natively, fast_dtype
    from squarechipo.privacy.provenance.sketch import record_store_path
    from squarechipo.privacy.release.registry import registry_target
    from squarechipo.trust.keys import signing_key, trust_is_explicit

    found = {"Platform": platform.platform(), "Python": platform.python_version()}
    for package in _PACKAGES:
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = "not installed"
    found["torch build"] = _torch_build()
    found["Accelerator"] = "yes" if accelerator_available() else "none (CPU)"
    native = "yes" if cpu_runs_bf16_natively() else "no (emulated: several times slower than float32)"
    found["CPU bf16 kernels"] = native
    found["Faster weight dtype"] = fast_dtype()
    found["Memory allocator"] = os.environ.get(ENV, "keep") + f" ({ENV}; keep: glibc keeps the memory a job frees)"
    found["Registry of releases"] = redact(registry_target())
    found["Store of model records"] = redact(record_store_path())
    key = signing_key(create=False)
    found["Signing key"] = f"{key.path} (id {key.key_id})" if key is not None else "none yet"
    found["Trusted keys"] = "SQUARECHIPO_TRUSTED_KEYS" if trust_is_explicit() else "this machine's own key"
    return found


def _torch_build() -> str:
    """Which build of torch this is: CPU, or CUDA/ROCm with its version (the version string alone hides it)."""
    import torch

    if torch.version.cuda:
        return f"CUDA {torch.version.cuda}"
    if getattr(torch.version, "hip", None):
        return f"ROCm {torch.version.hip}"
    return "CPU"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="squarechipo env", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--fast-dtype",
        action="store_true",
        help="print only the faster weight dtype here (bfloat16 or float32), for scripts: the main job uses it",
    )
    if parser.parse_args(argv).fast_dtype:
        from squarechipo.models.runtime import fast_dtype

        print(fast_dtype())
        return 0
    print("\n".join(f"- {name}: {value}" for name, value in environment().items()))
    return 0
