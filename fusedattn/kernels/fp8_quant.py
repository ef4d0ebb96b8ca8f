"""Fused FP8 (e4m3) quantiser: optional Hadamard rotation, per-block amax, scale, cast, in one pass.

One program quantises BLOCK_M rows of seqlen of one (batch, head): it loads the (BLOCK_M, head_dim)
tile, optionally rotates every row (random signs, then a Walsh-Hadamard transform, then
1/sqrt(hadamard_block)), takes the tile's amax, sets ``scale = max(amax / 448, 2**-126)`` (1.0 for
an all-zero tile), and stores ``e4m3(clamp(x / scale, -448, 448))`` and the scale. These tiles are the
"blocks matching the attention kernel's tiles, per head" of FlashAttention-3's block quantisation:
the FP8 attention kernel reads one Q scale per query tile and one K (V) scale per key tile.

Every step is a fixed sequence of IEEE float32 operations, so the PyTorch version in
``fusedattn.fp8._quantize_torch`` reproduces the kernel bit for bit (the tests check it):

* the rotation is a butterfly Walsh-Hadamard transform with a fixed stage order (pair distance
  h = 1, 2, 4, ..., each stage ``(a + b, a - b)``), not a ``tl.dot`` with the rotation matrix:
  a float32 matrix product's summation order differs between numpy (the interpreter), PyTorch's
  BLAS and the GPU (where ``tl.dot`` on float32 also defaults to TF32), so its last bits, and then
  an occasional e4m3 code, would differ. The butterflies also cost d*log2(d) adds instead of d^2 FMAs;
* the divisions are IEEE round-to-nearest (``tl.math.div_rn``: Triton's plain ``/`` on float32
  compiles to the approximate ``div.full.f32`` on NVIDIA GPUs);
* the cast is round-to-nearest-even after a clamp to +-448 (e4m3fn has no infinity; 448 is its
  largest finite value). On the GPU the cast is the hardware's ``cvt.rn.satfinite.e4m3x2.f32``.
  Triton 3.6's interpreter converts float32 to fp8 wrongly (it rounds half up and drops the carry
  into the exponent, so 7.78 becomes 4.0), so under the interpreter the kernel first rounds to the
  e4m3 grid itself (``_round_to_e4m3_grid``); the cast of an exactly representable value is exact.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..fp8 import _inv_sqrt_f32
from .triton_common import CompileSpec, triton_dtype, use_interpreter

__all__ = ["quantize", "compile_specs", "E4M3_MAX"]

E4M3_MAX = 448.0  # largest finite float8_e4m3fn value
MIN_SCALE: tl.constexpr = tl.constexpr(2.0 ** -126)  # fp8.MIN_SCALE: 1 / scale stays finite
NAN_ALL: tl.constexpr = tl.constexpr(tl.PropagateNan.ALL)
MAX_BLOCKS = 65535  # the grid's second axis (CUDA's limit for grid y): blocks per (batch, head)


@triton.jit
def _max_nan(a, b):
    """max that propagates NaN (max.NaN.f32), as torch's amax and clamp do."""
    return tl.maximum(a, b, propagate_nan=NAN_ALL)


@triton.jit
def _tile_amax(x, INTERPRETER: tl.constexpr):
    """max |x| over the tile, NaN if an entry is NaN. On the GPU a reduction with _max_nan
    (tl.max ignores NaN); in the interpreter, whose reductions with a Python combine function
    take seconds per tile, tl.max and a separate test for NaN (the same result)."""
    if INTERPRETER:
        amax = tl.max(tl.max(tl.abs(x), 1), 0)
        has_nan = tl.max(tl.max((x != x).to(tl.int32), 1), 0)
        return tl.where(has_nan > 0, float("nan"), amax)
    else:
        return tl.reduce(tl.reduce(tl.abs(x), 1, _max_nan), 0, _max_nan)


@triton.jit
def _divide(x, scale):
    """x / scale, IEEE division per element (as in every GPU run so far; the Gluon kernel's
    cheaper form of the same quotient, fp8_quant_gluon._divide, is to be measured first)."""
    return tl.math.div_rn(x, tl.zeros_like(x) + scale)


