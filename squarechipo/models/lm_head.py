"""A lean LM head: per-token log-probabilities at completion positions only.

TRL 1.16 patches the model's forward (``add_fused_lm_head``) so that
``model(..., labels=labels, fused_lm_head=True)`` returns per-token log-probs without building the
``(batch, seq, vocab)`` logits. Off Triton devices (CPU, Neuron) its patch projects *every*
position through the LM head — prompt and padding included — and the DPO trainer also asks it for
entropy, top-1 and mean-logit metrics that the loss does not use.

:func:`add_lean_lm_head` installs a forward with the same calling convention and output type that
scores only the positions whose label is not ``-100`` and computes log-probs alone, with TRL's
public kernel :class:`trl.kernels.ChunkedLogProbFunction` on accelerators (no logits materialised; the backward
recomputes tiles) and :mod:`squarechipo.models.logprob_kernel` on a CPU (the same fields and gradients in a few
passes over each tile). Because the convention is the same, TRL's own reference-model code
(``compute_ref_log_probs``, ``precompute_ref_log_probs``) runs on it unchanged.

Models whose logits are rescaled in ways the kernel call below does not cover (MoE router
logits, ``lm_head_multiplier``, ``logits_scaling``, ``output_multiplier``) keep TRL's head.
"""

from __future__ import annotations

import functools
import types

import torch
from torch.distributed.tensor import DTensor
from transformers import PreTrainedModel
from trl.trainer.utils import FusedCausalLMOutput, maybe_gather_lm_head_ctx

from squarechipo.models.logprob_kernel import chunked_logprobs

__all__ = ["add_lean_lm_head", "supports_lean_lm_head"]

#: Vocabulary tile width; the same as TRL's fused head.
VOCAB_CHUNK_SIZE = 32768
_UNSUPPORTED_SCALINGS = ("lm_head_multiplier", "logits_scaling", "output_multiplier")
#: The per-token fields the kernel returns, in its order (``outputs`` picks which are computed; the rest are None).
_KERNEL_FIELDS = ("log_probs", "entropy", "log_sum_sq_probs", "mean_logits", "is_top1")


def supports_lean_lm_head(model: PreTrainedModel) -> bool:
    """True when the lean head computes exactly what the model's own head would."""
    config = model.config.get_text_config()
    if getattr(config, "output_router_logits", False):
        return False
    return all(getattr(config, name, None) is None for name in _UNSUPPORTED_SCALINGS)


def _prompt_layout(input_ids: torch.Tensor, labels: torch.Tensor, attention_mask: torch.Tensor | None):
    """Prompt lengths if the batch is [chosen; rejected] rows sharing each prompt (TRL's preference collator)."""
    rows = input_ids.size(0)
    if rows % 2 or rows == 0:
        return None
    half = rows // 2
    completion = labels != -100
    if not completion.any(dim=1).all():
        return None
    start = completion.int().argmax(dim=1)  # first completion position of each row
    if start.min() < 1 or not torch.equal(start[:half], start[half:]):
        return None
    length = completion.sum(dim=1)
    positions = torch.arange(labels.size(1), device=labels.device)
    if not torch.equal(completion, (positions >= start[:, None]) & (positions < (start + length)[:, None])):
        return None  # completions must be contiguous
    prompt_len = int(start.max())
    prompt_mask = positions[:prompt_len] < start[:half, None]
    if attention_mask is not None and not attention_mask[:half, :prompt_len][prompt_mask].all():
        return None
    if not torch.equal(input_ids[:half, :prompt_len] * prompt_mask, input_ids[half:, :prompt_len] * prompt_mask):
        return None
    return start, length, prompt_mask


