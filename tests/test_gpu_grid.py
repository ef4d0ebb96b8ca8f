"""The GPU test grid: dtype x {MHA, GQA, MQA} x causal x head_dim x awkward seqlens, forward and
backward, for every GPU backend. Skipped without CUDA; run on the device machine by
scripts/gpu_check.sh.

Pass rule (as FlashAttention's test suites): the kernel's max error against the float64 oracle is at
most 2x the error of plain PyTorch computing the same thing in the same dtype, plus a rounding
floor (twice the error of merely storing the oracle's value in that dtype, plus 1e-5 for float32
accumulation where plain PyTorch happens to be exact). Outputs come from
memory that was poisoned with NaN first, so an element the kernel does not write fails the test.
"""

import os

import pytest
import torch

import fusedattn
from fusedattn.reference import attention_oracle

from helpers import check_grid_rule as check, max_err, plain_pytorch_attention

pytestmark = pytest.mark.gpu

DTYPES = [torch.float16, torch.bfloat16]
HEADS = {"mha": (4, 4), "gqa": (6, 2), "mqa": (4, 1)}
HEAD_DIMS = [40, 64, 96, 128, 192, 256]  # 40/96/192: the hopper backend pads (to 64/128/256)
SEQLENS = [(1, 1), (17, 17), (255, 255), (1000, 1000), (4097, 4097),   # (seqlen_q, seqlen_k)
           (1, 4097), (17, 255), (255, 17), (1000, 4097), (4097, 1000)]
# FUSEDATTN_TEST_BACKENDS=triton restricts the grid to some backends (e.g. while one is in progress).
BACKENDS = os.environ.get("FUSEDATTN_TEST_BACKENDS", "triton,hopper").split(",")


def poison_cuda_allocator():
    """Fill the caching allocator's free blocks with NaN so that unwritten outputs show up."""
    blocks = [torch.full((64 << 20,), float("nan"), device="cuda")]              # large pool
    blocks += [torch.full((1 << 17,), float("nan"), device="cuda") for _ in range(32)]  # small pool
    del blocks


def skip_unless_runs(backend, q, k, v, causal):
    why = fusedattn.explain(q, k, v, causal=causal, backend=backend)
    if why.forward is None:
        pytest.skip(f"{backend}: {why.reasons[backend]}")


@pytest.mark.parametrize("seqlens", SEQLENS, ids=lambda s: f"sq{s[0]}-sk{s[1]}")
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("heads", list(HEADS), ids=list(HEADS))
@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_grid(backend, dtype, heads, causal, head_dim, seqlens):
    _check_case(backend, dtype, *HEADS[heads], causal, head_dim, *seqlens)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("backend", BACKENDS)
def test_negative_softmax_scale(backend, causal, head_dim):
    """softmax_scale < 0 (torch's SDPA accepts it): the kernels that take the row max of the raw
    scores and scale it once must switch that off (the portable kernel gave NaN before)."""
    _check_case(backend, torch.bfloat16, 6, 2, causal, head_dim, 1000, 1037, scale=-0.3)


def _check_case(backend, dtype, h, hk, causal, head_dim, sq, sk, scale=None):
    b = 2
    q = torch.randn(b, sq, h, head_dim, device="cuda", dtype=dtype, requires_grad=True)
    k = torch.randn(b, sk, hk, head_dim, device="cuda", dtype=dtype, requires_grad=True)
    v = torch.randn(b, sk, hk, head_dim, device="cuda", dtype=dtype, requires_grad=True)
    skip_unless_runs(backend, q, k, v, causal)
    dout = torch.randn(b, sq, h, head_dim, device="cuda", dtype=dtype)

    poison_cuda_allocator()
    out, lse = fusedattn.attention(q, k, v, causal=causal, softmax_scale=scale, return_lse=True,
                                   backend=backend)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), dout)

    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref, ref_lse = attention_oracle(q64, k64, v64, causal, scale)
    rq, rk, rv = torch.autograd.grad(ref, (q64, k64, v64), dout.double())
    plain, _ = plain_pytorch_attention(q, k, v, causal, scale)
    pq, pk, pv = torch.autograd.grad(plain, (q, k, v), dout)

    check("out", out, plain, ref, dtype)
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), finite), "lse: -inf pattern differs from the oracle"
    assert max_err(lse[finite], ref_lse[finite]) <= 1e-3 + 1e-5 * ref_lse[finite].abs().max().item()
    for name, got, p, r in (("dq", dq, pq, rq), ("dk", dk, pk, rk), ("dv", dv, pv, rv)):
        check(name, got, p, r, dtype)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_bitwise_deterministic(backend, causal, head_dim):
    # batch x heads x m-tiles exceeds the SM count, so persistent programs take several tiles (the
    # dynamic scheduler hands them out in a different order from run to run)
    q = torch.randn(4, 1000, 8, head_dim, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(4, 1500, 2, head_dim, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    skip_unless_runs(backend, q, k, v, causal)
    a = fusedattn.attention(q, k, v, causal=causal, backend=backend)
    b = fusedattn.attention(q, k, v, causal=causal, backend=backend)
    assert torch.equal(a, b)


def test_auto_picks_a_gpu_backend():
    q = torch.randn(1, 128, 2, 64, device="cuda", dtype=torch.bfloat16)
    chosen = fusedattn.explain(q, q, q).forward
    assert chosen in ("hopper", "triton"), str(fusedattn.explain(q, q, q))


def test_compile_fullgraph_on_gpu():
    q, k, v = (torch.randn(2, 300, 4, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    fn = lambda q, k, v: fusedattn.attention(q, k, v, causal=True)  # noqa: E731
    out = torch.compile(fn, fullgraph=True)(q, k, v)
    ref = fn(q, k, v)
    assert torch.equal(out, ref)
    g = torch.autograd.grad(out.sum(), (q, k, v))
    r = torch.autograd.grad(ref.sum(), (q, k, v))
    assert all(torch.equal(a, b) for a, b in zip(g, r))
