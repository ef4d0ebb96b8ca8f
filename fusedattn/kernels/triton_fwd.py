"""Portable Triton forward kernel, FlashAttention-2 style.

One program computes BLOCK_M query rows of one (batch, head): it keeps its Q tile on chip and walks
the keys BLOCK_N at a time with a running row max ``m`` and row sum ``l`` (the online softmax, in
base 2: log2(e) is folded into the scale so that each exponential is a single ``exp2``), and
normalises the output once at the end. It writes the output and the natural-log logsumexp.

Layout (CONTRACTS.md): q (batch, seqlen_q, heads, head_dim), k/v (batch, seqlen_k, kv_heads,
head_dim), arbitrary strides with unit stride along head_dim; query head h reads kv head
h // (heads // kv_heads). Causal masking is bottom-right aligned: query i sees key j iff
j <= i + (seqlen_k - seqlen_q).

The key loop runs in two stages so that the common case carries no mask at all:
  1. full blocks: every query row of the tile sees every key of the block (no mask, no bounds);
  2. masked blocks: the causal diagonal and/or the ragged last block of seqlen_k.
Causal tiles stop at the last key their bottom row can see: fully masked blocks are never loaded.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .triton_common import LN2, LOG2E, CompileSpec, head_base, key_range, load_tile, mma_operand, \
    round_to, store_tile, tile_ptrs, triton_dtype, use_interpreter
from .triton_configs import Tile, forward_config, head_dim_block

__all__ = ["forward", "compile_specs"]

_LN2 = tl.constexpr(LN2)


@triton.jit
def _attend_key_blocks(acc, l_i, m_i, q, k_head, v_head, stride_ks, stride_vs, offs_m,
                       start_n, end_n, seqlen_k, diagonal, qk_scale,
                       HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                       DTYPE: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
                       INTERPRETER: tl.constexpr, RAW_MAX: tl.constexpr):
    """Fold keys [start_n, end_n) into the running (acc, l_i, m_i) of one query tile.

    k_head / v_head point at key 0 of this (batch, kv head). Scores are kept scaled by
    qk_scale = softmax_scale * log2(e), so m_i is in base-2 units. MASKED applies the causal mask
    (if CAUSAL) or the seqlen_k bound; without it the blocks must be fully visible. RAW_MAX
    (qk_scale > 0): the unmasked blocks take the row max of the raw scores and scale it once;
    with a negative scale that would be the row minimum, so the scores are scaled first.
    """
    keys = tl.arange(0, BLOCK_N)
    for start in range(start_n, end_n, BLOCK_N):
        start = tl.multiple_of(start, BLOCK_N)
        cols = start + keys
        k = load_tile(tile_ptrs(k_head, start, stride_ks, BLOCK_N, BLOCK_D), cols, seqlen_k,
                      MASKED, HEAD_DIM, BLOCK_D)
        s = tl.dot(q, tl.trans(mma_operand(k, DTYPE, INTERPRETER)))     # (BLOCK_M, BLOCK_N)
        if MASKED:
            if CAUSAL:
                # Implies key < seqlen_k for every real query row (rows past seqlen_q are dropped).
                visible = cols[None, :] <= offs_m[:, None] + diagonal
            else:
                visible = cols[None, :] < seqlen_k
            s = tl.where(visible, s * qk_scale, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            # A row that has seen no key yet keeps m = -inf; measure it from 0 so that
            # exp2(-inf - (-inf)) never yields NaN: its p and alpha are then exactly 0.
            m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)
            p = tl.math.exp2(s - m_ref[:, None])
        elif RAW_MAX:
            m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
            m_ref = m_new
            p = tl.math.exp2(s * qk_scale - m_ref[:, None])
        else:
            s = s * qk_scale
            m_new = tl.maximum(m_i, tl.max(s, 1))
            m_ref = m_new
            p = tl.math.exp2(s - m_ref[:, None])
        alpha = tl.math.exp2(m_i - m_ref)                              # rescales the old state
        l_i = l_i * alpha + tl.sum(p, 1)
        v = load_tile(tile_ptrs(v_head, start, stride_vs, BLOCK_N, BLOCK_D), cols, seqlen_k,
                      MASKED, HEAD_DIM, BLOCK_D)
        acc = tl.dot(mma_operand(p, DTYPE, INTERPRETER), mma_operand(v, DTYPE, INTERPRETER),
                     acc * alpha[:, None])
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _attn_fwd_kernel(
    Q, K, V, Out, Lse,
    stride_qb, stride_qs, stride_qh,
    stride_kb, stride_ks, stride_kh,
    stride_vb, stride_vs, stride_vh,
    stride_ob, stride_os, stride_oh,
    heads, seqlen_q, seqlen_k, group_size, qk_scale,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, INTERPRETER: tl.constexpr, BLOCK_N_MASKED: tl.constexpr,
    RAW_MAX: tl.constexpr = True,
):
    """Grid (cdiv(seqlen_q, BLOCK_M), heads, batch): writes BLOCK_M rows of Out and of Lse.

    The full key blocks go BLOCK_N keys at a time, the masked ones BLOCK_N_MASKED (a divisor of
    BLOCK_N; equal to it in the production configs)."""
    tile_m = tl.program_id(0)
    if CAUSAL:
        # Later query tiles see more keys: launch them first so that short ones fill the tail.
        tile_m = tl.num_programs(0) - 1 - tile_m
    head = tl.program_id(1)
    batch = tl.program_id(2)
    start_m = tile_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    diagonal = seqlen_k - seqlen_q  # query i sees key j iff j <= i + diagonal (when CAUSAL)
    dtype = Q.dtype.element_ty

    q_head = head_base(Q, batch, head, stride_qb, stride_qh)
    q = load_tile(tile_ptrs(q_head, start_m, stride_qs, BLOCK_M, BLOCK_D), offs_m, seqlen_q,
                  True, HEAD_DIM, BLOCK_D)
    q = mma_operand(q, dtype, INTERPRETER)
    kv_head = head // group_size
    k_head = head_base(K, batch, kv_head, stride_kb, stride_kh)
    v_head = head_base(V, batch, kv_head, stride_vb, stride_vh)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)

    # Keys of this tile: [0, full_end) are visible to every row, [full_end, end_n) are masked.
    full_end, end_n = key_range(start_m, seqlen_q, seqlen_k, BLOCK_M, BLOCK_N, CAUSAL)

    acc, l_i, m_i = _attend_key_blocks(
        acc, l_i, m_i, q, k_head, v_head, stride_ks, stride_vs, offs_m, 0, full_end, seqlen_k,
        diagonal, qk_scale, HEAD_DIM, BLOCK_N, BLOCK_D, dtype, False, CAUSAL, INTERPRETER, RAW_MAX)
    acc, l_i, m_i = _attend_key_blocks(
        acc, l_i, m_i, q, k_head, v_head, stride_ks, stride_vs, offs_m, full_end, end_n, seqlen_k,
        diagonal, qk_scale, HEAD_DIM, BLOCK_N_MASKED, BLOCK_D, dtype, True, CAUSAL, INTERPRETER,
        RAW_MAX)

    # The one normalisation. Rows that saw no key (l = 0) give zeros and lse = -inf.
    seen = l_i > 0.0
    l_safe = tl.where(seen, l_i, 1.0)
    acc = acc * (1.0 / l_safe)[:, None]
    lse = tl.where(seen, (m_i + tl.math.log2(l_safe)) * _LN2, float("-inf"))

    o_head = head_base(Out, batch, head, stride_ob, stride_oh)
    store_tile(tile_ptrs(o_head, start_m, stride_os, BLOCK_M, BLOCK_D),
               round_to(acc, dtype, INTERPRETER), offs_m, seqlen_q, HEAD_DIM, BLOCK_D)
    lse_row = Lse + (batch * heads + head).to(tl.int64) * seqlen_q  # Lse (batch, heads, seqlen_q)
    tl.store(lse_row + offs_m, lse, mask=offs_m < seqlen_q)


def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
            softmax_scale: float, *, config: Tile | None = None
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention forward (CONTRACTS.md).

    q (batch, seqlen_q, heads, head_dim), k/v (batch, seqlen_k, kv_heads, head_dim), fp16 or bf16.
    Returns out, contiguous, like q, and lse, float32 (batch, heads, seqlen_q), natural log.
    ``config`` overrides the tile of triton_configs.py (tuning, tests); None: the table's.
    """
    batch, seqlen_q, heads, head_dim = q.shape
    seqlen_k, kv_heads = k.shape[1], k.shape[2]
    interpret = use_interpreter(q)
    tile = config if config is not None else forward_config(head_dim, causal, interpret)
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty((batch, heads, seqlen_q), dtype=torch.float32, device=q.device)
    # Query tiles vary fastest, so that programs running side by side share their K/V in L2.
    grid = (triton.cdiv(seqlen_q, tile.block_m), heads, batch)
    _attn_fwd_kernel[grid](
        q, k, v, out, lse,
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        out.stride(0), out.stride(1), out.stride(2),
        heads, seqlen_q, seqlen_k, heads // kv_heads, softmax_scale * LOG2E,
        HEAD_DIM=head_dim, BLOCK_D=head_dim_block(head_dim), BLOCK_M=tile.block_m,
        BLOCK_N=tile.block_n, CAUSAL=bool(causal), INTERPRETER=interpret,
        BLOCK_N_MASKED=tile.masked_step, RAW_MAX=softmax_scale > 0, num_warps=tile.num_warps,
        num_stages=tile.num_stages,
    )
    return out, lse


