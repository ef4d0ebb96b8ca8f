"""Emulated FP8 attention forward in PyTorch: the executable specification of the FP8 kernel.

    qq, kq, vq = (quantize_fp8(t, role=r, rotate=r != "v") for t, r in ((q, "q"), (k, "k"), (v, "v")))
    out, lse = fp8_attention_forward(qq, kq, vq, causal=True)
    out, lse = fp8_attention(q, k, v, causal=True, rotate=True)       # the same, quantising first

It computes what FlashAttention-3's FP8 forward computes, one key block at a time (memory
O(seqlen * block), nothing of size seqlen_q x seqlen_k), with e4m3 operands for both matrix
products and float32 everywhere else:

    for each key block j (block_size keys of K and V, the blocks their scales belong to):
        S   = (Q8 @ K8_j^T) * (q_scale[row] * k_scale[j]) * softmax_scale     # e4m3 x e4m3 -> fp32
        m'  = max(m, rowmax S);  alpha = exp(m - m');  P = exp(S - m')          # fp32, P in [0, 1]
        P8  = e4m3(P * 256)                                                     # requantised P
        l   = alpha * l + rowsum(P * 256)                                       # fp32
        O   = alpha * O + (P8 @ V8_j) * v_scale[j]                              # e4m3 x e4m3 -> fp32
    out = O / l  (bf16 by default);  lse = m + log(l / 256)

Q8/K8/V8 are the e4m3 codes of :func:`fusedattn.quantize_fp8`; the products of two e4m3 values are
exact in float32, so the score and output products are e4m3 tensor-core products with a float32
accumulator. Q's scale is looked up per query row (its block), K's and V's per key block, so the
kernel's key tile must be (a divisor of) K's ``block_size`` and its query tile (a divisor of) Q's.

**The scale of P: a fixed 2**8 = 256.** P = exp(S - m) lies in [0, 1] (the running row max maps to
1), so no amax is needed: a fixed scale, exact to apply and to undo, does. e4m3 keeps 3 mantissa
bits at every normal magnitude, so the scale does not change how large P values round; it decides
where small ones fall off the bottom of the format. e4m3's smallest normal is 2**-6 and its
smallest subnormal 2**-9, so unscaled, every key whose score is more than ln(2**10) = 6.9 below the
row max would get P = 0 (and those below 4.2 only 1-3 bits): a thousand keys at 7 below the max
carry 0.9 times the weight of the max key, all of it lost. Multiplying by 256 moves the thresholds
8 bits down, to 12.5 below the max for P = 0, while the largest value, 256, stays under e4m3's
maximum of 448. A power of two is exact both ways; 448 itself would cover 0.8 bit more range at the
cost of a rounding of every P * 448 and of the 1/448. FlashAttention-3's kernel makes the same
choice (for FP8 its softmax subtracts 8 from the base-2 row max, so exp2 lands in [0, 256], and
divides the row sum by 2**8 for the logsumexp), and arXiv:2606.06521 derives 2**8 as the best
exact static scale for P. ``python -m fusedattn.fp8_study --ablation`` measures 1, 256 and 448.

The row sum l is taken from the unquantised float32 P (as FlashAttention-3 does: the sum is formed
in registers before the conversion). ``fp8_study`` measures the alternative (summing the requantised
P8) and the other P scales; see ``python -m fusedattn.fp8_study --ablation``.

What this emulation does not model: the order of the float32 additions inside the tensor-core
products (so it agrees with the kernel to float32 rounding, not bit for bit), and Hopper's FP8
tensor-core accumulator, which keeps fewer than float32's 24 bits of mantissa (reported as about 14
by DeepSeek-V3, section 3.3.2): the kernel's error can be somewhat larger than the emulation's for
long reduction dimensions. Causal masking is bottom-right aligned and GQA maps query head h to kv
head h // (heads // kv_heads), as in :mod:`fusedattn.reference`; a query row that sees no key gets
an output of zeros and a logsumexp of -inf.
"""

from __future__ import annotations

import math

import torch

from .fp8 import QuantizedTensor, quantize_fp8
from .reference import causal_visible

__all__ = ["fp8_attention_forward", "fp8_attention", "P_SCALE"]

P_SCALE = 256.0  # 2**8: P in [0, 1] is stored as e4m3(P * 256); see the module docstring


def _check(q: QuantizedTensor, k: QuantizedTensor, v: QuantizedTensor) -> None:
    for name, t, role in (("q", q, "q"), ("k", k, "k"), ("v", v, "v")):
        if not isinstance(t, QuantizedTensor):
            raise TypeError(f"{name} must be a QuantizedTensor (from fusedattn.quantize_fp8), "
                            f"got {type(t).__name__}")
        if t.role != role:
            raise ValueError(f"{name} was quantised with role={t.role!r}, expected role={role!r}")
    if q.rotated != k.rotated:
        raise ValueError(f"q and k must both be rotated or both not (q.rotated={q.rotated}, "
                         f"k.rotated={k.rotated}): the rotation cancels only in (R q) . (R k)")
    if q.rotated and q.seed != k.seed:
        raise ValueError(f"q and k must be rotated with the same seed, got {q.seed} and {k.seed}")
    if v.rotated:
        raise ValueError("v must not be rotated")
    if k.block_size != v.block_size:
        raise ValueError(f"k and v must share a block_size (the kernel's key tile), got "
                         f"{k.block_size} and {v.block_size}")
    b, sq, h, d = q.shape
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    if k.shape[0] != b or k.shape[3] != d:
        raise ValueError(f"k's batch and head_dim must match q's: q {tuple(q.shape)}, k {tuple(k.shape)}")
    if h % k.shape[2] != 0:
        raise ValueError(f"q's heads ({h}) must be a multiple of k's kv_heads ({k.shape[2]})")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k and v must be on one device, got {q.device}, {k.device}, {v.device}")


