"""The reference backend (the seed's blockwise algorithm in PyTorch) against the float64 oracle and
against autograd through the oracle."""

import pytest
import torch

from fusedattn.reference import attention_backward, attention_forward, attention_oracle

from helpers import finite_or_zero

SHAPES = [  # (batch, seqlen_q, seqlen_k, heads, kv_heads, head_dim)
    (2, 17, 33, 4, 4, 16),
    (1, 33, 17, 6, 2, 8),
    (2, 1, 40, 3, 1, 24),
    (1, 65, 65, 2, 1, 32),
    (1, 5, 300, 4, 2, 16),
]


def _inputs(shape, dtype):
    b, sq, sk, h, hk, d = shape
    q = torch.randn(b, sq, h, d, dtype=dtype)
    k = torch.randn(b, sk, hk, d, dtype=dtype)
    v = torch.randn(b, sk, hk, d, dtype=dtype)
    return q, k, v


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("block", [16, 128])
def test_forward_matches_oracle(shape, causal, block):
    q, k, v = _inputs(shape, torch.float64)
    out, lse = attention_forward(q, k, v, causal, block=block)
    ref_out, ref_lse = attention_oracle(q, k, v, causal)
    # float64 inputs: a float64 lse (float32, FlashAttention's, for the other dtypes)
    assert out.dtype == torch.float64 and lse.dtype == torch.float64
    torch.testing.assert_close(out, ref_out, rtol=1e-10, atol=1e-12)
    assert torch.equal(torch.isinf(lse), torch.isinf(ref_lse))
    torch.testing.assert_close(finite_or_zero(lse), finite_or_zero(ref_lse), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("causal", [False, True])
def test_backward_matches_autograd(shape, causal):
    q, k, v = (t.requires_grad_() for t in _inputs(shape, torch.float64))
    ref_out, ref_lse = attention_oracle(q, k, v, causal)
    dout = torch.randn_like(ref_out)
    dlse = finite_or_zero(torch.randn_like(ref_lse) * torch.isfinite(ref_lse))
    loss = (ref_out * dout).sum() + (finite_or_zero(ref_lse) * dlse).sum()
    gq, gk, gv = torch.autograd.grad(loss, (q, k, v))
    out, lse = attention_forward(q.detach(), k.detach(), v.detach(), causal, block=16)
    dq, dk, dv = attention_backward(dout, q.detach(), k.detach(), v.detach(), out, lse, causal,
                                    dlse=dlse, block=16)
    # float64 throughout (P's row statistics recomputed in float64, dlse float64): float64
    # precision
    for got, ref in ((dq, gq), (dk, gk), (dv, gv)):
        torch.testing.assert_close(got, ref, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_low_precision_close_to_oracle(dtype):
    q, k, v = _inputs((2, 40, 70, 4, 2, 32), dtype)
    out, lse = attention_forward(q, k, v, True)
    ref_out, ref_lse = attention_oracle(q, k, v, True)
    assert out.dtype == dtype
    tol = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float32: 1e-5}[dtype]
    torch.testing.assert_close(out.double(), ref_out, rtol=0, atol=tol)


def test_fully_masked_rows_are_zero_not_nan():
    # seqlen_q > seqlen_k with causal: the first seqlen_q - seqlen_k rows see no key.
    q, k, v = (t.requires_grad_() for t in _inputs((1, 9, 4, 2, 2, 8), torch.float32))
    out, lse = attention_forward(q, k, v, True)
    assert torch.equal(out[:, :5], torch.zeros_like(out[:, :5]))
    assert torch.isneginf(lse[:, :, :5]).all() and torch.isfinite(lse[:, :, 5:]).all()
    dq, dk, dv = attention_backward(torch.randn_like(out), q, k, v, out, lse, True)
    assert not any(torch.isnan(g).any() for g in (dq, dk, dv))
    assert torch.equal(dq[:, :5], torch.zeros_like(dq[:, :5]))


def test_memory_stays_linear_in_seqlen():
    """The blockwise reference never holds a seqlen_q x seqlen_k tensor: record the largest tensor
    created while it runs (through a dispatch mode) and compare with the quadratic size."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Largest(TorchDispatchMode):
        biggest = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in (out if isinstance(out, (tuple, list)) else (out,)):
                if isinstance(t, torch.Tensor):
                    Largest.biggest = max(Largest.biggest, t.numel())
            return out

    b, s, h, d, block = 1, 1024, 1, 16, 64
    q, k, v = _inputs((b, s, s, h, h, d), torch.float32)
    with Largest():
        out, lse = attention_forward(q, k, v, True, block=block)
        attention_backward(torch.randn_like(out), q, k, v, out, lse, True, block=block)
    assert Largest.biggest <= b * h * s * max(block, d), Largest.biggest
    assert Largest.biggest < s * s // 4


@pytest.mark.parametrize("causal", [False, True])
def test_plain_pytorch_yardstick_is_attention(causal):
    """attention_plain (the rounding-error yardstick) computes the same function as the oracle."""
    from fusedattn.reference import attention_plain
    q, k, v = _inputs((2, 9, 13, 4, 2, 16), torch.float64)
    out, lse = attention_plain(q, k, v, causal, 0.3)
    ref_out, ref_lse = attention_oracle(q, k, v, causal, 0.3)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(finite_or_zero(lse).double(), finite_or_zero(ref_lse))
