"""Hopper (sm_90a) attention forward, written in Gluon (Triton 3.6.0).

Layout: q (batch, seqlen_q, heads, head_dim); k, v (batch, seqlen_k, kv_heads, head_dim).
Returns out like q and lse float32 (batch, heads, seqlen_q), natural log. Causal masking is
bottom-right aligned: key j is visible to query i iff j <= i + seqlen_k - seqlen_q.

Structure of one program (one CTA, BLOCK_M query rows of one (batch, head)):

    partition        warps  registers   work
    consumer 0       4      rest        rows [0, BLOCK_M/2) of the tile   (Gluon default partition)
    consumer 1       4      CONSUMER    rows [BLOCK_M/2, BLOCK_M)
    producer         1      PRODUCER    TMA: the Q tile once, then K and V blocks into a ring of
                                        NUM_STAGES shared-memory stages (mbarriers k_ready,
                                        v_ready, kv_empty: K and V of a stage are released
                                        separately)

Each consumer warpgroup runs the running-softmax loop: S = Q K^T as an asynchronous wgmma with both
operands in shared memory, softmax in registers in the log2 domain (exp2, running max and sum),
O += P V as a wgmma with P in registers (DotOperandLayout), one normalisation at the end.

TMA descriptors are 4-D over the user's (batch, seqlen, heads, head_dim) tensors with boxes
[1, BLOCK, 1, head_dim], so tails along seqlen are exact: the copy engine zero-fills rows past the
end of the sequence (never reads the next batch). The shared-memory tile is reshaped to 2-D
[BLOCK, head_dim] for wgmma.

Compile-time switches (for ablations; all combinations compile):
    OVERLAP   intra-warpgroup overlap (FA3 alg. 2): QK^T of block j is issued together with
              P V of block j-1, and the softmax of block j runs while P V of block j-1 is in flight.
              Every block is scored, the last too.
    PINGPONG  the two consumer warpgroups take turns issuing their GEMMs (two mbarriers), so that
              one's softmax overlaps the other's GEMMs (FA3 sec. 3.1).
The shipped table (CONFIGS) has OVERLAP on and PINGPONG off: measured on an H200, overlap gave
+10..12% at hdim 128 and pingpong nothing (benchmarks/hopper_log.md).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453

SUPPORTED_HEAD_DIMS = (64, 128, 256)


# --------------------------------------------------------------------------------------------
# Tile configurations. One row per head dim; each names the measurement behind it.
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FwdConfig:
    block_m: int          # query rows per program (two consumer warpgroups, block_m // 2 rows each)
    block_n: int          # keys per K/V block
    num_stages: int       # K/V ring depth in shared memory
    overlap: bool = True    # intra-warpgroup overlap of softmax and GEMMs
    pingpong: bool = False  # the two consumer warpgroups alternate their GEMM issue
    consumer_regs: int = 240
    producer_regs: int = 24
    maxnreg: int = 168     # register cap at entry: 168 * 384 threads <= 64K registers

    @property
    def num_warps(self) -> int:  # warps of the default partition (consumer warpgroup 0)
        return 4


# Chosen from the shared-memory / register budget, then measured (benchmarks/hopper_log.md):
# hdim 64/128: 128x128 tiles (FA3 uses 128 x 128..176); hdim 256: BLOCK_N 64 keeps the fp32
# accumulator (128 regs/thread) plus S and P under 240 registers and shared memory at 192 KB.
# H200 run 2, hdim 128, s=8192: overlap 599 TFLOP/s (causal 549) vs no overlap 534 (499);
# pingpong on top of overlap gave nothing (599 / 532), 3 stages nothing either -> overlap on,
# pingpong off, 2 stages at hdim 128.
CONFIGS = {
    64: FwdConfig(block_m=128, block_n=128, num_stages=3),
    128: FwdConfig(block_m=128, block_n=128, num_stages=2),
    256: FwdConfig(block_m=128, block_n=64, num_stages=2),
}


def get_config(head_dim: int, **overrides) -> FwdConfig:
    cfg = CONFIGS[head_dim]
    if overrides:
        cfg = FwdConfig(**{**cfg.__dict__, **overrides})
    return cfg


# --------------------------------------------------------------------------------------------
# Kernel
# --------------------------------------------------------------------------------------------
@gluon.jit
def _producer(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, k_ready, v_ready, kv_empty,
              b, h, kvh, m_start, n_blocks,
              BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr):
    mbarrier.expect(q_bar, q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [b, m_start, h, 0], q_bar, q_smem)
    for j in range(n_blocks):
        s = j % NUM_STAGES
        ph = (j // NUM_STAGES) & 1
        # both consumer warpgroups must have released this stage's K (kv_empty[s]) and V
        # (kv_empty[NUM_STAGES + s]); a fresh barrier passes at once. K is released as soon as
        # the scores are computed, so the next K can land while P V still reads V.
        mbarrier.wait(kv_empty.index(s), ph ^ 1)
        kb = k_ready.index(s)
        mbarrier.expect(kb, k_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [b, j * BLOCK_N, kvh, 0], kb, k_smem.index(s))
        mbarrier.wait(kv_empty.index(NUM_STAGES + s), ph ^ 1)
        vb = v_ready.index(s)
        mbarrier.expect(vb, v_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(v_desc, [b, j * BLOCK_N, kvh, 0], vb, v_smem.index(s))


@gluon.jit
def _softmax_update(s_acc, m_i, l_i, rows, j, seqlen_k, causal_off, qk_scale,
                    MASK: gl.constexpr, CAUSAL: gl.constexpr,
                    BLOCK_N: gl.constexpr, s_layout: gl.constexpr):
    """One block of the running softmax in the log2 domain. Returns p (fp32), alpha, m, l."""
    qk = s_acc * qk_scale
    if MASK:
        cols = j * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        valid = gl.expand_dims(cols < seqlen_k, 0)
        if CAUSAL:
            valid = valid & (gl.expand_dims(cols, 0) <= gl.expand_dims(rows + causal_off, 1))
        qk = gl.where(valid, qk, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(qk, axis=1))
    if MASK:
        # a row with no visible key so far keeps m = -inf; use 0 so that exp2 gives 0, not NaN
        m_use = gl.where(m_new == float("-inf"), 0.0, m_new)
    else:
        m_use = m_new
    p = gl.exp2(qk - gl.expand_dims(m_use, 1))
    alpha = gl.exp2(m_i - m_use)
    l_i = l_i * alpha + gl.sum(p, axis=1)
    return p, alpha, m_new, l_i


@gluon.jit
def _turn_wait(turn_bars, t, WG: gl.constexpr, PINGPONG: gl.constexpr):
    # Warpgroup 0 goes first: its first wait is on the "previous" phase of a fresh barrier.
    if PINGPONG:
        if WG == 0:
            mbarrier.wait(turn_bars.index(0), (t & 1) ^ 1)
        else:
            mbarrier.wait(turn_bars.index(1), t & 1)


@gluon.jit
def _turn_pass(turn_bars, WG: gl.constexpr, PINGPONG: gl.constexpr):
    if PINGPONG:
        mbarrier.arrive(turn_bars.index(1 - WG), count=1)


@gluon.jit
def _consumer(q_smem, k_smem, v_smem, q_bar, k_ready, v_ready, kv_empty, turn_bars,
              out_ptr, lse_ptr, b, h, heads, seqlen_q, seqlen_k, causal_off, qk_scale,
              m_start, n_blocks, n_unmasked,
              WG: gl.constexpr, CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
              HEAD_DIM: gl.constexpr, NUM_STAGES: gl.constexpr,
              OVERLAP: gl.constexpr, PINGPONG: gl.constexpr):
    M_WG: gl.constexpr = BLOCK_M // 2
    dtype: gl.constexpr = q_smem.dtype
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HEAD_DIM, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)

    q = q_smem.reshape([BLOCK_M, HEAD_DIM]).slice(WG * M_WG, M_WG, dim=0)
    rows = m_start + WG * M_WG + gl.arange(0, M_WG, layout=row_s)

    m_i = gl.full([M_WG], float("-inf"), gl.float32, layout=row_s)
    l_i = gl.zeros([M_WG], gl.float32, layout=row_s)
    acc = gl.zeros([M_WG, HEAD_DIM], gl.float32, layout=o_layout)
    s_zero = gl.zeros([M_WG, BLOCK_N], gl.float32, layout=s_layout)

    mbarrier.wait(q_bar, 0)

    if OVERLAP:
        # FA3 alg. 2: iteration j issues QK^T_j, rescales O (block j-1's alpha) while it runs,
        # issues P_{j-1} V_{j-1}, then does the softmax of block j while P V is in flight.
        p_prev = gl.zeros([M_WG, BLOCK_N], dtype, layout=p_layout)
        alpha_o = gl.full([M_WG], 1.0, gl.float32, layout=row_o)
        if n_blocks > 0:
            # block 0: scores and softmax only
            mbarrier.wait(k_ready.index(0), 0)
            _turn_wait(turn_bars, 0, WG, PINGPONG)
            k_t = k_smem.index(0).reshape([BLOCK_N, HEAD_DIM]).permute((1, 0))
            s_tok = warpgroup_mma(q, k_t, s_zero, use_acc=False, is_async=True)
            _turn_pass(turn_bars, WG, PINGPONG)
            s_acc = warpgroup_mma_wait(0, deps=[s_tok])
            mbarrier.arrive(kv_empty.index(0), count=1)  # K_0 read
            if n_unmasked > 0:
                p, alpha, m_i, l_i = _softmax_update(s_acc, m_i, l_i, rows, 0, seqlen_k, causal_off,
                                                     qk_scale, False, CAUSAL, BLOCK_N, s_layout)
            else:
                p, alpha, m_i, l_i = _softmax_update(s_acc, m_i, l_i, rows, 0, seqlen_k, causal_off,
                                                     qk_scale, True, CAUSAL, BLOCK_N, s_layout)
            p_prev = gl.convert_layout(p.to(dtype), p_layout)
        # steady state: QK^T of block j and P V of block j-1 in flight together
        for j in range(1, n_blocks):
            s = j % NUM_STAGES
            sp = (j - 1) % NUM_STAGES
            mbarrier.wait(k_ready.index(s), (j // NUM_STAGES) & 1)
            _turn_wait(turn_bars, j, WG, PINGPONG)
            k_t = k_smem.index(s).reshape([BLOCK_N, HEAD_DIM]).permute((1, 0))
            s_tok = warpgroup_mma(q, k_t, s_zero, use_acc=False, is_async=True)
            acc = acc * gl.expand_dims(alpha_o, 1)
            mbarrier.wait(v_ready.index(sp), ((j - 1) // NUM_STAGES) & 1)
            v = v_smem.index(sp).reshape([BLOCK_N, HEAD_DIM])
            o_tok = warpgroup_mma(p_prev, v, acc, is_async=True)
            _turn_pass(turn_bars, WG, PINGPONG)
            s_acc = warpgroup_mma_wait(1, deps=[s_tok])
            mbarrier.arrive(kv_empty.index(s), count=1)  # K_j read
            if j < n_unmasked:
                p, alpha, m_i, l_i = _softmax_update(s_acc, m_i, l_i, rows, j, seqlen_k, causal_off,
                                                     qk_scale, False, CAUSAL, BLOCK_N, s_layout)
            else:
                p, alpha, m_i, l_i = _softmax_update(s_acc, m_i, l_i, rows, j, seqlen_k, causal_off,
                                                     qk_scale, True, CAUSAL, BLOCK_N, s_layout)
            alpha_o = gl.convert_layout(alpha, row_o)
            p_prev = gl.convert_layout(p.to(dtype), p_layout)
            acc = warpgroup_mma_wait(0, deps=[o_tok])
            mbarrier.arrive(kv_empty.index(NUM_STAGES + sp), count=1)  # V_{j-1} read
        if n_blocks > 0:
            jl = n_blocks - 1
            sl = jl % NUM_STAGES
            acc = acc * gl.expand_dims(alpha_o, 1)
            mbarrier.wait(v_ready.index(sl), (jl // NUM_STAGES) & 1)
            _turn_wait(turn_bars, n_blocks, WG, PINGPONG)
            v = v_smem.index(sl).reshape([BLOCK_N, HEAD_DIM])
            o_tok = warpgroup_mma(p_prev, v, acc, is_async=True)
            _turn_pass(turn_bars, WG, PINGPONG)
            acc = warpgroup_mma_wait(0, deps=[o_tok])
            mbarrier.arrive(kv_empty.index(NUM_STAGES + sl), count=1)
    else:
        for j in range(n_blocks):
            s = j % NUM_STAGES
            ph = (j // NUM_STAGES) & 1
            mbarrier.wait(k_ready.index(s), ph)
            _turn_wait(turn_bars, j, WG, PINGPONG)
            k_t = k_smem.index(s).reshape([BLOCK_N, HEAD_DIM]).permute((1, 0))
            s_tok = warpgroup_mma(q, k_t, s_zero, use_acc=False, is_async=True)
            _turn_pass(turn_bars, WG, PINGPONG)
            s_acc = warpgroup_mma_wait(0, deps=[s_tok])
            mbarrier.arrive(kv_empty.index(s), count=1)  # K_j read
            if j < n_unmasked:
                p, alpha, m_i, l_i = _softmax_update(s_acc, m_i, l_i, rows, j, seqlen_k, causal_off,
                                                     qk_scale, False, CAUSAL, BLOCK_N, s_layout)
            else:
                p, alpha, m_i, l_i = _softmax_update(s_acc, m_i, l_i, rows, j, seqlen_k, causal_off,
                                                     qk_scale, True, CAUSAL, BLOCK_N, s_layout)
            acc = acc * gl.expand_dims(gl.convert_layout(alpha, row_o), 1)
            p_op = gl.convert_layout(p.to(dtype), p_layout)
            mbarrier.wait(v_ready.index(s), ph)
            v = v_smem.index(s).reshape([BLOCK_N, HEAD_DIM])
            o_tok = warpgroup_mma(p_op, v, acc, is_async=True)
            acc = warpgroup_mma_wait(0, deps=[o_tok])
            mbarrier.arrive(kv_empty.index(NUM_STAGES + s), count=1)  # V_j read

    # epilogue: one normalisation; rows that saw no key give 0 and lse = -inf
    l_o = gl.convert_layout(l_i, row_o)
    l_safe = gl.where(l_o == 0.0, 1.0, l_o)
    out = acc / gl.expand_dims(l_safe, 1)
    lse = gl.where(l_i == 0.0, float("-inf"), (m_i + gl.log2(l_i)) * 0.6931471805599453)  # ln 2

    rows_o = m_start + WG * M_WG + gl.arange(0, M_WG, layout=row_o)
    cols_o = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, o_layout))
    row_off = ((b.to(gl.int64) * seqlen_q + rows_o) * heads + h) * HEAD_DIM
    o_ptrs = out_ptr + gl.expand_dims(row_off, 1) + gl.expand_dims(cols_o, 0)
    o_mask = gl.expand_dims(rows_o < seqlen_q, 1) & gl.expand_dims(cols_o < HEAD_DIM, 0)
    gl.store(o_ptrs, out.to(dtype), mask=o_mask)
    lse_ptrs = lse_ptr + (b.to(gl.int64) * heads + h) * seqlen_q + rows
    gl.store(lse_ptrs, lse, mask=rows < seqlen_q)


@gluon.jit
def _consumer_wg1(q_smem, k_smem, v_smem, q_bar, k_ready, v_ready, kv_empty, turn_bars,
                  out_ptr, lse_ptr, b, h, heads, seqlen_q, seqlen_k, causal_off, qk_scale,
                  m_start, n_blocks, n_unmasked,
                  CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                  HEAD_DIM: gl.constexpr, NUM_STAGES: gl.constexpr,
                  OVERLAP: gl.constexpr, PINGPONG: gl.constexpr):
    _consumer(q_smem, k_smem, v_smem, q_bar, k_ready, v_ready, kv_empty, turn_bars,
              out_ptr, lse_ptr, b, h, heads, seqlen_q, seqlen_k, causal_off, qk_scale,
              m_start, n_blocks, n_unmasked,
              1, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM, NUM_STAGES, OVERLAP, PINGPONG)


@gluon.jit
def _consumer_wg0(q_smem, k_smem, v_smem, q_bar, k_ready, v_ready, kv_empty, turn_bars,
                  out_ptr, lse_ptr, b, h, heads, seqlen_q, seqlen_k, causal_off, qk_scale,
                  m_start, n_blocks, n_unmasked,
                  CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                  HEAD_DIM: gl.constexpr, NUM_STAGES: gl.constexpr,
                  OVERLAP: gl.constexpr, PINGPONG: gl.constexpr):
    _consumer(q_smem, k_smem, v_smem, q_bar, k_ready, v_ready, kv_empty, turn_bars,
              out_ptr, lse_ptr, b, h, heads, seqlen_q, seqlen_k, causal_off, qk_scale,
              m_start, n_blocks, n_unmasked,
              0, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM, NUM_STAGES, OVERLAP, PINGPONG)


@gluon.jit
def attn_fwd_kernel(q_desc, k_desc, v_desc, out_ptr, lse_ptr,
                    seqlen_q, seqlen_k, heads, kv_group, num_m_tiles, qk_scale,
                    CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                    HEAD_DIM: gl.constexpr, NUM_STAGES: gl.constexpr,
                    OVERLAP: gl.constexpr, PINGPONG: gl.constexpr,
                    CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr):
    # 1-D grid over (batch * heads) x m-tiles, (batch, head) major so that neighbouring programs
    # share K/V in L2; with a causal mask the longest tiles (largest m) go first.
    pid = gl.program_id(0)
    bh = pid // num_m_tiles
    pid_m = pid % num_m_tiles
    if CAUSAL:
        pid_m = num_m_tiles - 1 - pid_m
    b = bh // heads
    h = bh % heads
    kvh = h // kv_group
    m_start = pid_m * BLOCK_M
    causal_off = seqlen_k - seqlen_q

    if CAUSAL:
        m_end = gl.minimum(m_start + BLOCK_M, seqlen_q)
        kv_end = gl.minimum(m_end + causal_off, seqlen_k)
        kv_end = gl.maximum(kv_end, 0)
        n_blocks = gl.cdiv(kv_end, BLOCK_N)
        # blocks whose every key is visible to every row of the tile need no mask
        full_end = gl.maximum(gl.minimum(m_start + causal_off + 1, seqlen_k), 0)
        n_unmasked = gl.minimum(full_end // BLOCK_N, n_blocks)
    else:
        n_blocks = gl.cdiv(seqlen_k, BLOCK_N)
        n_unmasked = seqlen_k // BLOCK_N

    dtype: gl.constexpr = q_desc.dtype
    q_smem = gl.allocate_shared_memory(dtype, q_desc.block_type.shape, q_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES] + k_desc.block_type.shape, k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES] + v_desc.block_type.shape, v_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    # kv_empty[s]: K of stage s free; kv_empty[NUM_STAGES + s]: V of stage s free
    kv_empty = gl.allocate_shared_memory(gl.int64, [2 * NUM_STAGES, 1], mbarrier.MBarrierLayout())
    turn_bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(kv_empty.index(i), count=2)  # one arrival per consumer warpgroup
        mbarrier.init(kv_empty.index(NUM_STAGES + i), count=2)
    mbarrier.init(turn_bars.index(0), count=1)
    mbarrier.init(turn_bars.index(1), count=1)

    # (the argument tuples are written inline: a tuple assigned to a local first would turn its
    # constexpr entries into tensors)
    gl.warp_specialize([
        (_consumer_wg0, (q_smem, k_smem, v_smem, q_bar, k_ready, v_ready, kv_empty, turn_bars,
                         out_ptr, lse_ptr, b, h, heads, seqlen_q, seqlen_k, causal_off, qk_scale,
                         m_start, n_blocks, n_unmasked,
                         CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM, NUM_STAGES, OVERLAP, PINGPONG)),
        (_consumer_wg1, (q_smem, k_smem, v_smem, q_bar, k_ready, v_ready, kv_empty, turn_bars,
                         out_ptr, lse_ptr, b, h, heads, seqlen_q, seqlen_k, causal_off, qk_scale,
                         m_start, n_blocks, n_unmasked,
                         CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM, NUM_STAGES, OVERLAP, PINGPONG)),
        (_producer, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, k_ready, v_ready,
                     kv_empty, b, h, kvh, m_start, n_blocks, BLOCK_N, NUM_STAGES)),
    ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])


# --------------------------------------------------------------------------------------------
# Host side
# --------------------------------------------------------------------------------------------
_GL_DTYPES = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16}


def smem_layout(dtype) -> gl.NVMMASharedLayout:
    """Shared layout of a [1, BLOCK, 1, head_dim] TMA box: 128-byte swizzle, 16-bit elements."""
    return gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=4)


def shared_memory_bytes(head_dim: int, cfg: FwdConfig, elem: int = 2) -> int:
    """Shared memory the kernel allocates for its tiles (the barriers add a few bytes)."""
    return elem * head_dim * (cfg.block_m + 2 * cfg.num_stages * cfg.block_n)


def supports(q, k, v, causal) -> str | None:
    """None if this backend can run the call, else a plain-English reason."""
    if not (q.is_cuda and k.is_cuda and v.is_cuda):
        return "the hopper backend needs CUDA tensors"
    if torch.cuda.get_device_capability(q.device) != (9, 0):
        major, minor = torch.cuda.get_device_capability(q.device)
        return f"the hopper backend needs an sm_90 GPU (H100/H200); this one is sm_{major}{minor}"
    if q.dtype not in _GL_DTYPES:
        return f"the hopper backend takes bfloat16 or float16, not {q.dtype}"
    if q.shape[-1] not in SUPPORTED_HEAD_DIMS:
        return (f"the hopper backend supports head_dim in {SUPPORTED_HEAD_DIMS}, "
                f"got {q.shape[-1]}")
    if q.shape[2] % k.shape[2] != 0:
        return "heads must be a multiple of kv_heads"
    return None


def _tma_ready(t: torch.Tensor) -> torch.Tensor:
    """TMA needs a 16-byte aligned base and 16-byte multiple strides; copy if not."""
    es = t.element_size()
    if t.stride(-1) != 1 or t.data_ptr() % 16 or any((s * es) % 16 for s in t.stride()[:-1]):
        t = t.contiguous()
    return t


def _descriptor(t: torch.Tensor, block: int):
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    d = t.shape[-1]
    return TensorDescriptor(t, list(t.shape), list(t.stride()), [1, block, 1, d],
                            smem_layout(t.dtype))


def forward(q, k, v, causal: bool, softmax_scale: float, config: FwdConfig | None = None,
            _out: torch.Tensor | None = None, _lse: torch.Tensor | None = None):
    """(out, lse) as the launcher contract says; see the module docstring.

    config overrides the tile table (ablations). _out/_lse: preallocated contiguous outputs, for
    tests that poison them before the launch.
    """
    batch, seqlen_q, heads, head_dim = q.shape
    _, seqlen_k, kv_heads, _ = k.shape
    cfg = config or get_config(head_dim)
    q, k, v = _tma_ready(q), _tma_ready(k), _tma_ready(v)
    out = _out if _out is not None else torch.empty((batch, seqlen_q, heads, head_dim),
                                                    dtype=q.dtype, device=q.device)
    lse = _lse if _lse is not None else torch.empty((batch, heads, seqlen_q),
                                                    dtype=torch.float32, device=q.device)
    q_desc = _descriptor(q, cfg.block_m)
    k_desc = _descriptor(k, cfg.block_n)
    v_desc = _descriptor(v, cfg.block_n)
    num_m_tiles = triton.cdiv(seqlen_q, cfg.block_m)
    grid = (batch * heads * num_m_tiles,)
    attn_fwd_kernel[grid](
        q_desc, k_desc, v_desc, out, lse,
        seqlen_q, seqlen_k, heads, heads // kv_heads, num_m_tiles, softmax_scale * LOG2E,
        CAUSAL=bool(causal), BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, HEAD_DIM=head_dim,
        NUM_STAGES=cfg.num_stages, OVERLAP=cfg.overlap, PINGPONG=cfg.pingpong,
        CONSUMER_REGS=cfg.consumer_regs, PRODUCER_REGS=cfg.producer_regs,
        num_warps=cfg.num_warps, maxnreg=cfg.maxnreg,
    )
    return out, lse


# --------------------------------------------------------------------------------------------
# Ahead-of-time compilation for sm_90a (no GPU needed): used by `python -m fusedattn.inspect`
# and by the CPU tests.
# --------------------------------------------------------------------------------------------
def compile_sm90(head_dim: int = 128, causal: bool = False, dtype: str = "bf16",
                 config: FwdConfig | None = None):
    """Compile attn_fwd_kernel for sm_90a with the bundled ptxas; returns triton's CompiledKernel."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    cfg = config or get_config(head_dim)
    lay = repr(gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=4))
    signature = {
        "q_desc": f"tensordesc<{dtype}[1, {cfg.block_m}, 1, {head_dim}],{lay}>",
        "k_desc": f"tensordesc<{dtype}[1, {cfg.block_n}, 1, {head_dim}],{lay}>",
        "v_desc": f"tensordesc<{dtype}[1, {cfg.block_n}, 1, {head_dim}],{lay}>",
        "out_ptr": f"*{dtype}", "lse_ptr": "*fp32",
        "seqlen_q": "i32", "seqlen_k": "i32", "heads": "i32", "kv_group": "i32",
        "num_m_tiles": "i32", "qk_scale": "fp32",
    }
    constexprs = dict(CAUSAL=bool(causal), BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
                      HEAD_DIM=head_dim, NUM_STAGES=cfg.num_stages, OVERLAP=cfg.overlap,
                      PINGPONG=cfg.pingpong, CONSUMER_REGS=cfg.consumer_regs,
                      PRODUCER_REGS=cfg.producer_regs)
    for name in constexprs:
        signature[name] = "constexpr"
    src = GluonASTSource(attn_fwd_kernel, signature, constexprs=constexprs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": cfg.num_warps, "maxnreg": cfg.maxnreg})
