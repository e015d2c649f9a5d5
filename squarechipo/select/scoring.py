"""Score candidate policies on private preference rows: L(π) = Σ_i (2σ(m_i) − 1 − 1)² (003 Algorithm 2).

The reference log-probabilities are computed once; each candidate then runs one batched,
gradient-free forward per batch with the lean LM head (completion positions only, each prompt once).
Across processes every rank scores a contiguous shard of the rows and the per-candidate sums are
all-reduced, so the main process holds L for every candidate; nothing here logs or prints a score.

Tokenization follows TRL's DPOTrainer (prompt, prompt + completion, completion starting where the two
diverge; EOS appended to standard-format completions) but is done here because TRL's version logs a
decoded fragment of the prompt when the two tokenizations disagree, and in the central model the
prompt is private. Rows are never dropped: a row whose completions are truncated away has h = 0 and
adds the same loss 1 to every candidate, so the selection cannot depend on it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import datasets
import torch
from accelerate import PartialState
from accelerate.utils import reduce
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase
from trl.data_utils import extract_prompt, is_conversational
from trl.trainer.dpo_trainer import DataCollatorForPreference

from squarechipo.losses import margins as policy_margins
from squarechipo.select.exponential import row_square_losses
from squarechipo.trainer.lm_head import add_lean_lm_head

__all__ = ["tokenize_preferences", "completion_logps", "model_logps", "score_candidates"]


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


def tokenize_preferences(dataset: datasets.Dataset, tokenizer: PreTrainedTokenizerBase) -> list[dict]:
    """prompt_ids / chosen_ids / rejected_ids per row, in memory (no cache file of the private rows)."""
    rows = []
    for example in dataset:
        if "prompt" not in example:
            example = extract_prompt(example)
        rows.append(_tokenize_row(example, tokenizer))
    return rows


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


def model_logps(model: PreTrainedModel, rows: list[dict], collator, batch_size: int, desc: str) -> torch.Tensor:
    """(2, n) float64 summed completion log-probs [chosen; rejected] of tokenized rows, gradient-free."""
    model.eval()
    lean = add_lean_lm_head(model, share_prompt=True)
    chosen, rejected = [], []
    total = (len(rows) + batch_size - 1) // batch_size
    for batch in tqdm(
        _batches(rows, collator, batch_size), total=total, desc=desc, disable=not PartialState().is_local_main_process
    ):
        c, r = completion_logps(model, batch, lean)
        chosen.append(c.cpu())
        rejected.append(r.cpu())
    if not chosen:
        return torch.zeros(2, 0, dtype=torch.float64)
    return torch.stack([torch.cat(chosen), torch.cat(rejected)])


def score_candidates(
    rows: list[dict],
    load_reference: Callable[[], PreTrainedModel],
    load_candidates: Sequence[Callable[[], PreTrainedModel]],
    *,
    pad_token_id: int,
    beta: float,
    link: str,
    clip: float | None,
    max_length: int | None,
    truncation_mode: str = "keep_start",
    batch_size: int = 8,
    all_reduce: bool = True,
) -> torch.Tensor:
    """L(π_k) for every candidate, float64, summed over this process's ``rows`` and all-reduced.

    Private: the result must only be passed to :func:`squarechipo.select.exponential.select_index`.
    Models are loaded one at a time through the given callables and freed after use. With
    ``all_reduce=False`` the sums cover this process's rows only.
    """
    collator = DataCollatorForPreference(
        pad_token_id=pad_token_id, max_length=max_length, truncation_mode=truncation_mode
    )
    reference = load_reference()
    ref_logps = model_logps(reference, rows, collator, batch_size, "reference log-probs")
    del reference
    state = PartialState()
    totals = torch.zeros(len(load_candidates), dtype=torch.float64)
    for k, load in enumerate(load_candidates):
        candidate = load()
        logps = model_logps(candidate, rows, collator, batch_size, f"scoring candidate {k + 1}/{len(load_candidates)}")
        del candidate
        m = policy_margins(logps[0], logps[1], ref_logps[0], ref_logps[1], beta=beta, link=link, clip=clip)
        totals[k] = row_square_losses(m).sum()
    if all_reduce and state.num_processes > 1:
        backend_device = state.device if state.backend == "nccl" else torch.device("cpu")
        totals = reduce(totals.to(backend_device), reduction="sum").cpu()
    return totals
