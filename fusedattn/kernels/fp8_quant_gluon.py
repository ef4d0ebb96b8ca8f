"""The FP8 quantiser in Gluon, for NVIDIA GPUs of compute capability 9.0 (Hopper).

The same arithmetic as ``fp8_quant._quantize_fp8_kernel`` (and so as ``fp8._quantize_torch``, bit
for bit): random signs, the Walsh-Hadamard butterflies in the order h = 1, 2, 4, ... with
``(a + b, a - b)`` at each stage, one multiply by float32(1/sqrt(B)), the tile's amax, scale =
max(amax / 448, 2**-126) (IEEE division; 1.0 for an all-zero tile), ``e4m3(clamp(x / scale))``
with the hardware's round-to-nearest-even cast, the division rounded as IEEE division but computed
from one reciprocal per tile (``_divide``).

Why a second kernel: the portable Triton kernel expresses each butterfly stage as
reshape / permute / split / join and leaves the register layout to the compiler, which moves the
tile through shared memory between stages (device-run analysis, benchmarks/fp8_log.md section 6:
55 barriers and 6 shared-memory round trips per 128 x 128 tile; the rotating pass runs at
0.7-0.8 TB/s where the plain one reaches 2-2.5). Here the layout is chosen by hand
(``quant_layout``) so that every stage but two is a register renaming:

* column bits 0-2 (8 consecutive elements: one 16-byte load of 16-bit input) and bits 5 and up
  are register bits of a thread, column bits 3-4 are lane bits 0-1, the rows take the remaining
  lane bits, the warps, and further register bits. For 16-bit input and rows of 32 columns or
  more, four lanes therefore read 64 consecutive bytes of a row (two full 32-byte sectors per
  16-byte load instruction; float32 input takes two 16-byte loads per 8 columns);
* a stage whose pair distance h is a register bit is a reshape / split / join inside each thread
  (no data movement; checked with ``convert_layout(..., assert_trivial=True)``);
* the stages h = 8 and 16 (lane bits) exchange values with one ``shfl.sync.bfly`` per element:
  the lower partner computes ``x + p`` and the upper one ``p - x`` (as ``fma(x, -1, p)``, whose
  product is exact: the same rounding as the subtraction), which is ``(a + b, a - b)``.

No shared memory is used apart from the amax's reduction across warps. A program quantises one
block of ``BLOCK_M`` rows of one (batch, head) in chunks of ``CHUNK`` rows: when the block fits
in registers (CHUNK == BLOCK_M) in one pass, otherwise in two (the first for the amax, the second
reads the chunks again, from L2, to scale and store). Results are the same either way.

It does not run in Triton's interpreter (Gluon does not); on the CPU, and on GPUs other than
sm_90, ``fp8_quant.quantize`` (the Triton kernel) runs. The GPU tests check this kernel against
``_quantize_torch`` bit for bit; the CPU tests compile it for sm_90a and check its structure.
"""
from __future__ import annotations

import functools

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
import triton.language as tl

from ..fp8 import _inv_sqrt_f32
from .fp8_quant import check_blocks, kernel_signature

__all__ = ["quantize", "launch_shape", "pick_max_warps", "quant_layout", "supports", "compile_sm90"]

_MIN_BLOCK_D = 16          # narrower rows are padded to 16 columns (masked, never stored)
_VALUES_PER_THREAD = 64    # float32 values of a chunk per thread
_MAX_WARPS = 8
MIN_SCALE: gl.constexpr = gl.constexpr(2.0 ** -126)   # fp8.MIN_SCALE
NAN_ALL: gl.constexpr = gl.constexpr(tl.PropagateNan.ALL)


def _log2(n: int) -> int:
    return n.bit_length() - 1


def block_d_of(head_dim: int) -> int:
    return max(_MIN_BLOCK_D, triton.next_power_of_2(head_dim))


def _lane_col_bits(block_d: int) -> int:
    """How many column bits the layout puts on lanes: bits 3 and 4, where block_d has them."""
    return max(0, min(5, _log2(block_d)) - 3)


def _rows_per_warp(block_d: int) -> int:
    return 32 >> _lane_col_bits(block_d)