def _shared_prompt_hidden(model, input_ids, labels, layout, kwargs):
    """Run each prompt once, then both completions on its KV cache; return hidden states per target token.

    Returns (hidden [N, H], targets [N], rows [N], cols [N]) where (rows, cols) index the shifted
    ``(batch, seq_len - 1)`` output. Exactly the same computation as the plain forward (causal
    attention sees the same keys), minus the second pass over every prompt.
    """
    start, length, prompt_mask = layout
    half = input_ids.size(0) // 2
    prompt_len = prompt_mask.size(1)
    device = input_ids.device
    prompt = model.base_model(
        input_ids=input_ids[:half, :prompt_len], attention_mask=prompt_mask.long(), use_cache=True
    )
    cache = prompt.past_key_values
    last_prompt_hidden = prompt.last_hidden_state[torch.arange(half, device=device), start[:half] - 1]
    # Interleave rows (c0, r0, c1, r1, ...) so the cache can be repeated with batch_repeat_interleave.
    order = torch.stack([torch.arange(half, device=device), torch.arange(half, device=device) + half], 1).flatten()
    cache.batch_repeat_interleave(2)
    width = int(length.max())
    offsets = torch.arange(width, device=device)
    comp_mask = offsets < length[order, None]
    gather_cols = (start[order, None] + offsets).clamp(max=input_ids.size(1) - 1)
    comp_ids = torch.gather(input_ids[order], 1, gather_cols).masked_fill(~comp_mask, 0)
    attention = torch.cat([prompt_mask.repeat_interleave(2, dim=0), comp_mask], dim=1).long()
    completion = model.base_model(
        input_ids=comp_ids,
        attention_mask=attention,
        position_ids=start[order, None] + offsets,
        past_key_values=cache,
        use_cache=False,
        **kwargs,
    )
    first = last_prompt_hidden.repeat_interleave(2, dim=0)[:, None]
    hidden = torch.cat([first, completion.last_hidden_state[:, :-1]], dim=1)  # predicts completion token j
    local_rows, local_cols = comp_mask.nonzero(as_tuple=True)
    rows = order[local_rows]
    cols = start[rows] - 1 + local_cols  # shifted position of completion token j is start + j - 1
    return hidden[local_rows, local_cols], comp_ids[local_rows, local_cols], rows, cols


#: Attention implementations that take a custom 4D mask as it is: a boolean one (SDPA) or an additive one (eager).
_PACKED_MASKS = {"sdpa": "bool", "eager": "additive"}


def _packed_mask_kind(model) -> str | None:
    """How the backbone takes the packed layout's block-causal mask, or None when it cannot: flash or flex
    attention, or a model whose own mask is not plain causal (sliding windows, chunked attention), which a custom
    4D mask would replace."""
    config = model.config.get_text_config()
    if getattr(config, "sliding_window", None) is not None or getattr(config, "attention_chunk_size", None):
        return None
    if any("sliding" in str(kind) or "chunk" in str(kind) for kind in getattr(config, "layer_types", None) or ()):
        return None
    return _PACKED_MASKS.get(getattr(model.config, "_attn_implementation", None))


