"""Per-token log-probabilities of ``hidden @ weight.T`` on a CPU, in as few passes over the logits as the math needs.

TRL's :class:`trl.kernels.ChunkedLogProbFunction` folds each ``[tokens, vocab]`` tile of logits into online-logsumexp
statistics. On devices without Triton its torch fallback makes about a dozen passes over every tile (float copies,
two scalings, a zero-filled gradient, a boolean target mask, the entropy's products) and recomputes the tile's
projection in the backward: on a 2-core CPU those passes cost more than the projection itself, a third of an
alignment step of SmolLM2-135M (docs/benchmarks.md). :class:`CpuLogProbFunction` computes the same fields with the
same gradients:

- forward: ``z = s · h Wᵀ`` (one GEMM per token chunk; ``s`` = logit scale / temperature), its row maximum ``m``,
  ``e = exp(z − m)`` and the sums each requested field needs: log p(target) = z_t − m − log Σe, the entropy
  log Σe − Σ e·(z − m) / Σe, log Σp² = log Σe² − 2 log Σe, the mean logit, and top-1 (the target is the first argmax);
- the probabilities ``p = e / Σe`` are kept for the backward while they fit :data:`KEEP_BYTES`, else recomputed;
- backward: ``∂L/∂z = s · (g_lp · (onehot − p) − g_H · p · (log p + H))``, built in place in the kept tile, then
  ``∂h = ∂z W`` and ``∂W = ∂zᵀ h``, accumulated in float32 from tiles in the compute dtype, as TRL's backward does.

Logits with a softcap (Gemma 2) keep TRL's kernel (:func:`chunked_logprobs` chooses).
"""

from __future__ import annotations

import torch
from trl.kernels import ChunkedLogProbFunction

__all__ = ["KEEP_BYTES", "OPTIONAL_OUTPUTS", "CpuLogProbFunction", "chunked_logprobs"]

#: The per-token fields besides the log-probs, in TRL's order (each computed only when asked for).
OPTIONAL_OUTPUTS = ("entropy", "log_sum_sq_probs", "mean_logits", "is_top1")
#: Tokens per projection tile: 2,048 × 49,152 float32 logits are 400 MB.
TOKEN_CHUNK = 2048
#: The largest float32 probability tiles kept between the forward and the backward (beyond it they are recomputed).
KEEP_BYTES = 2 * 2**30


def chunked_logprobs(hidden, weight, bias, targets, temperature, chunk_size, softcap, logit_scale, outputs):
    """TRL's kernel's call and return value: this module's on a CPU without a softcap, TRL's elsewhere."""
    if hidden.device.type == "cpu" and softcap is None:
        return CpuLogProbFunction.apply(hidden, weight, bias, targets, logit_scale / temperature, tuple(outputs))
    return ChunkedLogProbFunction.apply(
        hidden, weight, bias, targets, temperature, chunk_size, softcap, logit_scale, tuple(outputs)
    )


def _compute_dtype(hidden: torch.Tensor) -> torch.dtype:
    return torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else hidden.dtype


def _logits(hidden, weight, bias, scale: float, dtype: torch.dtype) -> torch.Tensor:
    """``scale · (h Wᵀ + b)`` in float32, projected in ``dtype`` (the autocast dtype, as TRL projects)."""
    z = torch.mm(hidden.to(dtype), weight.to(dtype).t())
    if bias is not None:
        z.add_(bias.to(dtype))
    z = z.float()
    return z.mul_(scale) if scale != 1.0 else z


def _fields(z: torch.Tensor, targets: torch.Tensor, outputs: tuple[str, ...]) -> tuple[dict, torch.Tensor]:
    """The per-token fields of one tile of logits ``z`` (overwritten: it becomes the probabilities, returned)."""
    target_z = z.gather(1, targets[:, None]).squeeze(1)
    fields = {}
    if "mean_logits" in outputs:
        fields["mean_logits"] = z.mean(1)
    if "is_top1" in outputs:
        fields["is_top1"] = z.argmax(1) == targets  # the first maximum, as TRL counts a tie with an earlier token
    m = z.amax(1)
    d = z.sub_(m[:, None])  # z − m, in place
    e = torch.exp(d) if "entropy" in outputs else d.exp_()  # the entropy reads z − m beside exp(z − m)
    total = e.sum(1)
    log_total = total.log()
    fields["log_probs"] = target_z - m - log_total
    if "entropy" in outputs:
        fields["entropy"] = log_total - torch.linalg.vecdot(e, d) / total
    if "log_sum_sq_probs" in outputs:
        fields["log_sum_sq_probs"] = torch.linalg.vecdot(e, e).log() - 2 * log_total
    return fields, e.div_(total[:, None])


