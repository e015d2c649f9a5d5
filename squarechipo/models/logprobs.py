"""Log-probabilities of a causal LM on preference pairs: the one tokenizer and scorer of prompt + response.

Used wherever a model is scored on (prompt, chosen, rejected) rows outside TRL's training loop: the central
selector (Zhou et al. 2025 (Square-χPO), Alg. 2), the LP-2ST prior (Ghazi et al. 2021 (label DP)), self-play's π_ref
and π_t (Zhou et al. 2025 (Square-χPO), Alg. 3) and the tests that check the trainer against it. Scoring is
gradient-free and batched, with the lean LM head (completion positions only, each prompt once) where the model supports
it.

Tokenization follows TRL's DPOTrainer (prompt, prompt + completion, completion starting where the two
diverge; EOS appended to standard-format completions) but is done here because TRL's version logs a
decoded fragment of the prompt when the two tokenizations disagree, and the prompts may be private.
Rows are never dropped and nothing here logs a score.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from accelerate import PartialState
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase
from trl.data_utils import extract_prompt, is_conversational
from trl.trainer.dpo_trainer import DataCollatorForPreference

from squarechipo.models.lm_head import add_lean_lm_head
from squarechipo.privacy.door import CheckedRows, reads_checked_rows

__all__ = ["completion_logps", "model_logps", "preference_collator", "tokenize_preferences"]


def preference_collator(
    tokenizer: PreTrainedTokenizerBase, *, max_length: int | None = None, truncation_mode: str = "keep_start"
) -> DataCollatorForPreference:
    """TRL's preference collator with the tokenizer's pad token (EOS where it has none)."""
    pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return DataCollatorForPreference(pad_token_id=pad_token_id, max_length=max_length, truncation_mode=truncation_mode)


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _tokenize_row(example: dict, tokenizer: PreTrainedTokenizerBase) -> dict:
    def encode(text):
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    if is_conversational(example):

        def render(messages, gen):
            return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen)

        prompt = encode(render(example["prompt"], True))
        chosen = encode(render(example["prompt"] + example["chosen"], False))
        rejected = encode(render(example["prompt"] + example["rejected"], False))
    else:
        eos = tokenizer.eos_token or ""

        def with_eos(text):
            return text if text.endswith(eos) else text + eos

        prompt = tokenizer(example["prompt"])["input_ids"]
        chosen = tokenizer(example["prompt"] + with_eos(example["chosen"]))["input_ids"]
        rejected = tokenizer(example["prompt"] + with_eos(example["rejected"]))["input_ids"]
    start = min(_common_prefix(prompt, chosen), _common_prefix(prompt, rejected))
    return {"prompt_ids": prompt[:start], "chosen_ids": chosen[start:], "rejected_ids": rejected[start:]}


@reads_checked_rows("rows")
def tokenize_preferences(rows: CheckedRows, tokenizer: PreTrainedTokenizerBase) -> CheckedRows:
    """prompt_ids / chosen_ids / rejected_ids per row, in memory (no cache file of the private rows); checked rows
    stay checked."""

    def tokenize(example: dict) -> dict:
        return _tokenize_row(example if "prompt" in example else extract_prompt(example), tokenizer)

    return rows.map(tokenize)


def _batches(rows: list[dict], collator: DataCollatorForPreference, batch_size: int) -> Iterator[dict]:
    for start in range(0, len(rows), batch_size):
        yield collator(rows[start : start + batch_size])


@torch.no_grad()
def completion_logps(model: PreTrainedModel, batch: dict, lean: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed completion log-probabilities (float64) of the [chosen; rejected] rows of a collated batch."""
    device = next(model.parameters()).device
    input_ids = batch["input_ids"].to(device)
    attention_mask = batch["attention_mask"].to(device)
    completion_mask = batch["completion_mask"].to(device)
    labels = input_ids.masked_fill(completion_mask == 0, -100)
    if lean:
        per_token = model(
            input_ids=input_ids, attention_mask=attention_mask, labels=labels, fused_lm_head=True
        ).log_probs
    else:  # models the lean head does not cover: full logits
        logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits[:, :-1]
        targets = labels[:, 1:]
        per_token = (
            torch.log_softmax(logits.float(), dim=-1).gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
        )
        per_token = per_token * (targets != -100)
    logps = per_token.to(torch.float64).sum(dim=1)
    return logps.chunk(2, dim=0)


@reads_checked_rows("rows")
def model_logps(model: PreTrainedModel, rows: CheckedRows, collator, batch_size: int, desc: str) -> torch.Tensor:
    """(2, n) float64 summed completion log-probs [chosen; rejected] of tokenized rows, gradient-free."""
    model.eval()
    lean = add_lean_lm_head(model, share_prompt="packed")  # 10-15% faster than the KV-cache layout here
    # Batches of rows of similar length pad least; a row's log-probs do not depend on its batch, and they come back
    # in the rows' order.
    order = sorted(range(len(rows)), key=lambda i: _row_length(rows[i]))
    chosen, rejected = [], []
    total = (len(rows) + batch_size - 1) // batch_size
    for batch in tqdm(
        _batches([rows[i] for i in order], collator, batch_size), total=total, desc=desc,
        disable=not PartialState().is_local_main_process,
    ):  # fmt: skip
        c, r = completion_logps(model, batch, lean)
        chosen.append(c.cpu())
        rejected.append(r.cpu())
    if not chosen:
        return torch.zeros(2, 0, dtype=torch.float64)
    out = torch.empty(2, len(rows), dtype=torch.float64)
    out[:, order] = torch.stack([torch.cat(chosen), torch.cat(rejected)])
    return out


def _row_length(row: dict) -> int:
    """A tokenized pair's packed length: its prompt once and both completions."""
    return len(row["prompt_ids"]) + len(row["chosen_ids"]) + len(row["rejected_ids"])
