"""Batched, seeded response generation with the model's chat template."""

from __future__ import annotations

import torch
import transformers
from tqdm.auto import tqdm
from transformers import AutoModelForCausalLM, AutoTokenizer

from squarechipo.models import resolve_model_path

__all__ = ["generate_responses", "prompt_text"]


def prompt_text(prompt) -> str:
    """The user-visible text of a standard (string) or conversational (messages) prompt."""
    if isinstance(prompt, str):
        return prompt
    return "\n".join(message["content"] for message in prompt if message.get("role") != "system")


def generate_responses(
    model_name_or_path: str,
    prompts: list,
    *,
    max_new_tokens: int = 128,
    batch_size: int = 8,
    do_sample: bool = False,
    temperature: float = 0.7,
    top_p: float = 0.95,
    seed: int = 0,
    device: str | None = None,
    desc: str = "generating",
) -> list[str]:
    """One response per prompt (string or list of messages), chat template applied, left-padded batches.

    Sampling is seeded per batch with ``transformers.set_seed(seed + batch_index)`` —
    ``generate`` takes no generator object — so a run is reproducible for a given seed.
    """
    path = resolve_model_path(model_name_or_path)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(path).to(device).eval()
    conversations = [[{"role": "user", "content": p}] if isinstance(p, str) else list(p) for p in prompts]
    texts = [tokenizer.apply_chat_template(c, add_generation_prompt=True, tokenize=False) for c in conversations]
    outputs: list[str] = []
    batches = range(0, len(texts), batch_size)
    for index, start in enumerate(tqdm(batches, desc=desc, unit="batch")):
        batch = tokenizer(texts[start : start + batch_size], return_tensors="pt", padding=True, add_special_tokens=False).to(device)
        transformers.set_seed(seed + index)
        with torch.no_grad():
            generated = model.generate(
                **batch,
                max_new_tokens=max_new_tokens,
                do_sample=do_sample,
                temperature=temperature if do_sample else None,
                top_p=top_p if do_sample else None,
                pad_token_id=tokenizer.pad_token_id,
            )
        new_tokens = generated[:, batch["input_ids"].shape[1] :]
        outputs.extend(t.strip() for t in tokenizer.batch_decode(new_tokens, skip_special_tokens=True))
    return outputs
