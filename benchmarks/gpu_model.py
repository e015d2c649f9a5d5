"""Build the GPU check's model from a config with random weights (no weights travel to an offline GPU machine).

    python benchmarks/gpu_model.py CONFIG_DIR OUT [--shape tiny]

``CONFIG_DIR`` holds SmolLM2-135M-Instruct's config and tokenizer (``benchmarks/gpu_bundle.sh`` copies them). The model
is SmolLM2-135M's shape, or with ``--shape tiny`` the tests' 2-layer, 64-wide model over the same tokenizer (the dry
run). Every figure made with it is speed, memory or "it runs", never quality.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import sys
from pathlib import Path


def _shapes() -> dict:
    """bench_trainer.py's model shapes (the tests' tiny one among them), loaded from its file beside this one."""
    spec = importlib.util.spec_from_file_location("bench_trainer", Path(__file__).with_name("bench_trainer.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.SHAPES


#: The tokenizer's and generation's files copied beside the weights (everything of the folder but weights).
_KEEP = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
         "generation_config.json")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config_dir")
    parser.add_argument("out")
    parser.add_argument("--shape", choices=["135m", "tiny"], default="135m")
    args = parser.parse_args(argv)
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    source, out = Path(args.config_dir), Path(args.out)
    config = AutoConfig.from_pretrained(source)
    if args.shape == "tiny":
        for key, value in _shapes()["tiny"].items():
            setattr(config, key, value)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    model.save_pretrained(out)
    for name in _KEEP:
        if (source / name).is_file():
            shutil.copy(source / name, out / name)
    print(f"built {args.shape} ({sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters) at {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
