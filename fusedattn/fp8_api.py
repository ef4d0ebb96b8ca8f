"""The public FP8 attention call: :func:`attention_fp8`.

    out = fusedattn.attention_fp8(q, k, v, causal=True)                 # 16-bit q, k, v
    kq = fusedattn.quantize_fp8(k, role="k", rotate=True)                 # an FP8 KV cache ...
    vq = fusedattn.quantize_fp8(v, role="v")
    out = fusedattn.attention_fp8(q, kq, vq, causal=True)               # ... reused (q is quantised
                                                                        #     to match kq's rotation)

What it computes: softmax(Q K^T * softmax_scale) V as FlashAttention-3's FP8 forward does, with
e4m3 operands for both matrix products (``fusedattn.fp8_reference`` is the executable
specification, the Gluon kernel ``fusedattn.kernels.hopper_fp8_fwd`` the fast path). The output is
**not** the 16-bit result: it differs from it by the FP8 error that the accuracy study
(``python -m fusedattn.fp8_study``, RESULTS.md) measures. On the FA3 paper's outlier test
(N(0,1) + N(0,100) * Bernoulli(0.001), head_dim 128) the RMSE against float64 attention is about
8.5e-3 with per-block scales and incoherent processing (16-bit: 2.5e-4); relative to the output's
RMS that is 3 % to 6 % on synthetic and real (MiniLM) activations, against ~0.15 % for bf16. Use it
where that is acceptable (inference), check on your own data, and keep the 16-bit
:func:`fusedattn.attention` where it is not.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .api import check_bool, check_dense, check_softmax_scale, type_name
from .fp8 import QuantizedTensor, quantize_fp8

__all__ = ["attention_fp8", "FP8_BACKENDS", "FP8_HEAD_DIMS", "FP8_BLOCK"]

FP8_BACKENDS = ("hopper", "reference")
FP8_HEAD_DIMS = (64, 128, 256)      # the Gluon kernel's head dims
FP8_BLOCK = 128                     # q's block (the kernel's query tile), and k and v's block where
                                    # the kernel's table has no preference (other head dims)


def kv_block_for(head_dim: int, causal: bool) -> int:
    """The block_size attention_fp8 quantises 16-bit k and v with: the FP8 kernel's preferred key
    tile for (head_dim, causal) (hopper_fp8_fwd.preferred_block: 256 keys at head_dim 64 and
    128, 128 at 256), FP8_BLOCK for head dims the kernel lacks. Both
    backends use it, so that "reference" emulates what "hopper" computes."""
    if head_dim not in FP8_HEAD_DIMS:
        return FP8_BLOCK
    from .kernels.hopper_fp8_fwd import preferred_block
    return preferred_block(head_dim, causal)
_FLOAT_INPUTS = (torch.float16, torch.bfloat16, torch.float32)
_LAYOUT = {"q": "(batch, seqlen_q, heads, head_dim)", "k": "(batch, seqlen_k, kv_heads, head_dim)",
           "v": "(batch, seqlen_k, kv_heads, head_dim)"}


def _name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _check_operand(name: str, x) -> None:
    if isinstance(x, QuantizedTensor):
        if x.role != name:
            raise ValueError(f"{name} is a QuantizedTensor quantised with role={x.role!r}; pass "
                             f"quantize_fp8(..., role={name!r}) as {name}")
        if x.data.dtype != torch.float8_e4m3fn:
            raise TypeError(f"{name}.data must be float8_e4m3fn, got {_name(x.data.dtype)}")
        check_dense(f"{name}.data", x.data)
        if not isinstance(x.scales, Tensor) or x.scales.dtype != torch.float32:
            got = _name(x.scales.dtype) if isinstance(x.scales, Tensor) else type_name(x.scales)
            raise TypeError(f"{name}.scales must be a float32 tensor, got {got}")
        if not isinstance(x.rotated, bool):
            raise TypeError(f"{name}.rotated must be a bool, got {type_name(x.rotated)}")
        if isinstance(x.seed, bool) or not isinstance(x.seed, int) or not 0 <= x.seed < 2 ** 64:
            raise ValueError(f"{name}.seed must be an int in [0, 2**64), got {x.seed!r}")
        t = x.data
        bs = x.block_size
        if isinstance(bs, bool) or not isinstance(bs, int):
            raise TypeError(f"{name}.block_size must be an int, got {type_name(bs)}")
        if bs < 1:
            raise ValueError(f"{name}.block_size must be a positive int, got {bs!r}")
        nb = -(-t.shape[1] // bs) if t.dim() == 4 else None
        if t.dim() == 4 and tuple(x.scales.shape) != (t.shape[0], t.shape[2], nb):
            raise ValueError(f"{name}.scales has shape {tuple(x.scales.shape)}; expected (batch, "
                             f"heads, ceil(seqlen / block_size)) = {(t.shape[0], t.shape[2], nb)}")
        if x.scales.device != t.device:
            raise ValueError(f"{name}.scales is on {x.scales.device} but {name}.data on {t.device}")
    elif isinstance(x, Tensor):
        check_dense(name, x)
        if x.dtype not in _FLOAT_INPUTS:
            extra = (" (pass a QuantizedTensor from fusedattn.quantize_fp8, which carries the "
                     "scales, instead of raw e4m3 codes)" if "float8" in str(x.dtype) else "")
            raise TypeError(f"{name} has dtype {_name(x.dtype)}; expected float16, bfloat16 or "
                            f"float32 (quantised here), or a fusedattn.QuantizedTensor{extra}")
        t = x
    else:
        raise TypeError(f"{name} must be a torch.Tensor or a fusedattn.QuantizedTensor, got "
                        f"{type(x).__name__}")
    if t.dim() != 4:
        raise ValueError(f"{name} must have 4 dimensions {_LAYOUT[name]}, got shape {tuple(t.shape)}")


def _rotation_of(q, k, incoherent, seed) -> tuple[bool, int]:
    """(rotate, seed) for q and k: from the quantised operands if any (and they must agree with each
    other and with ``incoherent`` when that is given), else from ``incoherent`` and ``seed``."""
    given = [(n, t) for n, t in (("q", q), ("k", k)) if isinstance(t, QuantizedTensor)]
    if len(given) == 2 and q.rotated != k.rotated:
        raise ValueError(f"q and k were quantised differently: q.rotated={q.rotated}, "
                         f"k.rotated={k.rotated}; the rotation cancels only when both are rotated "
                         "with the same seed (quantize_fp8(..., rotate=True, seed=S) for both)")
    if len(given) == 2 and q.rotated and q.seed != k.seed:
        raise ValueError(f"q and k were rotated with different seeds (q.seed={q.seed}, "
                         f"k.seed={k.seed}): Q K^T is then wrong; quantise both with one seed")
    if given:
        name, t = given[0]
        if incoherent is not None and incoherent != t.rotated:
            raise ValueError(f"incoherent={incoherent} but {name} was quantised with "
                             f"rotate={t.rotated}; leave incoherent=None to follow the quantised "
                             "operands")
        if seed is not None and t.rotated and seed != t.seed:
            raise ValueError(f"seed={seed} but {name} was rotated with seed {t.seed}")
        return t.rotated, t.seed
    return (True if incoherent is None else incoherent), (0 if seed is None else seed)


def _check_args(q, k, v, causal, softmax_scale, incoherent, return_lse, seed, backend) -> None:
    for name, x in (("q", q), ("k", k), ("v", v)):
        _check_operand(name, x)
    if not isinstance(backend, str) or backend not in FP8_BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(repr(b) for b in FP8_BACKENDS)}, got "
                         f"{backend!r} ('hopper': the FP8 kernel, sm_90 only; 'reference': the "
                         "emulation in PyTorch, any device, slow)")
    check_bool("causal", causal)
    check_bool("return_lse", return_lse)
    if incoherent is not None and not isinstance(incoherent, bool):
        raise TypeError(f"incoherent must be a bool or None, got {type_name(incoherent)}")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise TypeError(f"seed must be an int or None, got {type_name(seed)}")
    if seed is not None and not 0 <= seed < 2 ** 64:
        raise ValueError(f"seed must be in [0, 2**64), got {seed}")
    check_softmax_scale(softmax_scale)
    plain = [(n, x.dtype) for n, x in (("q", q), ("k", k), ("v", v)) if isinstance(x, Tensor)]
    if len({dt for _, dt in plain}) > 1:
        raise TypeError("q, k and v given as tensors must share one dtype, got "
                        + ", ".join(f"{n} {_name(dt)}" for n, dt in plain))
    if isinstance(v, QuantizedTensor) and v.rotated:
        raise ValueError("v must not be rotated (nothing undoes a rotation of V in P V)")
    qs, ks, vs = (x.shape for x in (q, k, v))
    devs = [x.device for x in (q, k, v)]
    if not (devs[0] == devs[1] == devs[2]):
        raise ValueError(f"q, k and v must be on the same device, got q on {devs[0]}, k on "
                         f"{devs[1]}, v on {devs[2]}")
    if ks != vs:
        raise ValueError(f"k and v must have the same shape {_LAYOUT['k']}, got k {tuple(ks)} and "
                         f"v {tuple(vs)}")
    if ks[0] != qs[0]:
        raise ValueError(f"k and v have batch {ks[0]} but q has batch {qs[0]}; they must match")
    if ks[3] != qs[3]:
        raise ValueError(f"k and v have head_dim {ks[3]} but q has head_dim {qs[3]}; they must match")
    if qs[2] == 0 or ks[2] == 0 or qs[2] % ks[2] != 0:
        raise ValueError(f"q's heads ({qs[2]}) must be a positive multiple of k and v's kv_heads "
                         f"({ks[2]}) (MHA: equal; GQA: a multiple; MQA: kv_heads = 1)")
    _rotation_of(q, k, incoherent, seed)     # q and k rotated alike (raises otherwise)
    if torch.is_grad_enabled() and any(isinstance(x, Tensor) and x.requires_grad for x in (q, k, v)):
        raise ValueError("attention_fp8 is a forward pass only (no gradients through the FP8 "
                         "quantisation): call it under torch.no_grad() or torch.inference_mode(), "
                         "or on detached tensors; fusedattn.attention is differentiable")
    d = qs[3]
    if backend == "hopper":
        if d not in FP8_HEAD_DIMS:
            raise ValueError(f"head_dim must be one of {FP8_HEAD_DIMS} for the FP8 kernel "
                             f"(backend='hopper'), got {d}")
        from .kernels.hopper_fp8_fwd import kv_block_error
        for name, x in (("k", k), ("v", v)):
            err = isinstance(x, QuantizedTensor) and kv_block_error(d, causal, x.block_size, name)
            if err:
                raise ValueError(err)
        dev = devs[0]
        if dev.type != "cuda":
            raise ValueError(f"backend='hopper' runs on an sm_90 GPU (H100/H200); the inputs are on "
                             f"{dev}. backend='reference' runs the emulated FP8 computation in "
                             "PyTorch on any device (slow); fusedattn.attention is the 16-bit path")
        major, minor = torch.cuda.get_device_capability(dev)
        if (major, minor) != (9, 0):
            raise ValueError(f"backend='hopper' needs an sm_90 GPU (H100/H200); {dev} is "
                             f"{torch.cuda.get_device_name(dev)} (sm_{major}{minor}). "
                             "backend='reference' runs the emulated FP8 computation instead (slow)")
    else:
        if d % 8 != 0 or not 8 <= d <= 256:
            raise ValueError(f"head_dim must be a multiple of 8 between 8 and 256, got {d}")
        if isinstance(k, QuantizedTensor) and isinstance(v, QuantizedTensor) \
                and k.block_size != v.block_size:
            raise ValueError(f"k and v must share a block_size (one scale per key block), got "
                             f"{k.block_size} and {v.block_size}")


def _out_dtype(q) -> torch.dtype:
    dt = q.dtype  # a QuantizedTensor's dtype is the dtype it was quantised from
    return dt if dt in (torch.float16, torch.bfloat16) else torch.bfloat16


def attention_fp8(q, k, v, *, causal: bool = False, softmax_scale: float | None = None,
                  incoherent: bool | None = None, return_lse: bool = False,
                  seed: int | None = None, backend: str = "hopper"):
    """FP8 (e4m3) attention forward: softmax(q k^T * softmax_scale) v with 8-bit matrix products.

    Args:
        q: (batch, seqlen_q, heads, head_dim); k, v: (batch, seqlen_k, kv_heads, head_dim), heads
            a multiple of kv_heads (MHA, GQA, MQA). Each is either a float16 / bfloat16 / float32
            tensor, quantised here with :func:`fusedattn.quantize_fp8` (one scale per head and block
            of rows: 128 rows for q; for k and v the kernel's key tile, 256 rows at head_dim 64 and
            128, 128 at 256 (``kv_block_for``); q and k rotated first when
            ``incoherent``), or a :class:`QuantizedTensor` from
            ``quantize_fp8`` (role "q", "k" or "v"), e.g. an FP8 KV cache. Mixed is fine: tensors
            are quantised to match the quantised operands (q with k's rotation seed).
        causal: bottom-right aligned causal mask, as :func:`fusedattn.attention`.
        softmax_scale: defaults to 1 / sqrt(head_dim).
        incoherent: rotate q and k by a random-sign Hadamard matrix before quantising (spreads
            outlier channels; cancels in Q K^T). Default (None): True for q and k passed as
            float16 / bfloat16 / float32 tensors (quantised here), and whatever the quantised
            operands carry; a value that contradicts them is an error.
        return_lse: also return the logsumexp of each score row (float32 (batch, heads,
            seqlen_q), natural log).
        seed: the rotation's seed (default 0; must match a quantised q or k's).
        backend: "hopper" (default): the Gluon FP8 kernel, sm_90 GPUs (H100/H200) only, head_dim
            64, 128 or 256, quantised k and v with a block_size of 128, 256 or a multiple.
            "reference": the same
            arithmetic emulated in PyTorch (fusedattn.fp8_reference), any device and head_dim
            (multiple of 8, <= 256), slow. Nothing falls back silently: a backend that cannot run
            the call raises ValueError saying why.

    Returns:
        out (batch, seqlen_q, heads, head_dim) in q's 16-bit dtype (bfloat16 for float32 inputs);
        with ``return_lse`` also the logsumexp. A query row that sees no key (causal with
        seqlen_q > seqlen_k, or seqlen_k = 0) gives zeros and -inf.

    Accuracy: the output differs from 16-bit attention by the FP8 error the accuracy study
    measures (module docstring; RESULTS.md "FP8 accuracy study"): relative RMSE ~3-6 %. Forward
    only: inputs that require grad raise (use torch.no_grad()). The inputs are not modified.

    CUDA graphs: with backend "hopper", causal at head_dim 64, 128 and 256, the first call with a new
    shape builds the kernel's tile table on the host and copies it to the GPU (kept for the
    process, 4 bytes per tile); that first call cannot happen inside graph capture (it raises
    RuntimeError saying so): make the call once before capturing.
    """
    _check_args(q, k, v, causal, softmax_scale, incoherent, return_lse, seed, backend)
    rotate, seed = _rotation_of(q, k, incoherent, seed)
    b, sq, h, d = q.shape
    hk = k.shape[2]
    out_dtype = _out_dtype(q)
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else float(softmax_scale)
    dev = q.device
    if b == 0 or sq == 0 or k.shape[1] == 0:
        out = torch.zeros((b, sq, h, d), dtype=out_dtype, device=dev)
        lse = torch.full((b, h, sq), float("-inf"), dtype=torch.float32, device=dev)
        return (out, lse) if return_lse else out

    # k and v first: their block size (a quantised KV cache's) decides nothing for q, any works
    kv_block = next((x.block_size for x in (k, v) if isinstance(x, QuantizedTensor)),
                    kv_block_for(d, causal))
    with torch.no_grad():
        qq = q if isinstance(q, QuantizedTensor) else quantize_fp8(
            q, block_size=FP8_BLOCK, rotate=rotate, seed=seed, role="q")
        kq = k if isinstance(k, QuantizedTensor) else quantize_fp8(
            k, block_size=kv_block, rotate=rotate, seed=seed, role="k")
        vq = v if isinstance(v, QuantizedTensor) else quantize_fp8(
            v, block_size=kv_block, role="v")
        if backend == "hopper":
            from .kernels import hopper_fp8_fwd
            out, lse = hopper_fp8_fwd.forward(qq, kq, vq, causal, scale, out_dtype=out_dtype)
        else:
            from .fp8_reference import fp8_attention_forward
            out, lse = fp8_attention_forward(qq, kq, vq, causal, scale, out_dtype=out_dtype)
    return (out, lse) if return_lse else out