@triton.jit
def _scale_of(amax):
    """fp8._scale_of: 1.0 for an all-zero tile, else max(amax / 448, MIN_SCALE); NaN stays NaN."""
    return tl.where(amax == 0, 1.0, tl.maximum(tl.math.div_rn(amax, 448.0), MIN_SCALE,
                                               propagate_nan=NAN_ALL))


@triton.jit
def _round_to_e4m3_grid(y):
    """Round float32 ``y`` (|y| <= 448) to the nearest e4m3 value, ties to even; keeps the sign of 0.

    Adding and subtracting ``magic = 2**(e + 20)`` (e = the exponent of |y|, at least -6, e4m3's
    smallest normal exponent) rounds |y| to a multiple of 2**(e - 3), the e4m3 spacing at that
    exponent (2**-9 for subnormals), with float32's own round-to-nearest-even.
    """
    bits = y.to(tl.int32, bitcast=True)
    a = tl.abs(y)
    e = a.to(tl.int32, bitcast=True) >> 23            # biased float32 exponent of |y|
    e = tl.maximum(e, 121)                            # 121 = 127 - 6: e4m3 subnormals share 2**-9
    magic = ((e + 20) << 23).to(tl.float32, bitcast=True)
    r = (a + magic) - magic
    # Put y's sign bit back with integer ops: -r would be computed as 0 - r, which loses -0.0.
    sign = (bits >> 31) << 31                         # 0 or 0x80000000
    return (r.to(tl.int32, bitcast=True) | sign).to(tl.float32, bitcast=True)


@triton.jit
def _butterfly(x, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, H: tl.constexpr):
    """One Walsh-Hadamard stage: columns c and c + H of each aligned 2H block become (a + b, a - b)."""
    x4 = tl.reshape(x, (BLOCK_M, BLOCK_D // (2 * H), 2, H))
    a, b = tl.split(tl.permute(x4, (0, 1, 3, 2)))
    x4 = tl.permute(tl.join(a + b, a - b), (0, 1, 3, 2))
    return tl.reshape(x4, (BLOCK_M, BLOCK_D))


@triton.jit
def _hadamard_rows(x, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, LOG2_HAD: tl.constexpr):
    """Unnormalised Walsh-Hadamard transform of each row, over aligned blocks of 2**LOG2_HAD columns.

    Stages with pair distance H = 1, 2, 4, ... (written out: a reshape needs compile-time ints).
    With LOG2_HAD = log2(BLOCK_D) this is x @ H_d (Sylvester order); fewer stages give the
    block-diagonal Hadamard used for head dims that are not a power of two.
    """
    if LOG2_HAD > 0:
        x = _butterfly(x, BLOCK_M, BLOCK_D, 1)
    if LOG2_HAD > 1:
        x = _butterfly(x, BLOCK_M, BLOCK_D, 2)
    if LOG2_HAD > 2:
        x = _butterfly(x, BLOCK_M, BLOCK_D, 4)
    if LOG2_HAD > 3:
        x = _butterfly(x, BLOCK_M, BLOCK_D, 8)
    if LOG2_HAD > 4:
        x = _butterfly(x, BLOCK_M, BLOCK_D, 16)
    if LOG2_HAD > 5:
        x = _butterfly(x, BLOCK_M, BLOCK_D, 32)
    if LOG2_HAD > 6:
        x = _butterfly(x, BLOCK_M, BLOCK_D, 64)
    if LOG2_HAD > 7:
        x = _butterfly(x, BLOCK_M, BLOCK_D, 128)
    return x


@triton.jit
def _load_rot(X, Signs, row0, b, h, stride_xb, stride_xs, stride_xh, seqlen, inv_sqrt_had,
              HEAD_DIM: tl.constexpr, ROWS: tl.constexpr, BLOCK_D: tl.constexpr,
              ROTATE: tl.constexpr, LOG2_HAD: tl.constexpr):
    """ROWS rows from row0 of one (batch, head), float32, rotated if ROTATE; padding reads 0."""
    rows = row0 + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_D)
    mask = (rows[:, None] < seqlen) & (cols[None, :] < HEAD_DIM)
    rows_64 = rows[:, None].to(tl.int64)
    x_ptrs = X + b * stride_xb + h * stride_xh + rows_64 * stride_xs + cols[None, :]
    x = tl.load(x_ptrs, mask=mask, other=0.0).to(tl.float32)      # padding reads 0: amax unchanged
    if ROTATE:
        signs = tl.load(Signs + cols, mask=cols < HEAD_DIM, other=0.0)
        x = _hadamard_rows(x * signs[None, :], ROWS, BLOCK_D, LOG2_HAD) * inv_sqrt_had
    return x


@triton.jit
def _store_q(Data, y, row0, b, h, stride_db, stride_ds, stride_dh, seqlen,
             HEAD_DIM: tl.constexpr, ROWS: tl.constexpr, BLOCK_D: tl.constexpr,
             ROUND_IN_KERNEL: tl.constexpr):
    rows = row0 + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_D)
    mask = (rows[:, None] < seqlen) & (cols[None, :] < HEAD_DIM)
    y = tl.minimum(tl.maximum(y, -448.0, propagate_nan=NAN_ALL), 448.0, propagate_nan=NAN_ALL)
    d_ptrs = Data + b * stride_db + h * stride_dh + rows[:, None].to(tl.int64) * stride_ds + cols[None, :]
    if ROUND_IN_KERNEL:
        # the interpreter's cast also turns NaN into a number: NaN is written as e4m3's NaN code
        codes = _round_to_e4m3_grid(y).to(tl.float8e4nv).to(tl.int8, bitcast=True)
        codes = tl.where(y != y, 0x7F, codes)
        tl.store(d_ptrs.to(tl.pointer_type(tl.int8)), codes, mask=mask)
    else:
        tl.store(d_ptrs, y.to(tl.float8e4nv), mask=mask)