def launch_shape(block_size: int, head_dim: int, max_warps: int = _MAX_WARPS) -> tuple[int, int]:
    """(chunk rows, num_warps) of the launch for this block_size and head_dim: up to max_warps
    warps, each thread holding at most 64 float32 values of a chunk. With the default 8 warps the
    blocks of 256 x 128, 128 x 256 and 256 x 256 (rows x head_dim) take two passes; with 16 warps
    the first two take one (a program of 512 threads then fills an SM's registers alone:
    scripts/quant_speed.py times both), 256 x 256 still two."""
    block_d = block_d_of(head_dim)
    warps = min(max_warps, max(1, block_size // _rows_per_warp(block_d)))
    chunk = min(block_size, max(_rows_per_warp(block_d) * warps,
                                _VALUES_PER_THREAD * 32 * warps // block_d))
    return chunk, warps


def pick_max_warps(block_size: int, head_dim: int, rotate: bool) -> int:
    """The launch's warp cap when the caller names none: 16 where it turns a two-pass rotating
    launch into a one-pass one, otherwise 8. Device runs 77-78 (scripts/quant_speed.py, bare
    kernel, 2 x 8192 rows x 2048 columns of bf16): rotating 256 x 128 blocks 60 -> 51 us and
    128 x 256 71 -> 63 us with 16 warps; the plain (v) blocks of the same shapes 35 -> 38 us
    (two passes over L2 cost less than 512-thread programs when nothing is rotated)."""
    if rotate and launch_shape(block_size, head_dim, 8)[0] < block_size \
            and launch_shape(block_size, head_dim, 16)[0] == block_size:
        return 16
    return _MAX_WARPS


def quant_layout(chunk: int, block_d: int, num_warps: int) -> gl.DistributedLinearLayout:
    """The (chunk, block_d) register layout described in the module docstring."""
    n = _log2(block_d)
    col = [[0, 1 << i] for i in range(n)]
    lane_cols = col[3:3 + _lane_col_bits(block_d)]
    row_lane_bits = 5 - len(lane_cols)
    warp_bits = _log2(num_warps)
    covered = 1 << (row_lane_bits + warp_bits)
    if chunk % covered:
        raise ValueError(f"chunk {chunk} must be a multiple of the {covered} rows one register "
                         f"covers with {num_warps} warps and block_d {block_d}")
    row_regs = [[covered << i, 0] for i in range(_log2(chunk // covered))]
    return gl.DistributedLinearLayout(
        reg_bases=col[:3] + col[5:] + row_regs,
        lane_bases=lane_cols + [[1 << i, 0] for i in range(row_lane_bits)],
        warp_bases=[[1 << (row_lane_bits + i), 0] for i in range(warp_bits)],
        block_bases=[], shape=[chunk, block_d])


def shuffle_asm(layout: gl.DistributedLinearLayout, h: int) -> str:
    """The inline PTX of the butterfly stage of pair distance h when column bit h is a lane bit of
    ``layout``: a shfl.sync.bfly whose lane mask flips exactly that lane bit (so the partner holds
    column c ^ h of the same row in the same register); "" when h is not a lane bit."""
    for i, (dr, dc) in enumerate(layout.lane_bases):
        if dr == 0 and dc == h:
            return f"shfl.sync.bfly.b32 $0, $1, {1 << i}, 0x1f, -1;"
    return ""


@gluon.jit
def _bfly_regs(x, H: gl.constexpr, CHUNK: gl.constexpr, BLOCK_D: gl.constexpr,
               L: gl.constexpr):
    """A stage whose pair distance H is a register bit: columns c and c + H of each aligned 2H
    block become (a + b, a - b), inside each thread."""
    x4 = gl.reshape(x, [CHUNK, BLOCK_D // (2 * H), 2, H])
    a, b = gl.split(gl.permute(x4, (0, 1, 3, 2)))
    x4 = gl.permute(gl.join(a + b, a - b), (0, 1, 3, 2))
    return gl.convert_layout(gl.reshape(x4, [CHUNK, BLOCK_D]), L, assert_trivial=True)


@gluon.jit
def _bfly_lanes(x, cols, H: gl.constexpr, SHFL: gl.constexpr):
    """A stage whose pair distance H (8 or 16) is a lane bit: the partner's value by one
    butterfly shuffle (SHFL = shuffle_asm(L, H)), then a + b in the lower and a - b in the upper
    half (fma(x, -1, p) = p - x: the product is exact)."""
    p = gl.inline_asm_elementwise(SHFL, "=r,r", [x], dtype=gl.float32, is_pure=False, pack=1)
    sgn = gl.where((cols & H) != 0, -1.0, 1.0)
    return gl.fma(x, gl.expand_dims(sgn, 0), p)


@gluon.jit
def _hadamard(x, cols, CHUNK: gl.constexpr, BLOCK_D: gl.constexpr, LOG2_HAD: gl.constexpr,
              L: gl.constexpr, SHFL8: gl.constexpr, SHFL16: gl.constexpr):
    """Unnormalised Walsh-Hadamard transform of each row over aligned blocks of 2**LOG2_HAD
    columns, stages h = 1, 2, 4, ... in that order (as fp8_quant._hadamard_rows)."""
    for i in gl.static_range(LOG2_HAD):
        if i == 3:
            x = _bfly_lanes(x, cols, 8, SHFL8)
        elif i == 4:
            x = _bfly_lanes(x, cols, 16, SHFL16)
        else:
            x = _bfly_regs(x, 1 << i, CHUNK, BLOCK_D, L)
    return x


@gluon.jit
def _load_chunk(X, Signs, row0, b, h, stride_xb, stride_xs, stride_xh, seqlen, inv_sqrt_had,
                HEAD_DIM: gl.constexpr, CHUNK: gl.constexpr, BLOCK_D: gl.constexpr,
                ROTATE: gl.constexpr, LOG2_HAD: gl.constexpr, L: gl.constexpr,
                SHFL8: gl.constexpr, SHFL16: gl.constexpr):
    """CHUNK rows from row0 of one (batch, head) as float32 in layout L, rotated if ROTATE;
    padding (rows past seqlen, columns past HEAD_DIM) reads 0, which leaves the amax unchanged."""
    rows = row0 + gl.arange(0, CHUNK, layout=gl.SliceLayout(1, L))
    cols = gl.arange(0, BLOCK_D, layout=gl.SliceLayout(0, L))
    mask = (gl.expand_dims(rows, 1) < seqlen) & (gl.expand_dims(cols, 0) < HEAD_DIM)
    ptrs = (X + b * stride_xb + h * stride_xh
            + gl.expand_dims(rows.to(gl.int64), 1) * stride_xs + gl.expand_dims(cols, 0))
    x = gl.load(ptrs, mask=mask, other=0.0).to(gl.float32)
    if ROTATE:
        signs = gl.load(Signs + cols, mask=cols < HEAD_DIM, other=0.0)
        x = _hadamard(x * gl.expand_dims(signs, 0), cols, CHUNK, BLOCK_D, LOG2_HAD, L, SHFL8,
                      SHFL16)
        x = x * inv_sqrt_had
    return x


@gluon.jit
def _divide(x, scale):
    """x / scale rounded as IEEE division, without a division per element: with 2**k the power of
    two that brings the scale into [1, 2) (sn = scale * 2**k, xn = x * 2**k, both exact), one
    reciprocal per tile, inv = RN(1 / sn), then per element q0 = RN(xn * inv) and one correction,
    RN(q0 + RN(xn - sn * q0) * inv) (Markstein's step; the fast path of div.rn does the same after
    its own reciprocal): 4 instructions instead of ~10 and a MUFU. Every quotient that can round
    to a nonzero e4m3 code (>= 2**-10) has a normal xn and comes out correctly rounded (checked
    in exact arithmetic on the tight cases, where the quotient lies within 2 units of 2**-47 of a
    float32 midpoint, and on random ones: tests/test_fp8.py and benchmarks/fp8_log.md).
    The step is written with negated operands, -xn and -inv: the same roundings for nonzero
    values (RN(-v) = -RN(v)), but a zero quotient keeps x's sign (with xn and inv as written
    above, -0 + +0 makes x = -0.0 come out +0, where IEEE division gives -0).
    A scale of inf or NaN gives x / scale too: with 2**k = sn = 1 and inv = 1 / scale (0 or
    NaN), +-0 with x's sign for finite x and NaN otherwise. Only per-tile scalars are selected:
    no branch around the element-wise code (a branch cost ~40 registers). Precondition: scale is
    a normal positive float below 2**127, inf or NaN (every scale that fp8._scale_of makes:
    amax / 448 < 2**120, at least 2**-126)."""
    e = (scale.to(gl.int32, bitcast=True) >> 23) & 0xFF
    finite = e < 254
    pow2 = gl.where(finite, ((254 - e) << 23).to(gl.float32, bitcast=True), 1.0)   # 2**(127-e)
    sn = gl.where(finite, scale * pow2, 1.0)
    # -1 / s, not -(1 / s): Triton lowers unary minus to 0 - v, which turns +0 (the quotient
    # 1 / inf) into +0 instead of -0, and every code of an inf-scale block then had the wrong
    # zero sign (device run 77)
    ninv = gl.div_rn(-1.0, gl.where(finite, sn, scale))
    nxn = x * (-pow2)                                  # -xn, exact
    q0 = nxn * ninv                                    # RN(xn * inv), a zero with x's sign
    return gl.fma(gl.fma(q0, sn, nxn), ninv, q0)       # RN(q0 + RN(xn - sn * q0) * inv)


@gluon.jit
def _store_chunk(Data, x, scale, row0, b, h, stride_db, stride_ds, stride_dh, seqlen,
                 HEAD_DIM: gl.constexpr, CHUNK: gl.constexpr, BLOCK_D: gl.constexpr,
                 L: gl.constexpr):
    rows = row0 + gl.arange(0, CHUNK, layout=gl.SliceLayout(1, L))
    cols = gl.arange(0, BLOCK_D, layout=gl.SliceLayout(0, L))
    mask = (gl.expand_dims(rows, 1) < seqlen) & (gl.expand_dims(cols, 0) < HEAD_DIM)
    y = gl.minimum(gl.maximum(_divide(x, scale), -448.0, propagate_nan=NAN_ALL), 448.0,
                   propagate_nan=NAN_ALL)
    ptrs = (Data + b * stride_db + h * stride_dh
            + gl.expand_dims(rows.to(gl.int64), 1) * stride_ds + gl.expand_dims(cols, 0))
    gl.store(ptrs, y.to(gl.float8e4nv), mask=mask)


@gluon.jit
def _max_nan(a, b):
    return gl.maximum(a, b, propagate_nan=NAN_ALL)


@gluon.jit
def _tile_amax(x):
    """max |x| over the chunk; NaN if any entry is NaN (as torch's amax)."""
    return gl.reduce(gl.reduce(gl.abs(x), 1, _max_nan), 0, _max_nan)


@gluon.jit
def _scale_of(amax):
    """fp8._scale_of: 1.0 for an all-zero tile, else max(amax / 448, MIN_SCALE); NaN stays NaN."""
    return gl.where(amax == 0, 1.0, gl.maximum(gl.div_rn(amax, 448.0), MIN_SCALE,
                                               propagate_nan=NAN_ALL))


@gluon.jit
def _quantize_fp8_gluon(
    X, Data, Scales, Signs, TensorScale,
    stride_xb, stride_xs, stride_xh,
    stride_db, stride_ds, stride_dh,
    seqlen, heads, num_blocks, inv_sqrt_had,
    HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_D: gl.constexpr, CHUNK: gl.constexpr,
    ROTATE: gl.constexpr, LOG2_HAD: gl.constexpr, GIVEN_SCALE: gl.constexpr, L: gl.constexpr,
    SHFL8: gl.constexpr, SHFL16: gl.constexpr,
):
    """Grid (batch * heads, num_blocks), as fp8_quant._quantize_fp8_kernel (same arguments but
    ROUND_IN_KERNEL, plus the chunk, its layout L and the two shuffles' PTX)."""
    pid_bh = gl.program_id(0)
    pid_m = gl.program_id(1)
    b = (pid_bh // heads).to(gl.int64)
    h = (pid_bh % heads).to(gl.int64)
    row0 = pid_m * BLOCK_M
    if CHUNK == BLOCK_M:
        x = _load_chunk(X, Signs, row0, b, h, stride_xb, stride_xs, stride_xh, seqlen,
                        inv_sqrt_had, HEAD_DIM, CHUNK, BLOCK_D, ROTATE, LOG2_HAD, L, SHFL8,
                        SHFL16)
        if GIVEN_SCALE:
            scale = gl.load(TensorScale)
        else:
            scale = _scale_of(_tile_amax(x))
            gl.store(Scales + pid_bh * num_blocks + pid_m, scale)
        _store_chunk(Data, x, scale, row0, b, h, stride_db, stride_ds, stride_dh, seqlen,
                     HEAD_DIM, CHUNK, BLOCK_D, L)
    else:
        if GIVEN_SCALE:
            scale = gl.load(TensorScale)
        else:
            amax = gl.full([], 0.0, gl.float32)   # |x| >= 0: the max of the chunk maxima
            for c in range(0, BLOCK_M // CHUNK):
                x = _load_chunk(X, Signs, row0 + c * CHUNK, b, h, stride_xb, stride_xs,
                                stride_xh, seqlen, inv_sqrt_had, HEAD_DIM, CHUNK, BLOCK_D,
                                ROTATE, LOG2_HAD, L, SHFL8, SHFL16)
                amax = _max_nan(amax, _tile_amax(x))
            scale = _scale_of(amax)
            gl.store(Scales + pid_bh * num_blocks + pid_m, scale)
        for c in range(0, BLOCK_M // CHUNK):
            x = _load_chunk(X, Signs, row0 + c * CHUNK, b, h, stride_xb, stride_xs, stride_xh,
                            seqlen, inv_sqrt_had, HEAD_DIM, CHUNK, BLOCK_D, ROTATE, LOG2_HAD, L,
                            SHFL8, SHFL16)
            _store_chunk(Data, x, scale, row0 + c * CHUNK, b, h, stride_db, stride_ds,
                         stride_dh, seqlen, HEAD_DIM, CHUNK, BLOCK_D, L)


def supports(x: torch.Tensor) -> bool:
    """Whether this kernel runs for x: a CUDA tensor on a device of compute capability 9.0."""
    return (x.is_cuda and torch.version.cuda is not None
            and torch.cuda.get_device_capability(x.device) == (9, 0))


@functools.lru_cache(maxsize=256)
def _constexprs(head_dim: int, block_size: int, rotate: bool, given_scale: bool,
                hadamard_block: int, max_warps: int | None = _MAX_WARPS) -> tuple[dict, int]:
    """The launch's constexprs and warp count (max_warps None: pick_max_warps), cached: building
    the layout and the shuffles' asm takes ~60 us of host time, which the short launches of an
    end-to-end call paid three times (device run 80). Callers pass the dict on as keywords and
    never change it."""
    if max_warps is None:
        max_warps = pick_max_warps(block_size, head_dim, rotate)
    block_d = block_d_of(head_dim)
    chunk, warps = launch_shape(block_size, head_dim, max_warps)
    layout = quant_layout(chunk, block_d, warps)
    return ({"HEAD_DIM": head_dim, "BLOCK_M": block_size, "BLOCK_D": block_d, "CHUNK": chunk,
             "ROTATE": bool(rotate), "LOG2_HAD": _log2(hadamard_block) if rotate else 0,
             "GIVEN_SCALE": bool(given_scale), "L": layout,
             "SHFL8": shuffle_asm(layout, 8), "SHFL16": shuffle_asm(layout, 16)}, warps)


def quantize(x: torch.Tensor, block_size: int, signs: torch.Tensor | None, hadamard_block: int,
             tensor_scale: torch.Tensor | None = None, max_warps: int | None = None,
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """As fp8_quant.quantize (same arguments and results), on an sm_90 GPU (``supports``);
    max_warps: see launch_shape, default pick_max_warps (the results do not depend on it)."""
    if not supports(x):
        raise RuntimeError("fp8_quant_gluon.quantize runs on CUDA devices of compute capability "
                           "9.0; use fp8_quant.quantize elsewhere")
    bsz, seqlen, heads, head_dim = x.shape
    check_blocks(seqlen, block_size)
    num_blocks = triton.cdiv(seqlen, block_size)
    data = torch.empty((bsz, seqlen, heads, head_dim), dtype=torch.float8_e4m3fn, device=x.device)
    scales = torch.empty((bsz, heads, num_blocks), dtype=torch.float32, device=x.device)
    rotate = signs is not None
    constexprs, warps = _constexprs(head_dim, block_size, rotate, tensor_scale is not None,
                                    hadamard_block, max_warps)
    dummy = scales
    _quantize_fp8_gluon[(bsz * heads, num_blocks)](
        x, data, scales, signs if rotate else dummy,
        tensor_scale if tensor_scale is not None else dummy,
        x.stride(0), x.stride(1), x.stride(2),
        data.stride(0), data.stride(1), data.stride(2),
        seqlen, heads, num_blocks, _inv_sqrt_f32(hadamard_block) if rotate else 1.0,
        **constexprs, num_warps=warps)
    if tensor_scale is not None:
        scales = tensor_scale.reshape(1, 1, 1).expand(bsz, heads, num_blocks).contiguous()
    return data, scales


def compile_sm90(head_dim: int, dtype: torch.dtype, block_size: int = 128, rotate: bool = True,
                 given_scale: bool = False, max_warps: int = _MAX_WARPS):
    """Compile the kernel for sm_90a with the bundled ptxas (no GPU needed), with the pointer
    alignment and stride divisibility that contiguous inputs get at launch."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    had = head_dim & -head_dim
    constexprs, warps = _constexprs(head_dim, block_size, rotate, given_scale, had, max_warps)
    signature, divisible = kernel_signature(dtype, constexprs)
    names = list(signature)
    attrs = {(names.index(a),): [["tt.divisibility", 16]] for a in divisible}
    src = GluonASTSource(_quantize_fp8_gluon, signature, constexprs=constexprs, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