def _grad_logits(probs, targets, grad_logprobs, grad_entropy, entropy, log_p):
    """∂L/∂z of one tile before the scale, built in place in ``probs``: g_lp · (onehot − p) − g_H · p · (log p + H).
    ``log_p`` is needed only with an entropy gradient."""
    entropy_term = None
    if grad_entropy is not None:
        entropy_term = probs * (log_p + entropy[:, None]) * grad_entropy[:, None].float()
    if grad_logprobs is None:
        grad = probs.zero_()
    else:
        g = grad_logprobs.float()
        grad = probs.mul_(-g[:, None])
        grad[torch.arange(grad.shape[0]), targets] += g
    return grad if entropy_term is None else grad.sub_(entropy_term)


class CpuLogProbFunction(torch.autograd.Function):
    """``(log_probs, entropy, log_sum_sq_probs, mean_logits, is_top1)`` per token of ``scale · (hidden @ weight.T +
    bias)``, as :class:`trl.kernels.ChunkedLogProbFunction` returns them (None where a field was not asked for);
    see the module docstring."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, scale: float, outputs: tuple[str, ...]):
        ctx.set_materialize_grads(False)  # entropy is usually a metric: no gradient, no work for it
        dtype = _compute_dtype(hidden)
        n = hidden.shape[0]
        keep = n * weight.shape[0] * 4 <= KEEP_BYTES
        names = ("log_probs", *(name for name in OPTIONAL_OUTPUTS if name in outputs))
        parts: dict[str, list[torch.Tensor]] = {name: [] for name in names}
        kept = []
        for start in range(0, n, TOKEN_CHUNK):
            z = _logits(hidden[start : start + TOKEN_CHUNK], weight, bias, scale, dtype)
            fields, probs = _fields(z, targets[start : start + TOKEN_CHUNK], outputs)
            for name in names:
                parts[name].append(fields[name])
            if keep:
                kept.append(probs)
        empty = {"is_top1": torch.bool}
        out = {
            name: torch.cat(parts[name]) if n else torch.zeros(0, dtype=empty.get(name, torch.float32))
            for name in names
        }
        ctx.save_for_backward(hidden, weight, bias, targets, out.get("entropy"))
        ctx.kept, ctx.scale, ctx.dtype = (kept if keep else None), scale, dtype
        frozen = ("log_sum_sq_probs", "mean_logits", "is_top1")
        ctx.mark_non_differentiable(*(out[name] for name in frozen if name in out))
        return tuple(out.get(name) for name in ("log_probs", *OPTIONAL_OUTPUTS))

    @staticmethod
    def backward(ctx, grad_logprobs, grad_entropy, *_):
        hidden, weight, bias, targets, entropy = ctx.saved_tensors
        needs_hidden, needs_weight, needs_bias = ctx.needs_input_grad[:3]
        grad_hidden = torch.zeros(hidden.shape, dtype=torch.float32) if needs_hidden else None
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32) if needs_weight else None
        grad_bias = torch.zeros(bias.shape, dtype=torch.float32) if needs_bias else None
        weight_f = weight.to(ctx.dtype).float()
        for index, start in enumerate(range(0, hidden.shape[0], TOKEN_CHUNK)):
            rows = slice(start, start + TOKEN_CHUNK)
            log_p = None
            if ctx.kept is not None and grad_entropy is None:
                probs = ctx.kept[index]
            else:  # beyond the memory budget, or an entropy gradient (which needs log p itself, not log of p)
                z = _logits(hidden[rows], weight, bias, ctx.scale, ctx.dtype)
                log_p = z.sub_(torch.logsumexp(z, 1, keepdim=True))
                probs = torch.exp(log_p)
            grad = _grad_logits(probs, targets[rows], grad_logprobs[rows] if grad_logprobs is not None else None,
                                grad_entropy[rows] if grad_entropy is not None else None,
                                entropy[rows] if entropy is not None else None, log_p)  # fmt: skip
            # Rounded to the compute dtype, as TRL's tile holds it, then accumulated in float32.
            tile = grad.mul_(ctx.scale).to(ctx.dtype).float()
            if grad_hidden is not None:
                grad_hidden[rows].addmm_(tile, weight_f)
            if grad_weight is not None:
                grad_weight.addmm_(tile.t(), hidden[rows].to(ctx.dtype).float())
            if grad_bias is not None:
                grad_bias += tile.sum(0)
        ctx.kept = None  # a second backward (retain_graph) recomputes: these tiles now hold gradients
        return (
            grad_hidden.to(hidden.dtype) if grad_hidden is not None else None,
            grad_weight.to(weight.dtype) if grad_weight is not None else None,
            grad_bias.to(bias.dtype) if grad_bias is not None else None,
            None,
            None,
            None,
        )
