"""Readable PyTorch references for attention. They run on any device.

Two things live here:

* :func:`attention_oracle` -- the float64 oracle: plain ``softmax(Q K^T * scale) V``, the whole score
  matrix materialised. Tests and benchmarks judge every kernel against it.
* :func:`attention_forward` / :func:`attention_backward` -- the seed's algorithm written out in
  PyTorch: a loop over key blocks with a running row max and row sum, one normalisation at the end,
  and the logsumexp out; the backward recomputes the probabilities block by block, from their
  row max and row sum recomputed in the accumulation dtype (one more pass over K than the
  kernels, which rebuild them from the float32 logsumexp, as FlashAttention does). Memory stays
  O(seqlen * block): nothing of size seqlen_q x seqlen_k is allocated.
  This is the ``reference`` backend of :func:`fusedattn.attention`, the executable specification
  that the kernels follow.

Layout: q is (batch, seqlen_q, heads, head_dim); k and v are (batch, seqlen_k, kv_heads, head_dim);
query head h reads kv head h // (heads // kv_heads). The causal mask is aligned to the bottom-right
corner: query i sees key j iff j <= i + (seqlen_k - seqlen_q). A query row that sees no key gets an
output of zeros and a logsumexp of -inf.
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "attention_oracle",
    "attention_plain",
    "attention_forward",
    "attention_backward",
    "causal_visible",
    "lse_dtype",
]

# Key-block width of the blockwise reference. Any value gives the same result up to rounding; 128
# keeps the per-block score tensor small while leaving few Python iterations.
DEFAULT_BLOCK = 128


def causal_visible(seqlen_q: int, seqlen_k: int, key_start: int = 0, key_end: int | None = None,
                   device=None) -> torch.Tensor:
    """Boolean (seqlen_q, key_end - key_start): True where query i may see key j (bottom-right)."""
    key_end = seqlen_k if key_end is None else key_end
    rows = torch.arange(seqlen_q, device=device)[:, None] + (seqlen_k - seqlen_q)
    cols = torch.arange(key_start, key_end, device=device)[None, :]
    return cols <= rows


def _scale(softmax_scale: float | None, head_dim: int) -> float:
    return 1.0 / math.sqrt(head_dim) if softmax_scale is None else float(softmax_scale)


def _grouped(q: torch.Tensor, kv_heads: int) -> torch.Tensor:
    """(batch, seqlen_q, heads, d) -> (batch, kv_heads, group, seqlen_q, d), a view: no copy."""
    b, s, h, d = q.shape
    return q.view(b, s, kv_heads, h // kv_heads, d).permute(0, 2, 3, 1, 4)


def _ungrouped(x: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`_grouped`: (batch, kv_heads, group, seqlen, d) -> (batch, seqlen, heads, d)."""
    b, hk, g, s, d = x.shape
    return x.permute(0, 3, 1, 2, 4).reshape(b, s, hk * g, d)


def _kv(x: torch.Tensor) -> torch.Tensor:
    """(batch, seqlen_k, kv_heads, d) -> (batch, kv_heads, 1, seqlen_k, d): broadcasts over the group."""
    return x.permute(0, 2, 1, 3).unsqueeze(2)