def _packed_hidden(model, input_ids, layout, mask_kind: str, kwargs):
    """One backbone call over [prompt, chosen, rejected] per pair; return hidden states per target token.

    Row i of the packed batch holds prompt i once, then its chosen completion, then its rejected one, with position
    ids restarting at the prompt's length for the rejected completion, and a block-causal mask: every token sees
    the tokens before it, except that the rejected completion does not see the chosen one. Each completion token
    therefore attends to exactly the keys, at exactly the positions, it has in its own row of the plain forward, and
    the prompt runs once. One batched call with one shape per batch: no KV cache to copy, no second pass, and it
    works under gradient checkpointing. Returns what :func:`_shared_prompt_hidden` returns.
    """
    start, length, _ = layout
    half, seq = input_ids.size(0) // 2, input_ids.size(1)
    device = input_ids.device
    prompt, chosen, rejected = start[:half], length[:half], length[half:]
    rejected_at = prompt + chosen  # first packed position of the rejected completion
    total = rejected_at + rejected
    width = int(total.max())  # the one host sync: the packed batch's width
    j = torch.arange(width, device=device)[None, :]
    in_rejected = j >= rejected_at[:, None]
    source_row = torch.arange(half, device=device)[:, None] + half * in_rejected
    source_col = (j - chosen[:, None] * in_rejected).clamp(max=seq - 1)
    valid = j < total[:, None]
    packed = input_ids[source_row, source_col].masked_fill(~valid, 0)
    positions = torch.where(in_rejected, j - chosen[:, None], j).masked_fill(~valid, 0)
    query, key = j[:, :, None], j[:, None, :]  # (1, W, 1) and (1, 1, W)
    in_chosen = (j >= prompt[:, None]) & ~in_rejected
    allowed = (key <= query) & valid[:, None, :] & ~(in_rejected[:, :, None] & in_chosen[:, None, :])
    if mask_kind == "additive":
        dtype = next(model.parameters()).dtype
        mask = torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill(~allowed, torch.finfo(dtype).min)
    else:
        mask = allowed
    hidden = model.base_model(
        input_ids=packed, attention_mask=mask[:, None], position_ids=positions, use_cache=False, **kwargs
    ).last_hidden_state
    # Completion token k of output row r (chosen rows first, then rejected) is predicted at packed position
    # start − 1 + k (chosen, and the first rejected token) or rejected_at + k − 1 (the other rejected tokens).
    k = torch.arange(seq, device=device)[None, :]
    rows, ks = (k < length[:, None]).nonzero(as_tuple=True)
    pair = rows % half
    is_rejected = rows >= half
    at = torch.where(is_rejected & (ks > 0), rejected_at[pair] + ks - 1, prompt[pair] - 1 + ks)
    targets = input_ids[rows, start[rows] + ks]
    return hidden[pair, at], targets, rows, start[rows] - 1 + ks


def _checkpointing_active(model) -> bool:
    return torch.is_grad_enabled() and bool(getattr(model.base_model, "gradient_checkpointing", False))


def _completion_hidden(model, args, kwargs, labels, shift_labels, share_prompt):
    """(hidden states of the completion positions, their target ids, their rows and columns, the (batch, length - 1)
    shape): the prompt shared across a pair where the layout allows (cache or packed), the plain backbone otherwise."""
    input_ids = kwargs.get("input_ids", args[0] if args else None)
    layout = None
    mask_kind = _packed_mask_kind(model) if share_prompt == "packed" else None
    packing = mask_kind is not None
    if (
        share_prompt
        and shift_labels is None
        and input_ids is not None
        and not args[1:]
        and set(kwargs) <= {"input_ids", "attention_mask", "use_cache"}
        and (packing or not _checkpointing_active(model))
    ):
        layout = _prompt_layout(input_ids, labels, kwargs.get("attention_mask"))
    if layout is not None:
        extra = {k: v for k, v in kwargs.items() if k not in ("input_ids", "attention_mask", "use_cache")}
        if packing:
            hidden, targets, rows, cols = _packed_hidden(model, input_ids, layout, mask_kind, extra)
        else:
            hidden, targets, rows, cols = _shared_prompt_hidden(model, input_ids, labels, layout, extra)
        return hidden, targets, rows, cols, (input_ids.size(0), input_ids.size(1) - 1)
    hidden = model.base_model(*args, **kwargs).last_hidden_state
    if shift_labels is None:
        hidden, shifted = hidden[:, :-1], labels[:, 1:]
    else:
        shifted = shift_labels
    mask = shifted != -100
    rows, cols = mask.nonzero(as_tuple=True)
    return hidden[rows, cols], shifted[rows, cols], rows, cols, tuple(mask.shape)


