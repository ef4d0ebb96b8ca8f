"""The portable Triton kernels (fusedattn/kernels/triton_fwd.py, triton_bwd.py) against the float64
oracle. Without a GPU they run in Triton's interpreter (tests/conftest.py sets TRITON_INTERPRET=1),
with 16 x 16 tiles so that short sequences still cross several blocks and ragged tails.

Pass rule (tests/helpers.py): the kernel's error against the float64 oracle must stay within twice
the error of plain PyTorch in the same dtype, plus a small floor. Gradients are judged the same
way against autograd through the oracle and through the plain-PyTorch math.

Every test runs with uninitialised memory filled with NaN (torch's deterministic mode), so an output
element that a kernel forgets to write shows up as NaN and fails.
"""

from __future__ import annotations

import pytest
import torch

from fusedattn.kernels import triton_bwd, triton_fwd
from helpers import (assert_close_to_oracle, attention_oracle, finite_or_zero,
                     plain_pytorch_attention)

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture(autouse=True)
def _nan_filled_empty():
    """torch.empty & co. return NaN-filled memory while a test runs (catches unwritten outputs)."""
    previous = (torch.are_deterministic_algorithms_enabled(),
                torch.utils.deterministic.fill_uninitialized_memory)
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    yield
    torch.use_deterministic_algorithms(previous[0])
    torch.utils.deterministic.fill_uninitialized_memory = previous[1]


def _inputs(batch, seqlen_q, seqlen_k, heads, kv_heads, head_dim, dtype):
    q = torch.randn(batch, seqlen_q, heads, head_dim, dtype=dtype, device=DEVICE)
    k = torch.randn(batch, seqlen_k, kv_heads, head_dim, dtype=dtype, device=DEVICE)
    v = torch.randn(batch, seqlen_k, kv_heads, head_dim, dtype=dtype, device=DEVICE)
    return q, k, v


def _check_forward(q, k, v, causal, scale, config=None):
    out, lse = triton_fwd.forward(q, k, v, causal, scale, config=config)
    assert out.shape == q.shape and out.dtype == q.dtype
    assert lse.shape == (q.shape[0], q.shape[2], q.shape[1]) and lse.dtype == torch.float32
    assert lse.is_contiguous()
    ref_out, ref_lse = attention_oracle(q, k, v, causal, scale)
    plain_out, plain_lse = plain_pytorch_attention(q, k, v, causal, scale)
    assert_close_to_oracle("out", out, plain_out, ref_out)
    assert torch.equal(torch.isneginf(lse), torch.isneginf(ref_lse)), "lse: -inf rows differ"
    assert_close_to_oracle("lse", finite_or_zero(lse), finite_or_zero(plain_lse),
                           finite_or_zero(ref_lse), floor=1e-4)
    return out, lse


def _check_backward(q, k, v, out, lse, causal, scale, with_dlse=False, config=None):
    dout = torch.randn_like(q)
    dlse = torch.randn(lse.shape, device=q.device) if with_dlse else None

    def grads(fn, dtype):
        leaves = [t.detach().to(dtype).requires_grad_() for t in (q, k, v)]
        o, l = fn(*leaves, causal, scale)
        loss = (o * dout.to(o.dtype)).sum()
        if with_dlse:
            loss = loss + (finite_or_zero(l) * dlse.to(l.dtype)).sum()
        return torch.autograd.grad(loss, leaves)

    ref = grads(attention_oracle, torch.float64)
    plain = grads(plain_pytorch_attention, q.dtype)
    got = triton_bwd.backward(dout, q, k, v, out, lse, causal, scale, dlse, config=config)
    for name, g, t in zip(("dq", "dk", "dv"), got, (q, k, v)):
        assert g.shape == t.shape and g.dtype == t.dtype, name
    for name, g, p, r in zip(("dq", "dk", "dv"), got, plain, ref):
        assert_close_to_oracle(name, g, p, r, floor=2e-3)
    return got


# (batch, seqlen_q, seqlen_k, heads, kv_heads, head_dim): MHA, GQA and MQA; seqlens equal, longer
# and shorter on either side, with ragged tails of the 16-wide tiles; head_dim 8, 40 (masked
# BLOCK_D of 64) and 64.
CASES = [
    (2, 17, 33, 2, 2, 40),    # MHA, seqlen_q < seqlen_k
    (1, 33, 17, 4, 2, 64),    # GQA, seqlen_q > seqlen_k: causal rows 0..15 see no key
    (1, 40, 40, 3, 1, 8),     # MQA, square
    (1, 1, 19, 2, 1, 40),     # a single query row (decoding)
    (1, 23, 1, 2, 2, 64),     # a single key
    (1, 48, 48, 4, 2, 64),    # whole tiles only: the unmasked paths alone
    (1, 70, 131, 2, 1, 16),   # MQA, many diagonal blocks; seqlen_k - seqlen_q not a tile multiple
]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", CASES, ids=lambda s: "b{}_q{}_k{}_h{}_hk{}_d{}".format(*s))
def test_forward_and_backward_match_oracle(shape, causal, dtype):
    q, k, v = _inputs(*shape, dtype)
    scale = shape[-1] ** -0.5
    out, lse = _check_forward(q, k, v, causal, scale)
    _check_backward(q, k, v, out, lse, causal, scale)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_dlse_gradient(causal):
    """A gradient flowing into the logsumexp enters as dS = P * (dP - (Delta - dlse))."""
    q, k, v = _inputs(1, 35, 21, 4, 2, 40, torch.float16)
    out, lse = _check_forward(q, k, v, causal, 0.3)
    _check_backward(q, k, v, out, lse, causal, 0.3, with_dlse=True)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("scale", [-0.4, 0.0])