@triton.jit
def _quantize_fp8_kernel(
    X, Data, Scales, Signs, TensorScale,
    stride_xb, stride_xs, stride_xh,
    stride_db, stride_ds, stride_dh,
    seqlen, heads, num_blocks, inv_sqrt_had,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
    ROTATE: tl.constexpr, LOG2_HAD: tl.constexpr, GIVEN_SCALE: tl.constexpr,
    ROUND_IN_KERNEL: tl.constexpr, CHUNK: tl.constexpr = 0,
):
    """Grid (batch * heads, num_blocks). Writes Data (e4m3) and, unless GIVEN_SCALE, Scales.

    Scales is float32 (batch, heads, num_blocks), contiguous. With GIVEN_SCALE the tile is scaled by
    the one float32 at TensorScale (per-tensor mode) and Scales is not written. ROUND_IN_KERNEL:
    the kernel runs in the interpreter (its own e4m3 rounding, and the amax's NaN test apart).

    CHUNK (0: the whole BLOCK_M-row tile at once, as in the first GPU run): two passes over the
    tile in chunks of CHUNK rows: the first loads (and rotates) each chunk for the amax only, the
    second loads it again (an L2 hit), rotates, scales and stores. Twice the rotation work and L2
    reads, but a fraction of the registers, so several programs share an SM and their loads
    overlap each other's arithmetic (the whole-tile rotation needs 167 registers at hdim 128: one
    program of 8 warps per SM). Bit-identical: the same operations per element, and the max of
    the chunk maxima is the tile's max.
    """
    pid_bh = tl.program_id(0)
    pid_m = tl.program_id(1)
    b = (pid_bh // heads).to(tl.int64)
    h = (pid_bh % heads).to(tl.int64)
    if CHUNK == 0:
        x = _load_rot(X, Signs, pid_m * BLOCK_M, b, h, stride_xb, stride_xs, stride_xh, seqlen,
                      inv_sqrt_had, HEAD_DIM, BLOCK_M, BLOCK_D, ROTATE, LOG2_HAD)
        if GIVEN_SCALE:
            scale = tl.load(TensorScale)
        else:
            scale = _scale_of(_tile_amax(x, ROUND_IN_KERNEL))
            tl.store(Scales + pid_bh * num_blocks + pid_m, scale)
        y = _divide(x, scale)
        _store_q(Data, y, pid_m * BLOCK_M, b, h, stride_db, stride_ds, stride_dh, seqlen,
                 HEAD_DIM, BLOCK_M, BLOCK_D, ROUND_IN_KERNEL)
    else:
        if GIVEN_SCALE:
            scale = tl.load(TensorScale)
        else:
            amax = tl.full([], 0.0, tl.float32)    # |x| >= 0: the same max as the one-pass tile
            for c in tl.range(0, BLOCK_M // CHUNK):
                x = _load_rot(X, Signs, pid_m * BLOCK_M + c * CHUNK, b, h, stride_xb, stride_xs,
                              stride_xh, seqlen, inv_sqrt_had, HEAD_DIM, CHUNK, BLOCK_D, ROTATE,
                              LOG2_HAD)
                amax = _max_nan(amax, _tile_amax(x, ROUND_IN_KERNEL))
            scale = _scale_of(amax)
            tl.store(Scales + pid_bh * num_blocks + pid_m, scale)
        for c in tl.range(0, BLOCK_M // CHUNK):
            x = _load_rot(X, Signs, pid_m * BLOCK_M + c * CHUNK, b, h, stride_xb, stride_xs,
                          stride_xh, seqlen, inv_sqrt_had, HEAD_DIM, CHUNK, BLOCK_D, ROTATE,
                          LOG2_HAD)
            y = _divide(x, scale)
            _store_q(Data, y, pid_m * BLOCK_M + c * CHUNK, b, h, stride_db, stride_ds, stride_dh,
                     seqlen, HEAD_DIM, CHUNK, BLOCK_D, ROUND_IN_KERNEL)


def _num_warps(block_m: int, block_d: int) -> int:
    # Keep the float32 tile at <= 64 values a thread: 128 x 128 on 8 warps, 128 x 256 on 16
    # (8 warps spill there: 255 registers and 100 bytes in ptxas -v for sm_90a).
    return max(4, min(16, block_m * block_d // (64 * 32)))


# Launch shape of the quantiser: (rows per chunk or 0 for the whole tile, num_warps or None for
# _num_warps); results are bit-identical for every choice. (0, None) is the first GPU run's. The
# rotating pass (q, k) at head_dim >= 128 runs in chunks of 16 rows on 4 warps: +15% in device
# run 7 and +12..15% in run 17 at head_dim 128 / 256 (0.77 TB/s against 0.67-0.69), where the
# whole-tile rotation holds one 8- or 16-warp program per SM; at head_dim 64 the chunks lost 12%
# (run 17), and the plain pass (v) had no clear winner (benchmarks/fp8_log.md).
LAUNCH = (0, None)
LAUNCH_ROTATING_WIDE = (16, 4)


def launch_shape(head_dim: int, rotate: bool) -> tuple[int, int | None]:
    """(chunk, num_warps) of the shipped launch for this head_dim and pass."""
    return LAUNCH_ROTATING_WIDE if rotate and head_dim >= 128 else LAUNCH


def quantize(x: torch.Tensor, block_size: int, signs: torch.Tensor | None, hadamard_block: int,
             tensor_scale: torch.Tensor | None = None, chunk: int | None = None,
             num_warps: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Launch the quantiser on x (batch, seqlen, heads, head_dim), unit stride along head_dim.

    signs: float32 (head_dim,) of +-1 to rotate (None: no rotation); hadamard_block: the power of two
    the Walsh-Hadamard transform spans (ignored without signs). tensor_scale: a float32 tensor of one
    element to use as every block's scale (per-tensor mode); then the returned scales are that
    value broadcast. Returns (data float8_e4m3fn (batch, seqlen, heads, head_dim) contiguous,
    scales float32 (batch, heads, num_blocks)).
    """
    bsz, seqlen, heads, head_dim = x.shape
    num_blocks = triton.cdiv(seqlen, block_size)
    data = torch.empty((bsz, seqlen, heads, head_dim), dtype=torch.float8_e4m3fn, device=x.device)
    scales = torch.empty((bsz, heads, num_blocks), dtype=torch.float32, device=x.device)
    block_d = triton.next_power_of_2(head_dim)
    rotate = signs is not None
    log2_had = hadamard_block.bit_length() - 1 if rotate else 0
    inv_sqrt_had = _inv_sqrt_f32(hadamard_block) if rotate else 1.0
    dummy = scales  # unused pointer arguments
    check_blocks(seqlen, block_size)
    grid = (bsz * heads, num_blocks)
    if chunk is None:
        chunk, shipped_warps = launch_shape(head_dim, rotate)
        num_warps = num_warps or shipped_warps
    num_warps = num_warps or _num_warps(block_size if not chunk else min(chunk, block_size), block_d)
    if chunk and (chunk >= block_size or block_size % chunk):
        chunk = 0                                   # one chunk: the one-pass form
    _quantize_fp8_kernel[grid](
        x, data, scales, signs if rotate else dummy,
        tensor_scale if tensor_scale is not None else dummy,
        x.stride(0), x.stride(1), x.stride(2),
        data.stride(0), data.stride(1), data.stride(2),
        seqlen, heads, num_blocks, inv_sqrt_had,
        HEAD_DIM=head_dim, BLOCK_M=block_size, BLOCK_D=block_d, ROTATE=rotate, LOG2_HAD=log2_had,
        GIVEN_SCALE=tensor_scale is not None, ROUND_IN_KERNEL=use_interpreter(x), CHUNK=chunk,
        num_warps=num_warps, **({"num_stages": 1} if chunk else {}),
    )
    if tensor_scale is not None:
        scales = tensor_scale.reshape(1, 1, 1).expand(bsz, heads, num_blocks).contiguous()
    return data, scales


def check_blocks(seqlen: int, block_size: int) -> None:
    """The grids put the blocks of one (batch, head) on their second axis: at most MAX_BLOCKS."""
    num_blocks = triton.cdiv(seqlen, block_size)
    if num_blocks > MAX_BLOCKS:
        raise ValueError(f"x has seqlen {seqlen}: with block_size {block_size} that is {num_blocks} "
                         f"blocks per (batch, head), more than the quantiser's grid takes "
                         f"({MAX_BLOCKS}); use a larger block_size")


def kernel_signature(dtype: torch.dtype, constexprs: dict) -> tuple[dict, tuple]:
    """The quantiser kernels' argument types for an ahead-of-time compile (both kernels take the
    same runtime arguments), and the arguments a contiguous launch finds 16-divisible."""
    ptrs = {"X": f"*{triton_dtype(dtype)}", "Data": "*fp8e4nv", "Scales": "*fp32",
            "Signs": "*fp32", "TensorScale": "*fp32"}
    strides = ("stride_xb", "stride_xs", "stride_xh", "stride_db", "stride_ds", "stride_dh")
    signature = {**ptrs, **{s: "i32" for s in strides}, "seqlen": "i32", "heads": "i32",
                 "num_blocks": "i32", "inv_sqrt_had": "fp32",
                 **{name: "constexpr" for name in constexprs}}
    return signature, tuple(ptrs) + strides




def compile_specs(head_dim: int, dtype: torch.dtype, block_size: int = 128, rotate: bool = True,
                  given_scale: bool = False, chunk: int | None = None,
                  num_warps: int | None = None) -> list[CompileSpec]:
    """The quantiser's sm_90a compile inputs (for the CPU compile check of the GPU path); chunk
    None: the shipped launch shape (launch_shape)."""
    if chunk is None:
        chunk, shipped_warps = launch_shape(head_dim, rotate)
        num_warps = num_warps or shipped_warps
    if chunk and (chunk >= block_size or block_size % chunk):
        chunk = 0
    block_d = triton.next_power_of_2(head_dim)
    had = head_dim & -head_dim
    constexprs = {"HEAD_DIM": head_dim, "BLOCK_M": block_size, "BLOCK_D": block_d,
                  "ROTATE": bool(rotate), "LOG2_HAD": (had.bit_length() - 1) if rotate else 0,
                  "GIVEN_SCALE": bool(given_scale), "ROUND_IN_KERNEL": False, "CHUNK": chunk}
    signature, divisible = kernel_signature(dtype, constexprs)
    nw = num_warps or _num_warps(min(chunk, block_size) if chunk else block_size, block_d)
    return [CompileSpec("quantize_fp8", _quantize_fp8_kernel, signature, constexprs,
                        nw, 1, divisible=divisible)]