def _head_outputs(model, hidden, targets, rows, cols, shape, num_items_in_batch, head: dict) -> FusedCausalLMOutput:
    """The chunked LM head on the completion positions, scattered back to (batch, length - 1) fields, as TRL's
    fused head returns them. ``head`` holds temperature, softcap, logit_scale and the output names."""
    lm_head = model.get_output_embeddings()
    weight, bias = lm_head.weight, lm_head.bias
    if isinstance(weight, DTensor):  # FSDP2
        weight = weight.full_tensor()
        bias = bias.full_tensor() if bias is not None else None
    with maybe_gather_lm_head_ctx(weight, bias):
        per_token = chunked_logprobs(
            hidden.to(weight.device),
            weight,
            bias,
            targets.to(weight.device),
            head["temperature"],
            VOCAB_CHUNK_SIZE,
            head["softcap"],
            head["logit_scale"],
            head["outputs"],
        )
    # index_put keeps the graph connected even when a micro-batch has no completion token.
    where = (rows.to(weight.device), cols.to(weight.device))
    fields = {
        name: None if x is None else x.new_zeros(shape).index_put(where, x)
        for name, x in zip(_KERNEL_FIELDS, per_token, strict=True)
    }
    label_mask = torch.zeros(shape, dtype=torch.bool, device=weight.device).index_put(
        where, torch.ones_like(per_token[0], dtype=torch.bool)
    )
    denominator = label_mask.sum().clamp(min=1) if num_items_in_batch is None else num_items_in_batch
    return FusedCausalLMOutput(loss=-fields["log_probs"].sum() / denominator, label_mask=label_mask, **fields)


def add_lean_lm_head(
    model: PreTrainedModel,
    temperature: float = 1.0,
    share_prompt: bool | str = True,
    outputs: tuple[str, ...] = ("log_probs",),
) -> bool:
    """Patch ``model.forward`` so ``fused_lm_head=True`` returns completion-only log-probs.

    ``outputs`` names the per-token fields computed, as in TRL's ``add_fused_lm_head`` (e.g. ``("log_probs",
    "entropy", "is_top1")`` for the SFT trainer's metrics); the others are None.

    With ``share_prompt`` (default) a batch laid out by TRL's preference collator — rows
    [chosen; rejected] with the same prompts — runs each prompt through the backbone once and both
    completions on its KV cache. ``share_prompt="packed"`` instead runs one backbone call over
    [prompt, chosen, rejected] per pair under a block-causal mask (:func:`_packed_hidden`), with SDPA or
    eager attention and a plain causal model (otherwise the cache layout is used). It falls back to the plain forward
    when the layout does not match, with padding-free inputs (``position_ids``) or ``inputs_embeds``, and
    (the cache path only) under gradient checkpointing with gradients on, where a checkpointed recompute
    would grow the cache again.

    Returns False (and leaves the model alone) when :func:`supports_lean_lm_head` is False.
    """
    if not supports_lean_lm_head(model):
        return False
    config = model.config.get_text_config()
    logit_scale = getattr(config, "logit_scale", None)
    head = {
        "temperature": temperature,
        "softcap": getattr(config, "final_logit_softcapping", None),
        "logit_scale": 1.0 if logit_scale is None else float(logit_scale),
        "outputs": outputs,
    }
    original_forward = types.MethodType(type(model).forward, model)

    @functools.wraps(type(model).forward)
    def _lean_forward(
        self, *args, fused_lm_head=False, labels=None, shift_labels=None, num_items_in_batch=None, **kwargs
    ):
        if not fused_lm_head:
            given = {"labels": labels, "shift_labels": shift_labels, "num_items_in_batch": num_items_in_batch}
            return original_forward(*args, **kwargs, **{k: v for k, v in given.items() if v is not None})
        kwargs["use_cache"] = False
        hidden, targets, rows, cols, shape = _completion_hidden(self, args, kwargs, labels, shift_labels, share_prompt)
        return _head_outputs(self, hidden, targets, rows, cols, shape, num_items_in_batch, head)

    model.forward = types.MethodType(_lean_forward, model)
    return True