def test_negative_and_zero_softmax_scale(causal, scale):
    """softmax_scale <= 0 (which torch's SDPA accepts): the unmasked blocks' row max of the raw
    scores, scaled once, would be the row minimum with a negative scale (exp2 overflowed to NaN
    before this case was covered); forward and backward against the oracle."""
    q, k, v = _inputs(1, 40, 56, 2, 1, 32, torch.float16)
    out, lse = _check_forward(q, k, v, causal, scale)
    assert torch.isfinite(out).all()
    _check_backward(q, k, v, out, lse, causal, scale)


def test_fully_masked_rows_give_zeros_and_neg_inf():
    """Causal with seqlen_q > seqlen_k: the first seqlen_q - seqlen_k rows see no key."""
    q, k, v = _inputs(1, 37, 5, 2, 1, 16, torch.bfloat16)
    out, lse = triton_fwd.forward(q, k, v, True, 0.25)
    empty = 37 - 5
    assert torch.all(out[:, :empty] == 0) and torch.all(torch.isneginf(lse[..., :empty]))
    assert torch.isfinite(out).all() and torch.isfinite(lse[..., empty:]).all()
    dlse = torch.randn(lse.shape, device=q.device)
    dq, dk, dv = triton_bwd.backward(torch.randn_like(q), q, k, v, out, lse, True, 0.25, dlse)
    assert torch.all(dq[:, :empty] == 0)
    for g in (dq, dk, dv):
        assert torch.isfinite(g).all()


def test_arbitrary_strides():
    """Non-contiguous layouts: q from a packed qkv tensor, k and v with different row strides."""
    b, s, h, d = 2, 29, 4, 40
    qkv = torch.randn(b, s, 3, h, d, dtype=torch.float16, device=DEVICE)
    q = qkv[:, :, 0]                                                     # packed (b, s, 3, h, d)
    k = torch.randn(b, h // 2, s + 3, d, dtype=torch.float16, device=DEVICE).transpose(1, 2)[:, :s]
    v = torch.randn(b, s, h // 2, 2 * d, dtype=torch.float16, device=DEVICE)[..., :d]
    assert k.stride(1) != v.stride(1)
    out, lse = _check_forward(q, k, v, True, d ** -0.5)
    dout_strided = torch.randn(b, h, s, d, dtype=torch.float16, device=DEVICE).transpose(1, 2)
    got = triton_bwd.backward(dout_strided, q, k, v, out, lse, True, d ** -0.5)
    want = triton_bwd.backward(dout_strided.contiguous(), q.contiguous(), k.contiguous(),
                               v.contiguous(), out, lse, True, d ** -0.5)
    for g, w in zip(got, want):
        assert torch.equal(g, w)


def test_head_dim_256():
    """The largest head_dim (BLOCK_D = 256), forward and backward."""
    q, k, v = _inputs(1, 20, 20, 1, 1, 256, torch.float16)
    out, lse = _check_forward(q, k, v, True, 256 ** -0.5)
    _check_backward(q, k, v, out, lse, True, 256 ** -0.5)


def test_config_override():
    """config= replaces the table's tiles (scripts/triton_tune.py): a 32-key step with a 16-key
    step on the masked blocks (block_n_masked), on a causal case with a diagonal offset."""
    from fusedattn.kernels.triton_configs import BackwardConfig, Tile
    q, k, v = _inputs(1, 70, 131, 2, 1, 16, torch.bfloat16)
    scale = 16 ** -0.5
    fwd_tile = Tile(16, 32, 4, 1, block_n_masked=16)
    out, lse = _check_forward(q, k, v, True, scale, config=fwd_tile)
    cfg = BackwardConfig(dkdv=Tile(16, 32, 4, 1), dq=Tile(16, 32, 4, 1, block_n_masked=16),
                         preprocess_block_m=32)
    _check_backward(q, k, v, out, lse, True, scale, with_dlse=True, config=cfg)
    dout = torch.randn_like(q)
    with pytest.raises(ValueError):
        triton_fwd.forward(q, k, v, True, scale, config=Tile(16, 32, 4, 1, block_n_masked=24))
    with pytest.raises(ValueError):
        triton_bwd.backward(dout, q, k, v, out, lse, True, scale,
                            config=BackwardConfig(dkdv=fwd_tile, dq=fwd_tile))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim", [64, 96, 128, 256])
@pytest.mark.parametrize("seqlens", [(1000, 1037), (777, 300)], ids=["q<k", "q>k"])
def test_gpu_production_tiles(seqlens, head_dim, causal, dtype):
    """On the GPU, with the production tiles: ragged sequences several tiles long, GQA."""
    q, k, v = _inputs(2, *seqlens, 4, 2, head_dim, dtype)
    out, lse = _check_forward(q, k, v, causal, head_dim ** -0.5)
    _check_backward(q, k, v, out, lse, causal, head_dim ** -0.5, with_dlse=True)
