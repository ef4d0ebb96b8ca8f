"""The operator layer: forward and backward as ``torch.library`` custom ops, and an eager path.

``fusedattn::forward`` and ``fusedattn::backward`` have fake (meta) implementations and registered
autograd, so ``torch.compile(fullgraph=True)`` traces them. The backend is chosen by the public API
(:mod:`fusedattn.api`) before the op is called and travels as a string argument; the ops do no
validation of their own beyond what the kernels need.

:func:`attention` is what the API calls. Under ``torch.compile`` it calls the custom op. In eager
mode it runs the same two functions (``_forward_impl`` / ``_backward_impl``) without the custom-op
dispatcher, whose Python overhead is the larger part of a short call's host time: through
``torch.autograd.Function`` when autograd will need a backward, directly otherwise. The kernels,
arguments and results are the same on every path (tests/test_api.py compares them). Second
derivatives differ: the eager path raises when a kernel's gradients are differentiated, the
custom op has no autograd formula for its backward (torch raises that), and the reference
backend's eager backward is differentiable.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .backends import get_backend
from .reference import lse_dtype

__all__ = ["attention", "forward", "backward"]


def _last_dim_contiguous(x: Tensor) -> Tensor:
    # Kernels take arbitrary strides but need unit stride along head_dim.
    return x if x.stride(-1) == 1 else x.contiguous()


def _empty_lse(q: Tensor) -> Tensor:
    b, sq, h, _ = q.shape
    return q.new_empty((b, h, sq), dtype=lse_dtype(q.dtype))


def _forward_impl(q: Tensor, k: Tensor, v: Tensor, causal: bool, softmax_scale: float,
                  backend: str) -> tuple[Tensor, Tensor]:
    if k.shape[1] == 0 or q.numel() == 0:
        # No key to attend to (or nothing to compute): zeros and a logsumexp of -inf.
        return q.new_zeros(q.shape), _empty_lse(q).fill_(float("-inf"))
    q, k, v = (_last_dim_contiguous(x) for x in (q, k, v))
    out, lse = get_backend(backend).forward(q, k, v, causal, softmax_scale)
    # Outputs are contiguous whatever the inputs' strides, matching the fake implementation.
    return out.contiguous(), lse.contiguous()


@torch.library.custom_op("fusedattn::forward", mutates_args=())
def forward(q: Tensor, k: Tensor, v: Tensor, causal: bool, softmax_scale: float,
            backend: str, backward_backend: str) -> tuple[Tensor, Tensor]:
    """Returns (out, lse): out like q, lse (batch, heads, seqlen_q), float32 (float64 for float64
    inputs)."""
    return _forward_impl(q, k, v, causal, softmax_scale, backend)


@forward.register_fake
def _(q, k, v, causal, softmax_scale, backend, backward_backend):
    return q.new_empty(q.shape), _empty_lse(q)


def _backward_impl(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
                   dlse: Tensor | None, causal: bool, softmax_scale: float,
                   backend: str) -> tuple[Tensor, Tensor, Tensor]:
    if k.shape[1] == 0 or q.numel() == 0:
        return q.new_zeros(q.shape), k.new_zeros(k.shape), v.new_zeros(v.shape)
    dout, q, k, v, out = (_last_dim_contiguous(x) for x in (dout, q, k, v, out))
    grads = get_backend(backend).backward(dout, q, k, v, out, lse, causal, softmax_scale, dlse)
    return tuple(g.contiguous() for g in grads)


@torch.library.custom_op("fusedattn::backward", mutates_args=())
def backward(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
             dlse: Tensor | None, causal: bool, softmax_scale: float,
             backend: str) -> tuple[Tensor, Tensor, Tensor]:
    """Returns (dq, dk, dv) shaped and typed like (q, k, v)."""
    return _backward_impl(dout, q, k, v, out, lse, dlse, causal, softmax_scale, backend)


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


class _EagerAttention(torch.autograd.Function):
    """The eager path with autograd: the custom ops' forward and backward, minus the dispatcher."""

    # forward and setup_context apart (not forward(ctx, ...)), so that torch.func's transforms
    # (grad, vjp, jacrev) can run it; the context is the custom op's
    @staticmethod
    def forward(q, k, v, causal, softmax_scale, backend, backward_backend):
        return _forward_impl(q, k, v, causal, softmax_scale, backend)

    setup_context = staticmethod(_setup_context)

    @staticmethod
    def backward(ctx, grad_out, grad_lse):
        # The kernels' backward is not itself differentiable. With create_graph=True (grad mode
        # on here; torch.func's transforms always differentiate so) their gradients come from
        # _KernelGradients, so that differentiating them (a gradient penalty, say) raises instead
        # of silently treating them as constants, as torch's own flash-attention backward does.
        # The reference backend's backward is plain differentiable PyTorch and keeps the second
        # derivative.
        if grad_out is None and grad_lse is None:
            return None, None, None, None, None, None, None
        q, k, v, out, lse = ctx.saved_tensors
        args = (grad_out, grad_lse, q, k, v, out, lse, ctx.causal, ctx.softmax_scale,
                ctx.backward_backend)
        if ctx.backward_backend == "reference" or not torch.is_grad_enabled():
            grads = _eager_gradients(*args)
        else:
            grads = _KernelGradients.apply(*args)
        return (*grads, None, None, None, None)


def _eager_gradients(grad_out, grad_lse, q, k, v, out, lse, causal, softmax_scale, backend):
    """(dq, dk, dv) on the eager path; a gradient that reached only the lse gets dout = 0."""
    if grad_out is None:
        grad_out = torch.zeros_like(out)
    return _backward_impl(grad_out, q, k, v, out, lse, grad_lse, causal, softmax_scale, backend)


class _KernelGradients(torch.autograd.Function):
    """A kernel backend's (dq, dk, dv) as the outputs of a node whose inputs are everything they
    depend on: differentiating them, through any of those inputs, raises. Being a Function of its
    own also lets torch.func's transforms run the kernels: they call its forward with plain
    tensors, which the kernels need, where the backward above sees torch.func's wrappers."""

    forward = staticmethod(_eager_gradients)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.backend = inputs[-1]

    @staticmethod
    def backward(ctx, *_):
        raise RuntimeError(
            f"fusedattn.attention: the {ctx.backend!r} backend's backward is not differentiable, "
            "so its gradients cannot be differentiated again (create_graph=True); "
            "backend='reference' gives second derivatives")


# torch.func.vmap's tensors (functorch's BatchedTensor; torch has no public test for them)
_is_vmapped = getattr(getattr(torch._C, "_functorch", None), "is_batchedtensor", lambda t: False)


def attention(q: Tensor, k: Tensor, v: Tensor, causal: bool, softmax_scale: float, backend: str,
              backward_backend: str) -> tuple[Tensor, Tensor]:
    """(out, lse) through the custom op under torch.compile, else through the eager path."""
    if torch.compiler.is_compiling():
        return forward(q, k, v, causal, softmax_scale, backend, backward_backend)
    if backend != "reference" and any(_is_vmapped(t) for t in (q, k, v)):
        raise NotImplementedError(
            f"fusedattn.attention: torch.func.vmap cannot run the {backend!r} backend's kernels "
            "(they need plain tensors); fold the mapped dimension into batch, or pass "
            "backend='reference', which runs under vmap")
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return _EagerAttention.apply(q, k, v, causal, softmax_scale, backend, backward_backend)
    return _forward_impl(q, k, v, causal, softmax_scale, backend)
