"""The public API: :func:`attention`, :func:`sdpa`, :func:`explain`, :func:`available_backends`.

Every argument is checked here, before any kernel runs; an error names the argument and says what
was expected. The backend is chosen here too, and the call then goes to :func:`fusedattn.ops.attention`
(the custom ops under torch.compile, the same functions without the dispatcher in eager mode).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field

import torch
from torch import Tensor

from . import ops
from .backends import BACKENDS, PREFERENCE, Problem, device_capability, resolve

__all__ = ["attention", "sdpa", "explain", "available_backends", "Explanation"]

MAX_HEAD_DIM = 256
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

CAUSAL_DIAGRAM = """\
    causal=True is aligned to the bottom-right corner (as in FlashAttention): query row i sees key j
    iff j <= i + (seqlen_k - seqlen_q). With seqlen_q = seqlen_k this is the usual lower triangle.

        seqlen_q = 2, seqlen_k = 5             seqlen_q = 5, seqlen_k = 2
               k0 k1 k2 k3 k4                         k0 k1
          q0    1  1  1  1  0                    q0    0  0   <- sees no key: output 0, lse -inf
          q1    1  1  1  1  1                    q1    0  0
                                                 q2    0  0
                                                 q3    1  0
                                                 q4    1  1
"""


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def type_name(x) -> str:
    """The type of x for an error message: 'str', 'numpy.bool', 'torch.Tensor'."""
    t = type(x)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def check_bool(name: str, value) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type_name(value)}")


def check_dense(name: str, t: Tensor) -> None:
    """t must be an ordinary dense tensor: sparse and nested tensors are refused up front, by name,
    rather than failing later inside a backend with an error that names no argument."""
    if t.is_nested:
        raise TypeError(f"{name} must be a dense (strided) tensor, got a nested tensor; pad the "
                        "sequences to one length (and mask them) or call fusedattn per sequence")
    if t.layout != torch.strided:
        raise TypeError(f"{name} must be a dense (strided) tensor, got layout {t.layout}; "
                        "convert it with .to_dense()")


# The kernels multiply the scale by log2(e) in float32: |scale| * log2(e) must stay finite there.
MAX_SOFTMAX_SCALE = 2.3e38   # float32's max (3.4028e38) / log2(e) = 2.3587e38, rounded down


def check_softmax_scale(value, name: str = "softmax_scale") -> None:
    """None, or a real number of magnitude at most MAX_SOFTMAX_SCALE; any sign, zero included."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number or None, got {type_name(value)}")
    try:
        f = float(value)
    except OverflowError:
        f = math.inf
    if not (math.isfinite(f) and abs(f) <= MAX_SOFTMAX_SCALE):
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise ValueError(f"{name} must be finite, at most {MAX_SOFTMAX_SCALE:g} in magnitude (the "
                         f"kernels scale by it in float32), got {shown}")


# How the argument checks name the tensors: attention's (batch, seqlen, heads, head_dim) names,
# and sdpa's, whose tensors arrive transposed to that order (shapes are shown as the caller passed
# them).
_ATTENTION_NAMES = (("q", "k", "v"), {"q": "(batch, seqlen_q, heads, head_dim)",
                                      "k": "(batch, seqlen_k, kv_heads, head_dim)",
                                      "v": "(batch, seqlen_k, kv_heads, head_dim)"}, False)
_SDPA_NAMES = (("query", "key", "value"), {"query": "(batch, heads, seqlen_q, head_dim)",
                                           "key": "(batch, kv_heads, seqlen_k, head_dim)",
                                           "value": "(batch, kv_heads, seqlen_k, head_dim)"}, True)


def _check_inputs(q, k, v, causal, softmax_scale, backend, naming=_ATTENTION_NAMES) -> None:
    """Raise TypeError / ValueError naming the offending argument; nothing is modified."""
    (Q, K, V), layouts, transposed = naming

    def shown(t):   # a shape as the caller wrote it
        s = tuple(t.shape)
        return (s[0], s[2], s[1], s[3]) if transposed and len(s) == 4 else s

    for name, t in ((Q, q), (K, k), (V, v)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        check_dense(name, t)
    for name, t in ((Q, q), (K, k), (V, v)):
        if t.dim() != 4:
            raise ValueError(f"{name} must have 4 dimensions {layouts[name]}, "
                             f"got {t.dim()} dimensions with shape {shown(t)}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"{Q}, {K} and {V} must have the same dtype, got "
                        f"{Q} {_dtype_name(q.dtype)}, {K} {_dtype_name(k.dtype)}, "
                        f"{V} {_dtype_name(v.dtype)}")
    if q.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{Q}, {K} and {V} have dtype {_dtype_name(q.dtype)}; expected one of "
                        + ", ".join(_dtype_name(d) for d in SUPPORTED_DTYPES))
    if not (q.device == k.device == v.device):
        raise ValueError(f"{Q}, {K} and {V} must be on the same device, got {Q} on {q.device}, "
                         f"{K} on {k.device}, {V} on {v.device}")
    if k.shape != v.shape:
        raise ValueError(f"{K} and {V} must have the same shape {layouts[K]}, "
                         f"got {K} {shown(k)} and {V} {shown(v)}")
    b, _, h, d = q.shape
    if k.shape[0] != b:
        raise ValueError(f"{K} and {V} have batch {k.shape[0]} but {Q} has batch {b}; they must match")
    if k.shape[3] != d:
        raise ValueError(f"{K} and {V} have head_dim {k.shape[3]} but {Q} has head_dim {d}; "
                         "they must match")
    hk = k.shape[2]
    if hk == 0 or h == 0 or h % hk != 0:
        raise ValueError(f"{Q}'s heads ({h}) must be a positive multiple of {K} and {V}'s kv_heads "
                         f"({hk}) (MHA: equal; GQA: a multiple; MQA: kv_heads = 1)")
    if d == 0 or d % 8 != 0 or d > MAX_HEAD_DIM:
        raise ValueError(f"head_dim must be a multiple of 8 between 8 and {MAX_HEAD_DIM}, got {d}")
    check_bool("causal", causal)
    check_softmax_scale(softmax_scale)
    if not isinstance(backend, str):
        raise TypeError(f"backend must be a string, got {type(backend).__name__}")
    if backend != "auto" and backend not in BACKENDS:
        raise ValueError(f"backend must be 'auto' or one of {', '.join(repr(n) for n in PREFERENCE)}, "
                         f"got {backend!r}")


