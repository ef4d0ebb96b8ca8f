"""The operator layer: forward and backward as ``torch.library`` custom ops.

``fusedattn::forward`` and ``fusedattn::backward`` have fake (meta) implementations and registered
autograd, so eager mode, autograd and ``torch.compile(fullgraph=True)`` all run the same kernels.
The backend is chosen by the public API (:mod:`fusedattn.api`) before the op is called and travels
as a string argument; the ops do no validation of their own beyond what the kernels need.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .backends import get_backend

__all__ = ["forward", "backward"]


def _last_dim_contiguous(x: Tensor) -> Tensor:
    # Kernels take arbitrary strides but need unit stride along head_dim.
    return x if x.stride(-1) == 1 else x.contiguous()


def _empty_lse(q: Tensor) -> Tensor:
    b, sq, h, _ = q.shape
    return q.new_empty((b, h, sq), dtype=torch.float32)


@torch.library.custom_op("fusedattn::forward", mutates_args=())
def forward(q: Tensor, k: Tensor, v: Tensor, causal: bool, softmax_scale: float,
            backend: str, backward_backend: str) -> tuple[Tensor, Tensor]:
    """Returns (out, lse): out like q, lse float32 (batch, heads, seqlen_q)."""
    if k.shape[1] == 0 or q.numel() == 0:
        # No key to attend to (or nothing to compute): zeros and a logsumexp of -inf.
        return q.new_zeros(q.shape), _empty_lse(q).fill_(float("-inf"))
    q, k, v = (_last_dim_contiguous(x) for x in (q, k, v))
    out, lse = get_backend(backend).forward(q, k, v, causal, softmax_scale)
    # Outputs are contiguous whatever the inputs' strides, matching the fake implementation.
    return out.contiguous(), lse.contiguous()


@forward.register_fake
def _(q, k, v, causal, softmax_scale, backend, backward_backend):
    return q.new_empty(q.shape), _empty_lse(q)


@torch.library.custom_op("fusedattn::backward", mutates_args=())
def backward(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
             dlse: Tensor | None, causal: bool, softmax_scale: float,
             backend: str) -> tuple[Tensor, Tensor, Tensor]:
    """Returns (dq, dk, dv) shaped and typed like (q, k, v)."""
    if k.shape[1] == 0 or q.numel() == 0:
        return q.new_zeros(q.shape), k.new_zeros(k.shape), v.new_zeros(v.shape)
    dout, q, k, v, out = (_last_dim_contiguous(x) for x in (dout, q, k, v, out))
    grads = get_backend(backend).backward(dout, q, k, v, out, lse, causal, softmax_scale, dlse)
    return tuple(g.contiguous() for g in grads)


@backward.register_fake
def _(dout, q, k, v, out, lse, dlse, causal, softmax_scale, backend):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output):
    q, k, v, causal, softmax_scale, _, backward_backend = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.set_materialize_grads(False)  # an unused lse gets grad None, not a tensor of zeros
    ctx.causal = causal
    ctx.softmax_scale = softmax_scale
    ctx.backward_backend = backward_backend


def _backward(ctx, grad_out, grad_lse):
    q, k, v, out, lse = ctx.saved_tensors
    if grad_out is None:
        grad_out = torch.zeros_like(out)
    dq, dk, dv = backward(grad_out, q, k, v, out, lse, grad_lse, ctx.causal, ctx.softmax_scale,
                          ctx.backward_backend)
    return dq, dk, dv, None, None, None, None


forward.register_autograd(_backward, setup_context=_setup_context)