def compile_specs(head_dim: int, dtype: torch.dtype, causal: bool,
                  tile: Tile | None = None) -> list[CompileSpec]:
    """The forward kernel's sm_90a compile inputs for one problem class (default: production
    tile)."""
    tile = tile or forward_config(head_dim, causal)
    t = triton_dtype(dtype)
    ptrs = {"Q": f"*{t}", "K": f"*{t}", "V": f"*{t}", "Out": f"*{t}", "Lse": "*fp32"}
    strides = [f"stride_{x}{y}" for x in "qkvo" for y in "bsh"]
    ints = strides + ["heads", "seqlen_q", "seqlen_k", "group_size"]
    constexprs = {"HEAD_DIM": head_dim, "BLOCK_D": head_dim_block(head_dim),
                  "BLOCK_M": tile.block_m, "BLOCK_N": tile.block_n, "CAUSAL": bool(causal),
                  "INTERPRETER": False, "BLOCK_N_MASKED": tile.masked_step, "RAW_MAX": True}
    signature = {**ptrs, **{name: "i32" for name in ints}, "qk_scale": "fp32",
                 **{name: "constexpr" for name in constexprs}}
    return [CompileSpec("attn_fwd", _attn_fwd_kernel, signature, constexprs, tile.num_warps,
                        tile.num_stages, divisible=tuple(ptrs) + tuple(strides))]