def attention(q: Tensor, k: Tensor, v: Tensor, *, causal: bool = False,
              softmax_scale: float | None = None, return_lse: bool = False,
              backend: str = "auto") -> Tensor | tuple[Tensor, Tensor]:
    """softmax(q k^T * softmax_scale) v, fused: the seqlen_q x seqlen_k scores never reach memory.

    Args:
        q: (batch, seqlen_q, heads, head_dim), float16 / bfloat16 (float32 / float64 run on the
            reference backend only).
        k, v: (batch, seqlen_k, kv_heads, head_dim), same dtype and device as q. heads must be a
            multiple of kv_heads: MHA (equal), GQA, MQA (kv_heads = 1). Query head h reads kv head
            h // (heads // kv_heads). head_dim is a multiple of 8, at most 256. Any strides.
        causal: mask future keys; see the diagram below.
        softmax_scale: defaults to 1 / sqrt(head_dim); any real number of magnitude at most
            2.3e38 (negative and zero included, as torch's SDPA).
        return_lse: also return the logsumexp of each score row.
        backend: "auto" (the fastest that can take the inputs; see :func:`explain`), "hopper",
            "triton" or "reference". A named backend that cannot take the inputs raises ValueError
            saying why; nothing falls back silently.

    Returns:
        out, (batch, seqlen_q, heads, head_dim) in q's dtype; with ``return_lse=True`` also the
        logsumexp, float32 (float64 for float64 inputs), (batch, heads, seqlen_q), natural log.
        Differentiable in q, k and v (and through the logsumexp); second derivatives only with
        backend "reference" (the kernels' gradients raise RuntimeError when differentiated).
        seqlen_k = 0 gives zeros and a logsumexp of -inf.

    """
    _check_inputs(q, k, v, causal, softmax_scale, backend)
    check_bool("return_lse", return_lse)
    scale = 1.0 / math.sqrt(q.shape[-1]) if softmax_scale is None else float(softmax_scale)
    fwd_name, bwd_name = resolve(Problem.of(q, k, causal), backend)
    out, lse = ops.attention(q, k, v, causal, scale, fwd_name, bwd_name)
    return (out, lse) if return_lse else out


attention.__doc__ += "\n" + CAUSAL_DIAGRAM


