"""Byte-compile what the main job imports, and nothing else: every squarechipo module and the modules its commands
load on first use. Run by ``scripts/install.sh`` for the main job (``SQUARECHIPO_COMPILE=imports``) with bytecode
writing on, so each import here leaves its ``.pyc``; a whole-venv compile took about 29 s of a fresh install here,
this about 15 s. A module left out is compiled in memory when a job imports it, as without this script."""

from __future__ import annotations

import importlib
import pkgutil
import sys

#: Loaded inside functions on first use by the main job's commands (found by running them with bytecode writing on).
ON_FIRST_USE = (
    "transformers.models.llama.modeling_llama",
    "trl.trainer.dpo_trainer",
    "trl.trainer.sft_trainer",
    "accelerate.commands.launch",
    "datasets.io.json",
    "matplotlib.pyplot",
    "matplotlib.backends.backend_agg",
    "spellchecker",
)


def main() -> int:
    import squarechipo

    names = [m.name for m in pkgutil.walk_packages(squarechipo.__path__, "squarechipo.")]
    skipped = []
    for name in [*names, *ON_FIRST_USE]:
        try:
            importlib.import_module(name)
        except ImportError:  # an optional extra that is not installed: nothing of it to compile
            skipped.append(name)
    print(f"[install] compiled the imports of {len(sys.modules)} modules ({len(skipped)} not installed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
