"""The CPU log-prob kernel of the lean head (squarechipo.models.logprob_kernel) against the full logits in float64:
every field TRL's kernel returns, and the gradients, as exact as TRL's own kernel is."""

from __future__ import annotations

import pytest
import torch
from trl.kernels import ChunkedLogProbFunction

from squarechipo.models import logprob_kernel
from squarechipo.models.logprob_kernel import OPTIONAL_OUTPUTS, CpuLogProbFunction, chunked_logprobs

FIELDS = ("log_probs", *OPTIONAL_OUTPUTS)


def _exact(hidden, weight, bias, targets, scale):
    """Every field from the full (tokens, vocabulary) logits in float64, with autograd for the gradients."""
    z = (hidden @ weight.T + (0 if bias is None else bias)) * scale
    log_p = torch.log_softmax(z, dim=-1)
    p = log_p.exp()
    return {
        "log_probs": log_p.gather(1, targets[:, None]).squeeze(1),
        "entropy": -(p * log_p).sum(-1),
        "log_sum_sq_probs": torch.log((p * p).sum(-1)),
        "mean_logits": z.mean(-1),
        "is_top1": z.argmax(-1) == targets,
    }


def _run(kernel, inputs, scale, outputs, entropy_weight):
    """The kernel's fields and the gradients of Σ w·log p (+ ``entropy_weight``·Σ entropy) by every input."""
    hidden, weight, bias, targets = (x.detach().clone().requires_grad_(x.is_floating_point()) if x is not None else x
                                     for x in inputs)  # fmt: skip
    if kernel == "exact":
        fields = _exact(hidden, weight, bias, targets, scale)
    elif kernel == "trl":
        out = ChunkedLogProbFunction.apply(hidden, weight, bias, targets, 1 / scale, 64, None, 1.0, outputs)
        fields = dict(zip(FIELDS, out))
    else:
        fields = dict(zip(FIELDS, CpuLogProbFunction.apply(hidden, weight, bias, targets, scale, outputs)))
    weights = torch.linspace(0.5, 1.5, len(targets), dtype=hidden.dtype)
    loss = (fields["log_probs"] * weights).sum()
    if entropy_weight:
        loss = loss + entropy_weight * fields["entropy"].sum()
    loss.backward()
    grads = [x.grad for x in (hidden, weight, bias) if x is not None]
    return {k: v.detach() for k, v in fields.items() if v is not None and (k == "log_probs" or k in outputs)}, grads


def _inputs(tokens: int, width: int, vocab: int, bias: bool, seed: int):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(tokens, width, dtype=torch.float64, generator=g)
    weight = torch.randn(vocab, width, dtype=torch.float64, generator=g)
    bias_ = torch.randn(vocab, dtype=torch.float64, generator=g) if bias else None
    targets = torch.randint(0, vocab, (tokens,), generator=g)
    return hidden, weight, bias_, targets


def _error(got: dict, grads: list, want: dict, want_grads: list) -> float:
    worst = 0.0
    for name, value in got.items():
        if name == "is_top1":
            assert torch.equal(value, want[name]), name
            continue
        worst = max(worst, float((value.double() - want[name]).abs().max()))
    for a, b in zip(grads, want_grads, strict=True):
        worst = max(worst, float((a - b).abs().max()))
    return worst


@pytest.mark.parametrize("outputs", [(), ("entropy", "is_top1"), OPTIONAL_OUTPUTS])
@pytest.mark.parametrize("scale, bias, entropy_weight", [(1.0, False, 0.0), (1 / 0.7, True, 0.0), (2.0, False, 0.3)])
def test_every_field_and_gradient_equals_the_full_logits_as_closely_as_trls_kernel(outputs, scale, bias,
                                                                                   entropy_weight):  # fmt: skip
    """Against float64 full logits: log-probs, entropy, log Σp², mean logit, top-1 and the gradients of hidden,
    weight and bias (an entropy term in the loss too), within float32's rounding, and no further from the exact
    figures than TRL's kernel is."""
    if entropy_weight and "entropy" not in outputs:
        outputs = ("entropy", *outputs)
    inputs = _inputs(37, 16, 301, bias, seed=len(outputs))
    want, want_grads = _run("exact", inputs, scale, outputs, entropy_weight)
    ours = _error(*_run("cpu", inputs, scale, outputs, entropy_weight), want, want_grads)
    trls = _error(*_run("trl", inputs, scale, outputs, entropy_weight), want, want_grads)
    assert ours < 1e-4
    assert ours <= 2 * trls + 1e-6, (ours, trls)