def attention_oracle(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                     softmax_scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The float64 oracle: materialises the full score matrix. For tests and small problems only.

    Returns ``(out, lse)`` in float64: out (batch, seqlen_q, heads, head_dim) and the natural-log
    logsumexp (batch, heads, seqlen_q), -inf on rows that see no key.
    """
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    scale = _scale(softmax_scale, d)
    qg = _grouped(q.to(torch.float64), hk)                    # (b, hk, g, sq, d)
    kg, vg = _kv(k.to(torch.float64)), _kv(v.to(torch.float64))  # (b, hk, 1, sk, d)
    s = torch.matmul(qg, kg.transpose(-1, -2)) * scale        # (b, hk, g, sq, sk)
    if causal:
        s = s.masked_fill(~causal_visible(sq, sk, device=q.device), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)                          # -inf where a row sees nothing
    finite = torch.isfinite(lse)
    p = torch.exp(s - torch.where(finite, lse, 0.0)[..., None])
    p = torch.where(finite[..., None], p, 0.0)
    out = torch.matmul(p, vg)                                 # (b, hk, g, sq, d)
    return _ungrouped(out), lse.reshape(b, h, sq)


def attention_plain(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                    softmax_scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention as a user writes it in plain PyTorch, in the inputs' own dtype.

    The score matrix, the softmax and both products run in q's dtype: its error against
    :func:`attention_oracle` is the yardstick of honest rounding error that kernels are judged by
    (tests, benchmarks). Materialises the scores, so it is for small problems only; differentiable
    through autograd. Returns ``(out, lse)``: out in q's dtype, lse (batch, heads, seqlen_q) in
    :func:`lse_dtype` (float32; float64 for float64 inputs).
    """
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    scale = _scale(softmax_scale, d)
    kk = k.repeat_interleave(h // hk, dim=2)
    vv = v.repeat_interleave(h // hk, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, kk) * scale
    if causal:
        s = s.masked_fill(~causal_visible(sq, sk, device=q.device), float("-inf"))
    lse = torch.logsumexp(s.to(lse_dtype(s.dtype)), dim=-1)
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)  # rows that see no key: 0, not NaN
    return torch.einsum("bhqk,bkhd->bqhd", p, vv), lse


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def lse_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype of the logsumexp returned for inputs of ``dtype``: float32, as FlashAttention's,
    except float64 for float64 inputs (a float32 logsumexp would cap their accuracy near 1e-7):
    the accumulation dtype."""
    return _acc_dtype(dtype)


def _score_block(qg, kg, start: int, end: int, scale: float, causal: bool, sq: int, sk: int, acc):
    """Scaled scores of keys [start, end) in the accumulation dtype, masked keys -inf."""
    s = torch.matmul(qg, kg[..., start:end, :].to(acc).transpose(-1, -2)) * scale
    if causal:
        s = s.masked_fill(~causal_visible(sq, sk, start, end, device=qg.device), float("-inf"))
    return s


def _running_step(m, l, s):
    """One block of scores s folded into the running row max m and row sum l: returns (m_new,
    alpha, p, l_new), alpha rescaling the old state and p = exp(s - m_new)."""
    m_new = torch.maximum(m, s.amax(dim=-1))
    # A row that has seen only masked keys so far has m_new = -inf; measure it from 0 instead so
    # that exp(-inf - (-inf)) never produces NaN. Its p and alpha are then exactly 0.
    m_ref = torch.where(torch.isfinite(m_new), m_new, 0.0)
    alpha = torch.exp(m - m_ref)                               # rescale factor of the old state
    p = torch.exp(s - m_ref[..., None])
    return m_new, alpha, p, alpha * l + p.sum(dim=-1)


def _row_stats(qg, kg, scale: float, causal: bool, sq: int, sk: int, block: int, acc):
    """The row max m and the row sum l of exp(s - m) in the accumulation dtype, one key block at
    a time (the forward's running softmax without the output). Rows that see no key: m = -inf,
    l = 0."""
    m = torch.full(qg.shape[:-1], float("-inf"), dtype=acc, device=qg.device)
    l = torch.zeros(qg.shape[:-1], dtype=acc, device=qg.device)
    for start in range(0, sk, block):
        s = _score_block(qg, kg, start, min(start + block, sk), scale, causal, sq, sk, acc)
        m, _, _, l = _running_step(m, l, s)
    return m, l


def attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                      softmax_scale: float | None = None, block: int = DEFAULT_BLOCK,
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """The running-softmax forward, one key block at a time (the seed's sketch, in PyTorch).

    Accumulates in float32 (float64 for float64 inputs). Returns ``(out, lse)``: out in q's dtype,
    lse (batch, heads, seqlen_q) in :func:`lse_dtype` (float32; float64 for float64 inputs).
    """
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    scale = _scale(softmax_scale, d)
    acc = _acc_dtype(q.dtype)
    qg = _grouped(q, hk).to(acc)                               # (b, hk, g, sq, d)
    kg, vg = _kv(k), _kv(v)                                    # (b, hk, 1, sk, d), input dtype
    g = h // hk
    m = torch.full((b, hk, g, sq), float("-inf"), dtype=acc, device=q.device)  # running row max
    l = torch.zeros((b, hk, g, sq), dtype=acc, device=q.device)              # running row sum
    o = torch.zeros((b, hk, g, sq, d), dtype=acc, device=q.device)           # unnormalised output
    for start in range(0, sk, block):
        end = min(start + block, sk)
        if causal and start > (sq - 1) + (sk - sq):
            break  # this key block and all later ones are invisible to every query row
        s = _score_block(qg, kg, start, end, scale, causal, sq, sk, acc)
        m, alpha, p, l = _running_step(m, l, s)
        o = alpha[..., None] * o + torch.matmul(p, vg[..., start:end, :].to(acc))
    seen = l > 0
    o = o / torch.where(seen, l, 1.0)[..., None]               # the one normalisation
    lse = torch.where(seen, m + torch.log(torch.where(seen, l, 1.0)), float("-inf"))
    return _ungrouped(o).to(q.dtype), lse.reshape(b, h, sq).to(lse_dtype(q.dtype))


def attention_backward(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       out: torch.Tensor, lse: torch.Tensor, causal: bool = False,
                       softmax_scale: float | None = None, dlse: torch.Tensor | None = None,
                       block: int = DEFAULT_BLOCK) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The matching backward, one key block at a time, recomputing P.

    P is rebuilt from its row max and row sum recomputed here in the accumulation dtype, not from
    the float32 ``lse`` (which the kernels use, as FlashAttention does): rebuilt from a float32
    logsumexp, P carries a relative error of about |lse| * 2**-24, which capped float64 gradients
    near 1e-7 and grows with the scores' magnitude. ``lse`` is accepted for the backends' common
    signature and not read.

    With D = rowsum(dO * O):  dV = P^T dO,  dP = dO V^T,  dS = P * (dP - D),  dQ = dS K * scale,
    dK = dS^T Q * scale. ``dlse`` (optional, (batch, heads, seqlen_q)) is the gradient reaching the
    logsumexp output; since d lse / d S = P it enters as dS = P * (dP - D + dlse).
    Returns (dq, dk, dv) in the inputs' dtypes; dk and dv are summed over each GQA group.
    """
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    g = h // hk
    scale = _scale(softmax_scale, d)
    acc = _acc_dtype(q.dtype)
    qg = _grouped(q, hk).to(acc)
    dog = _grouped(dout, hk).to(acc)
    delta = (dog * _grouped(out, hk).to(acc)).sum(dim=-1)     # D, (b, hk, g, sq)
    if dlse is not None:
        delta = delta - dlse.reshape(b, hk, g, sq).to(acc)
    kg, vg = _kv(k), _kv(v)
    m, l = _row_stats(qg, kg, scale, causal, sq, sk, block, acc)
    # a row that saw no key (l = 0, m = -inf): P = exp(-inf) / 1 = 0, not NaN
    m_ref = torch.where(torch.isfinite(m), m, float("inf"))[..., None]
    inv_l = (1.0 / torch.where(l > 0, l, 1.0))[..., None]
    dq = torch.zeros_like(qg)
    dk = torch.zeros((b, sk, hk, d), dtype=acc, device=q.device)
    dv = torch.zeros((b, sk, hk, d), dtype=acc, device=q.device)
    for start in range(0, sk, block):
        end = min(start + block, sk)
        kb = kg[..., start:end, :].to(acc)                     # (b, hk, 1, n, d)
        vb = vg[..., start:end, :].to(acc)
        s = _score_block(qg, kg, start, end, scale, causal, sq, sk, acc)   # (b, hk, g, sq, n)
        p = torch.exp(s - m_ref) * inv_l
        dp = torch.matmul(dog, vb.transpose(-1, -2))
        ds = p * (dp - delta[..., None])
        dq += torch.matmul(ds, kb) * scale
        # Sum the group's query heads into their shared kv head: (b, hk, n, d) -> (b, n, hk, d).
        dv[:, start:end] = torch.matmul(p.transpose(-1, -2), dog).sum(dim=2).transpose(1, 2)
        dk[:, start:end] = (torch.matmul(ds.transpose(-1, -2), qg).sum(dim=2) * scale).transpose(1, 2)
    return _ungrouped(dq).to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)
