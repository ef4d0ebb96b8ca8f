"""Portable Triton backward kernels, FlashAttention-2 style.

With S = softmax_scale * Q K^T and P = softmax(S) recomputed block by block from the forward's
logsumexp (nothing of size seqlen_q x seqlen_k is ever stored):

    dV = P^T dO        dP = dO V^T        dS = P * (dP - Delta)
    dQ = softmax_scale * dS K              dK = softmax_scale * dS^T Q

where Delta = rowsum(dO * O), minus dlse when a gradient reaches the logsumexp output.

Three launches:
  1. ``_bwd_preprocess_kernel``: per query row, Delta and the logsumexp in base 2 (``lse2``, with
     -inf turned into +inf so that rows that saw no key get P = exp2(S - lse2) = 0, never NaN).
  2. ``_bwd_dkdv_kernel``: one program per (BLOCK_N keys, kv head). K and V stay on chip; the
     program loops over the query heads of its GQA group and over their query blocks, accumulating
     dK and dV in float32 registers, and writes them once: no atomics.
  3. ``_bwd_dq_kernel``: one program per (BLOCK_M query rows, head), looping over key blocks.

As in the forward, loops are split into full blocks (no mask) and masked blocks (the causal
diagonal, ragged sequence ends), and causal loops skip blocks that are entirely masked.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .triton_common import LOG2E, CompileSpec, head_base, key_range, load_tile, mma_operand, \
    round_to, store_tile, tile_ptrs, triton_dtype, use_interpreter
from .triton_configs import BackwardConfig, backward_config, head_dim_block

__all__ = ["backward", "compile_specs"]

_LOG2E = tl.constexpr(LOG2E)
PREPROCESS_NUM_WARPS = 4  # a streaming row sum: no matrix product, any warp count will do


@triton.jit
def _bwd_preprocess_kernel(
    Out, dOut, Lse, dLse, Delta, Lse2,
    stride_ob, stride_os, stride_oh,
    stride_dob, stride_dos, stride_doh,
    heads, seqlen_q,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, HAS_DLSE: tl.constexpr,
):
    """Grid (cdiv(seqlen_q, BLOCK_M), heads, batch): Delta and Lse2, (batch, heads, seqlen_q)."""
    head = tl.program_id(1)
    batch = tl.program_id(2)
    start_m = tl.program_id(0) * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    o_head = head_base(Out, batch, head, stride_ob, stride_oh)
    do_head = head_base(dOut, batch, head, stride_dob, stride_doh)
    o = load_tile(tile_ptrs(o_head, start_m, stride_os, BLOCK_M, BLOCK_D), offs_m, seqlen_q,
                  True, HEAD_DIM, BLOCK_D)
    do = load_tile(tile_ptrs(do_head, start_m, stride_dos, BLOCK_M, BLOCK_D), offs_m, seqlen_q,
                   True, HEAD_DIM, BLOCK_D)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)

    rows = (batch * heads + head).to(tl.int64) * seqlen_q + offs_m
    in_bounds = offs_m < seqlen_q
    if HAS_DLSE:
        delta -= tl.load(dLse + rows, mask=in_bounds, other=0.0)
    lse = tl.load(Lse + rows, mask=in_bounds, other=0.0)
    lse2 = tl.where(lse == float("-inf"), float("inf"), lse * _LOG2E)
    tl.store(Delta + rows, delta, mask=in_bounds)
    tl.store(Lse2 + rows, lse2, mask=in_bounds)


@triton.jit
def _dkdv_query_blocks(dk, dv, k, v, q_head, do_head, lse2_row, delta_row, stride_qs, stride_dos,
                       offs_n, first_start, n_first, second_start, n_blocks,
                       seqlen_q, diagonal, qk_scale,
                       HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
                       DTYPE: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
                       INTERPRETER: tl.constexpr):
    """Accumulate n_blocks query blocks of one head into (dk, dv) of the key block offs_n.

    The blocks are n_first blocks from row first_start on, then the rest from row second_start
    on. The masked blocks lie in two runs (the causal diagonal and the ragged last block) and one
    loop covers both: the kernel has two loops, not three, which keeps it out of register spills.
    MASKED bounds the rows by seqlen_q and, if CAUSAL, applies the causal mask; without it the
    blocks must be full and fully visible.

    Works transposed (keys on rows), so that P^T and dS^T come out of the dots ready to multiply
    dO and Q. q_head / do_head point at query 0 of the head, lse2_row / delta_row at its row 0.
    """
    rows = tl.arange(0, BLOCK_M)
    for i in range(0, n_blocks):
        if MASKED:
            start = tl.where(i < n_first, first_start + i * BLOCK_M,
                             second_start + (i - n_first) * BLOCK_M)
        else:
            start = first_start + i * BLOCK_M  # the full blocks form a single run
        start = tl.multiple_of(start, BLOCK_M)
        offs_m = start + rows
        q = load_tile(tile_ptrs(q_head, start, stride_qs, BLOCK_M, BLOCK_D), offs_m, seqlen_q,
                      MASKED, HEAD_DIM, BLOCK_D)
        q = mma_operand(q, DTYPE, INTERPRETER)
        if MASKED:
            # Rows past seqlen_q get lse2 = +inf, hence P = 0, and contribute nothing.
            lse2 = tl.load(lse2_row + offs_m, mask=offs_m < seqlen_q, other=float("inf"))
            delta = tl.load(delta_row + offs_m, mask=offs_m < seqlen_q, other=0.0)
        else:
            lse2 = tl.load(lse2_row + offs_m)
            delta = tl.load(delta_row + offs_m)
        s_t = tl.dot(k, tl.trans(q))                                   # (BLOCK_N, BLOCK_M)
        p_t = tl.math.exp2(s_t * qk_scale - lse2[None, :])
        if MASKED and CAUSAL:
            p_t = tl.where(offs_n[:, None] <= offs_m[None, :] + diagonal, p_t, 0.0)
        do = load_tile(tile_ptrs(do_head, start, stride_dos, BLOCK_M, BLOCK_D), offs_m, seqlen_q,
                       MASKED, HEAD_DIM, BLOCK_D)
        do = mma_operand(do, DTYPE, INTERPRETER)
        dv = tl.dot(mma_operand(p_t, DTYPE, INTERPRETER), do, dv)
        dp_t = tl.dot(v, tl.trans(do))                                 # (BLOCK_N, BLOCK_M)
        ds_t = p_t * (dp_t - delta[None, :])
        dk = tl.dot(mma_operand(ds_t, DTYPE, INTERPRETER), q, dk)
    return dk, dv


@triton.jit
def _bwd_dkdv_kernel(
    Q, K, V, dOut, Lse2, Delta, dK, dV,
    stride_qb, stride_qs, stride_qh,
    stride_kb, stride_ks, stride_kh,
    stride_vb, stride_vs, stride_vh,
    stride_dob, stride_dos, stride_doh,
    stride_dkb, stride_dks, stride_dkh,
    stride_dvb, stride_dvs, stride_dvh,
    heads, seqlen_q, seqlen_k, group_size, qk_scale, softmax_scale,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, INTERPRETER: tl.constexpr,
):
    """Grid (cdiv(seqlen_k, BLOCK_N), kv_heads, batch): writes BLOCK_N rows of dK and dV."""
    kv_head = tl.program_id(1)
    batch = tl.program_id(2)
    start_n = tl.program_id(0) * BLOCK_N
    offs_n = start_n + tl.arange(0, BLOCK_N)
    diagonal = seqlen_k - seqlen_q  # query i sees key j iff j <= i + diagonal (when CAUSAL)
    dtype = Q.dtype.element_ty

    k_head = head_base(K, batch, kv_head, stride_kb, stride_kh)
    v_head = head_base(V, batch, kv_head, stride_vb, stride_vh)
    k = load_tile(tile_ptrs(k_head, start_n, stride_ks, BLOCK_N, BLOCK_D), offs_n, seqlen_k,
                  True, HEAD_DIM, BLOCK_D)
    v = load_tile(tile_ptrs(v_head, start_n, stride_vs, BLOCK_N, BLOCK_D), offs_n, seqlen_k,
                  True, HEAD_DIM, BLOCK_D)
    k = mma_operand(k, dtype, INTERPRETER)
    v = mma_operand(v, dtype, INTERPRETER)
    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)

    # The query rows of this key block, in three runs:
    #   [lo, mid)            the causal diagonal: some rows see only part of the block (masked);
    #   [mid, full_end)      every row sees every key of the block (no mask);
    #   [full_end, seqlen_q) the ragged last query block, if any (masked).
    # Rows before lo see none of these keys and are skipped.
    full_end = seqlen_q // BLOCK_M * BLOCK_M
    if CAUSAL:
        lo = tl.maximum(start_n - diagonal, 0) // BLOCK_M * BLOCK_M
        mid = tl.cdiv(tl.maximum(start_n + BLOCK_N - 1 - diagonal, 0), BLOCK_M) * BLOCK_M
        mid = tl.minimum(tl.maximum(mid, lo), full_end)
    else:
        lo = 0
        mid = 0
    n_diagonal = (mid - lo) // BLOCK_M
    n_full = (full_end - mid) // BLOCK_M
    n_masked = n_diagonal + tl.cdiv(seqlen_q - full_end, BLOCK_M)

    # The query heads of this kv head's GQA group all accumulate into the same dK and dV.
    for g in range(group_size):
        head = kv_head * group_size + g
        q_head = head_base(Q, batch, head, stride_qb, stride_qh)
        do_head = head_base(dOut, batch, head, stride_dob, stride_doh)
        row0 = (batch * heads + head).to(tl.int64) * seqlen_q  # Lse2/Delta (batch, heads, seqlen_q)
        dk, dv = _dkdv_query_blocks(
            dk, dv, k, v, q_head, do_head, Lse2 + row0, Delta + row0, stride_qs, stride_dos,
            offs_n, mid, n_full, mid, n_full, seqlen_q, diagonal, qk_scale,
            HEAD_DIM, BLOCK_M, BLOCK_D, dtype, False, CAUSAL, INTERPRETER)
        dk, dv = _dkdv_query_blocks(
            dk, dv, k, v, q_head, do_head, Lse2 + row0, Delta + row0, stride_qs, stride_dos,
            offs_n, lo, n_diagonal, full_end, n_masked, seqlen_q, diagonal, qk_scale,
            HEAD_DIM, BLOCK_M, BLOCK_D, dtype, True, CAUSAL, INTERPRETER)

    dk_head = head_base(dK, batch, kv_head, stride_dkb, stride_dkh)
    dv_head = head_base(dV, batch, kv_head, stride_dvb, stride_dvh)
    store_tile(tile_ptrs(dk_head, start_n, stride_dks, BLOCK_N, BLOCK_D),
               round_to(dk * softmax_scale, dtype, INTERPRETER), offs_n, seqlen_k, HEAD_DIM,
               BLOCK_D)
    store_tile(tile_ptrs(dv_head, start_n, stride_dvs, BLOCK_N, BLOCK_D),
               round_to(dv, dtype, INTERPRETER), offs_n, seqlen_k, HEAD_DIM, BLOCK_D)


@triton.jit
def _dq_key_blocks(dq, q, do, lse2, delta, k_head, v_head, stride_ks, stride_vs, offs_m,
                   start_n, end_n, seqlen_k, diagonal, qk_scale,
                   HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                   DTYPE: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
                   INTERPRETER: tl.constexpr):
    """Accumulate keys [start_n, end_n) into dq of one query block (masking as in the forward)."""
    keys = tl.arange(0, BLOCK_N)
    for start in range(start_n, end_n, BLOCK_N):
        start = tl.multiple_of(start, BLOCK_N)
        cols = start + keys
        k = load_tile(tile_ptrs(k_head, start, stride_ks, BLOCK_N, BLOCK_D), cols, seqlen_k,
                      MASKED, HEAD_DIM, BLOCK_D)
        v = load_tile(tile_ptrs(v_head, start, stride_vs, BLOCK_N, BLOCK_D), cols, seqlen_k,
                      MASKED, HEAD_DIM, BLOCK_D)
        k = mma_operand(k, DTYPE, INTERPRETER)
        v = mma_operand(v, DTYPE, INTERPRETER)
        s = tl.dot(q, tl.trans(k))                                     # (BLOCK_M, BLOCK_N)
        p = tl.math.exp2(s * qk_scale - lse2[:, None])
        if MASKED:
            if CAUSAL:
                # Implies key < seqlen_k for every real query row (rows past seqlen_q are dropped).
                visible = cols[None, :] <= offs_m[:, None] + diagonal
            else:
                visible = cols[None, :] < seqlen_k
            p = tl.where(visible, p, 0.0)
        dp = tl.dot(do, tl.trans(v))                                   # (BLOCK_M, BLOCK_N)
        ds = p * (dp - delta[:, None])
        dq = tl.dot(mma_operand(ds, DTYPE, INTERPRETER), k, dq)
    return dq


@triton.jit
def _bwd_dq_kernel(
    Q, K, V, dOut, Lse2, Delta, dQ,
    stride_qb, stride_qs, stride_qh,
    stride_kb, stride_ks, stride_kh,
    stride_vb, stride_vs, stride_vh,
    stride_dob, stride_dos, stride_doh,
    stride_dqb, stride_dqs, stride_dqh,
    heads, seqlen_q, seqlen_k, group_size, qk_scale, softmax_scale,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, INTERPRETER: tl.constexpr, BLOCK_N_MASKED: tl.constexpr,
):
    """Grid (cdiv(seqlen_q, BLOCK_M), heads, batch): writes BLOCK_M rows of dQ.

    Full key blocks go BLOCK_N keys at a time, masked ones BLOCK_N_MASKED (a divisor of BLOCK_N)."""
    tile_m = tl.program_id(0)
    if CAUSAL:
        tile_m = tl.num_programs(0) - 1 - tile_m  # longest query blocks first, as in the forward
    head = tl.program_id(1)
    batch = tl.program_id(2)
    start_m = tile_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    diagonal = seqlen_k - seqlen_q
    dtype = Q.dtype.element_ty

    q_head = head_base(Q, batch, head, stride_qb, stride_qh)
    do_head = head_base(dOut, batch, head, stride_dob, stride_doh)
    q = load_tile(tile_ptrs(q_head, start_m, stride_qs, BLOCK_M, BLOCK_D), offs_m, seqlen_q,
                  True, HEAD_DIM, BLOCK_D)
    do = load_tile(tile_ptrs(do_head, start_m, stride_dos, BLOCK_M, BLOCK_D), offs_m, seqlen_q,
                   True, HEAD_DIM, BLOCK_D)
    q = mma_operand(q, dtype, INTERPRETER)
    do = mma_operand(do, dtype, INTERPRETER)
    rows = (batch * heads + head).to(tl.int64) * seqlen_q + offs_m  # (batch, heads, seqlen_q)
    # Rows past seqlen_q get lse2 = +inf, hence P = 0.
    lse2 = tl.load(Lse2 + rows, mask=offs_m < seqlen_q, other=float("inf"))
    delta = tl.load(Delta + rows, mask=offs_m < seqlen_q, other=0.0)
    kv_head = head // group_size
    k_head = head_base(K, batch, kv_head, stride_kb, stride_kh)
    v_head = head_base(V, batch, kv_head, stride_vb, stride_vh)
    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)

    full_end, end_n = key_range(start_m, seqlen_q, seqlen_k, BLOCK_M, BLOCK_N, CAUSAL)
    dq = _dq_key_blocks(
        dq, q, do, lse2, delta, k_head, v_head, stride_ks, stride_vs, offs_m, 0, full_end,
        seqlen_k, diagonal, qk_scale, HEAD_DIM, BLOCK_N, BLOCK_D, dtype, False, CAUSAL, INTERPRETER)
    dq = _dq_key_blocks(
        dq, q, do, lse2, delta, k_head, v_head, stride_ks, stride_vs, offs_m, full_end, end_n,
        seqlen_k, diagonal, qk_scale, HEAD_DIM, BLOCK_N_MASKED, BLOCK_D, dtype, True, CAUSAL,
        INTERPRETER)

    dq_head = head_base(dQ, batch, head, stride_dqb, stride_dqh)
    store_tile(tile_ptrs(dq_head, start_m, stride_dqs, BLOCK_M, BLOCK_D),
               round_to(dq * softmax_scale, dtype, INTERPRETER), offs_m, seqlen_q, HEAD_DIM,
               BLOCK_D)


def backward(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             out: torch.Tensor, lse: torch.Tensor, causal: bool, softmax_scale: float,
             dlse: torch.Tensor | None = None, *, config: BackwardConfig | None = None
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Attention backward (CONTRACTS.md).

    dout/out like q (batch, seqlen_q, heads, head_dim); lse and the optional dlse float32
    (batch, heads, seqlen_q). Returns (dq, dk, dv), contiguous, shaped and typed like (q, k, v);
    dk and dv are summed over the query heads of each GQA group.
    ``config`` overrides the configs of triton_configs.py (tuning, tests); None: the table's.
    """
    batch, seqlen_q, heads, head_dim = q.shape
    seqlen_k, kv_heads = k.shape[1], k.shape[2]
    interpret = use_interpreter(q)
    cfg = config if config is not None else backward_config(head_dim, causal, interpret)
    if cfg.dkdv.block_n_masked is not None:
        raise ValueError("the dK/dV kernel has no separate masked step (block_n_masked)")
    block_d = head_dim_block(head_dim)
    group_size = heads // kv_heads
    qk_scale = softmax_scale * LOG2E
    lse = lse.contiguous()
    delta = torch.empty((batch, heads, seqlen_q), dtype=torch.float32, device=q.device)
    lse2 = torch.empty_like(delta)
    dq = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    dk = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    dv = torch.empty(v.shape, dtype=v.dtype, device=v.device)

    _bwd_preprocess_kernel[(triton.cdiv(seqlen_q, cfg.preprocess_block_m), heads, batch)](
        out, dout, lse, lse if dlse is None else dlse.contiguous(), delta, lse2,
        out.stride(0), out.stride(1), out.stride(2),
        dout.stride(0), dout.stride(1), dout.stride(2),
        heads, seqlen_q,
        HEAD_DIM=head_dim, BLOCK_D=block_d, BLOCK_M=cfg.preprocess_block_m,
        HAS_DLSE=dlse is not None, num_warps=PREPROCESS_NUM_WARPS,
    )
    tile = cfg.dkdv
    # Key blocks near the start see the most query rows (causal), and they are launched first.
    _bwd_dkdv_kernel[(triton.cdiv(seqlen_k, tile.block_n), kv_heads, batch)](
        q, k, v, dout, lse2, delta, dk, dv,
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        dout.stride(0), dout.stride(1), dout.stride(2),
        dk.stride(0), dk.stride(1), dk.stride(2),
        dv.stride(0), dv.stride(1), dv.stride(2),
        heads, seqlen_q, seqlen_k, group_size, qk_scale, softmax_scale,
        HEAD_DIM=head_dim, BLOCK_D=block_d, BLOCK_M=tile.block_m, BLOCK_N=tile.block_n,
        CAUSAL=bool(causal), INTERPRETER=interpret,
        num_warps=tile.num_warps, num_stages=tile.num_stages,
    )
    tile = cfg.dq
    _bwd_dq_kernel[(triton.cdiv(seqlen_q, tile.block_m), heads, batch)](
        q, k, v, dout, lse2, delta, dq,
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        dout.stride(0), dout.stride(1), dout.stride(2),
        dq.stride(0), dq.stride(1), dq.stride(2),
        heads, seqlen_q, seqlen_k, group_size, qk_scale, softmax_scale,
        HEAD_DIM=head_dim, BLOCK_D=block_d, BLOCK_M=tile.block_m, BLOCK_N=tile.block_n,
        CAUSAL=bool(causal), INTERPRETER=interpret, BLOCK_N_MASKED=tile.masked_step,
        num_warps=tile.num_warps, num_stages=tile.num_stages,
    )
    return dq, dk, dv