def _e4m3(x: torch.Tensor) -> torch.Tensor:
    """Round float32 to e4m3 (nearest, ties to even; saturating at +-448) and widen back to float32."""
    return x.clamp(-448.0, 448.0).to(torch.float8_e4m3fn).to(torch.float32)


def fp8_attention_forward(q: QuantizedTensor, k: QuantizedTensor, v: QuantizedTensor,
                          causal: bool = False, softmax_scale: float | None = None, *,
                          out_dtype: torch.dtype = torch.bfloat16, p_scale: float = P_SCALE,
                          rowsum_of_fp8_p: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """FP8 attention forward from quantised q (batch, seqlen_q, heads, head_dim) and k, v
    (batch, seqlen_k, kv_heads, head_dim).

    Returns ``(out, lse)``: out (batch, seqlen_q, heads, head_dim) in ``out_dtype`` (bf16 by
    default, as FP8 kernels write it), lse float32 (batch, heads, seqlen_q), natural log.
    ``p_scale`` and ``rowsum_of_fp8_p`` exist for the accuracy study's ablation; the kernel's
    choices are the defaults.
    """
    _check(q, k, v)
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    g = h // hk
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else float(softmax_scale)
    dev = q.device
    f32 = torch.float32
    # Grouped views, as in reference.py: q (b, hk, g, sq, d), k/v (b, hk, 1, sk, d).
    q8 = q.data.to(f32).view(b, sq, hk, g, d).permute(0, 2, 3, 1, 4)
    q_row_scale = q.row_scales().reshape(b, sq, hk, g).permute(0, 2, 3, 1)     # (b, hk, g, sq)
    k8 = k.data.to(f32).permute(0, 2, 1, 3).unsqueeze(2)
    v8 = v.data.to(f32).permute(0, 2, 1, 3).unsqueeze(2)
    m = torch.full((b, hk, g, sq), float("-inf"), dtype=f32, device=dev)
    l = torch.zeros((b, hk, g, sq), dtype=f32, device=dev)
    o = torch.zeros((b, hk, g, sq, d), dtype=f32, device=dev)
    bn = k.block_size
    for j, start in enumerate(range(0, sk, bn)):
        end = min(start + bn, sk)
        if causal and start > (sq - 1) + (sk - sq):
            break  # this key block and all later ones are invisible to every query row
        k_scale = k.scales[:, :, j].reshape(b, hk, 1, 1)
        v_scale = v.scales[:, :, j].reshape(b, hk, 1, 1, 1)
        s = torch.matmul(q8, k8[..., start:end, :].transpose(-1, -2))           # exact products
        s = s * (q_row_scale[..., None] * k_scale[..., None]) * scale
        if causal:
            s = s.masked_fill(~causal_visible(sq, sk, start, end, device=dev), float("-inf"))
        m_new = torch.maximum(m, s.amax(dim=-1))
        # rows with no key yet (m_new = -inf): measured from 0, so p = 0. Only those: a row max of
        # +inf (scores overflowed float32) must give NaN, as in fusedattn.attention and plain
        # float32 attention, not p = e4m3's largest value for every key and an output of zeros
        m_ref = torch.where(m_new == float("-inf"), 0.0, m_new)
        alpha = torch.exp(m - m_ref)
        p = torch.exp(s - m_ref[..., None]) * p_scale                             # [0, p_scale]
        p8 = _e4m3(p)
        l = alpha * l + (p8 if rowsum_of_fp8_p else p).sum(dim=-1)
        o = alpha[..., None] * o + torch.matmul(p8, v8[..., start:end, :]) * v_scale
        m = m_new
    unseen = l == 0                  # no key seen: zeros and -inf (l is NaN, not 0, after NaN)
    o = o / torch.where(unseen, 1.0, l)[..., None]
    lse = torch.where(unseen, float("-inf"), m + torch.log(torch.where(unseen, 1.0, l) / p_scale))
    lse = torch.where(m == float("inf"), float("inf"), lse)   # overflowed scores: +inf
    out = o.permute(0, 3, 1, 2, 4).reshape(b, sq, h, d).to(out_dtype)
    return out, lse.reshape(b, h, sq)


def fp8_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                  softmax_scale: float | None = None, *, block_size: int = 128, rotate: bool = False,
                  per_tensor: bool = False, seed: int = 0, out_dtype: torch.dtype = torch.bfloat16,
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise 16-bit q, k, v with :func:`fusedattn.quantize_fp8` (q and k rotated when ``rotate``,
    with ``seed``; one scale per tensor when ``per_tensor``) and run :func:`fp8_attention_forward`."""
    qq = quantize_fp8(q, block_size=block_size, rotate=rotate, seed=seed, role="q",
                      per_tensor=per_tensor)
    kq = quantize_fp8(k, block_size=block_size, rotate=rotate, seed=seed, role="k",
                      per_tensor=per_tensor)
    vq = quantize_fp8(v, block_size=block_size, role="v", per_tensor=per_tensor)
    return fp8_attention_forward(qq, kq, vq, causal, softmax_scale, out_dtype=out_dtype)
