"""FP8 (e4m3) quantisation of attention inputs, as FlashAttention-3's FP8 forward takes them.

    qq = fusedattn.quantize_fp8(q, rotate=True, role="q")   # q (batch, seqlen, heads, head_dim)
    kq = fusedattn.quantize_fp8(k, rotate=True, role="k")   # same seed as q: the rotation cancels
    vq = fusedattn.quantize_fp8(v, role="v")
    qq.data     # float8_e4m3fn (batch, seqlen, heads, head_dim)
    qq.scales   # float32 (batch, heads, ceil(seqlen / block_size)): one scale per block and head
    qq.dequantize()                                          # back to q's dtype, rotation undone

What it computes, per (batch, head) and per block of ``block_size`` rows of seqlen (the tiles that
the FP8 attention kernel loads, so each tile comes with exactly one scale):

1. optionally (``rotate=True``, q and k only), each row x of length head_dim becomes R x, with
   R = (1/sqrt(B)) * H * diag(s): s are random signs drawn from ``seed``, H is the Sylvester
   Hadamard matrix of order B = head_dim when head_dim is a power of two. For other head dims
   (96 = 3 * 32, 80 = 5 * 16, ...) H is block diagonal: copies of the Hadamard matrix of order
   B = the largest power of two dividing head_dim. R is orthogonal, so (R q) . (R k) = q . k: the
   scores are unchanged while an outlier entry is spread over B entries of magnitude |x|/sqrt(B)
   ("incoherent processing", FlashAttention-3 section 3.3). V must not be rotated (nothing undoes
   it in P V), so ``rotate=True`` with ``role="v"`` is an error.
2. amax = max |x| over the block; scale = amax / 448 (448 = e4m3's largest finite value), but at
   least 2**-126 (float32's smallest normal number, so that 1 / scale is finite: only blocks whose
   largest entry is below ~5e-36 reach this floor); an all-zero block gets scale 1.0.
3. data = e4m3(clamp(x / scale, -448, 448)), rounded to nearest, ties to even. So
   x ~= data * scale, with a relative error of at most 2**-4 for entries above e4m3's smallest
   normal, amax / 448 * 2**-6 ~ amax * 3.5e-5, and an absolute one of scale * 2**-10 below it.
   e4m3 is a floating-point format (4 exponent bits), so a scale only decides where a tensor's
   range sits inside e4m3's range: one scale for a whole tensor costs accuracy only where the
   tensor's own range is wider than e4m3's (2**-9 .. 448), or through which entry lands exactly
   on 448. The accuracy study shows what this means in practice.

``per_tensor=True`` uses one scale for the whole tensor instead (the baseline of the accuracy study,
``python -m fusedattn.fp8_study``); the scales tensor then holds that one value in every block.

On CUDA tensors the quantisation runs as one fused kernel: on sm_90 the Gluon one
(``kernels/fp8_quant_gluon.py``: register layout chosen by hand, no shared memory between the
rotation's stages; ``USE_GLUON_QUANTISER``), elsewhere the portable Triton one
(``kernels/fp8_quant.py``). Both give the same bits. On the CPU the Triton kernel runs in
Triton's interpreter when ``TRITON_INTERPRET=1`` was set before Triton was imported, and otherwise :func:`_quantize_torch`,
the same float32 arithmetic in PyTorch (also the tests' oracle for the kernels, which must agree
with it bit for bit).

Non-finite inputs are not checked for (that would cost a pass and a device sync), but they are not
hidden either: a NaN in a block makes that block's scale and all its codes NaN; an inf makes the
scale inf, its own code NaN and the block's other codes 0 (with ``rotate=True`` a NaN or inf first
spreads over its row). Everything computed from such a block is NaN. The kernels and
:func:`_quantize_torch` agree on this (a NaN code's sign bit may differ).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

import torch

__all__ = ["QuantizedTensor", "quantize_fp8", "hadamard_rotation", "hadamard_block_size",
           "random_signs", "rotate_rows", "E4M3_MAX"]

E4M3_MAX = 448.0  # largest finite torch.float8_e4m3fn value
MIN_SCALE = 2.0 ** -126  # the smallest scale: float32's smallest normal number (1 / scale finite)
_INPUT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_MIN_BLOCK, _MAX_BLOCK = 16, 256


# --- the rotation -----------------------------------------------------------------------------

def hadamard_block_size(head_dim: int) -> int:
    """Order B of the Hadamard blocks for ``head_dim``: the largest power of two dividing it."""
    return head_dim & -head_dim


def random_signs(head_dim: int, seed: int = 0) -> torch.Tensor:
    """float32 (head_dim,) of +-1, drawn on the CPU from ``seed`` (the same on every device)."""
    gen = torch.Generator(device="cpu").manual_seed(int(seed))
    return (torch.randint(0, 2, (head_dim,), generator=gen) * 2 - 1).to(torch.float32)


_SIGNS_ON_DEVICE: dict = {}


def _device_signs(head_dim: int, seed: int, device: torch.device) -> torch.Tensor:
    """random_signs on ``device``, kept per (head_dim, seed, device): a fresh copy from the CPU on
    every call would be a blocking host-to-device copy (a stream synchronisation) per quantisation.
    The cached tensor is never written to."""
    key = (head_dim, int(seed), str(device))
    t = _SIGNS_ON_DEVICE.get(key)
    if t is None:
        if len(_SIGNS_ON_DEVICE) >= 256:
            _SIGNS_ON_DEVICE.clear()
        t = _SIGNS_ON_DEVICE[key] = random_signs(head_dim, seed).to(device)
    return t


def _sylvester(n: int) -> torch.Tensor:
    h = torch.ones((1, 1), dtype=torch.float64)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h


def hadamard_rotation(head_dim: int, seed: int = 0, device=None,
                      dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The orthogonal (head_dim, head_dim) matrix R = (1/sqrt(B)) * H * diag(signs from ``seed``).

    H is the Sylvester Hadamard matrix of order head_dim when head_dim is a power of two, otherwise
    block diagonal with Hadamard blocks of order B = :func:`hadamard_block_size` (head_dim). Rows
    x of a (..., head_dim) tensor rotate as ``x @ R.T``; R R^T = I, so
    ``(q @ R.T) @ (k @ R.T).T == q @ k.T``. Built in float64, then cast to ``dtype``.
    """
    if not isinstance(head_dim, int) or isinstance(head_dim, bool) or head_dim < 1:
        raise ValueError(f"head_dim must be a positive int, got {head_dim!r}")
    b = hadamard_block_size(head_dim)
    h = torch.block_diag(*([_sylvester(b)] * (head_dim // b))) / math.sqrt(b)
    r = h * random_signs(head_dim, seed).to(torch.float64)[None, :]     # H @ diag(s)
    return r.to(device=device, dtype=dtype)


def _hadamard_rows_torch(x: torch.Tensor, block: int) -> torch.Tensor:
    """Unnormalised Walsh-Hadamard transform of each row over aligned blocks of ``block`` columns.

    The same butterflies, in the same order and precision, as the kernel's ``_hadamard_rows``.
    """
    d = x.shape[-1]
    lead = x.shape[:-1]
    h = 1
    while h < block:
        x4 = x.reshape(*lead, d // (2 * h), 2, h)
        a, b = x4[..., 0, :], x4[..., 1, :]
        x = torch.stack([a + b, a - b], dim=-2).reshape(*lead, d)
        h *= 2
    return x


@functools.lru_cache(maxsize=None)
def _inv_sqrt_f32(n: int) -> float:
    """1/sqrt(n) rounded to float32 (as a Python float): the same constant on every path (the
    torch twin and both quantiser kernels)."""
    return float(torch.tensor(n, dtype=torch.float64).rsqrt().to(torch.float32))


def rotate_rows(x: torch.Tensor, seed: int = 0) -> torch.Tensor:
    """float32 ``x @ R.T`` for R = hadamard_rotation(head_dim, seed), computed as the kernel does.

    (Signs, then butterflies, then one multiply by float32(1/sqrt(B)): bit-identical to the kernel.)
    """
    d = x.shape[-1]
    b = hadamard_block_size(d)
    signs = random_signs(d, seed).to(x.device)
    return _hadamard_rows_torch(x.to(torch.float32) * signs, b) * _inv_sqrt_f32(b)


# --- the quantiser: PyTorch version (CPU path and test oracle) ---------------------------------

def _quantize_torch(x: torch.Tensor, block_size: int, signs: torch.Tensor | None,
                    hadamard_block: int, tensor_scale: torch.Tensor | None = None,
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """PyTorch twin of ``kernels.fp8_quant.quantize`` (same arguments, same results bit for bit).

    x (batch, seqlen, heads, head_dim) -> (data float8_e4m3fn of x's shape, scales float32
    (batch, heads, num_blocks)).
    """
    bsz, seqlen, heads, d = x.shape
    xf = x.to(torch.float32)
    if signs is not None:
        xf = _hadamard_rows_torch(xf * signs.to(xf.device), hadamard_block) * _inv_sqrt_f32(hadamard_block)
    nb = -(-seqlen // block_size)
    pad = nb * block_size - seqlen
    xp = torch.nn.functional.pad(xf, (0, 0, 0, 0, 0, pad)) if pad else xf
    blocks = xp.reshape(bsz, nb, block_size, heads, d)
    if tensor_scale is None:
        amax = blocks.abs().amax(dim=(2, 4))                               # (batch, nb, heads)
        scales = _scale_of(amax).transpose(1, 2)
    else:
        scales = tensor_scale.to(torch.float32).reshape(1, 1, 1).expand(bsz, heads, nb)
    scales = scales.contiguous()
    y = blocks / scales.transpose(1, 2)[:, :, None, :, None]
    y = y.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    data = y.reshape(bsz, nb * block_size, heads, d)[:, :seqlen].contiguous()
    return data, scales


def _scale_of(amax: torch.Tensor) -> torch.Tensor:
    """float32 amax -> scale: 1.0 where amax is 0, else amax / 448 but at least MIN_SCALE; NaN
    and inf stay (the kernels' arithmetic)."""
    # a tensor divisor: on CUDA, PyTorch divides by a Python scalar as a multiply by its
    # reciprocal (two roundings); tensor by tensor is IEEE division on every device
    scale = torch.clamp(amax / torch.full_like(amax, E4M3_MAX), min=MIN_SCALE)
    return torch.where(amax == 0, torch.ones_like(amax), scale)


# The Gluon quantiser (kernels/fp8_quant_gluon.py) runs on sm_90, the Triton one elsewhere. Device
# runs 77-78: the GPU tests pass (bit for bit against _quantize_torch, signed zeros and non-finite
# input included) and the bare kernel takes 0.36-0.40x the Triton kernel's time rotating, 0.72-0.77x
# plain (scripts/quant_speed.py). False restores the Triton kernel on sm_90 (same results).
USE_GLUON_QUANTISER = True


def _quantize_triton(x, block_size, signs, hadamard_block, tensor_scale=None):
    """The quantiser kernels (the Triton one also in the interpreter): the Gluon quantiser on sm_90
    when USE_GLUON_QUANTISER, otherwise the portable Triton kernel (kernels/fp8_quant.py). Both
    compute what _quantize_torch computes, bit for bit."""
    from .kernels import fp8_quant, fp8_quant_gluon
    if USE_GLUON_QUANTISER and fp8_quant_gluon.supports(x):
        return fp8_quant_gluon.quantize(x, block_size, signs, hadamard_block, tensor_scale)
    return fp8_quant.quantize(x, block_size, signs, hadamard_block, tensor_scale)


def _interpreter_active() -> bool:
    """True when the quantiser kernel was built for Triton's interpreter (TRITON_INTERPRET=1)."""
    from triton.runtime.interpreter import InterpretedFunction

    from .kernels.fp8_quant import _quantize_fp8_kernel
    return isinstance(_quantize_fp8_kernel, InterpretedFunction)


# --- the public type and function ---------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class QuantizedTensor:
    """An FP8 tensor with its block scales: what the FP8 attention kernel reads, and what a KV cache
    keeps and reuses.

    data:       float8_e4m3fn (batch, seqlen, heads, head_dim), contiguous.
    scales:     float32 (batch, heads, num_blocks), contiguous, every scale positive (the FP8
                kernel takes the row max of the raw scores, which a negative scale would turn
                into the minimum; quantize_fp8 never makes one; attention_fp8 checks the
                dtype, not the values, which would cost a wait on the GPU per call); block j
                covers rows [j * block_size, (j + 1) * block_size) of seqlen. x ~= data * scale
                (in the rotated basis when ``rotated``).
    block_size: rows of seqlen per scale.
    rotated:    whether rows were multiplied by ``hadamard_rotation(head_dim, seed)`` first.
    seed:       the rotation's seed (q and k must share it).
    dtype:      the dtype of the tensor that was quantised.
    role:       "q", "k" or "v".
    per_tensor: True when every block carries the same, whole-tensor scale.
    """

    data: torch.Tensor
    scales: torch.Tensor
    block_size: int
    rotated: bool
    seed: int
    dtype: torch.dtype
    role: str
    per_tensor: bool = False

    @property
    def shape(self) -> torch.Size:
        return self.data.shape

    @property
    def device(self) -> torch.device:
        return self.data.device

    @property
    def num_blocks(self) -> int:
        return self.scales.shape[-1]

    def row_scales(self) -> torch.Tensor:
        """float32 (batch, seqlen, heads): the scale of every row."""
        s = self.scales.repeat_interleave(self.block_size, dim=-1)[..., :self.data.shape[1]]
        return s.transpose(1, 2)

    def reblocked(self, block_size: int) -> "QuantizedTensor":
        """The same values (the same data, each scale repeated) described with smaller blocks:
        ``block_size`` must divide ``self.block_size``. The FP8 kernel uses this to run a tensor
        quantised with 256-row blocks on a tile of 128 keys (one scale per tile); no data is
        copied."""
        if isinstance(block_size, bool) or not isinstance(block_size, int):
            raise TypeError(f"block_size must be an int, got {type(block_size).__name__}")
        if block_size <= 0 or self.block_size % block_size:
            raise ValueError(f"block_size must divide {self.block_size}, got {block_size}")
        if block_size == self.block_size:
            return self
        nb = -(-self.data.shape[1] // block_size)
        scales = self.scales.repeat_interleave(self.block_size // block_size, dim=-1)[..., :nb]
        return replace(self, scales=scales.contiguous(), block_size=block_size)

    def dequantize(self, dtype: torch.dtype | None = None, *, unrotate: bool = True) -> torch.Tensor:
        """data * scale, in ``dtype`` (default: the original dtype), (batch, seqlen, heads, head_dim).

        With ``unrotate`` (default) a rotated tensor is rotated back (x = x_rot @ R), so the result
        approximates the original input; ``unrotate=False`` keeps the rotated basis.
        """
        x = self.data.to(torch.float32) * self.row_scales()[..., None]
        if self.rotated and unrotate:
            x = x @ hadamard_rotation(self.data.shape[-1], self.seed, x.device, torch.float32)
        return x.to(dtype or self.dtype)

    def __repr__(self) -> str:
        b, s, h, d = self.data.shape
        mode = "per-tensor" if self.per_tensor else f"block_size={self.block_size}"
        rot = f", rotated (seed {self.seed})" if self.rotated else ""
        return (f"QuantizedTensor(role={self.role!r}, shape=(batch {b}, seqlen {s}, heads {h}, "
                f"head_dim {d}), e4m3, {mode}{rot}, from {self.dtype}, on {self.device})")


def _check_int(name, value):
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")


def quantize_fp8(x: torch.Tensor, *, block_size: int = 128, rotate: bool = False, seed: int = 0,
                 role: str = "q", per_tensor: bool = False) -> QuantizedTensor:
    """Quantise x (batch, seqlen, heads, head_dim), fp16/bf16/fp32, to e4m3 with float32 block scales.

    block_size: rows of seqlen sharing one scale, per (batch, head): a power of two in [16, 256].
        For attention_fp8 use 128 for q, and for k and v the kernel's key tile,
        ``fusedattn.fp8_api.kv_block_for(head_dim, causal)`` (256 at head_dim 64 and 128, 128 at
        256); k and v in 128-row blocks run on the 128-key tile, which is slower at head_dim
        64 and 128.
    rotate: multiply each row by ``hadamard_rotation(head_dim, seed)`` first (q and k only; both
        with the same seed).
    seed: the rotation's random signs, an int in [0, 2**64) (checked, and kept with the result,
        whether or not it is used).
    role: "q", "k" or "v" (v cannot be rotated).
    per_tensor: one scale for the whole tensor (the accuracy study's baseline).

    Returns a :class:`QuantizedTensor`. x is not modified. See the module docstring for the maths.
    Quantisation carries no gradient (FP8 attention is a forward pass only): under grad mode an x
    that requires grad raises ValueError (use torch.no_grad(), torch.inference_mode() or
    x.detach()), rather than returning detached data silently.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    from .api import check_dense   # here, not at the top: api is the layer above this module
    check_dense("x", x)
    if x.dim() != 4:
        raise ValueError(f"x must be 4-D (batch, seqlen, heads, head_dim), got shape {tuple(x.shape)}")
    if x.dtype not in _INPUT_DTYPES:
        raise ValueError(f"x must be float16, bfloat16 or float32, got {x.dtype}")
    head_dim = x.shape[-1]
    if head_dim == 0 or head_dim % 8 != 0 or head_dim > 256:
        raise ValueError(f"x's head_dim must be a multiple of 8 between 8 and 256, got {head_dim}")
    _check_int("block_size", block_size)
    if not (_MIN_BLOCK <= block_size <= _MAX_BLOCK) or block_size & (block_size - 1):
        raise ValueError(f"block_size must be a power of two in [{_MIN_BLOCK}, {_MAX_BLOCK}], "
                         f"got {block_size}")
    _check_int("seed", seed)
    if not 0 <= seed < 2 ** 64:
        raise ValueError(f"seed must be in [0, 2**64), got {seed}")
    if role not in ("q", "k", "v"):
        raise ValueError(f"role must be 'q', 'k' or 'v', got {role!r}")
    if not isinstance(rotate, bool):
        raise TypeError(f"rotate must be a bool, got {type(rotate).__name__}")
    if not isinstance(per_tensor, bool):
        raise TypeError(f"per_tensor must be a bool, got {type(per_tensor).__name__}")
    if rotate and role == "v":
        raise ValueError("rotate=True is not allowed with role='v': the rotation cancels only in "
                         "Q K^T (both rotated), nothing undoes it in P V")
    if torch.is_grad_enabled() and x.requires_grad:
        raise ValueError("quantize_fp8 does not carry gradients (FP8 attention is a forward pass "
                         "only), and x requires grad: call it under torch.no_grad() or "
                         "torch.inference_mode(), or on x.detach()")
    if x.stride(-1) != 1:
        x = x.contiguous()

    had = hadamard_block_size(head_dim)
    signs = _device_signs(head_dim, seed, x.device) if rotate else None
    if x.device.type == "cuda" or (x.device.type == "cpu" and _interpreter_active()):
        impl = _quantize_triton
    else:
        impl = _quantize_torch
    tensor_scale = None
    if per_tensor:
        xf = rotate_rows(x, seed) if rotate else x.to(torch.float32)
        amax = xf.abs().amax() if xf.numel() else torch.zeros((), device=x.device)
        tensor_scale = _scale_of(amax.to(torch.float32)).reshape(1)
    if x.numel() == 0:
        data, scales = _quantize_torch(x, block_size, signs, had, tensor_scale)
    else:
        data, scales = impl(x, block_size, signs, had, tensor_scale)
    return QuantizedTensor(data=data, scales=scales, block_size=block_size, rotated=rotate,
                           seed=seed, dtype=x.dtype, role=role, per_tensor=per_tensor)