def compile_specs(head_dim: int, dtype: torch.dtype, causal: bool,
                  cfg: BackwardConfig | None = None) -> list[CompileSpec]:
    """The three backward kernels' sm_90a compile inputs for one problem class (default:
    production config): preprocess, dK/dV, dQ."""
    cfg = cfg or backward_config(head_dim, causal)
    t = triton_dtype(dtype)
    block_d = head_dim_block(head_dim)

    def strides(*tensors):
        return [f"stride_{x}{y}" for x in tensors for y in "bsh"]

    def spec(name, fn, ptrs, stride_names, ints, floats, constexprs, num_warps, num_stages):
        signature = {**ptrs, **{n: "i32" for n in stride_names + ints},
                     **{n: "fp32" for n in floats}, **{n: "constexpr" for n in constexprs}}
        return CompileSpec(name, fn, signature, constexprs, num_warps, num_stages,
                           divisible=tuple(ptrs) + tuple(stride_names))

    pre = spec("attn_bwd_preprocess", _bwd_preprocess_kernel,
               {"Out": f"*{t}", "dOut": f"*{t}", "Lse": "*fp32", "dLse": "*fp32",
                "Delta": "*fp32", "Lse2": "*fp32"},
               strides("o", "do"), ["heads", "seqlen_q"], [],
               {"HEAD_DIM": head_dim, "BLOCK_D": block_d, "BLOCK_M": cfg.preprocess_block_m,
                "HAS_DLSE": True},
               PREPROCESS_NUM_WARPS, 1)
    operands = {"Q": f"*{t}", "K": f"*{t}", "V": f"*{t}", "dOut": f"*{t}", "Lse2": "*fp32",
                "Delta": "*fp32"}
    sizes = ["heads", "seqlen_q", "seqlen_k", "group_size"]

    def tile_constexprs(tile, masked_step=False):
        c = {"HEAD_DIM": head_dim, "BLOCK_D": block_d, "BLOCK_M": tile.block_m,
             "BLOCK_N": tile.block_n, "CAUSAL": bool(causal), "INTERPRETER": False}
        if masked_step:
            c["BLOCK_N_MASKED"] = tile.masked_step
        return c

    dkdv = spec("attn_bwd_dkdv", _bwd_dkdv_kernel, {**operands, "dK": f"*{t}", "dV": f"*{t}"},
                strides("q", "k", "v", "do", "dk", "dv"), sizes, ["qk_scale", "softmax_scale"],
                tile_constexprs(cfg.dkdv), cfg.dkdv.num_warps, cfg.dkdv.num_stages)
    dq = spec("attn_bwd_dq", _bwd_dq_kernel, {**operands, "dQ": f"*{t}"},
              strides("q", "k", "v", "do", "dq"), sizes, ["qk_scale", "softmax_scale"],
              tile_constexprs(cfg.dq, masked_step=True), cfg.dq.num_warps, cfg.dq.num_stages)
    return [pre, dkdv, dq]