def test_top1_counts_a_tie_with_an_earlier_token_as_not_top1_as_trl_does():
    hidden = torch.ones(3, 1, dtype=torch.float64)
    weight = torch.tensor([[0.0], [2.0], [2.0], [1.0]], dtype=torch.float64)  # tokens 1 and 2 tie at the top
    targets = torch.tensor([1, 2, 3])
    ours = CpuLogProbFunction.apply(hidden, weight, None, targets, 1.0, ("is_top1",))[4]
    trls = ChunkedLogProbFunction.apply(hidden, weight, None, targets, 1.0, 64, None, 1.0, ("is_top1",))[4]
    assert ours.tolist() == trls.tolist() == [True, False, False]


def test_chunks_and_a_memory_budget_too_small_to_keep_the_probabilities_give_the_same_figures(monkeypatch):
    """Token chunks (the last one short) and the backward's recomputation, when the kept probabilities would pass the
    budget, give what one chunk with kept probabilities gives; a second backward (retain_graph) too."""
    inputs = _inputs(41, 8, 97, True, seed=5)
    whole = _run("cpu", inputs, 1.3, ("entropy",), 0.0)
    monkeypatch.setattr(logprob_kernel, "TOKEN_CHUNK", 16)
    monkeypatch.setattr(logprob_kernel, "KEEP_BYTES", 1)
    chunked = _run("cpu", inputs, 1.3, ("entropy",), 0.0)
    assert _error(*chunked, *whole) < 1e-5
    monkeypatch.setattr(logprob_kernel, "KEEP_BYTES", 2**30)
    hidden = inputs[0].clone().requires_grad_(True)
    out = CpuLogProbFunction.apply(hidden, inputs[1], None, inputs[3], 1.0, ())[0].sum()
    out.backward(retain_graph=True)
    first = hidden.grad.clone()
    hidden.grad = None
    out.backward()  # the kept tiles hold the first backward's gradients by now: recomputed
    torch.testing.assert_close(hidden.grad, first, rtol=1e-5, atol=1e-5)  # float32 rounding of p either way


def test_no_token_gives_empty_fields_and_a_zero_gradient():
    hidden = torch.zeros(0, 8, requires_grad=True)
    weight = torch.randn(50, 8, requires_grad=True)
    out = CpuLogProbFunction.apply(hidden, weight, None, torch.zeros(0, dtype=torch.long), 1.0, ("entropy", "is_top1"))
    assert out[0].shape == out[1].shape == out[4].shape == (0,) and out[4].dtype == torch.bool
    out[0].sum().backward()
    assert weight.grad is not None and not weight.grad.any()


def test_the_cpu_kernel_is_chosen_on_a_cpu_and_trls_with_a_softcap(monkeypatch):
    called = []
    for kernel in (CpuLogProbFunction, ChunkedLogProbFunction):
        monkeypatch.setattr(kernel, "apply", lambda *args, name=kernel.__name__: called.append(name))
    hidden, weight, _, targets = _inputs(4, 8, 20, False, seed=1)
    chunked_logprobs(hidden, weight, None, targets, 1.0, 32768, None, 1.0, ())
    chunked_logprobs(hidden, weight, None, targets, 1.0, 32768, 30.0, 1.0, ())
    assert called == ["CpuLogProbFunction", "ChunkedLogProbFunction"]