def sdpa(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
         dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
         enable_gqa: bool = False) -> Tensor:
    """A drop-in for ``torch.nn.functional.scaled_dot_product_attention``.

    Same arguments and layout: query (batch, heads, seqlen_q, head_dim), key and value
    (batch, kv_heads, seqlen_k, head_dim); returns (batch, heads, seqlen_q, head_dim). ``is_causal``
    follows PyTorch's convention, aligned to the top-left corner (query i sees key j iff j <= i),
    which differs from :func:`attention`'s bottom-right alignment when seqlen_q != seqlen_k.
    What fusedattn does not compute raises NotImplementedError rather than computing something
    else: an ``attn_mask``, ``dropout_p > 0`` and a value head_dim that differs from the key's.
    Only 4-dimensional inputs are accepted.
    """
    check_bool("is_causal", is_causal)
    check_bool("enable_gqa", enable_gqa)
    check_softmax_scale(scale, "scale")
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, numbers.Real):
        raise TypeError(f"dropout_p must be a float, got {type_name(dropout_p)}")
    if attn_mask is not None:
        raise NotImplementedError("fusedattn.sdpa does not support attn_mask (an arbitrary mask); "
                                  "use is_causal=True for causal masking, or "
                                  "torch.nn.functional.scaled_dot_product_attention")
    if dropout_p != 0.0:
        raise NotImplementedError(f"fusedattn.sdpa does not support dropout, got dropout_p={dropout_p}; "
                                  "pass dropout_p=0.0")
    for name, t in (("query", query), ("key", key), ("value", value)):
        if isinstance(t, Tensor):
            check_dense(name, t)   # before the shape reads and transposes below
    four_d = [isinstance(t, Tensor) and t.dim() == 4 for t in (query, key, value)]
    if four_d[1] and four_d[2] and value.shape[-1] != key.shape[-1]:
        raise NotImplementedError(f"fusedattn.sdpa needs value's head_dim equal to key's, got key "
                                  f"{key.shape[-1]} and value {value.shape[-1]}; use "
                                  "torch.nn.functional.scaled_dot_product_attention")
    # attention's layout, (batch, seqlen, heads, head_dim); every check names sdpa's arguments
    q, k, v = (t.transpose(1, 2) if ok else t for t, ok in zip((query, key, value), four_d))
    _check_inputs(q, k, v, is_causal, scale, "auto", _SDPA_NAMES)
    if not enable_gqa and query.shape[1] != key.shape[1]:
        raise ValueError(f"query has {query.shape[1]} heads and key {key.shape[1]}: pass "
                         "enable_gqa=True for grouped-query attention")
    sq, sk = q.shape[1], k.shape[1]
    if not is_causal or sq == sk:
        out = attention(q, k, v, causal=is_causal, softmax_scale=scale)
    elif sq < sk:
        # Top-left: no query sees a key at or past position seqlen_q, so the call is the square
        # causal problem on the first seqlen_q keys (where both alignments agree).
        out = attention(q, k[:, :sq], v[:, :sq], causal=True, softmax_scale=scale)
    else:
        # Top-left with more queries than keys: the first seqlen_k rows are the square causal
        # problem; every later row sees all keys.
        head = attention(q[:, :sk], k, v, causal=True, softmax_scale=scale)
        tail = attention(q[:, sk:], k, v, causal=False, softmax_scale=scale)
        out = torch.cat([head, tail], dim=1)
    return out.transpose(1, 2)


@dataclass
class Explanation:
    """What ``backend="auto"`` (or a named backend) would do with a call, and why.

    ``forward`` and ``backward`` are the chosen backend names (None when the request cannot be
    served; ``error`` then says why); ``reasons`` maps every backend to None (can take the call) or
    the reason it cannot. ``str()`` gives the report.
    """

    inputs: str
    requested: str
    forward: str | None
    backward: str | None
    reasons: dict = field(default_factory=dict)
    error: str | None = None

    def __str__(self) -> str:
        lines = [f"fusedattn: {self.inputs}"]
        if self.forward is None:
            lines.append(f"cannot run this call: {self.error}")
        else:
            how = "picked by backend='auto'" if self.requested == "auto" else "as requested"
            lines.append(f"forward runs on '{self.forward}' ({how}); backward runs on '{self.backward}'"
                         + ("" if self.forward == self.backward else
                            f" because '{self.forward}' has no backward pass"))
        lines.append("backends, fastest first:")
        for name in PREFERENCE:
            why = self.reasons[name]
            verdict = "can run it" if why is None else f"cannot: {why}"
            if why is None and not BACKENDS[name].in_auto:
                verdict += " (experimental: runs only when asked for by name)"
            lines.append(f"  {name:<10} {verdict}  [{BACKENDS[name].summary}]")
        return "\n".join(lines)


def _describe(q: Tensor, k: Tensor, causal: bool) -> str:
    dev = str(q.device)
    cap = device_capability(q.device)
    if cap is not None:
        dev += f" ({torch.cuda.get_device_name(q.device)}, sm_{cap[0]}{cap[1]})"
    b, sq, h, d = q.shape
    return (f"batch {b}, seqlen_q {sq}, seqlen_k {k.shape[1]}, heads {h}, kv_heads {k.shape[2]}, "
            f"head_dim {d}, {_dtype_name(q.dtype)} on {dev}, causal={causal}")


def explain(q: Tensor, k: Tensor, v: Tensor, *, causal: bool = False, softmax_scale: float | None = None,
            backend: str = "auto") -> Explanation:
    """Which backend :func:`attention` would use for these inputs, and why each other could or could not.

    Takes the same arguments as :func:`attention` (the tensors are only inspected, never computed
    on) and returns an :class:`Explanation`; ``print()`` it for a readable report. Invalid inputs
    raise the same errors as :func:`attention`.
    """
    _check_inputs(q, k, v, causal, softmax_scale, backend)
    p = Problem.of(q, k, causal)
    reasons = {name: BACKENDS[name].why_not(p) for name in PREFERENCE}
    try:
        fwd, bwd = resolve(p, backend)
        error = None
    except ValueError as e:
        fwd = bwd = None
        error = str(e)
    return Explanation(_describe(q, k, causal), backend, fwd, bwd, reasons, error)


def available_backends(q: Tensor, k: Tensor, v: Tensor, *, causal: bool = False) -> list[str]:
    """The backends able to run these inputs, fastest first."""
    _check_inputs(q, k, v, causal, None, "auto")
    p = Problem.of(q, k, causal)
    return [name for name in PREFERENCE if BACKENDS[name].why_not(p) is None]
