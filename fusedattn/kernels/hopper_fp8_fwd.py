"""Hopper (sm_90a) FP8 (e4m3) attention forward, written in Gluon (Triton 3.6.0).

    from fusedattn import quantize_fp8
    qq = quantize_fp8(q, role="q", rotate=True); kq = quantize_fp8(k, role="k", rotate=True)
    vq = quantize_fp8(v, role="v")
    out, lse = hopper_fp8_fwd.forward(qq, kq, vq, causal, softmax_scale)   # out bf16, lse fp32

Computes exactly what ``fusedattn.fp8_reference.fp8_attention_forward`` specifies (up to the order
of float32 additions and the tensor core's FP8 accumulator), one key block of BLOCK_N keys at a time:

    S   = (Q8 @ K8_j^T) * (q_scale[row] * k_scale[j]) * softmax_scale    e4m3 wgmma, fp32 acc
    m'  = max(m, rowmax S);  P = exp(S - m') * 256                         fp32 (exp2, log2 domain)
    l   = alpha * l + rowsum(P)                                            from the fp32 P
    O   = alpha * O + (e4m3(P) @ V8_j) * v_scale[j]                        e4m3 wgmma, fp32 acc
    out = O / l  (bf16),  lse = m + ln(l / 256)

Layout: q (batch, seqlen_q, heads, head_dim), k/v (batch, seqlen_k, kv_heads, head_dim), all
float8_e4m3fn codes from :func:`fusedattn.quantize_fp8` with float32 scales (batch, heads, blocks).
Causal masking is bottom-right aligned; a row that sees no key gets out = 0 and lse = -inf.

Program structure (one CTA = BLOCK_M = 128 query rows of one (batch, head); BLOCK_N = 128 or 256
keys per key tile, from the table CONFIGS),
as the 16-bit kernel (``hopper_fwd.py``) but with a whole producer warpgroup:

    partition        warps  registers     work
    consumer 0       4      232 (rest)    rows [0, 64)     (Gluon default partition)
    consumer 1       4      240           rows [64, 128)
    producer         4      32            TMA of Q, K, V; transposes each V tile in shared memory

Design choices (and why):

* **V transposed in shared memory by the producer warpgroup.** e4m3 wgmma reads its shared-memory
  operands K-major only (no transpose bit for 8-bit types), so the B operand of P V must be
  V^T (head_dim, BLOCK_N) with the keys contiguous. The producer TMA-loads each V tile as
  head_dim / 64 boxes (BLOCK_N, 64) into a staging ring (V_STAGES = 2 slots, 64-byte swizzle);
  its 128 threads then load each box into registers (16 per thread, 16-byte loads), and store it
  transposed into the V^T ring (NUM_STAGES slots, (head_dim, 128) with 128-byte NVMMA swizzle,
  the layout wgmma reads; Triton lowers these stores to stmatrix), execute
  ``fence_async_shared`` (generic-proxy writes made visible to the async proxy wgmma reads
  through), synchronise the warpgroup (named barrier) and arrive on ``vt_ready``. The TMA of
  V_{j+1} is issued before the transpose of V_j, so the copy hides behind it, and the transposes
  run one to two blocks ahead of the consumers. This is FA3's choice (its producer warpgroup
  transposes with LDSM.T/STSM): the consumers' instruction stream (the bottleneck: tensor cores
  and softmax) stays the same as in the 16-bit kernel, and the producer warpgroup is otherwise
  idle. Costs: the producer is 4 warps instead of 1 (the thread count stays 384: a 1-warp producer
  is padded to a warpgroup anyway) and needs 32 registers instead of 24 (at 24 the transpose
  spills), which leaves 232 for consumer 0; plus the staging ring in shared memory. A global
  transpose before the call would cost a pass over V in HBM (FA3 rejects it for that reason);
  transposing in the consumers would take issue slots from the softmax and the wgmma issue.
  The register layout of the transpose was chosen by enumerating lane/vector assignments for
  shared-memory bank conflicts (see ``_transpose_v``).
* **Keys permuted identically in P and V^T, so P needs no shuffles.** The 8-bit A operand of
  wgmma from registers (k_width 4) holds, per thread, other key columns than the fp32 score
  accumulator does. Rather than move P between threads, the transpose writes V^T with its keys
  permuted within each group of 32 (position k' holds key pi(k'), a permutation of the index
  bits) and P is relabelled with the same pi: P V = sum_k' P[:, pi(k')] V[pi(k'), :]. With this
  pi the conversion from the accumulator layout to the operand layout is a register renaming
  (checked at compile time: ``convert_layout(..., assert_trivial=True)``).
* **Scales applied exactly.** q_scale is read per query row (the row's block), so any block_size
  of q gives the reference's result; k_scale[j] multiplies the fp32 scores of key block j together
  with q_scale and softmax_scale * log2(e), before the max. v_scale[j] cannot be folded into P
  before requantising (e4m3(P * 256 * v_scale) rounds differently from e4m3(P * 256) * v_scale, and
  could leave e4m3's range), and a separate accumulator per block would cost head_dim / 2 more
  registers. Instead O is kept *in units of the current block's v_scale*: before P_j V_j is
  accumulated, O is multiplied by alpha_j * v_scale[j-1] / v_scale[j] (folded into the alpha
  rescale that runs anyway, so free), and the epilogue multiplies by v_scale[last] / l. This is the
  reference's O = alpha * O + (P8 V8) * v_scale[j] with the same products, up to float32 rounding
  of the ratio (relative 2**-22 per block). Limitation: the ratio must stay finite in float32
  (ratios of v block maxima below ~1e30).
* **P requantised in registers.** P * 256 = exp2(s - (m - 8)) lies in [0, 256], is converted to
  e4m3 in registers (cvt.rn.satfinite: round to nearest even, saturating, as the reference's
  clamp + cast) and fed to the P V wgmma as its A operand from registers
  (``DotOperandLayout(0, parent, k_width=4)``: Gluon 3.6 supports 8-bit register A operands). The
  row sum comes from the fp32 P, as in the reference.
* Intra-warpgroup overlap (FA3 alg. 2) at hdim 64 and 128: QK^T of block j is in flight together
  with P V of block j-1; K and V^T of a stage are released separately. At hdim 256 the overlapped
  loop needs O (128) + S (64) + P (16) registers at once and spills ~130 registers per thread, so
  hdim 256 runs block by block (unmasked blocks first, in their own loop): 0 spills.
* FP8 accumulation: wgmma's e4m3 accumulator is used as is (no max_num_imprecise_acc split), as
  FA3 does; the reference module's docstring notes the difference this can make.

* **256-key tiles** (device run 18: +22..29% at hdim 64 and at hdim 128 non-causal over the
  128-key rows): run block by block (S alone is 128 registers per thread); V is loaded and
  transposed in 128-key chunks (two V^T tiles per stage) and P V is two products of 128 keys, P
  split at key bit 7, a register bit of the accumulator. The per-block work (the O rescale, the row
  reductions' shuffles, barriers, waits, descriptors) is paid once per 256 keys.
* **Persistent rows** (causal at hdim 64, hdim 128's 256-key rows, both hdim 256 rows; device
  runs 37, 81, 85, 86):
  one program per SM walks its tiles (causal: its own list from a host-built table,
  tile_schedule; non-causal, where tiles are equal: tiles pid, pid + grid, ...), Q is
  released after each tile's last QK^T so that the next tile's Q and first K / V load under the
  current tile's last P V, and O leaves by TMA store: through a half-tile buffer of its own
  (o_half, hdim 64) or through the V staging ring (o_ring, hdim 128 and 256), whose
  next V load waits until both warpgroups' stores have read it. This hides most of a tile's fixed
  cost (Q load, first V transpose, epilogue, the gap before the SM's next program).

The quantised tensors' block sizes: k and v carry one scale per key tile: block_size == BLOCK_N
gives the reference's online-softmax blocking, so the two agree to float32 rounding; a multiple of
BLOCK_N runs with each scale repeated per tile (QuantizedTensor.reblocked, the same values; its
emulation is the reference on the reblocked tensors). q may have any block_size (the scale is looked
up per row).
"""
from __future__ import annotations

import functools
import heapq
import math
from dataclasses import dataclass, replace

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from . import fast_launch as _fl

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
P_SCALE_LOG2 = 8.0  # P is stored as e4m3(P * 2**8); must equal log2(fp8_reference.P_SCALE)

SUPPORTED_HEAD_DIMS = (64, 128, 256)


# --------------------------------------------------------------------------------------------
# Tile configurations
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Fp8FwdConfig:
    block_m: int = 128        # query rows per program (two consumer warpgroups of block_m // 2)
    block_n: int = 128        # keys per K/V block: must equal k/v's quantisation block_size
    num_stages: int = 2       # K ring and V^T ring depth
    v_stages: int = 2         # V staging ring (TMA destination before the transpose)
    overlap: bool = True      # intra-warpgroup overlap (FA3 alg. 2) of softmax and GEMMs
    consumer_regs: int = 240
    producer_regs: int = 32   # the transpose needs > 24 (24 spills); consumer wg0 gets 232
    maxnreg: int = 168        # register cap at entry: 168 * 384 <= 64K
    # --- candidates after the first GPU run (benchmarks/fp8_log.md), off until measured ---
    prefetch_scales: bool = False  # overlapped loop: k/v scales loaded one block ahead (same values)
    softmax_fma: bool = False  # FA3's softmax: max of the raw scores, exponent as one FFMA
    pack_p: bool = False       # overlapped loop: P carried as packed 32-bit words (same values)
    pingpong: bool = False     # FA3's warpgroup turns (named barriers 10/11), either loop
    # --- session-3 candidate (benchmarks/fp8_log.md), off until measured on a GPU ---
    persistent: bool = False   # grid = #SMs, each program walks tiles pid, pid + grid, ... in the
                               # one-tile grid's order; rings and pingpong turns carry across tiles
    # --- session-4 candidates (benchmarks/fp8_log.md), off until measured on a GPU ---
    unpack_prmt: bool = False     # with pack_p: P's words unpacked by a plain prmt (kernel
                                  # PACK_P == 2); the shipped predicated form serialises every
                                  # wgmma (ptxas C7513, fp8_log.md)
    ldsm_transpose: bool = False  # V transposed with 16-bit transposing loads (ldmatrix.trans)
                                  # and 2 byte permutes per 8 bytes (_transpose_v_ldsm)
    # --- session-5 candidate (benchmarks/fp8_log.md), off until measured on a GPU ---
    lpt_order: bool = False       # causal, one-tile grid: program ids run longest tile first
                                  # over L2 sections of (batch, head)s (the 16-bit kernel's
                                  # dynamic schedule's order), instead of (batch, head) major
    l2_section_kb: int = 32768    # lpt_order: K+V bytes per L2 section, KB (FA3: 32 MB)
    # --- session-6 candidate (fp8_log.md, end of session 6), off until measured on a GPU ---
    causal_mask_only: bool = False  # causal: the mask without the implied key < seqlen_k test
                                    # (kernel CAUSAL == 2; the same stored results)
    # --- session-14 candidate (fp8_log.md, session 14), off until measured on a GPU ---
    v_perm: bool = False   # ldsm_transpose: V^T row sigma(d) holds head-dim column d (sigma swaps
                           # bits 0 and 3 of d), so that each stmatrix writes 8 rows in 8
                           # different bank groups (run 24: 2-way conflicts, 2x the ideal
                           # wavefronts); O's columns come out permuted the same way and are
                           # put back by a register relabel before the epilogue (FA3's trick)
    o_tma: bool = False    # one-tile rows: each consumer warpgroup writes its O (bf16) into V
                           # staging slot WG (free once its last V^T is published: no loads
                           # follow in a one-tile program) and sends it out with one TMA store,
                           # instead of 4-byte pointer stores (~4.8k cycles per hdim 256 tile,
                           # run 35)
    o_half: bool = False   # persistent rows (session 16, off until measured on a GPU): O through
                           # one half-tile bf16 buffer of its own (M_WG x head_dim, 16 KB at hdim
                           # 128) that the two consumer warpgroups take in turn each tile
                           # (warpgroup 0, then 1; two mbarriers), then one TMA store per
                           # warpgroup: o_tma's store where the staging ring is not free
    o_ring: bool = False   # persistent rows with early_q (session 19, off until measured on a
                           # GPU): o_tma's store in a persistent program, FA3's way of sharing O's
                           # buffer with the V path: O through V staging slot WG; the producer
                           # loads the next tile's K_0 and Q first and its V_0 only once both
                           # warpgroups' O stores of the previous tile have read the ring (two
                           # mbarriers). For hdim 256, where no buffer of its own fits
    # --- timing diagnostic (session 7), WRONG RESULTS: forward() runs it only with _diagnostic ---
    diag_no_transpose: bool = False  # the producer skips the V transpose (V^T left stale): how
                                     # much of the time the transpose's issue slots cost
    # --- session-8 candidate (fp8_log.md, session 8), off until measured on a GPU ---
    early_q: bool = False  # persistent, block by block: Q is released (q_empty) right after the
                           # tile's last QK^T instead of after its last P V, and the producer
                           # loads the next tile's first V / K and publishes its first V^T
                           # before it waits for that release and loads the next Q (then V_1,
                           # K_1: K_1's stage is freed with Q)
    # --- timing diagnostic (session 8), lse OVERWRITTEN: forward() runs it only with _diagnostic ---
    diag_stamps: bool = False  # SM clock stamps of each tile's phases written over the first 16
                               # lse entries of its rows (scripts/fp8_tile_phases.py reads them)
    # --- session-8 candidate (fp8_log.md, session 8): measured, no gain (device run 30) ---
    split_producer: bool = False  # the producer split in two: a one-warp loader issuing every
                                  # TMA copy and a two-warp transposer (ldsm_transpose only),
                                  # sharing one warpgroup (producer_regs each); Triton's membar
                                  # pass then puts no barrier around the copies (one warp) and
                                  # the transposer's warps issue no copy code
    # --- session-9 candidates (fp8_log.md, session 9), off until measured on a GPU ---
    mask_split: bool = False   # the masked blocks' compares as (c & ~6) <= limit - (c & 6): one
                               # 32-bit compare with an immediate per score instead of a 64-bit
                               # one (kernel SOFTMAX_FMA bit 1; the same mask)
    sched_table: bool = False  # persistent, causal: each program walks its own list of tiles
                               # from a host-built table (tile_schedule: the one-tile grid's
                               # longest-first order over L2 sections, each tile given to the
                               # program predicted to finish first) instead of tiles pid,
                               # pid + grid, ... (run 36: that static stride leaves programs
                               # 6-54% apart in work when causal)
    # --- session-21 candidate (fp8_log.md, session 21), off until measured on a GPU ---
    vt_signal_expect: bool = False  # the producer signals V^T ready with an expect of 0 bytes
                                    # (mbarrier.arrive.expect_tx ..., 0: the same single arrive)
                                    # instead of mbarrier.arrive, whose lowering Triton 3.6's
                                    # membar pass treats as touching all shared memory, so that
                                    # a warpgroup barrier lands before it and before the next
                                    # block's first shared-memory access. The explicit fence and
                                    # thread barrier before the signal stay (kernel LDSM_T bit 2)
    release_expect: bool = False    # block by block (_block_serial): each consumer warpgroup
                                    # releases its K and V^T stages with a 0-byte expect after
                                    # its wgmma wait, not mbarrier.arrive, whose membar fences
                                    # cost 3 warpgroup barriers per block (7 -> 4 in pvr's loop,
                                    # CPU). Without the fence, one thread signals once its own
                                    # wait returned, as FA3's K release does (one thread per
                                    # warpgroup right after its wgmma wait; FA3 releases V with
                                    # all 256 threads). Kernel SOFTMAX_FMA bit 3

    # --- session-24 candidates (RESULTS.md runs 96-97), off until measured on a GPU ---
    k_after_vt: bool = False        # with early_q, the one-warpgroup producer: in the key-block
                                    # loop, K_{j+1} is loaded after V_j's transpose and signal, not
                                    # before it. The K load waits for both consumer warpgroups'
                                    # release of K_{j-1} (their QK^T_{j-1}), so the transpose of
                                    # V_j started only after it; run 96's no-transpose row was
                                    # 16-22% faster at hdim 256 (kernel LDSM_T bit 3)
    k_mid_vt: bool = False          # with k_after_vt: K_{j+1} loaded between the two halves of
                                    # V_j's transpose (its column chunks), not after it, in case
                                    # K's copy latency surfaces before QK^T_{j+1} once it leaves
                                    # after the whole transpose (kernel LDSM_T bit 4)

    # --- session-25 candidate (RESULTS.md runs 98-100), off until measured on a GPU ---
    exp_poly: int = 0               # 0, 2, 4 or 8: one score in exp_poly takes its exp2 on the
                                    # FMA pipe (a degree-2 polynomial, _exp2_mixed) instead of
                                    # MUFU.EX2. Run 99's stamps: the consumer's QK^T + softmax is
                                    # ~1770 of the ~3500 cycles of hdim 256's per-block chain,
                                    # with no wait on the producer or the other warpgroup; its
                                    # 64 MUFU.EX2 per thread and block occupy the sub-partition's
                                    # MUFU pipe ~512 cycles (4 lanes per clock). Kernel
                                    # SOFTMAX_FMA bits 4-5
    row_tree: bool = False          # each row's max and sum over the block as trees inside the
                                    # thread (_row_tree) rather than the
                                    # reduction's one chain of 31 / 63 dependent FMNMX / FADD
                                    # (kernel SOFTMAX_FMA bit 6)

    @property
    def num_warps(self) -> int:  # warps of the default partition (consumer warpgroup 0)
        return 4


# Key tiles (block_n) are 128 or 256 keys: powers of two, as quantisation blocks are (k and v carry
# one scale per key tile; a tensor quantised with 256-row blocks also runs on a 128-key tile, its
# scales repeated: QuantizedTensor.reblocked). FA3 FP8 uses 192x160 (hdim 64), 128x224 (128,
# causal and non-causal: its FP8 tile sizes do not depend on causal; read in its tile_size.h,
# session 14), 128x128 (256). Registers (ptxas, CPU compile): with the producer at
# 32 registers the default partition (consumer wg0) gets 232 = 168 * 3 - 240 - 32; at 24 the
# producer's transpose spills. hdim 256 with overlap spills ~130 registers per thread in each
# consumer (O 128 + S 64 + P 16 + state > 232), so hdim 256 runs without overlap (0 spills); a
# 256-key tile there would need S 128 + O 128 registers: not offered. 256-key tiles run block by
# block (S alone is 128 registers); hdim 128 causal with them spills 112 B with the bounds test
# in the mask, 16 B without it (causal_mask_only, the shipped row; outside the key loops).
# Shared memory: see shared_memory_bytes (hdim 64: 72.5 / 136.5 KB, 128: 112.4 / 208.4 KB,
# 256: 224.4 KB, for 128- / 256-key tiles).
_ROW64 = Fp8FwdConfig(num_stages=3, v_stages=2, pack_p=True, softmax_fma=True, pingpong=True,
                      lpt_order=True)
_ROW128 = Fp8FwdConfig(num_stages=2, v_stages=2, pack_p=True, softmax_fma=True, pingpong=True,
                       unpack_prmt=True, ldsm_transpose=True, lpt_order=True)
_ROW256 = Fp8FwdConfig(num_stages=2, v_stages=2, overlap=False, softmax_fma=True, pingpong=True,
                       ldsm_transpose=True, lpt_order=True)
_BLOCKWISE = dict(overlap=False, pack_p=False, unpack_prmt=False)   # the block-by-block loop
# hdim 256's one-tile row of device runs 77-85 (v_perm and o_tma, variant vpo): the row its
# candidates are defined against (variant_config), as the table's row moved to the persistent form
_ONE_TILE256 = replace(_ROW256, v_perm=True, o_tma=True)
# the persistent loop with O through the V staging ring (o_ring; variant pvr): hdim 256's rows
_PERSISTENT_RING = dict(persistent=True, early_q=True, sched_table=True, causal_mask_only=True,
                        o_tma=False, v_perm=True, o_ring=True)
# the session-21 signals as 0-byte expects (variant pvxc; hdim 256's rows since device run 97)
_EXPECTS = dict(vt_signal_expect=True, release_expect=True)

# (head_dim, causal, block_n) -> configuration. attention_fp8 on 16-bit inputs quantises k and v
# with the largest block_n listed for (head_dim, causal) (preferred_block); quantised inputs run
# on the largest listed block_n that divides their block_size (get_config).
CONFIGS = {
    # P packed, FFMA softmax and pingpong (variant pack_fma_pp), device run 11: s=2048/8192
    # non-causal 374/427 vs 294/328, causal 282/394 vs 207/297 (+27/+30/+36/+32%); best or within
    # 2% of the best of 6 in all four cells. The persistent loop on top: -9..+4% (run 11).
    # Causal tiles longest first over L2 sections (variant lpt), device run 15: causal s=2048
    # 288 vs 280 (+3.0%), non-causal unchanged (same kernel). P unpacked by prmt (unser, which
    # ends ptxas's serialisation of every wgmma): +1.6/-1.3/+2.5%, flat: not adopted.
    (64, False, 128): _ROW64,
    (64, True, 128): _ROW64,
    # 256-key tiles block by block (variant n256), device run 18: s=2048/8192 non-causal 464/546
    # vs 376/424 (+23/+29%), causal 301/477 vs 291/401 (+3/+19%; measured with 3 stages, which
    # spills 4 B causal: 2 stages here, 0 spills).
    (64, False, 256): replace(_ROW64, block_n=256, **_BLOCKWISE),
    # Causal since session 9: the persistent loop with Q released after each tile's last QK^T
    # (early_q) and the tiles dealt from a host-built table (sched_table; variant pq256s, 3
    # stages, the causal mask alone, 0 spills). Device run 37, rotated rounds / sequential:
    # s=2048 363 vs 311 (+17%, sequential), s=8192 +1.2% (rounds) / +3.2%. Before: 2 stages
    # block by block (run 18: causal 301/477 vs 291/401 with 128-key tiles).
    # Then O through a half-tile buffer of its own and a TMA store (o_half, variant oh64c), device
    # run 81 on an H100 (rounds beside this row at s=2048: 372 vs 355, +4.7%; the dev bench, same
    # process: s=2048/8192 374/518 vs 358/485, +4.6/+6.7%); the previous row is variant pq256s.
    (64, True, 256): replace(_ROW64, block_n=256, causal_mask_only=True, persistent=True,
                             early_q=True, sched_table=True, o_half=True, **_BLOCKWISE),
    # P packed to e4m3 in registers (pack_p), FFMA softmax and pingpong between the consumer
    # warpgroups (variant pack_fma_pp), device run 7: s=2048/8192 non-causal 573/669 vs 497/573,
    # causal 438/611 vs 345/507 (+15..27%); best of 6 in all four cells.
    # Then P unpacked by prmt and V transposed through ldmatrix.trans (variant unser_ldsm),
    # device run 15: s=2048/8192 non-causal 604/708 vs 568/664 (+6.4/+6.6%), causal 456/643 vs
    # 433/606 (+5.1/+6.1%), best or within 0.3% of the best of 6 in every cell; and causal tiles
    # longest first (variant lpt, measured alone: causal +2.8/+5.0%).
    (128, False, 128): _ROW128,
    # the same without the overlap (variant serial), device run 18: causal s=2048/8192 495/678 vs
    # 458/659 (+8/+3%); non-causal 629/708 vs 600/707
    (128, True, 128): replace(_ROW128, **_BLOCKWISE),
    # 256-key tiles block by block (variant n256), device run 18: s=2048/8192 non-causal 731/876
    # vs 600/707 (+22/+24%; FA3-FP8 842/929 in that process)
    # Then v_perm and o_tma as in hdim 256's rows (variant vpo256n), device run 79 (rotated
    # rounds beside this row): s=2048/4096/8192 756/800/853 vs 692/767/823 (+9.4/+4.3/+3.6%);
    # o_tma alone (ot256n) +10.5/+4.5/+4.2%, v_perm alone (vp256n) +4.9/+2.7/+2.7%; the
    # previous row is variant n256.
    # Then the persistent loop with O through the V staging ring (o_ring, variant or256n, as the
    # causal row below), device run 86 on an H100 (rotated rounds beside this row):
    # s=2048/4096/8192 811/833/853 vs 738/790/843 (+9.9/+5.4/+1.2%; FA3-FP8 818/854/883). Spills
    # 8 B, tile-level values of the tile loop, none in a key-block loop (KNOWN_SPILL in
    # tests/test_hopper_fp8_compile.py). The previous row is variant vpo256n.
    (128, False, 256): replace(_ROW128, block_n=256, persistent=True, early_q=True,
                               sched_table=True, v_perm=True, o_ring=True, **_BLOCKWISE),
    # 256-key tiles block by block with the causal mask alone (variant n256c: no bounds test, which
    # the bottom-right mask implies), device run 23: s=2048/8192 501/772 vs 489/678 (+2.5/+13.9%;
    # FA3-FP8 692/876 in that process). Spills 16 B: two row indices of consumer warpgroup 0
    # stored at entry and reloaded before the masked loop and the epilogue (none inside a loop;
    # every form tried without it spilled more, fp8_log.md session 7)
    # Since session 9 in the persistent loop with early_q and the table-dealt tiles (variant
    # pq256s; 0 spills): device run 37 in rotated rounds beside this row's one-tile form,
    # s=2048 / 8192 / 16384: 562 / 746 / 784 vs 498 / 727 / 797 (+12.9 / +2.7 / -1.7%, the
    # last within the rounds' spread of 4-13%); per tile ~1 key block less outside the key loop
    # (clock stamps, fp8_log.md session 9). The same loop dealt by the static stride (pq256)
    # fell to 0.74x at 16384 (programs up to 54% apart in work).
    # Then V^T's rows permuted (v_perm, variant vp256c; o_tma is for one-tile programs), device
    # run 79 (rotated rounds): s=2048/4096/8192 557/672/738 vs 540/649/702 (+3.1/+3.6/+5.1%); the
    # previous row is variant pq256s.
    # Then O through a half-tile buffer of its own and a TMA store (o_half, variant oh256c), device
    # run 81 on an H100 (rotated rounds beside this row): s=2048/4096/8192 591/706/799 vs
    # 550/652/730 (+7.5/+8.4/+9.4%; FA3-FP8 675/758/850); the previous row is variant vp256c.
    # The one-tile form with o_tma (vpo256c) gave 0.98/1.03/1.05x the previous row there.
    # Then O through the V staging ring instead of that buffer (o_ring, variant or256c: both
    # warpgroups' stores at once, no turns, 16 KB less shared memory), device run 85 on an H100
    # (rotated rounds beside this row): s=2048/8192 606/806 vs 595/790 (+2.0/+2.0%; FA3-FP8
    # 679/867); the dev bench in the same call +1.7/+0.3%. The previous row is variant oh256c.
    (128, True, 256): replace(_ROW128, block_n=256, causal_mask_only=True, persistent=True,
                              early_q=True, sched_table=True, v_perm=True, o_ring=True,
                              **_BLOCKWISE),
    # block by block with FFMA softmax and pingpong (variant fma_pp), device run 7:
    # s=2048/8192 non-causal 851/962 vs 813/922, causal 643/863 vs 620/849 (+2..5%).
    # Then the V transpose through ldmatrix.trans (variant ldsm), device run 15: s=2048/8192
    # non-causal 877/1005 vs 852/966 (+2.9/+4.1%), causal 657/894 vs 642/867 (+2.5/+3.1%); and
    # causal tiles longest first (variant lpt, alone: causal +0.3/+5.3%). The overlapped loop
    # (variant ov256) was no better than ldsm alone (+2.6/+4.0%, causal -3.9/+2.1%).
    # Then V^T's rows permuted so that the transpose's stores are free of bank conflicts
    # (v_perm) and O stored through the V staging ring by one TMA store (o_tma): variant vpo,
    # device run 77 (rotated rounds beside the row, same process): s=2048/8192 non-causal
    # 935/1005 vs 801/939 (+16.8/+7.1%), causal 774/980 vs 616/874 (+25.7/+12.2%); v_perm
    # alone +3.7..7.5%, o_tma alone +5.5..22.4%.
    # Then the persistent loop again (as pq128, run 41: 0.96-1.01x the row of then), now with
    # v_perm and O through the staging ring (o_ring: the next tile's K_0 and Q load under the
    # epilogue, its V_0 once both O stores have read the ring): variant pvr, device run 85 on an
    # H100 (rotated rounds beside this row): s=2048/8192 non-causal 981/1065 vs 927/1003
    # (+5.8/+6.2%), causal 805/977 vs 753/969 (+7.0/+0.8%; FA3-FP8 1113/1188, 897/1114); the
    # clock stamps put each tile's fixed cost at ~1.0-1.4 key blocks against 2.4-3.0 one tile per
    # program. Spills: 40 B non-causal / 24 B causal, tile-level values of the tile loop, none in
    # a key-block loop (KNOWN_SPILL in tests/test_hopper_fp8_compile.py). The previous row is
    # variant vpo (_ONE_TILE256).
    # Then V^T signalled ready, and K / V^T released by the consumers, with 0-byte expects in
    # place of mbarrier.arrive (vt_signal_expect + release_expect, variant pvxc: 7 -> 4 warpgroup
    # barriers per block in each consumer's loop, CPU), device run 97 on an H100 (clock stamps
    # and rotated rounds beside this row): loop cycles per block -1.2 / -1.1 / +0.1 / -1.3% at
    # non-causal 2k / 8k, causal 2k / 8k; rounds 1.037 / 1.019 / 1.015 / 1.049x (spreads
    # 0.04-0.12). Bitwise equal to the row (5 repeats, 1 and 2 programs), memcheck 0 errors,
    # racecheck only the hand-off class. The previous row is variant pvr.
    (256, False, 128): replace(_ONE_TILE256, **_PERSISTENT_RING, **_EXPECTS),
    (256, True, 128): replace(_ONE_TILE256, **_PERSISTENT_RING, **_EXPECTS),
}


def preferred_block(head_dim: int, causal: bool) -> int:
    """The key tile (and k/v quantisation block) attention_fp8 uses for 16-bit inputs."""
    return max(bn for (d, c, bn) in CONFIGS if d == head_dim and c == bool(causal))


def kernel_block(head_dim: int, causal: bool, kv_block: int) -> int | None:
    """The largest key tile in CONFIGS for (head_dim, causal) that divides kv_block (k and v's
    quantisation block_size), or None when there is none (kv_block < 128)."""
    fits = [bn for (d, c, bn) in CONFIGS if d == head_dim and c == bool(causal)
            and kv_block % bn == 0]
    return max(fits) if fits else None


# Candidates after the first GPU run (benchmarks/fp8_log.md), measured beside the table's rows by
# scripts/hopper_fp8_dev.py: name -> (overrides, head dims it applies to). pack_p and
# prefetch_scales act only on the overlapped loop (hdim 64/128); hdim 256 runs block by block.
VARIANTS = {
    # the dims are those where the candidate is still to be measured: after device run 7 the
    # hdim 128 / 256 rows are pack_fma_pp / fma_pp, so the rest are measured at hdim 64 (never
    # timed yet; all compile there without spills), plus scale prefetch on top of hdim 128's row
    # (device run 11 measured them at hdim 64: pack_fma_pp became its row; pack_fma_pf was flat at
    # 128 and within 2% of pack_fma_pp at 64)
    "pack": ({"pack_p": True}, ()),
    "fma": ({"softmax_fma": True}, ()),
    "pack_fma": ({"pack_p": True, "softmax_fma": True}, ()),
    "pack_fma_pf": ({"pack_p": True, "softmax_fma": True, "prefetch_scales": True}, ()),
    "pack_fma_pp": ({"pack_p": True, "softmax_fma": True, "pingpong": True}, ()),
    "fma_pp": ({"softmax_fma": True, "pingpong": True}, ()),
    # session 3 (fp8_log.md): the persistent tile loop on top of each head dim's row
    # (measured in run 11 at every head dim: -24..+5%, not adopted; not timed again)
    "persistent": ({"persistent": True, "o_tma": False}, ()),
    # session 4 (fp8_log.md, "Where the FP8 kernel's time goes"): the V transpose with
    # ldmatrix.trans, on top of each head dim's row (hdim 64 spills 4 B with it: not listed);
    # device run 15: +1..4% at 128 / 256, in both rows since
    "ldsm": ({"ldsm_transpose": True}, ()),
    "no_ldsm": ({"ldsm_transpose": False, "v_perm": False}, ()),   # the hdim 128 / 256 rows before run 15
    # session 4: P unpacked without the predicated mov (the shipped hdim 64 / 128 rows' wgmmas are
    # all serialised by ptxas, C7513); alone and with the ldsm transpose. Device run 15: unser
    # +3..7% at 128 (predicted +15..40%), flat at 64; unser_ldsm in hdim 128's row since
    "unser": ({"unpack_prmt": True}, ()),
    "unser_ldsm": ({"unpack_prmt": True, "ldsm_transpose": True}, ()),
    # session 5: causal tiles dispatched longest first over L2 sections (the one-tile grid was
    # (batch, head) major: each head's tiles longest first, but a head's short tiles before the
    # next head's long ones); only causal cells change. Device run 15: causal +0.3..5.3%, in
    # every row since
    "lpt": ({"lpt_order": True}, ()),
    # the same with 256 KB sections: at the check stage's shapes the 32 MB sections hold every
    # head (one section), these several (its causal GQA case: 4 sections of 2 heads; passed in
    # device run 15, and timed: +0.8/+1.1% causal at hdim 128, below lpt's 32 MB)
    "lpt_s256k": ({"lpt_order": True, "l2_section_kb": 256}, ()),
    # session 5: hdim 256 with the overlap, made to fit by the ldsm transpose's producer at 24
    # registers (consumers 240 + 240): no serialisation, no spill in the consumers' key-block
    # loops (the producer spills a few words per block; the causal form more, around the loops).
    # Device run 15: no better than ldsm alone (+2.6/+4.0% non-causal, -3.9/+2.1% causal)
    "ov256": ({"overlap": True, "pack_p": True, "unpack_prmt": True, "ldsm_transpose": True,
               "producer_regs": 24}, ()),
    # session 21: ov256 on today's one-tile row (vpo; v_perm made the transpose's stores free of
    # bank conflicts since run 15's measurement), causal with the mask alone. Run 92's stamps:
    # the row's key-block loop 3108-3119 cycles per block against FA3-FP8's ~2790-2930 at one
    # clock; FA3-FP8 runs this tile with the overlap. SASS (CPU): QK^T of block j+1 and P V of
    # block j issued before block j+1's softmax, waits <1> then <0>; no wgmma serialised; no
    # local memory in a consumer loop; the producer (24 registers) loads 7 words per block.
    # Device run 93 (H200): checks passed; loop 3088 vs vpo's 3079 cycles per block (non-causal
    # 8k), 3518 vs 3433 (causal 2k); rounds 0.95-1.00x the row, level with vpo or below. Not
    # adopted: the consumers' softmax is not what sets the loop's period
    "ovpo": ({"overlap": True, "pack_p": True, "unpack_prmt": True, "producer_regs": 24,
              "causal_mask_only": True}, (256,)),
    # session 7: run 24's profile (hdim 256, 8k, the row beside FA3-FP8) put the gap in the
    # consumers' waits for their own products (4 wgmma waits per block: 21.7k stall samples
    # against FA3's 6.1k); ov256 timed again beside the row, and without pingpong. Device run
    # 25: ov256 +0.1/+0.2% non-causal 2k/8k, -5.6/-2.0% causal; ov256_nopp -1.2/-0.4%,
    # -6.0/-4.0%. Its profile: the waits for the products fall to FA3's level (barrier stalls
    # 27k -> 11k) but the cycles do not move (1.77M vs the row's 1.78M; FA3 1.48M): not adopted
    "ov256_nopp": ({"overlap": True, "pack_p": True, "unpack_prmt": True, "ldsm_transpose": True,
                    "producer_regs": 24, "pingpong": False}, ()),
    # session 5, after run 15: deeper rings (0 spills; hdim 128 with 3 K / V^T stages spills
    # 4-6 B, not offered; v_stages 3 spills 2 B at hdim 128 causal). Device run 17: s4 +2.1/+1.9%
    # non-causal, -0.6/0.0% causal (noise level); v3 -0.5..-2.5%. Not adopted.
    "s4": ({"num_stages": 4}, ()),
    "v3": ({"v_stages": 3}, ()),
    # not timed (no head dims): hdim 256 with the overlap, P packed and unpacked by prmt spills
    # 16 B in consumer warpgroup 0 and ptxas serialises every wgmma (C7512, registers); kept so
    # that a CPU test notices when a compiler update changes that
    "overlap_unser": ({"overlap": True, "pack_p": True, "unpack_prmt": True}, ()),
    # session 6 (fp8_log.md): 256-key blocks at hdim 128, block by block (k and v quantised with
    # block_size 256): half the per-block work (O rescale, reductions' shuffles, barriers,
    # waits, descriptors) per key; FA3 uses 224-key blocks here (non-causal)
    # device run 18: +22..29% non-causal at hdim 64 / 128 (in the table since: (d, False, 256),
    # and (64, True, 256)); hdim 128 causal -5/+6% (and spills 112 B: not in the table)
    "n256": ({"block_n": 256, "overlap": False, "pack_p": False, "unpack_prmt": False}, ()),
    # the control for n256: the same block-by-block loop with 128-key blocks (hdim 128's row
    # without the overlap), to separate the block size's effect from the loop's. Device run 18:
    # non-causal +5/0%, causal +8/+3% (the table's (128, True, 128) since)
    "serial": ({"overlap": False, "pack_p": False, "unpack_prmt": False}, ()),
    # end of session 6 (fp8_log.md): 256-key tiles at hdim 128 causal with the mask alone (no
    # implied bounds test): 16 B spill (two row indices of consumer warpgroup 0, reloaded once
    # per tile between the loops) instead of 112 B. Device run 23: causal +2.5/+13.9% at 2k/8k
    # (the table's (128, True, 256) since)
    "n256c": ({"block_n": 256, "overlap": False, "pack_p": False, "unpack_prmt": False,
               "causal_mask_only": True}, ()),
    # session 8 (fp8_log.md): the split producer (a one-warp loader, a two-warp transposer) on
    # the hdim 256 row: 384 threads as before; the transposer needs 48 registers (40 spills), so
    # consumer warpgroup 1 gets 232 and warpgroup 0 224 (0 spills; the causal form spills 24 B
    # with the bounds test in the mask, 0 with the mask alone, hence causal_mask_only). A fourth
    # warpgroup (four transposer warps) is not possible: at 512 threads ptxas caps every region
    # at 128 registers and the m64n256k32 P V wgmma needs 158 (C7602). Device run 30 (order-fair
    # rounds, scripts/fp8_interleaved.py): +0.2% non-causal 2k, +0.1% 8k, +3.3% causal 8k, within
    # the noise (cmo, the same code as the row at non-causal, measured +2.1/+3.1%); run 29
    # (sequential) the same. Prediction +4..10%: wrong. Not adopted: the copies' barriers and
    # issue code are not what the transpose costs
    "split": ({"split_producer": True, "producer_regs": 48, "consumer_regs": 232,
               "causal_mask_only": True, "o_tma": False, "v_perm": False}, ()),
    # the control for split's causal cells: the hdim 256 row with the mask alone (run 30: causal
    # 8k +4.5%, non-causal, where it is the row's code, +2.1/+3.1%: noise)
    "cmo": ({"causal_mask_only": True}, ()),
    # the split producer on hdim 128's 256-key rows (n256 / n256c); causal spills 16 B outside the
    # loops, as the row does. Device run 30: -2.5% non-causal 8k, -1.8/-1.5% causal 2k/8k
    "split_n256": ({"block_n": 256, "overlap": False, "pack_p": False, "unpack_prmt": False,
                    "causal_mask_only": True, "split_producer": True, "producer_regs": 48,
                    "consumer_regs": 232, "o_tma": False, "v_perm": False}, ()),
    # session 8: the persistent tile loop on the 256-key rows (block by block; 0 spills at hdim
    # 64 and 128 with the mask alone; hdim 256's 128-key row spills 72 B in its loops with it).
    # Runs 26/31 put a per-tile cost of ~1.8 key blocks (hdim 128) on our kernel against ~0.8 for
    # FA3 (fit of TFLOP/s over seqlen 2k-16k at a fixed number of tiles): a program that loads
    # the next tile's Q / K / V under the current tile's last blocks and epilogue hides part of
    # it. Static order (tile pid, pid + grid, ...): causal tiles are not balanced as the one-tile
    # grid's hardware dispatch balances them. Device run 32 (checks 3/3 at hdim 64 and 128;
    # memcheck 0; racecheck only the hand-off bytes): in rotated rounds hdim 128 +2.0 / -4.2%
    # (non-causal 2k / 8k), causal +3.6 / -3.0%; hdim 64 2k 0.0%, causal +5.3% (the dev
    # script's sequential timing the same within 1%). Prediction +5..12% at 2k: wrong; not
    # adopted (the 8k cells lose)
    "pn256": ({"block_n": 256, "overlap": False, "pack_p": False, "unpack_prmt": False,
               "causal_mask_only": True, "persistent": True, "o_tma": False}, ()),
    # session 8, after run 35's stamps (fp8_log.md): pn256 with Q released after the tile's last
    # QK^T (not its last P V) and the next tile's first V / K loaded before that release.
    # Device runs 36-37 (rounds): +4.6% non-causal 2k, -1.3% 4k, -4.5% 8k at hdim 128 (the
    # one-tile rows stay); causal +9.8% 2k, +1.4..3.4% 8k, 0.74x at 16k (the static stride's
    # imbalance): in the causal rows since with the table (pq256s)
    "pq256": ({"block_n": 256, "overlap": False, "pack_p": False, "unpack_prmt": False,
               "causal_mask_only": True, "persistent": True, "early_q": True, "o_tma": False}, ()),
    # session 9 (fp8_log.md): pq256 with the causal tiles dealt by a host-built table
    # (sched_table) instead of the static stride (run 36's pq256: a simulation of that stride
    # puts programs 12.5% apart in work at causal 2k, 6% at 8k, 54% at 16k with 16 heads).
    # Device run 37: the (64, True, 256) and (128, True, 256) rows since
    "pq256s": ({"block_n": 256, "overlap": False, "pack_p": False, "unpack_prmt": False,
                "causal_mask_only": True, "persistent": True, "early_q": True,
                "sched_table": True, "o_tma": False}, ()),
    # session 9, end (fp8_log.md): the same persistent form at hdim 256 (128-key tiles), where
    # each tile spends ~4.4 key blocks outside its key loop (run 35's stamps). Spills 44 B causal
    # / 84 B non-causal whatever the register split (232-248 / 24-48 tried): scalars of the tile
    # loop in both consumer warpgroups, reloaded per tile; none inside a key-block loop (SASS
    # checked on the CPU). Not yet run on a GPU
    "pq128": ({"persistent": True, "early_q": True, "sched_table": True,
               "causal_mask_only": True, "o_tma": False}, ()),
    # session 9, end (fp8_log.md): the masked blocks' compares in the split form (mask_split):
    # 32-bit compares with immediates, 1 per score (the rows: a 64-bit compare, 2 ISETP, and
    # 0.5 LOP3 per score). hdim 128 causal masked block 1275 -> 1080 instructions (unmasked 815).
    # Not yet run on a GPU; on the 256-key causal rows (ms256c) and hdim 256's rows (ms)
    # session 14 (fp8_log.md): V^T rows permuted (v_perm) so that the transpose's stmatrix
    # stores are free of bank conflicts (run 24: 2x the ideal wavefronts; FA3: none), O's columns
    # put back in the epilogue; on the hdim 256 rows (vp) and hdim 128's 256-key rows (vp256n:
    # non-causal, vp256c: causal). Not yet run on a GPU
    # Device run 77 (rounds at hdim 256, 2k / 8k): vp +3.7..7.5%, ot +5.5..22.4%, vpo
    # +7.1..25.7%: vpo in hdim 256's rows since. vp and ot are each switch alone (the other one
    # off), so that they stay the controls of the rows' code (tests/test_hopper_fp8_compile.py)
    "vp": ({"v_perm": True, "o_tma": False}, ()),
    # session 14: O through the V staging ring and one TMA store (o_tma) on the one-tile rows
    # (hdim 256; hdim 128's non-causal 256-key row: ot256n), and with v_perm (vpo)
    "ot": ({"o_tma": True, "v_perm": False}, ()),
    "vpo": ({"v_perm": True, "o_tma": True}, (256,)),   # hdim 256's one-tile row of runs 77-85
    "ot256n": ({"block_n": 256, "overlap": False, "pack_p": False, "unpack_prmt": False,
                "o_tma": True}, ()),
    "vp256n": ({"block_n": 256, "overlap": False, "pack_p": False, "unpack_prmt": False,
                "v_perm": True}, ()),
    # session 16, after run 77: both on hdim 128's non-causal 256-key row. Device run 79: vpo256n
    # in the (128, False, 256) row since, vp256c in the (128, True, 256) row (see CONFIGS)
    "vpo256n": ({"block_n": 256, "overlap": False, "pack_p": False, "unpack_prmt": False,
                 "v_perm": True, "o_tma": True}, (128,)),   # the row of runs 79-86: timed beside
    "vp256c": ({"block_n": 256, "overlap": False, "pack_p": False, "unpack_prmt": False,
                "causal_mask_only": True, "persistent": True, "early_q": True,
                "sched_table": True, "v_perm": True, "o_tma": False}, ()),
    # session 16 (after run 80): O through a half-tile buffer of its own and a TMA store in the
    # persistent causal rows (o_half), on hdim 128's row (with v_perm) and hdim 64's. Device run
    # 81: +7.5..9.4% (hdim 128), +4.7% (hdim 64, s=2048): both the rows since
    "oh256c": ({"block_n": 256, "overlap": False, "pack_p": False, "unpack_prmt": False,
                "causal_mask_only": True, "persistent": True, "early_q": True,
                "sched_table": True, "v_perm": True, "o_tma": False, "o_half": True}, (128,)),
    # session 17: hdim 128 causal's 256-key tiles one per program again (the persistent form
    # won +12.9% at 2k in run 37, before o_tma, which gave the one-tile rows +4..22% by
    # shortening the gap between programs), with v_perm and o_tma, longest tile first. Device run
    # 81: 0.98/1.03/1.05x vp256c at s=2048/4096/8192, below oh256c (1.08-1.09x): not adopted
    "vpo256c": ({"block_n": 256, "overlap": False, "pack_p": False, "unpack_prmt": False,
                 "causal_mask_only": True, "v_perm": True, "o_tma": True}, (128,)),
    "oh64c": ({"block_n": 256, "overlap": False, "pack_p": False, "unpack_prmt": False,
               "causal_mask_only": True, "persistent": True, "early_q": True,
               "sched_table": True, "o_tma": False, "o_half": True}, (64,)),
    # session 19: hdim 256's rows in the persistent loop again (pq128's form, run 41: 0.96-1.01x
    # the row of then), now with v_perm and O through the staging ring (o_ring), the next tile's
    # K_0 and Q loaded under the epilogue. Against the one-tile rows (vpo), whose per-tile fixed
    # cost (epilogue, the gap before the SM's next program) is what holds hdim 256 at 2k back.
    # Not yet run on a GPU
    # Device run 85 (H100): +5.8..7.0% at 2k, +6.2% non-causal 8k, +0.8% causal 8k: hdim 256's
    # rows since (session 20); vpo, the previous row, is timed beside them
    "pvr": (_PERSISTENT_RING, ()),
    # session 21: hdim 256's rows (pvr) with V^T signalled by a 0-byte expect instead of an
    # arrive (vt_signal_expect). A helper's CPU study of Triton 3.6's membar pass (fp8_log.md,
    # session 21): an mbarrier.arrive counts as a read and write of all shared memory, so membar
    # fences it on both sides; the expect touches its mbarrier alone. Not yet run on a GPU
    "pvx": (dict(_PERSISTENT_RING, vt_signal_expect=True), (256,)),
    # the same with the consumers' K / V^T releases as 0-byte expects too (release_expect):
    # warpgroup barriers in each consumer's key-block loop 7 -> 4 (CPU). Not yet run on a GPU
    # Device run 97 (H100): pvx flat (loop cycles -0.2..+1.9%), pvxc -1.1..-1.3% (+0.1% causal
    # 2k); pvxc is hdim 256's rows since, pvr the previous row
    "pvxc": (dict(_PERSISTENT_RING, **_EXPECTS), (256,)),
    # session 24: the row (pvxc) with K_{j+1} loaded after V_j's transpose (k_after_vt), so the
    # transpose no longer waits for the consumers' release of K_{j-1}. Not yet run on a GPU
    "pkt": (dict(_PERSISTENT_RING, **_EXPECTS, k_after_vt=True), (256,)),
    # the same with K_{j+1} between the transpose's halves (k_mid_vt): in case pkt's K load,
    # now after the whole transpose, surfaces as a wait for K_{j+1}. Not yet run on a GPU
    "pkh": (dict(_PERSISTENT_RING, **_EXPECTS, k_after_vt=True, k_mid_vt=True), (256,)),
    # the same O path on hdim 128's causal row in place of o_half (no buffer of its own, both
    # warpgroups' stores at once, no turns; V_0 of the next tile waits for them). Device run 85:
    # +2.0% at 2k and 8k, the (128, True, 256) row since; oh256c, the previous row, timed beside it
    "or256c": ({"block_n": 256, "overlap": False, "pack_p": False, "unpack_prmt": False,
                "causal_mask_only": True, "persistent": True, "early_q": True,
                "sched_table": True, "v_perm": True, "o_tma": False, "o_ring": True}, ()),
    # session 20: that persistent form on hdim 128's non-causal 256-key row (one tile per program
    # with o_tma, vpo256n). Run 85's dev bench timed or256c at the non-causal cells too: 835 / 904
    # vs 787 / 878 at s=2048 / 8192 (+6.1 / +3.0%, one sequential measurement). Spills 8 B of the
    # tile loop's values (or256c compiled non-causal: the same), none in a key-block loop.
    # Device run 86 (rounds): +9.9 / +5.4 / +1.2% at 2k / 4k / 8k: the (128, False, 256) row since
    "or256n": ({"block_n": 256, "overlap": False, "pack_p": False, "unpack_prmt": False,
                "persistent": True, "early_q": True, "sched_table": True, "v_perm": True,
                "o_tma": False, "o_ring": True}, ()),
    # pq128, ms and ms256c: device run 41, not adopted (pq128 0.96-1.01x the row; ms / ms256c
    # within noise); no head dims since session 17, so that device runs no longer compile them
    "ms": ({"mask_split": True}, ()),
    "ms256c": ({"block_n": 256, "overlap": False, "pack_p": False, "unpack_prmt": False,
                "causal_mask_only": True, "persistent": True, "early_q": True,
                "sched_table": True, "mask_split": True, "o_tma": False}, ()),
}
# session 25: one score in 2 / 4 / 8 takes its exp2 on the FMA pipe (exp_poly), on hdim 256's
# rows (pvxc) and hdim 128's 256-key rows (or256n / or256c). Run 101: slower, not adopted
VARIANTS["ep2"] = (dict(_PERSISTENT_RING, **_EXPECTS, exp_poly=2), (256,))
VARIANTS["ep4"] = (dict(_PERSISTENT_RING, **_EXPECTS, exp_poly=4), (256,))
VARIANTS["ep8"] = (dict(_PERSISTENT_RING, **_EXPECTS, exp_poly=8), (256,))
# session 25: the hdim 256 candidates on hdim 128's 256-key rows (or256n / or256c, the table's
# (128, *, 256) rows): the 0-byte-expect signals and releases (pvxc's switches), then with K_{j+1}
# after V_j's transpose (pkt's). Not yet run on a GPU
for _name, _base in (("256n", "or256n"), ("256c", "or256c")):
    VARIANTS["pxc" + _name] = (dict(VARIANTS[_base][0], **_EXPECTS), (128,))
    VARIANTS["pkt" + _name] = (dict(VARIANTS[_base][0], **_EXPECTS, k_after_vt=True), (128,))
del _name, _base
# exp_poly on hdim 128's 256-key rows (or256c's switches: compiled non-causal they are the
# (128, False, 256) row's kernel, so one name serves both cells). There each consumer thread
# takes 128 exp2 per key block: MUFU.EX2 holds its sub-partition ~1024 cycles per block and
# warpgroup, as long as the warpgroup's QK^T and P V take on the tensor cores
VARIANTS["ep2h"] = (dict(VARIANTS["or256c"][0], exp_poly=2), (128,))
VARIANTS["ep4h"] = (dict(VARIANTS["or256c"][0], exp_poly=4), (128,))
# session 25: each row's max as a tree inside the thread (row_tree), alone and with exp_poly 4,
# on the same rows. Run 101: 1-15% slower, not adopted
VARIANTS["rt"] = (dict(_PERSISTENT_RING, **_EXPECTS, row_tree=True), (256,))
VARIANTS["rtep4"] = (dict(_PERSISTENT_RING, **_EXPECTS, row_tree=True, exp_poly=4), (256,))
VARIANTS["rth"] = (dict(VARIANTS["or256c"][0], row_tree=True), (128,))
VARIANTS["rtep4h"] = (dict(VARIANTS["or256c"][0], row_tree=True, exp_poly=4), (128,))


def kv_block_error(head_dim: int, causal: bool, kv_block: int, name: str = "kq") -> str | None:
    """None if a table tile for (head_dim, causal) divides kv_block, else the reason (naming the
    argument `name`): the one message of get_config, supports, forward and attention_fp8."""
    if kernel_block(head_dim, causal, kv_block) is not None:
        return None
    return (f"{name} was quantised with block_size={kv_block}, but the FP8 kernel's key tiles are "
            f"128 or 256 keys (one scale per tile, or a multiple): quantise k and v with "
            f"quantize_fp8(..., block_size={preferred_block(head_dim, causal)})")


def get_config(head_dim: int, causal: bool = False, kv_block: int | None = None,
               **overrides) -> Fp8FwdConfig:
    """The table's configuration for (head_dim, causal) and k/v quantised with kv_block rows per
    scale (default: preferred_block), plus overrides."""
    bn = (preferred_block(head_dim, causal) if kv_block is None
          else kernel_block(head_dim, causal, kv_block))
    if bn is None:
        raise ValueError(kv_block_error(head_dim, causal, kv_block))
    cfg = CONFIGS[(head_dim, bool(causal), bn)]
    if overrides:
        cfg = replace(cfg, **overrides)
    return cfg


def variant_config(name: str, head_dim: int, causal: bool = False) -> Fp8FwdConfig:
    """A named candidate (VARIANTS): its overrides on the table's 128-key row for (head_dim,
    causal), the rows the candidates were defined against; at head_dim 256 on the one-tile row of
    device runs 77-85 (vpo), which the persistent rows (pvr) replaced in session 20, so that its
    candidates keep their meaning."""
    if head_dim == 256:
        return replace(_ONE_TILE256, **VARIANTS[name][0])
    return get_config(head_dim, causal, 128, **VARIANTS[name][0])


# --------------------------------------------------------------------------------------------
# Kernel
# --------------------------------------------------------------------------------------------
@gluon.jit
def _key_perm(x, ROWS: gl.constexpr, COLS: gl.constexpr, KEY_DIM: gl.constexpr):
    """Reorder the 128 keys of x as the P V wgmma reads them (pi, see _transpose_v).

    KEY_DIM 1: x is (ROWS, 128 keys) -> (ROWS, 128 positions k'), position k' holding key pi(k').
    KEY_DIM 0: x is (128 keys, COLS) -> (COLS, 128 positions k') (the transpose of V, with pi).
    pi is a permutation of the bits of the key index within each group of 32: key bits
    (0, 1, 2, 3, 4) = k' bits (0, 2, 3, 1, 4). Reshape and permute only relabel elements: no data
    moves between threads.
    """
    if KEY_DIM == 1:
        # (r, n_hi, n4, n3, n2, n1, n0) -> (r, n_hi, n4, n2, n1, n3, n0); any multiple of 32 keys
        nk: gl.constexpr = x.shape[1]
        y = x.reshape([ROWS, nk // 32, 2, 2, 2, 2, 2]).permute((0, 1, 2, 4, 5, 3, 6))
        return y.reshape([ROWS, nk])
    else:
        # (n65, n4, n3, n2, n1, n0, d) -> (d, n65, n4, n2, n1, n3, n0)
        y = x.reshape([4, 2, 2, 2, 2, 2, COLS]).permute((6, 0, 1, 3, 4, 2, 5))
        return y.reshape([COLS, 128])


@gluon.jit
def _pack_p(p, M_WG: gl.constexpr, p_layout: gl.constexpr):
    """P * 256 (fp32, accumulator layout) -> int32 (M_WG, BLOCK_N // 4): word c holds the e4m3
    codes (cvt.rn.satfinite, as .to(float8e4nv)) of operand positions 4c .. 4c + 3 (after the key
    permutation pi), position 4c + t in byte t.

    Why (switch pack_p): the overlapped loop carries P from the softmax of block j to the P V of
    iteration j + 1. As an e4m3 tensor that is 64 single-byte values per thread crossing the loop
    back edge: Triton splits every cvt result into bytes, and the wgmma operand is reassembled
    from them after the back edge (SASS hdim 128: ~210 PRMT/LOP3/SHF per block and thread).
    Carried as 16 words, the bytes stay together. Exact: the same cvt per element, and the
    split/join/asm steps below are defined on logical elements (none depends on the register
    layout Triton picks, see _unpack_p)."""
    x = gl.convert_layout(_key_perm(p, M_WG, 0, 1), p_layout, assert_trivial=True)
    n4: gl.constexpr = x.shape[1] // 4
    x = x.reshape([M_WG, n4, 2, 2])                 # position 4c + 2a + b
    x01, x23 = gl.split(x.permute((0, 1, 3, 2)))     # split on a
    e0, e1 = gl.split(x01)                           # positions 4c, 4c + 1
    e2, e3 = gl.split(x23)                           # positions 4c + 2, 4c + 3
    # cvt.e4m3x2 d, a, b puts a in the upper byte of the 16-bit d
    return gl.inline_asm_elementwise(
        "{\n.reg .b16 lo, hi;\n"
        "cvt.rn.satfinite.e4m3x2.f32 lo, $2, $1;\n"
        "cvt.rn.satfinite.e4m3x2.f32 hi, $4, $3;\n"
        "mov.b32 $0, {lo, hi};\n}",
        "=r,r,r,r,r", [e0, e1, e2, e3], dtype=gl.int32, is_pure=True, pack=1)


# _unpack_p's asm: the prmt selector s = t0 | t1 << 4 | t2 << 8 | t3 << 12 from the four
# elements' byte indices, then byte r of the result = byte t_r of the word ($1)
_UNPACK_SELECTOR = ("shl.b32 u, $6, 4;\n" "or.b32 s, $5, u;\n" "shl.b32 u, $7, 8;\n"
                    "or.b32 s, s, u;\n" "shl.b32 u, $8, 12;\n" "or.b32 s, s, u;\n")
_UNPACK_PREDICATED = gl.constexpr("{\n.reg .b32 s, u;\n.reg .pred p;\n" + _UNPACK_SELECTOR
                                  + "setp.eq.u32 p, s, 0x3210;\n@p mov.b32 $0, $1;\n"
                                  "@!p prmt.b32 $0, $1, 0, s;\n}")
_UNPACK_PRMT = gl.constexpr("{\n.reg .b32 s, u;\n" + _UNPACK_SELECTOR
                            + "prmt.b32 $0, $1, 0, s;\n}")


@gluon.jit
def _unpack_p(w, M_WG: gl.constexpr, fp8: gl.constexpr, p_layout: gl.constexpr,
              MODE: gl.constexpr = 1):
    """The inverse of _pack_p: int32 (M_WG, BLOCK_N // 4) -> e4m3 (M_WG, BLOCK_N) in p_layout.

    Every word is broadcast to its four positions (two joins: position 4c + t, t = i + 2 j) next to
    a tensor holding t; the asm takes four elements at a time (which four is the layout's choice)
    and builds its 32-bit result with one prmt whose selector is made of those elements' t: byte r
    of the result = byte t_r of the word. Whatever the grouping, each element gets its own byte.
    The t are compile-time constants, so ptxas folds the selector; when the grouping is the
    operand's register order the prmt is the identity and disappears (SASS: no byte moves)."""
    zero = w * 0                                   # (folded to constants)
    t = gl.join(zero, zero + 1)                    # i
    t = gl.join(t, t + 2)                          # i + 2 j
    w = gl.join(w, w)
    w = gl.join(w, w)                              # (M_WG, n4, 2, 2): the word at each position
    # MODE 2 (session 4): one unconditional prmt. MODE 1's predicated mov / prmt pair makes
    # ptxas serialise every wgmma of the kernel (C7513: "non wgmma instructions defining input
    # registers of a wgmma between start and end of the pipeline stage"), because these
    # definitions sit between the QK^T issue and the P V issue; a plain prmt does not (CPU
    # compile, ptxas info). It costs one prmt per operand register (16 per block, BLOCK_N 128)
    # where the identity grouping needs none.
    if MODE == 2:
        asm: gl.constexpr = _UNPACK_PRMT
    else:
        asm: gl.constexpr = _UNPACK_PREDICATED
    y = gl.inline_asm_elementwise(asm, "=r,r,r,r,r,r,r,r,r", [w, t], dtype=gl.float8e4nv,
                                  is_pure=True, pack=4)
    n: gl.constexpr = w.shape[1] * 4
    # (c, i, j) -> position 4c + 2 j + i
    return gl.convert_layout(y.permute((0, 1, 3, 2)).reshape([M_WG, n]), p_layout,
                             assert_trivial=True)


@gluon.jit
def _transpose_v(src, dst):
    """dst[d, k'] = src[pi(k'), d] for one (128 keys, 64 head-dim columns) V chunk.

    Run by all 128 threads of the producer warpgroup; each holds 64 bytes (16 registers). The
    register layout (linear, over (key n, column d)): registers d bits 0-3 (16-byte loads along d
    from the staging chunk: 64-byte rows, 64-byte swizzle) and key bits 0, 3 (= k' bits 0, 1:
    4-byte stores along k' into V^T: 128-byte rows, 128-byte swizzle); lanes key bits 1, 2, 4, 5,
    6; warps d bits 4, 5. Found by enumerating every assignment of single bits to lanes, vector
    widths 4/8/16 bytes and staging swizzles none/32/64 (a distributed layout's bases may not mix
    dimensions, which rules out XOR "diagonals"): this one needs 48 shared-memory wavefronts per
    warp and chunk, against 32 for a conflict-free transpose (loads 2-way, stores conflict-free).
    Triton 3.6 lowers the stores to stmatrix.m8n8.x4.b16 (16-byte rows: conflict-free) and the
    loads to ld.shared.v4.b32 (CPU compile, PTX).
    """
    layout: gl.constexpr = gl.DistributedLinearLayout(
        reg_bases=[[0, 1], [0, 2], [0, 4], [0, 8], [1, 0], [8, 0]],
        lane_bases=[[2, 0], [4, 0], [16, 0], [32, 0], [64, 0]],
        warp_bases=[[0, 16], [0, 32]],
        block_bases=[],
        shape=[128, 64])
    tile = src.load(layout)                                   # (128 keys, 64 columns)
    dst.store(_key_perm(tile, 128, 64, 0))                    # (64 columns, 128 positions)


@gluon.jit
def _bytes4(e0, e1, e2, e3):
    # e_a: 16-bit pairs of one key each (low byte: column 2p, high byte: column 2p + 1), the keys
    # of byte positions a = 0..3 of a V^T word; returns the words of columns 2p and 2p + 1.
    # e0/e1 (and e2/e3) come from one ldmatrix register, so the movs are free: 2 prmt per 8 bytes
    return gl.inline_asm_elementwise(
        "{\n.reg .b32 r01, r23;\n"
        "mov.b32 r01, {$2, $3};\n"
        "mov.b32 r23, {$4, $5};\n"
        "prmt.b32 $0, r01, r23, 0x6420;\n"
        "prmt.b32 $1, r01, r23, 0x7531;\n}",
        "=r,=r,h,h,h,h", [e0, e1, e2, e3], dtype=(gl.int32, gl.int32), is_pure=True, pack=1)


@gluon.jit
def _transpose_v_ldsm(src, dst, PERM: gl.constexpr = False):
    """As _transpose_v (dst[d, k'] = src[pi(k'), d] for one (128 keys, 64 columns) chunk), FA3's
    way: the chunk read as 16-bit pairs (128 keys, 32 pairs) into the B-operand layout of an
    m16n8k16 MMA, which Triton loads with ldmatrix.trans (4 x4 loads per thread, CPU compile:
    PTX), so that each register holds one pair of two keys 2t, 2t + 1 (t = lane % 4) and its
    partner register the keys 2t + 8, 2t + 9: exactly the four keys of one V^T word under pi
    (key bits (0, 1, 2, 3) = k' bits (0, 2, 3, 1)). Two prmt per register pair make the words of
    columns 2p and 2p + 1; the reshapes / permutes / splits / joins only relabel registers
    (checked: no shared-memory round trip in the PTX), and the words are stored as 32-bit
    elements (stmatrix). The index algebra was checked against numpy (fp8_log.md)."""
    # the partition's warps share the 32 pairs (4 in the producer warpgroup, 2 in the split
    # producer's transposer); the index algebra below does not depend on it
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0],
                                                   warps_per_cta=[1, gl.num_warps()],
                                                   instr_shape=[16, 8])
    opl: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=mma, k_width=2)
    l16: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=64, element_bitwidth=16, rank=2)
    l32: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=32, rank=2)
    y = src._reinterpret(gl.int16, [128, 32], l16).load(opl)   # (128 keys, 32 pairs)
    y = y.reshape([8, 2, 2, 2, 2, 32]).permute((0, 2, 3, 5, 1, 4))  # (k_hi, b2, b1, p, b3, b0)
    y = y.reshape([8, 2, 2, 32, 2, 2]).permute((0, 1, 2, 3, 5, 4))  # (k_hi, b2, b1, p, b0, b3)
    y_b3_0, y_b3_1 = gl.split(y)
    e0, e1 = gl.split(y_b3_0)                                  # byte positions 0, 1
    e2, e3 = gl.split(y_b3_1)                                  # byte positions 2, 3
    lo, hi = _bytes4(e0, e1, e2, e3)                           # words of columns 2p, 2p + 1
    if PERM:
        # v_perm: row sigma(d) for column d = 2p + x = 16 ph + 8 p2 + 2 p01 + x, i.e. row
        # 16 ph + 8 x + 2 p01 + p2 (bits 0 and 3 of d swapped). A stmatrix 8x8 matrix takes its
        # rows from the 8 lane quads of one register, whose d are x + 2 * (0..7): 4 bank groups
        # under the 128-byte swizzle (row % 8 picks the 16-byte chunk), 8 once x and p2 trade
        # places; only registers are relabelled (x and p2 are register bits here)
        j = gl.join(lo, hi).reshape([8, 2, 2, 4, 2, 4, 2])     # (k_hi, b2, b1, ph, p2, p01, x)
        w = j.permute((3, 6, 5, 4, 0, 1, 2)).reshape([64, 32])  # (sigma(d), word)
    else:
        w = gl.join(lo, hi).permute((3, 4, 0, 1, 2)).reshape([64, 32])  # (d, word = 4 k_hi +
        #                                                                  2 b2 + b1)
    dst._reinterpret(gl.int32, [64, 32], l32).store(w)


@gluon.jit
def _load_v(v_desc, vs_smem, bar, b, kvh, n0, slot, NCH: gl.constexpr, NKC: gl.constexpr = 1):
    """TMA of one V tile (BLOCK_N = NKC * 128 keys, head_dim) as NKC x NCH boxes (128 keys, 64
    columns) into staging slot `slot` (box (kc, c) at index (slot * NKC + kc) * NCH + c)."""
    mbarrier.expect(bar, NKC * NCH * v_desc.block_type.nbytes)
    for kc in gl.static_range(NKC):
        for c in gl.static_range(NCH):
            tma.async_copy_global_to_shared(v_desc, [b, n0 + kc * 128, kvh, c * 64], bar,
                                            vs_smem.index((slot * NKC + kc) * NCH + c))


_CLOCK = gl.constexpr("mov.u64 $0, %clock64;")
_GTIMER = gl.constexpr("mov.u64 $0, %globaltimer;")
_SMID = gl.constexpr("{\n.reg .b32 t;\nmov.u32 t, %smid;\ncvt.u64.u32 $0, t;\n}")


# diag_stamps: the stamps own the first STAMP_ROWS lse entries of each tile (20 int64 slots:
# 0-7 the tile's phases, 8-17 key block STAMP_BLOCK's producer and consumer steps;
# scripts/fp8_tile_phases.py)
STAMP_ROWS = gl.constexpr(40)
STAMP_BLOCK = gl.constexpr(2)


@gluon.jit
def _stamp(lse_ptr, base, SLOT: gl.constexpr, ASM: gl.constexpr, T: gl.constexpr = 0):
    """diag_stamps: thread T (0) of the partition writes a special register (ASM: _CLOCK, the
    SM's cycle counter, _GTIMER or _SMID) as int64 slot SLOT over the tile's first lse entries
    (base: the tile's first lse index; 8-byte aligned when seqlen_q is even)."""
    lay: gl.constexpr = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    offs = gl.arange(0, 32 * gl.num_warps(), layout=lay)
    v = gl.inline_asm_elementwise(ASM, "=l,r", [offs], dtype=gl.int64, is_pure=False, pack=1)
    p = (lse_ptr + base).to(gl.pointer_type(gl.int64), bitcast=True)
    gl.store(p + SLOT + offs * 0, v, mask=offs == T)


@gluon.jit
def _block_stamp(lse_ptr, base, j, SLOT: gl.constexpr, STAMPS: gl.constexpr):
    """diag_stamps: the SM clock in slot SLOT while key block j is block STAMP_BLOCK."""
    if STAMPS:
        if j == STAMP_BLOCK:
            _stamp(lse_ptr, base, SLOT, _CLOCK)


@gluon.jit
def _transpose_block(vs_smem, vt_smem, vs, s, NKC: gl.constexpr, NCH: gl.constexpr,
                     LDSM_T: gl.constexpr, C0: gl.constexpr = 0, C1: gl.constexpr = -1):
    """One key block's V: staging slot vs (NKC x NCH boxes of 128 keys x 64 columns) -> V^T
    stage s (NKC tiles of HEAD_DIM x 128 keys), 64 columns at a time, by this partition's warps
    (columns chunks C0 .. C1 - 1 of each box only, if given: k_mid_vt)."""
    CE: gl.constexpr = NCH if C1 < 0 else C1
    for kc in gl.static_range(NKC):
        vt = vt_smem.index(s * NKC + kc)
        for c in gl.static_range(C0, CE):
            src = vs_smem.index((vs * NKC + kc) * NCH + c).reshape([128, 64])
            if LDSM_T:   # 3: v_perm
                _transpose_v_ldsm(src, vt.slice(c * 64, 64, dim=0), LDSM_T == 3)
            else:
                _transpose_v(src, vt.slice(c * 64, 64, dim=0))


@gluon.jit
def _load_next(k_desc, v_desc, k_smem, vs_smem, k_ready, k_empty, vs_ready, b, kvh, jn, gn,
               n_blocks, BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr, V_STAGES: gl.constexpr,
               NCH: gl.constexpr, NKC: gl.constexpr):
    # the producer's loads of key block jn (ring position gn), if the tile has it:
    # V_jn into its staging slot (last read by the transpose of V_{jn-V_STAGES}, done before the
    # warpgroup barrier of an earlier iteration), then K_jn once both consumer warpgroups released
    # that K stage (a fresh barrier passes at once)
    if jn < n_blocks:
        _load_v(v_desc, vs_smem, vs_ready.index(gn % V_STAGES), b, kvh, jn * BLOCK_N,
                gn % V_STAGES, NCH, NKC)
        _load_k(k_desc, k_smem, k_ready, k_empty, b, kvh, jn * BLOCK_N, gn, NUM_STAGES)


@gluon.jit
def _load_k(k_desc, k_smem, k_ready, k_empty, b, kvh, n0, g, NUM_STAGES: gl.constexpr):
    # K rows n0.. (ring position g) once both consumer warpgroups released that stage
    sn = g % NUM_STAGES
    mbarrier.wait(k_empty.index(sn), ((g // NUM_STAGES) & 1) ^ 1)
    mbarrier.expect(k_ready.index(sn), k_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(k_desc, [b, n0, kvh, 0], k_ready.index(sn), k_smem.index(sn))


@gluon.jit
def _load_k_late(k_desc, k_smem, k_ready, k_empty, b, kvh, j, n_blocks, kv_base,
                 BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr, lse_ptr, stamp_base,
                 STAMPS: gl.constexpr):
    # k_after_vt / k_mid_vt: K_{j+1}, once K_{j-1}'s stage is released, issued from inside or
    # after V_j's transpose (K_1 comes with j == 0's _load_next); stamp slot 11 when it left
    jn = j + 1
    if j > 0:
        if jn < n_blocks:
            _load_k(k_desc, k_smem, k_ready, k_empty, b, kvh, jn * BLOCK_N, kv_base + jn,
                    NUM_STAGES)
    _block_stamp(lse_ptr, stamp_base, j, 11, STAMPS)


@gluon.jit
def _signal(bar, AS_EXPECT: gl.constexpr):
    """One arrive on bar. AS_EXPECT (vt_signal_expect, release_expect): as an expect of 0 bytes
    (mbarrier.arrive.expect_tx), which Triton 3.6's membar pass sees as touching bar alone;
    mbarrier.arrive it fences as an access to all shared memory (scripts/membar_study)."""
    if AS_EXPECT:
        mbarrier.expect(bar, 0)
    else:
        mbarrier.arrive(bar, count=1)


@gluon.jit
def _load_q(q_desc, q_smem, q_bar, b, h, m_start):
    # the tile's Q (one box of BLOCK_M rows) into its buffer, completing on q_bar
    mbarrier.expect(q_bar, q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [b, m_start, h, 0], q_bar, q_smem)


@gluon.jit
def _load_q_released(q_desc, q_smem, q_bar, q_empty, q_phase, b, h, m_start):
    # early_q: Q of this tile once both consumer warpgroups released the previous tile's Q
    mbarrier.wait(q_empty, q_phase)
    _load_q(q_desc, q_smem, q_bar, b, h, m_start)


@gluon.jit
def _producer(q_desc, k_desc, v_desc, q_smem, k_smem, vs_smem, vt_smem,
              q_bar, k_ready, k_empty, vs_ready, vt_ready, vt_empty,
              b, h, kvh, m_start, n_blocks,
              BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, NUM_STAGES: gl.constexpr,
              V_STAGES: gl.constexpr, kv_base=0, PERSISTENT: gl.constexpr = False,
              LDSM_T: gl.constexpr = False, lse_ptr=None, stamp_base=0,
              STAMPS: gl.constexpr = False, q_empty=None, q_phase=0,
              EARLY_Q: gl.constexpr = False, o_read=None, O_RING: gl.constexpr = False):
    # kv_base (PERSISTENT): blocks loaded by this program's earlier tiles; the rings' slots and
    # phases run on across tiles (0 for the one-tile grid: the same code as before)
    NCH: gl.constexpr = HEAD_DIM // 64
    NKC: gl.constexpr = BLOCK_N // 128    # 128-key chunks per key block (V boxes, V^T tiles)
    if STAMPS:
        _stamp(lse_ptr, stamp_base, 4, _CLOCK)
    if not EARLY_Q:   # (written out: through _load_q the persistent loop's SASS changes)
        mbarrier.expect(q_bar, q_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(q_desc, [b, m_start, h, 0], q_bar, q_smem)
    if n_blocks > 0:
        if PERSISTENT:
            g0 = kv_base
            if O_RING:
                # K_0 (its own ring) and Q (once released) first; V_0 once both warpgroups' O
                # stores of the previous tile have read the staging ring (q_phase: the
                # previous tile's phase; the program's first tile passes, parity 1)
                _load_k(k_desc, k_smem, k_ready, k_empty, b, kvh, 0, g0, NUM_STAGES)
                _load_q_released(q_desc, q_smem, q_bar, q_empty, q_phase, b, h, m_start)
                mbarrier.wait(o_read.index(0), q_phase)
                mbarrier.wait(o_read.index(1), q_phase)
            _load_v(v_desc, vs_smem, vs_ready.index(g0 % V_STAGES), b, kvh, 0, g0 % V_STAGES, NCH,
                    NKC)
            if not O_RING:
                _load_k(k_desc, k_smem, k_ready, k_empty, b, kvh, 0, g0, NUM_STAGES)
        else:
            _load_v(v_desc, vs_smem, vs_ready.index(0), b, kvh, 0, 0, NCH, NKC)
            mbarrier.expect(k_ready.index(0), k_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(k_desc, [b, 0, kvh, 0], k_ready.index(0),
                                            k_smem.index(0))
    for j in range(n_blocks):
        jn = j + 1
        if EARLY_Q:
            if j > 0:   # (at j == 0 after V_0's transpose and the Q release, below)
                if LDSM_T & 8:   # k_after_vt: V_{j+1} now, K_{j+1} after V_j's signal (below)
                    if jn < n_blocks:
                        gn = kv_base + jn
                        _load_v(v_desc, vs_smem, vs_ready.index(gn % V_STAGES), b, kvh,
                                jn * BLOCK_N, gn % V_STAGES, NCH, NKC)
                else:
                    _load_next(k_desc, v_desc, k_smem, vs_smem, k_ready, k_empty, vs_ready, b,
                               kvh, jn, kv_base + jn, n_blocks, BLOCK_N, NUM_STAGES, V_STAGES,
                               NCH, NKC)
        else:
            _load_next(k_desc, v_desc, k_smem, vs_smem, k_ready, k_empty, vs_ready, b, kvh,
                       jn, kv_base + jn, n_blocks, BLOCK_N, NUM_STAGES, V_STAGES, NCH, NKC)
        # transpose V_j: staging slot j % V_STAGES -> V^T stage j % NUM_STAGES, 64 columns at a time
        g = kv_base + j
        vs = g % V_STAGES
        s = g % NUM_STAGES
        if LDSM_T & 8 == 0:   # K_{j+1} was issued above (_load_next)
            _block_stamp(lse_ptr, stamp_base, j, 11, STAMPS)
        _block_stamp(lse_ptr, stamp_base, j, 8, STAMPS)
        mbarrier.wait(vs_ready.index(vs), (g // V_STAGES) & 1)
        mbarrier.wait(vt_empty.index(s), ((g // NUM_STAGES) & 1) ^ 1)
        _block_stamp(lse_ptr, stamp_base, j, 9, STAMPS)
        if LDSM_T & 3 != 2:   # 2: the timing diagnostic diag_no_transpose (no transpose at all)
            if LDSM_T & 16:   # k_mid_vt (with k_after_vt, EARLY_Q): K_{j+1} between the halves
                _transpose_block(vs_smem, vt_smem, vs, s, NKC, NCH, LDSM_T & 3, 0, NCH // 2)
                _load_k_late(k_desc, k_smem, k_ready, k_empty, b, kvh, j, n_blocks, kv_base,
                             BLOCK_N, NUM_STAGES, lse_ptr, stamp_base, STAMPS)
                _transpose_block(vs_smem, vt_smem, vs, s, NKC, NCH, LDSM_T & 3, NCH // 2, NCH)
            else:
                _transpose_block(vs_smem, vt_smem, vs, s, NKC, NCH, LDSM_T & 3)
        fence_async_shared()   # the generic-proxy stores become visible to wgmma (async proxy)
        gl.thread_barrier()    # all 128 producer threads have stored and fenced (and read vs)
        _signal(vt_ready.index(s), LDSM_T & 4)   # bit 2: vt_signal_expect
        if STAMPS:
            if j == 0:
                _stamp(lse_ptr, stamp_base, 5, _CLOCK)
        _block_stamp(lse_ptr, stamp_base, j, 10, STAMPS)
        if EARLY_Q:   # (k_after_vt needs early_q: without it _load_next above loaded K_{j+1})
            if LDSM_T & 24 == 8:   # k_after_vt: K_{j+1}, once K_{j-1}'s stage is released
                _load_k_late(k_desc, k_smem, k_ready, k_empty, b, kvh, j, n_blocks, kv_base,
                             BLOCK_N, NUM_STAGES, lse_ptr, stamp_base, STAMPS)
        if EARLY_Q:
            # V_0's transpose waited on nothing of the previous tile's last block; Q and K_1
            # wait for its last QK^T (q_empty, K_1's stage), V_1 for nothing (under o_ring V_0
            # and so everything after it waited for the previous tile's two O stores, above)
            if j == 0:
                if not O_RING:   # (o_ring loaded Q before V_0)
                    _load_q_released(q_desc, q_smem, q_bar, q_empty, q_phase, b, h, m_start)
                _load_next(k_desc, v_desc, k_smem, vs_smem, k_ready, k_empty, vs_ready, b, kvh,
                           jn, kv_base + jn, n_blocks, BLOCK_N, NUM_STAGES, V_STAGES, NCH, NKC)
    if EARLY_Q:
        if n_blocks == 0:
            _load_q_released(q_desc, q_smem, q_bar, q_empty, q_phase, b, h, m_start)



# The split producer (switch split_producer): in the producer warpgroup above, Triton 3.6's
# membar pass (which has no exception for TMA copies or mbarrier operations) puts a barrier of
# the four warps before every copy, expect and wait that touches an allocation with a pending
# access: about 11 per key block at hdim 256, around copy code (elect, predicate, descriptor
# address) that all four warps run. Here one warp issues the copies (no barrier in a one-warp
# partition) and two warps transpose; they share one warpgroup and its register count.
@gluon.jit
def _loader(q_desc, k_desc, v_desc, q_smem, k_smem, vs_smem, q_bar, k_ready, k_empty, vs_ready,
            vs_empty, b, h, kvh, m_start, n_blocks,
            BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, NUM_STAGES: gl.constexpr,
            V_STAGES: gl.constexpr):
    # Q, then per key block V_j (once the transposer has released its staging slot: vs_empty) and
    # K_j (once both consumer warpgroups have released its stage: k_empty); fresh barriers pass
    NCH: gl.constexpr = HEAD_DIM // 64
    NKC: gl.constexpr = BLOCK_N // 128
    _load_q(q_desc, q_smem, q_bar, b, h, m_start)
    for j in range(n_blocks):
        vs = j % V_STAGES
        mbarrier.wait(vs_empty.index(vs), ((j // V_STAGES) & 1) ^ 1)
        _load_v(v_desc, vs_smem, vs_ready.index(vs), b, kvh, j * BLOCK_N, vs, NCH, NKC)
        _load_k(k_desc, k_smem, k_ready, k_empty, b, kvh, j * BLOCK_N, j, NUM_STAGES)


@gluon.jit
def _transposer(vs_smem, vt_smem, vs_ready, vs_empty, vt_ready, vt_empty, n_blocks,
                BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, NUM_STAGES: gl.constexpr,
                V_STAGES: gl.constexpr):
    # V_j: staging slot j % V_STAGES -> V^T stage j % NUM_STAGES (_transpose_v_ldsm on this
    # partition's warps), then V^T_j published to the consumers and the staging slot released
    NCH: gl.constexpr = HEAD_DIM // 64
    NKC: gl.constexpr = BLOCK_N // 128
    for j in range(n_blocks):
        vs = j % V_STAGES
        s = j % NUM_STAGES
        mbarrier.wait(vs_ready.index(vs), (j // V_STAGES) & 1)
        mbarrier.wait(vt_empty.index(s), ((j // NUM_STAGES) & 1) ^ 1)
        _transpose_block(vs_smem, vt_smem, vs, s, NKC, NCH, True)
        fence_async_shared()   # the generic-proxy stores become visible to wgmma (async proxy)
        gl.thread_barrier()    # both warps have stored, fenced and read the staging slot
        mbarrier.arrive(vt_ready.index(s), count=1)
        mbarrier.arrive(vs_empty.index(vs), count=1)

# Pingpong (switch pingpong; FA3 turns them on for FP8 at hdim >= 128): the two consumer warpgroups
# take turns issuing their GEMM pairs (QK^T_j + P V_{j-1}), so that one's softmax runs while the
# other's GEMMs occupy the tensor cores. FA3's placement (mainloop_fwd_sm90_tma_gmma_ws.hpp): sync
# before QK^T_j, arrive for the other warpgroup right after P V_{j-1} is issued; the first QK^T and
# the last P V of a tile are outside any turn; warpgroup 0 opens its own first turn. Named hardware
# barriers 10 / 11 (Triton uses the low ids for its partitions), 256 threads each, as inline PTX
# (Gluon 3.6 has no named-barrier op): the same scheme as hopper_fwd.py's pingpong_mode 2, which
# passed its GPU checks in device run 5.
@gluon.jit
def _named_bar(BAR: gl.constexpr, ARRIVE: gl.constexpr):
    lay: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    x = gl.full([128], 0, gl.int32, layout=lay)  # one element per thread: the asm runs once
    if ARRIVE:
        if BAR == 10:
            gl.inline_asm_elementwise("bar.arrive 10, 256;\n\tmov.b32 $0, $1;", "=r,r", [x],
                                      dtype=gl.int32, is_pure=False, pack=1)
        else:
            gl.inline_asm_elementwise("bar.arrive 11, 256;\n\tmov.b32 $0, $1;", "=r,r", [x],
                                      dtype=gl.int32, is_pure=False, pack=1)
    else:
        if BAR == 10:
            gl.inline_asm_elementwise("bar.sync 10, 256;\n\tmov.b32 $0, $1;", "=r,r", [x],
                                      dtype=gl.int32, is_pure=False, pack=1)
        else:
            gl.inline_asm_elementwise("bar.sync 11, 256;\n\tmov.b32 $0, $1;", "=r,r", [x],
                                      dtype=gl.int32, is_pure=False, pack=1)


# exp2 of one element on the FMA pipe (exp_poly): x clamped to -127, split as j + f with j an
# integer (the 1.5 * 2**23 rounding trick: j sits in the low mantissa bits of t) and f in
# [-0.5, 0.5]; 2**f by a polynomial with constant term 1 (relative minimax fits: degree 2
# (FP8) max error 2.0e-3, below e4m3's half-spacing of 2**-4, mean -2.4e-4; degree 3 (the
# 16-bit kernel, hopper_fwd) 1.0e-4, below bf16's 2**-9 and fp16's 2**-12 half-spacing), and j
# added to the exponent field. Exact at integers (2**8 = 256, FP8's largest P); -inf, NaN and
# x <= -127 give +0 (the clamp, then 1.0's bits + (-127 << 23) wrap to 0); between -127 and
# -126 a subnormal below 2**-126 (ex2.approx.ftz gives 0 there). ex2.approx.ftz.f32 for the
# other elements of the group, as gl.exp2 lowers.
_EXP2_HORNER = {
    2: ("fma.rn.f32 p, f, 0f3E759EE4, 0f3F33F401;\n",     # c2 0.23986393, c1 0.70294195
        "fma.rn.f32 p, p, f, 0f3F800000;\n"),
    3: ("fma.rn.f32 p, f, 0f3D61510C, 0f3E780629;\n",     # c3 0.05500893, c2 0.24221100
        "fma.rn.f32 p, p, f, 0f3F317AFD;\n",              # c1 0.69328290
        "fma.rn.f32 p, p, f, 0f3F800000;\n"),
}


@triton.constexpr_function
def _exp2_mix_asm(pack: int, degree: int = 2) -> str:
    """Inline PTX for inline_asm_elementwise(pack=pack): $0..$pack-1 = exp2($pack..$2pack-1),
    the last element of the group through the polynomial of `degree`."""
    pack, degree = int(pack), int(degree)
    x, y = f"${2 * pack - 1}", f"${pack - 1}"
    body = "".join(f"ex2.approx.ftz.f32 ${i}, ${pack + i};\n" for i in range(pack - 1))
    poly = (f"max.f32 f, {x}, 0fC2FE0000;\n"          # -127
            "add.rn.f32 t, f, 0f4B400000;\n"           # 1.5 * 2**23
            "sub.rn.f32 j, t, 0f4B400000;\n"
            "sub.rn.f32 f, f, j;\n"
            + "".join(_EXP2_HORNER[degree])
            + "shl.b32 t, t, 23;\n"
            f"add.s32 {y}, p, t;\n")
    return "{\n.reg .b32 f, t, j, p;\n" + body + poly + "}"


def check_exp_poly(exp_poly) -> None:
    """Both kernels' configurations take exp_poly 0, 2, 4 or 8."""
    if exp_poly not in (0, 2, 4, 8):
        raise ValueError(f"exp_poly must be 0, 2, 4 or 8 (one score in exp_poly through the "
                         f"polynomial exp2), got {exp_poly!r}")


@triton.constexpr_function
def _exp2_constraints(pack):
    return ",".join(["=r"] * int(pack) + ["r"] * int(pack))


@gluon.jit
def _exp2_mixed(x, EP: gl.constexpr, DEG: gl.constexpr):
    """exp2 of every element (as gl.exp2: MUFU.EX2); with EP > 0 (exp_poly = 2**EP) the last of
    each group of 2**EP elements a thread holds through _exp2_mix_asm's polynomial of degree DEG
    on the FMA pipe. Which elements are grouped is the layout's choice; the split is the same in
    every block. Both kernels' (hopper_fwd: degree 3)."""
    if EP == 0:
        y = gl.exp2(x)
    else:
        PACK: gl.constexpr = 1 << EP
        y = gl.inline_asm_elementwise(_exp2_mix_asm(PACK, DEG), _exp2_constraints(PACK), [x],
                                      dtype=gl.float32, is_pure=True, pack=PACK)
    return y


@gluon.jit
def _halve_columns(x, IS_MAX: gl.constexpr):
    """Elementwise max (IS_MAX) or sum of the two halves of x's columns: the top column bit is a
    register bit of the wgmma accumulator layout, so the split only relabels registers."""
    M: gl.constexpr = x.shape[0]
    N: gl.constexpr = x.shape[1]
    a, b = gl.split(x.reshape([M, 2, N // 2]).permute((0, 2, 1)))
    if IS_MAX:
        y = gl.maximum(a, b)
    else:
        y = a + b
    return y


@gluon.jit
def _row_tree(x, IS_MAX: gl.constexpr):
    """gl.max (IS_MAX) or gl.sum of x along axis 1 as a tree inside each thread (row_tree): the
    reduction's own lowering folds a thread's 32 (BLOCK_N 128) or 64 values of a row in one
    dependent chain of FMNMX / FADD (SASS: 31 in a row, ~4 cycles each; the max's before the
    row's first exp2 can issue). Column bits 3 and up are register bits in the accumulator
    layout, so BLOCK_N 64 / 128 / 256 halve 3 / 4 / 5 times down to 8 columns (depth 3-5, the
    same count), then the reduction takes the last two per thread and the lanes. A sum changes
    by rounding (another order). Both kernels' (hopper_fwd)."""
    N: gl.constexpr = x.shape[1]
    x = _halve_columns(_halve_columns(_halve_columns(x, IS_MAX), IS_MAX), IS_MAX)
    if N >= 128:
        x = _halve_columns(x, IS_MAX)
    if N >= 256:
        x = _halve_columns(x, IS_MAX)
    if IS_MAX:
        r = gl.max(x, axis=1)
    else:
        r = gl.sum(x, axis=1)
    return r


@gluon.jit
def _softmax_update(s_acc, row_f, k_sc, m_i, l_i, rows, j, seqlen_k, causal_off,
                    MASK: gl.constexpr, CAUSAL: gl.constexpr,
                    BLOCK_N: gl.constexpr, s_layout: gl.constexpr, FMA: gl.constexpr = False):
    """One block of the running softmax, log2 domain. Returns p = P * 256 (fp32), alpha, m, l.

    FMA (FA3's form, switch softmax_fma): the row max is taken over the raw accumulator and then
    scaled (f = q_scale[row] * k_scale[j] * softmax_scale * log2(e) > 0, and rounding is monotonic,
    so fl(max(s) * f) == max(fl(s * f)): m is bit-identical), and the exponent
    s * f - (m - 8) is one FFMA per score instead of an FMUL and an FADD (P differs by the
    rounding of that one product, below e4m3's resolution). Needs f > 0: forward() falls back
    to the plain form when softmax_scale <= 0 (quantize_fp8's scales are > 0).

    FMA is the kernel's SOFTMAX_FMA: bit 0 the FMA form above, bit 1 the split mask (switch
    mask_split): each key column c = (c & ~6) + (c & 6), where c & 6 is the same for every column
    a thread holds in the wgmma accumulator layout (2 * (lane % 4)) and c & ~6 a constant per
    register, so `c <= limit` is tested as `(c & ~6) <= limit - (c & 6)`: one 32-bit compare
    with an immediate per score (the plain form compares 64-bit: LLVM widens the block index)."""
    f = row_f * k_sc
    if FMA & 1:
        qk = s_acc
    else:
        # scores in log2 units: acc * q_scale[row] * k_scale[j] * softmax_scale * log2(e)
        qk = s_acc * gl.expand_dims(f, 1)
    if MASK and (FMA & 2):
        offs = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        hi = gl.expand_dims(offs & -7, 0)    # the column within the block, c & ~6
        lo = gl.expand_dims(offs & 6, 0)     # and c & 6 (per thread)
        lim_c = gl.expand_dims(rows + (causal_off - j * BLOCK_N), 1)   # key - block start <= this
        if CAUSAL == 2:
            valid = hi <= lim_c - lo
        else:
            valid = hi < (seqlen_k - j * BLOCK_N) - lo
            if CAUSAL:
                valid = valid & (hi <= lim_c - lo)
        qk = gl.where(valid, qk, float("-inf"))
    elif MASK:
        cols = j * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        if CAUSAL == 2:
            # causal_mask_only: bottom-right causal implies key <= row + seqlen_k - seqlen_q <
            # seqlen_k for every stored row (row < seqlen_q): the bounds test is left out
            valid = gl.expand_dims(cols, 0) <= gl.expand_dims(rows + causal_off, 1)
        else:
            valid = gl.expand_dims(cols < seqlen_k, 0)
            if CAUSAL:
                valid = valid & (gl.expand_dims(cols, 0) <= gl.expand_dims(rows + causal_off, 1))
        qk = gl.where(valid, qk, float("-inf"))
    if FMA & 64:
        m_blk = gl.convert_layout(_row_tree(qk, True), f.type.layout, assert_trivial=True)
    else:
        m_blk = gl.max(qk, axis=1)
    if FMA & 1:
        m_new = gl.maximum(m_i, m_blk * f)
    else:
        m_new = gl.maximum(m_i, m_blk)
    if MASK:
        # a row with no visible key so far keeps m = -inf; use 0 so that exp2 gives 0, not NaN
        m_use = gl.where(m_new == float("-inf"), 0.0, m_new)
    else:
        m_use = m_new
    # P * 2**8 = exp2(qk - (m - 8)) in [0, 256] (FA3's FP8 trick: the scale is in the exponent)
    if FMA & 1:
        x = gl.fma(qk, gl.expand_dims(f, 1), gl.expand_dims(8.0 - m_use, 1))
    else:
        x = qk - gl.expand_dims(m_use - 8.0, 1)
    EP: gl.constexpr = (FMA >> 4) & 3   # exp_poly (bits 4-5), degree 2
    if EP == 0:   # (gl.exp2 itself, not through the helper: the rows' code stays as pinned)
        p = gl.exp2(x)
    else:
        p = _exp2_mixed(x, EP, 2)
    alpha = gl.exp2(m_i - m_use)
    if FMA & 64:
        l_i = l_i * alpha + gl.convert_layout(_row_tree(p, False), f.type.layout,
                                              assert_trivial=True)
    else:
        l_i = l_i * alpha + gl.sum(p, axis=1)
    return p, alpha, m_new, l_i


@gluon.jit
def _tile_of(tile, seqlen_q, seqlen_k, heads, kv_heads, num_m_tiles,
             CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr):
    """_tile for tile index `tile` of the persistent loop (the one-tile grid's order)."""
    bh = tile // num_m_tiles
    pid_m = tile % num_m_tiles
    if CAUSAL:
        pid_m = num_m_tiles - 1 - pid_m
    b = bh // heads
    h = bh % heads
    kvh = h // (heads // kv_heads)
    m_start = pid_m * BLOCK_M
    causal_off = seqlen_k - seqlen_q
    if CAUSAL:
        m_end = gl.minimum(m_start + BLOCK_M, seqlen_q)
        kv_end = gl.maximum(gl.minimum(m_end + causal_off, seqlen_k), 0)
        n_blocks = gl.cdiv(kv_end, BLOCK_N)
        full_end = gl.maximum(gl.minimum(m_start + causal_off + 1, seqlen_k), 0)
        n_unmasked = gl.minimum(full_end // BLOCK_N, n_blocks)
    else:
        n_blocks = gl.cdiv(seqlen_k, BLOCK_N)
        n_unmasked = seqlen_k // BLOCK_N
    return b, h, kvh, m_start, n_blocks, n_unmasked


@gluon.jit
def _tile(seqlen_q, seqlen_k, heads, kv_heads, num_m_tiles,
          CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
          LPT: gl.constexpr = False):
    """This program's (b, h, kv head, first row, key blocks, key blocks needing no mask).

    Computed in each partition from the kernel arguments (instead of being captured from the
    prologue) so that ptxas can rematerialise them rather than keep them live: at hdim 256 every
    register counts. 1-D grid over (batch * heads) x m-tiles, (batch, head) major; causal: the
    longest tiles (largest m) first. LPT (causal): a 3-D grid (heads of an L2 section, m-tiles,
    sections); the hardware dispatches blocks x fastest, then y, then z, so the SM that frees up
    first gets the longest remaining tile of the current section (forward() chooses the section
    size, a divisor of batch * heads). No division here: an in-kernel decode of a 1-D id cost
    one spilled register at hdim 128 causal.
    """
    if LPT:
        bh = gl.program_id(2) * gl.num_programs(0) + gl.program_id(0)
        pid_m = num_m_tiles - 1 - gl.program_id(1)
    else:
        pid = gl.program_id(0)
        bh = pid // num_m_tiles
        pid_m = pid % num_m_tiles
        if CAUSAL:
            pid_m = num_m_tiles - 1 - pid_m
    b = bh // heads
    h = bh % heads
    kvh = h // (heads // kv_heads)
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
    return b, h, kvh, m_start, n_blocks, n_unmasked


@gluon.jit
def _block_serial(q, k_smem, vt_smem, k_ready, k_empty, vt_ready, vt_empty, ks_ptr, vs_ptr, kv_sc,
                  acc, m_i, l_i, v_unit, row_f, rows, j, seqlen_k, causal_off, s_zero,
                  MASK: gl.constexpr, CAUSAL: gl.constexpr, BLOCK_N: gl.constexpr,
                  HEAD_DIM: gl.constexpr, NUM_STAGES: gl.constexpr, M_WG: gl.constexpr,
                  s_layout: gl.constexpr, o_layout: gl.constexpr, p_layout: gl.constexpr,
                  FMA: gl.constexpr = False, PINGPONG: gl.constexpr = False,
                  WG: gl.constexpr = 0, kv_base=0, q_empty=None, n_blocks=0,
                  EARLY_Q: gl.constexpr = False, STAMPS: gl.constexpr = False, lse_ptr=None,
                  stamp_base=0):
    """Key block j without overlap: QK^T_j, softmax, O = O * alpha * v_unit / v_j + P_j V_j.
    STAMPS (warpgroup 0's, diag_stamps): block STAMP_BLOCK's steps in slots 12-17.

    PINGPONG: FA3's schedule without intra-warpgroup overlap: a turn spans P V_{j-1} (issued and
    waited for) and the issue of QK^T_j; the softmax runs outside the turns, under the other
    warpgroup's GEMMs. The first QK^T of a tile opens with a sync, the caller closes the last
    turn (_named_bar(11 - WG, True) after the loops)."""
    s = (kv_base + j) % NUM_STAGES
    ph = ((kv_base + j) // NUM_STAGES) & 1
    k_sc = gl.load(ks_ptr + kv_sc + j)
    v_j = gl.load(vs_ptr + kv_sc + j)
    _block_stamp(lse_ptr, stamp_base, j, 12, STAMPS)
    mbarrier.wait(k_ready.index(s), ph)
    _block_stamp(lse_ptr, stamp_base, j, 13, STAMPS)
    k_t = k_smem.index(s).reshape([BLOCK_N, HEAD_DIM]).permute((1, 0))
    if PINGPONG:
        if j == 0:
            _named_bar(10 + WG, False)
    s_tok = warpgroup_mma(q, k_t, s_zero, use_acc=False, is_async=True)
    if PINGPONG:
        _named_bar(11 - WG, True)
    s_acc = warpgroup_mma_wait(0, deps=[s_tok])
    _signal(k_empty.index(s), FMA & 8)             # K_j read (bit 3: release_expect)
    if EARLY_Q:
        if j == n_blocks - 1:
            mbarrier.arrive(q_empty, count=1)      # the tile's last QK^T has completed
    p, alpha, m_i, l_i = _softmax_update(s_acc, row_f, k_sc, m_i, l_i, rows, j, seqlen_k,
                                         causal_off, MASK, CAUSAL, BLOCK_N, s_layout, FMA)
    # O in units of v_scale[j] before P_j V_j is added (alpha = 0 at the first block)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    acc = acc * gl.expand_dims(gl.convert_layout(alpha, row_o) * (v_unit / v_j), 1)
    NKC: gl.constexpr = BLOCK_N // 128
    if NKC == 1:
        p_op = gl.convert_layout(_key_perm(p.to(q.dtype), M_WG, 0, 1), p_layout,
                                 assert_trivial=True)
        _block_stamp(lse_ptr, stamp_base, j, 14, STAMPS)
        mbarrier.wait(vt_ready.index(s), ph)
        _block_stamp(lse_ptr, stamp_base, j, 15, STAMPS)
        if PINGPONG:
            _named_bar(10 + WG, False)
        _block_stamp(lse_ptr, stamp_base, j, 16, STAMPS)
        v = vt_smem.index(s).permute((1, 0))
        o_tok = warpgroup_mma(p_op, v, acc, is_async=True)
    else:
        # BLOCK_N 256: P V as two products of 128 keys, one per V^T tile of the stage. The key
        # bit 7 of the score accumulator is a register bit, so the split relabels registers and
        # each half has the accumulator layout of a 128-key block
        p_lo, p_hi = gl.split(p.reshape([M_WG, 2, 128]).permute((0, 2, 1)))
        p_op0 = gl.convert_layout(_key_perm(p_lo.to(q.dtype), M_WG, 0, 1), p_layout,
                                  assert_trivial=True)
        p_op1 = gl.convert_layout(_key_perm(p_hi.to(q.dtype), M_WG, 0, 1), p_layout,
                                  assert_trivial=True)
        mbarrier.wait(vt_ready.index(s), ph)
        if PINGPONG:
            _named_bar(10 + WG, False)
        o_tok = warpgroup_mma(p_op0, vt_smem.index(2 * s).permute((1, 0)), acc, is_async=True)
        o_tok = warpgroup_mma(p_op1, vt_smem.index(2 * s + 1).permute((1, 0)), o_tok,
                              is_async=True)
    acc = warpgroup_mma_wait(0, deps=[o_tok])
    _block_stamp(lse_ptr, stamp_base, j, 17, STAMPS)
    _signal(vt_empty.index(s), FMA & 8)            # V^T_j read (bit 3: release_expect)
    return acc, m_i, l_i, v_j


@gluon.jit
def _consumer(q_smem, k_smem, vt_smem, q_bar, k_ready, k_empty, vt_ready, vt_empty,
              out_ptr, lse_ptr, qs_ptr, ks_ptr, vs_ptr,
              heads, kv_heads, seqlen_q, seqlen_k, num_m_tiles, qk_scale, q_block, q_nblk, kv_nblk,
              WG: gl.constexpr, CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr,
              BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, NUM_STAGES: gl.constexpr,
              OVERLAP: gl.constexpr, PREFETCH: gl.constexpr = False, FMA: gl.constexpr = False,
              PACK_P: gl.constexpr = False, PINGPONG: gl.constexpr = False,
              tile=0, kv_base=0, q_phase=0, q_empty=None, PERSISTENT: gl.constexpr = False,
              LPT: gl.constexpr = False, STAMPS: gl.constexpr = False,
              EARLY_Q: gl.constexpr = False, o_desc=None, vs_smem=None, o_buf=None,
              o_turn=None, O_RING: gl.constexpr = False):
    """One tile of one consumer warpgroup. PERSISTENT: the tile `tile`, with the K / V^T rings at
    kv_base and Q's phase q_phase; Q is released (q_empty) after the tile's last QK^T, and the
    pingpong turns run on from the previous tile (the caller opened the first one).
    o_desc: O leaves through shared memory and a TMA store: o_tma (one-tile programs) through
    V staging slot WG (vs_smem), o_half (persistent) through o_buf, taken in turn: o_turn[0]
    completes when warpgroup 0's store of this tile has read the buffer, o_turn[1] when
    warpgroup 1's has; q_phase (the program's tile count & 1) gives the phases. O_RING
    (persistent): as o_tma, through V staging slot WG (vs_smem), no turns; o_turn[WG] completes
    when this warpgroup's store has read it, which the producer waits for before the next
    tile's V_0."""
    M_WG: gl.constexpr = BLOCK_M // 2
    fp8: gl.constexpr = q_smem.dtype
    if PERSISTENT:
        b, h, kvh, m_start, n_blocks, n_unmasked = _tile_of(tile, seqlen_q, seqlen_k, heads,
                                                            kv_heads, num_m_tiles, CAUSAL,
                                                            BLOCK_M, BLOCK_N)
    else:
        b, h, kvh, m_start, n_blocks, n_unmasked = _tile(seqlen_q, seqlen_k, heads, kv_heads,
                                                         num_m_tiles, CAUSAL, BLOCK_M, BLOCK_N,
                                                         LPT)
    causal_off = seqlen_k - seqlen_q
    stamp_base = (b * heads + h) * seqlen_q + m_start    # diag_stamps (warpgroup 0 only)
    if STAMPS:
        _stamp(lse_ptr, stamp_base, 0, _CLOCK)
        _stamp(lse_ptr, stamp_base, 6, _SMID)
        _stamp(lse_ptr, stamp_base, 7, _GTIMER)
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 32])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HEAD_DIM, 32])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=4)
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)

    q = q_smem.reshape([BLOCK_M, HEAD_DIM]).slice(WG * M_WG, M_WG, dim=0)
    rows = m_start + WG * M_WG + gl.arange(0, M_WG, layout=row_s)
    # per-row factor: q_scale[batch, head, row // q_block] * softmax_scale * log2(e)
    q_blk = gl.minimum(rows // q_block, q_nblk - 1)
    row_f = gl.load(qs_ptr + (b * heads + h) * q_nblk + q_blk) * qk_scale
    kv_sc = (b * kv_heads + kvh) * kv_nblk     # int32: the scale tensors are small

    m_i = gl.full([M_WG], float("-inf"), gl.float32, layout=row_s)
    l_i = gl.zeros([M_WG], gl.float32, layout=row_s)
    acc = gl.zeros([M_WG, HEAD_DIM], gl.float32, layout=o_layout)
    s_zero = gl.zeros([M_WG, BLOCK_N], gl.float32, layout=s_layout)
    v_unit = 1.0   # acc holds O / v_unit (v_unit = v_scale of the last block added)

    mbarrier.wait(q_bar, q_phase)
    if STAMPS:
        _stamp(lse_ptr, stamp_base, 1, _CLOCK)

    if OVERLAP:
        # FA3 alg. 2: iteration j issues QK^T_j, rescales O while it runs, issues P_{j-1} V_{j-1},
        # then does the softmax of block j while P V is in flight.
        if PINGPONG:
            if not PERSISTENT:
                if WG == 0:
                    _named_bar(10, True)               # warpgroup 0 opens its own first turn
        if PACK_P:
            p_prev = _pack_p(s_zero, M_WG, p_layout)
        else:
            p_prev = gl.zeros([M_WG, BLOCK_N], fp8, layout=p_layout)
        alpha_o = gl.full([M_WG], 1.0, gl.float32, layout=row_o)
        if n_blocks > 0:
            k_sc = gl.load(ks_ptr + kv_sc)
            v_unit = gl.load(vs_ptr + kv_sc)
            s0 = kv_base % NUM_STAGES
            mbarrier.wait(k_ready.index(s0), (kv_base // NUM_STAGES) & 1)
            k_t = k_smem.index(s0).reshape([BLOCK_N, HEAD_DIM]).permute((1, 0))
            s_tok = warpgroup_mma(q, k_t, s_zero, use_acc=False, is_async=True)
            s_acc = warpgroup_mma_wait(0, deps=[s_tok])
            mbarrier.arrive(k_empty.index(s0), count=1)  # K_0 read
            if n_unmasked > 0:
                p, alpha, m_i, l_i = _softmax_update(s_acc, row_f, k_sc, m_i, l_i, rows, 0, seqlen_k,
                                                     causal_off, False, CAUSAL, BLOCK_N, s_layout, FMA)
            else:
                p, alpha, m_i, l_i = _softmax_update(s_acc, row_f, k_sc, m_i, l_i, rows, 0, seqlen_k,
                                                     causal_off, True, CAUSAL, BLOCK_N, s_layout, FMA)
            if PACK_P:
                p_prev = _pack_p(p, M_WG, p_layout)
            else:
                p_prev = gl.convert_layout(_key_perm(p.to(fp8), M_WG, 0, 1), p_layout,
                                           assert_trivial=True)
        # PREFETCH: the scales of iteration j are loaded in iteration j - 1 (the index clamped to
        # the last block: in bounds, and the value past the end is never used), so their global
        # load latency is off the path between the QK^T issue and the P V issue
        k_nx = gl.load(ks_ptr + kv_sc + gl.minimum(1, kv_nblk - 1))
        v_nx = gl.load(vs_ptr + kv_sc)
        for j in range(1, n_blocks):
            s = (kv_base + j) % NUM_STAGES
            sp = (kv_base + j - 1) % NUM_STAGES
            if PREFETCH:
                k_sc = k_nx
                v_prev = v_nx
                k_nx = gl.load(ks_ptr + kv_sc + gl.minimum(j + 1, kv_nblk - 1))
                v_nx = gl.load(vs_ptr + kv_sc + j)
            else:
                k_sc = gl.load(ks_ptr + kv_sc + j)
                v_prev = gl.load(vs_ptr + kv_sc + (j - 1))
            mbarrier.wait(k_ready.index(s), ((kv_base + j) // NUM_STAGES) & 1)
            if PINGPONG:
                _named_bar(10 + WG, False)             # this warpgroup's turn
            k_t = k_smem.index(s).reshape([BLOCK_N, HEAD_DIM]).permute((1, 0))
            s_tok = warpgroup_mma(q, k_t, s_zero, use_acc=False, is_async=True)
            # O in units of v_scale[j-1] before P_{j-1} V_{j-1} is added
            acc = acc * gl.expand_dims(alpha_o * (v_unit / v_prev), 1)
            v_unit = v_prev
            mbarrier.wait(vt_ready.index(sp), ((kv_base + j - 1) // NUM_STAGES) & 1)
            v = vt_smem.index(sp).permute((1, 0))          # (BLOCK_N, HEAD_DIM), K-major
            if PACK_P:
                o_tok = warpgroup_mma(_unpack_p(p_prev, M_WG, fp8, p_layout, PACK_P), v, acc,
                                      is_async=True)
            else:
                o_tok = warpgroup_mma(p_prev, v, acc, is_async=True)
            if PINGPONG:
                _named_bar(11 - WG, True)              # the other warpgroup's turn
            s_acc = warpgroup_mma_wait(1, deps=[s_tok])
            mbarrier.arrive(k_empty.index(s), count=1)     # K_j read
            if j < n_unmasked:
                p, alpha, m_i, l_i = _softmax_update(s_acc, row_f, k_sc, m_i, l_i, rows, j, seqlen_k,
                                                     causal_off, False, CAUSAL, BLOCK_N, s_layout, FMA)
            else:
                p, alpha, m_i, l_i = _softmax_update(s_acc, row_f, k_sc, m_i, l_i, rows, j, seqlen_k,
                                                     causal_off, True, CAUSAL, BLOCK_N, s_layout, FMA)
            alpha_o = gl.convert_layout(alpha, row_o)
            if PACK_P:
                p_prev = _pack_p(p, M_WG, p_layout)
            else:
                p_prev = gl.convert_layout(_key_perm(p.to(fp8), M_WG, 0, 1), p_layout,
                                           assert_trivial=True)
            acc = warpgroup_mma_wait(0, deps=[o_tok])
            mbarrier.arrive(vt_empty.index(sp), count=1)   # V^T_{j-1} read
        if PERSISTENT:
            mbarrier.arrive(q_empty, count=1)          # every QK^T of this tile has completed
        if n_blocks > 0:
            jl = n_blocks - 1
            sl = (kv_base + jl) % NUM_STAGES
            v_last = gl.load(vs_ptr + kv_sc + jl)
            acc = acc * gl.expand_dims(alpha_o * (v_unit / v_last), 1)
            v_unit = v_last
            mbarrier.wait(vt_ready.index(sl), ((kv_base + jl) // NUM_STAGES) & 1)
            v = vt_smem.index(sl).permute((1, 0))
            if PACK_P:
                o_tok = warpgroup_mma(_unpack_p(p_prev, M_WG, fp8, p_layout, PACK_P), v, acc,
                                      is_async=True)
            else:
                o_tok = warpgroup_mma(p_prev, v, acc, is_async=True)
            acc = warpgroup_mma_wait(0, deps=[o_tok])
            mbarrier.arrive(vt_empty.index(sl), count=1)

    else:
        # one block at a time: QK^T_j, softmax, P_j V_j (fewer live registers: hdim 256); the
        # blocks that need no mask first, in their own loop
        if PINGPONG:
            if not PERSISTENT:
                if WG == 0:
                    _named_bar(10, True)               # warpgroup 0 opens its own first turn
        for j in range(0, n_unmasked):
            acc, m_i, l_i, v_unit = _block_serial(
                q, k_smem, vt_smem, k_ready, k_empty, vt_ready, vt_empty, ks_ptr, vs_ptr, kv_sc,
                acc, m_i, l_i, v_unit, row_f, rows, j, seqlen_k, causal_off, s_zero,
                False, CAUSAL, BLOCK_N, HEAD_DIM, NUM_STAGES, M_WG, s_layout, o_layout, p_layout,
                FMA, PINGPONG, WG, kv_base, q_empty, n_blocks, EARLY_Q, STAMPS, lse_ptr,
                stamp_base)
        for j in range(n_unmasked, n_blocks):
            acc, m_i, l_i, v_unit = _block_serial(
                q, k_smem, vt_smem, k_ready, k_empty, vt_ready, vt_empty, ks_ptr, vs_ptr, kv_sc,
                acc, m_i, l_i, v_unit, row_f, rows, j, seqlen_k, causal_off, s_zero,
                True, CAUSAL, BLOCK_N, HEAD_DIM, NUM_STAGES, M_WG, s_layout, o_layout, p_layout,
                FMA, PINGPONG, WG, kv_base, q_empty, n_blocks, EARLY_Q, STAMPS, lse_ptr,
                stamp_base)
        if PINGPONG:
            if n_blocks > 0:
                _named_bar(11 - WG, True)              # closes the turn of the last P V
        if PERSISTENT:
            if EARLY_Q:
                if n_blocks == 0:
                    mbarrier.arrive(q_empty, count=1)  # no QK^T in this tile
            else:
                mbarrier.arrive(q_empty, count=1)      # every QK^T of this tile has completed

    if STAMPS:
        _stamp(lse_ptr, stamp_base, 2, _CLOCK)
    # epilogue: out = O * v_scale[last] / l; rows that saw no key give 0 and lse = -inf
    l_o = gl.convert_layout(l_i, row_o)
    l_safe = gl.where(l_o == 0.0, 1.0, l_o)
    out = acc * gl.expand_dims(v_unit / l_safe, 1)
    if FMA & 4:
        # v_perm: acc column c holds head-dim column sigma(c) (sigma swaps bits 0 and 3; it is
        # its own inverse). In the accumulator layout a thread holds columns 16 i + 8 i0 +
        # 2 (lane % 4) + e, so bits 0 (e) and 3 (i0) are both register bits: a relabel of this
        # thread's registers
        out = out.reshape([M_WG, HEAD_DIM // 16, 2, 4, 2]).permute((0, 1, 4, 3, 2))
        out = gl.convert_layout(out.reshape([M_WG, HEAD_DIM]), o_layout)
    lse = gl.where(l_i == 0.0, float("-inf"),
                   (m_i + gl.log2(l_i) - 8.0) * 0.6931471805599453)  # ln(l / 256) + m

    if o_desc is not None:
        if o_turn is not None and not O_RING:
            # o_half: warpgroup 0 waits until warpgroup 1's store of the previous tile has read
            # the buffer (the program's first tile passes: parity 1 of a fresh barrier),
            # warpgroup 1 until warpgroup 0's store of this tile has
            if WG == 0:
                mbarrier.wait(o_turn.index(1), q_phase ^ 1)
            else:
                mbarrier.wait(o_turn.index(0), q_phase)
            o_stage = o_buf
        else:
            # o_tma: this warpgroup's O through the V staging ring (O tile WG of it: 32 KB at
            # hdim 256, half of the ring). The ring is free: this warpgroup waited for its last
            # block's V^T, published after the producer's last read of the ring, and a one-tile
            # program loads nothing after it (with no key block nothing was loaded at all).
            # o_ring (persistent): the same, and the producer loads the next tile's V_0 only
            # after o_turn[0] and o_turn[1] (below).
            # The ring (boxes of 128 x 64 e4m3, 8 KB) seen as O tiles of M_WG x HEAD_DIM x 2 B
            N_O: gl.constexpr = vs_smem.shape[0] * 8192 // (M_WG * HEAD_DIM * 2)
            o_stage = vs_smem._reinterpret(o_desc.dtype, [N_O] + o_desc.block_type.shape,
                                           o_desc.layout).index(WG)
        # one TMA store of the warpgroup's rows; the copy engine clips rows past seqlen_q
        o_stage.reshape([M_WG, HEAD_DIM]).store(out.to(o_desc.dtype))
        fence_async_shared()
        gl.thread_barrier()   # the warpgroup's rows are all written
        tma.async_copy_shared_to_global(o_desc, [b, m_start + WG * M_WG, h, 0], o_stage)
        tma.store_wait(0)     # (.read: until the copy has read shared memory)
        if o_turn is not None:
            # needed: the store is split into copies issued by lanes of two warps, each waiting
            # for its own; the arrive below is thread 0's alone
            gl.thread_barrier()
            mbarrier.arrive(o_turn.index(WG), count=1)
    else:
        rows_o = m_start + WG * M_WG + gl.arange(0, M_WG, layout=row_o)
        cols_o = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, o_layout))
        row_off = ((b.to(gl.int64) * seqlen_q + rows_o) * heads + h) * HEAD_DIM
        o_ptrs = out_ptr + gl.expand_dims(row_off, 1) + gl.expand_dims(cols_o, 0)
        o_mask = gl.expand_dims(rows_o < seqlen_q, 1) & gl.expand_dims(cols_o < HEAD_DIM, 0)
        gl.store(o_ptrs, out.to(out_ptr.dtype.element_ty), mask=o_mask)
    lse_ptrs = lse_ptr + (b.to(gl.int64) * heads + h) * seqlen_q + rows
    if STAMPS:   # the stamps own the tile's first STAMP_ROWS lse entries
        gl.store(lse_ptrs, lse, mask=(rows < seqlen_q) & (rows >= m_start + STAMP_ROWS))
        _stamp(lse_ptr, stamp_base, 3, _CLOCK)
    else:
        gl.store(lse_ptrs, lse, mask=rows < seqlen_q)
    return n_blocks


@gluon.jit
def _consumer_wg0(q_smem, k_smem, vt_smem, q_bar, k_ready, k_empty, vt_ready, vt_empty,
                  out_ptr, lse_ptr, qs_ptr, ks_ptr, vs_ptr,
                  heads, kv_heads, seqlen_q, seqlen_k, num_m_tiles, qk_scale, q_block, q_nblk,
                  kv_nblk,
                  CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                  HEAD_DIM: gl.constexpr, NUM_STAGES: gl.constexpr, OVERLAP: gl.constexpr,
                  PREFETCH: gl.constexpr, FMA: gl.constexpr, PACK_P: gl.constexpr,
                  PINGPONG: gl.constexpr, LPT: gl.constexpr = False, STAMPS: gl.constexpr = False,
                  o_desc=None, vs_smem=None):
    _consumer(q_smem, k_smem, vt_smem, q_bar, k_ready, k_empty, vt_ready, vt_empty,
              out_ptr, lse_ptr, qs_ptr, ks_ptr, vs_ptr,
              heads, kv_heads, seqlen_q, seqlen_k, num_m_tiles, qk_scale, q_block, q_nblk, kv_nblk,
              0, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM, NUM_STAGES, OVERLAP, PREFETCH, FMA, PACK_P,
              PINGPONG, LPT=LPT, STAMPS=STAMPS, o_desc=o_desc, vs_smem=vs_smem)


@gluon.jit
def _consumer_wg1(q_smem, k_smem, vt_smem, q_bar, k_ready, k_empty, vt_ready, vt_empty,
                  out_ptr, lse_ptr, qs_ptr, ks_ptr, vs_ptr,
                  heads, kv_heads, seqlen_q, seqlen_k, num_m_tiles, qk_scale, q_block, q_nblk,
                  kv_nblk,
                  CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                  HEAD_DIM: gl.constexpr, NUM_STAGES: gl.constexpr, OVERLAP: gl.constexpr,
                  PREFETCH: gl.constexpr, FMA: gl.constexpr, PACK_P: gl.constexpr,
                  PINGPONG: gl.constexpr, LPT: gl.constexpr = False, o_desc=None,
                  vs_smem=None):
    _consumer(q_smem, k_smem, vt_smem, q_bar, k_ready, k_empty, vt_ready, vt_empty,
              out_ptr, lse_ptr, qs_ptr, ks_ptr, vs_ptr,
              heads, kv_heads, seqlen_q, seqlen_k, num_m_tiles, qk_scale, q_block, q_nblk, kv_nblk,
              1, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM, NUM_STAGES, OVERLAP, PREFETCH, FMA, PACK_P,
              PINGPONG, LPT=LPT, o_desc=o_desc, vs_smem=vs_smem)


@gluon.jit
def _sched_start(num_tiles, sched_ptr, SCHED: gl.constexpr):
    """The persistent loop's iterations (lo, hi, step) and, with SCHED, its first tile.

    Without SCHED: tiles pid, pid + grid, ... With SCHED (sched_table): this program's entries
    of the table built by tile_schedule(): [grid + 1 offsets | the tiles, program by program |
    one pad entry]; entries lo .. hi - 1 are this program's tiles in order."""
    pid = gl.program_id(0)
    lo = pid
    hi = num_tiles
    step = gl.num_programs(0)
    nxt = pid
    if SCHED:
        lo = gl.load(sched_ptr + pid)
        hi = gl.load(sched_ptr + pid + 1)
        step = 1
        nxt = gl.load(sched_ptr + gl.num_programs(0) + 1 + lo)
    return lo, hi, step, nxt


@gluon.jit
def _sched_tile(sched_ptr, it, nxt, SCHED: gl.constexpr):
    """Iteration `it`'s tile and the next one: without SCHED the tile is `it`; with it the
    prefetched table entry, and the entry after `it` loaded a tile ahead (the table's pad entry
    makes the last iteration's load safe)."""
    if SCHED:
        return nxt, gl.load(sched_ptr + gl.num_programs(0) + 1 + it + 1)
    else:
        return it, nxt


@gluon.jit
def _consumer_persistent(q_smem, k_smem, vt_smem, q_bar, q_empty, k_ready, k_empty, vt_ready,
                         vt_empty, out_ptr, lse_ptr, qs_ptr, ks_ptr, vs_ptr,
                         heads, kv_heads, seqlen_q, seqlen_k, num_m_tiles, qk_scale, q_block,
                         q_nblk, kv_nblk, num_tiles, sched_ptr,
                         WG: gl.constexpr, CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr,
                         BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr,
                         NUM_STAGES: gl.constexpr, OVERLAP: gl.constexpr,
                         PREFETCH: gl.constexpr, FMA: gl.constexpr, PACK_P: gl.constexpr,
                         PINGPONG: gl.constexpr, STAMPS: gl.constexpr = False,
                         EARLY_Q: gl.constexpr = False, SCHED: gl.constexpr = False,
                         o_desc=None, o_buf=None, o_turn=None, O_RING: gl.constexpr = False):
    # pingpong: each tile leaves one arrival on barrier 10 (the one-tile kernel exits with it),
    # which is the opening of the next tile's first turn; so warpgroup 0 opens only once
    if PINGPONG:
        if WG == 0:
            _named_bar(10, True)
    c = gl.program_id(0) * 0  # K / V^T ring position, carried across tiles (as the producer's)
    i = gl.program_id(0) * 0  # tiles done: q_bar's phase
    lo, hi, step, nxt = _sched_start(num_tiles, sched_ptr, SCHED)
    for it in range(lo, hi, step):
        tile, nxt = _sched_tile(sched_ptr, it, nxt, SCHED)
        n_blocks = _consumer(q_smem, k_smem, vt_smem, q_bar, k_ready, k_empty, vt_ready, vt_empty,
                  out_ptr, lse_ptr, qs_ptr, ks_ptr, vs_ptr,
                  heads, kv_heads, seqlen_q, seqlen_k, num_m_tiles, qk_scale, q_block, q_nblk,
                  kv_nblk, WG, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM, NUM_STAGES, OVERLAP, PREFETCH,
                  FMA, PACK_P, PINGPONG, tile, c, i & 1, q_empty, True, STAMPS=STAMPS,
                  EARLY_Q=EARLY_Q, o_desc=o_desc, vs_smem=o_buf, o_buf=o_buf, o_turn=o_turn,
                  O_RING=O_RING)
        c += n_blocks
        i += 1


@gluon.jit
def _consumer_persistent_wg0(q_smem, k_smem, vt_smem, q_bar, q_empty, k_ready, k_empty, vt_ready,
                             vt_empty, out_ptr, lse_ptr, qs_ptr, ks_ptr, vs_ptr,
                             heads, kv_heads, seqlen_q, seqlen_k, num_m_tiles, qk_scale, q_block,
                             q_nblk, kv_nblk, num_tiles, sched_ptr,
                             CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                             HEAD_DIM: gl.constexpr, NUM_STAGES: gl.constexpr,
                             OVERLAP: gl.constexpr, PREFETCH: gl.constexpr, FMA: gl.constexpr,
                             PACK_P: gl.constexpr, PINGPONG: gl.constexpr,
                             STAMPS: gl.constexpr = False, EARLY_Q: gl.constexpr = False,
                             SCHED: gl.constexpr = False, o_desc=None, o_buf=None, o_turn=None,
                             O_RING: gl.constexpr = False):
    _consumer_persistent(q_smem, k_smem, vt_smem, q_bar, q_empty, k_ready, k_empty, vt_ready,
                         vt_empty, out_ptr, lse_ptr, qs_ptr, ks_ptr, vs_ptr,
                         heads, kv_heads, seqlen_q, seqlen_k, num_m_tiles, qk_scale, q_block,
                         q_nblk, kv_nblk, num_tiles, sched_ptr, 0, CAUSAL, BLOCK_M, BLOCK_N,
                         HEAD_DIM, NUM_STAGES, OVERLAP, PREFETCH, FMA, PACK_P, PINGPONG, STAMPS,
                         EARLY_Q, SCHED, o_desc, o_buf, o_turn, O_RING)


@gluon.jit
def _consumer_persistent_wg1(q_smem, k_smem, vt_smem, q_bar, q_empty, k_ready, k_empty, vt_ready,
                             vt_empty, out_ptr, lse_ptr, qs_ptr, ks_ptr, vs_ptr,
                             heads, kv_heads, seqlen_q, seqlen_k, num_m_tiles, qk_scale, q_block,
                             q_nblk, kv_nblk, num_tiles, sched_ptr,
                             CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                             HEAD_DIM: gl.constexpr, NUM_STAGES: gl.constexpr,
                             OVERLAP: gl.constexpr, PREFETCH: gl.constexpr, FMA: gl.constexpr,
                             PACK_P: gl.constexpr, PINGPONG: gl.constexpr,
                             EARLY_Q: gl.constexpr = False, SCHED: gl.constexpr = False,
                             o_desc=None, o_buf=None, o_turn=None, O_RING: gl.constexpr = False):
    _consumer_persistent(q_smem, k_smem, vt_smem, q_bar, q_empty, k_ready, k_empty, vt_ready,
                         vt_empty, out_ptr, lse_ptr, qs_ptr, ks_ptr, vs_ptr,
                         heads, kv_heads, seqlen_q, seqlen_k, num_m_tiles, qk_scale, q_block,
                         q_nblk, kv_nblk, num_tiles, sched_ptr, 1, CAUSAL, BLOCK_M, BLOCK_N,
                         HEAD_DIM, NUM_STAGES, OVERLAP, PREFETCH, FMA, PACK_P, PINGPONG, False,
                         EARLY_Q, SCHED, o_desc, o_buf, o_turn, O_RING)


@gluon.jit
def _producer_persistent(q_desc, k_desc, v_desc, q_smem, k_smem, vs_smem, vt_smem,
                         q_bar, q_empty, k_ready, k_empty, vs_ready, vt_ready, vt_empty,
                         seqlen_q, seqlen_k, heads, kv_heads, num_m_tiles, num_tiles, sched_ptr,
                         CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                         HEAD_DIM: gl.constexpr, NUM_STAGES: gl.constexpr,
                         V_STAGES: gl.constexpr, LDSM_T: gl.constexpr = False, lse_ptr=None,
                         STAMPS: gl.constexpr = False, EARLY_Q: gl.constexpr = False,
                         SCHED: gl.constexpr = False, o_read=None, O_RING: gl.constexpr = False):
    # the consumers' tile sequence; Q of the next tile once both consumer warpgroups have
    # finished the current tile's QK^T (q_empty), i.e. under their last P V and epilogue
    c = gl.program_id(0) * 0
    i = gl.program_id(0) * 0
    lo, hi, step, nxt = _sched_start(num_tiles, sched_ptr, SCHED)
    for it in range(lo, hi, step):
        tile, nxt = _sched_tile(sched_ptr, it, nxt, SCHED)
        b, h, kvh, m_start, n_blocks, _nu = _tile_of(tile, seqlen_q, seqlen_k, heads, kv_heads,
                                                     num_m_tiles, CAUSAL, BLOCK_M, BLOCK_N)
        if not EARLY_Q:
            mbarrier.wait(q_empty, (i & 1) ^ 1)
        _producer(q_desc, k_desc, v_desc, q_smem, k_smem, vs_smem, vt_smem,
                  q_bar, k_ready, k_empty, vs_ready, vt_ready, vt_empty,
                  b, h, kvh, m_start, n_blocks, BLOCK_N, HEAD_DIM, NUM_STAGES, V_STAGES, c, True,
                  LDSM_T, lse_ptr, (b * heads + h) * seqlen_q + m_start, STAMPS, q_empty,
                  (i & 1) ^ 1, EARLY_Q, o_read, O_RING)
        c += n_blocks
        i += 1


# The integer arguments are not specialised (value 1 / multiple of 16): they only feed index
# arithmetic and loop bounds, and each distinct pattern of them was a separate 3-6 s compile
# (every case of the GPU test grid compiled its own kernel; 14 of 14 at hdim 128). Unspecialised,
# a launch compiles once per (head_dim, causal, config, output dtype): the code that
# compile_sm90() (the CPU tests' report) builds, which never specialised them either.
_INT_ARGS = ("seqlen_q", "seqlen_k", "heads", "kv_heads", "num_m_tiles", "q_block", "q_nblk",
             "kv_nblk")


@gluon.jit(do_not_specialize=_INT_ARGS)
def attn_fp8_fwd_kernel(q_desc, k_desc, v_desc, out_ptr, lse_ptr, qs_ptr, ks_ptr, vs_ptr,
                        seqlen_q, seqlen_k, heads, kv_heads, num_m_tiles, qk_scale,
                        q_block, q_nblk, kv_nblk, sched_ptr,
                        CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                        HEAD_DIM: gl.constexpr, NUM_STAGES: gl.constexpr,
                        V_STAGES: gl.constexpr, OVERLAP: gl.constexpr,
                        CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr,
                        PREFETCH: gl.constexpr = False, SOFTMAX_FMA: gl.constexpr = False,
                        PACK_P: gl.constexpr = False, PINGPONG: gl.constexpr = False,
                        PERSISTENT: gl.constexpr = False, LDSM_T: gl.constexpr = False,
                        LPT: gl.constexpr = False, SPLIT: gl.constexpr = False,
                        STAMPS: gl.constexpr = False, EARLY_Q: gl.constexpr = False,
                        SCHED: gl.constexpr = False, o_desc=None, O_RING: gl.constexpr = False):
    b, h, kvh, m_start, n_blocks, n_unmasked = _tile(seqlen_q, seqlen_k, heads, kv_heads,
                                                     num_m_tiles, CAUSAL, BLOCK_M, BLOCK_N,
                                                     LPT)

    fp8: gl.constexpr = q_desc.dtype
    vt_layout: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=8,
                                                   rank=2)
    q_smem = gl.allocate_shared_memory(fp8, q_desc.block_type.shape, q_desc.layout)
    k_smem = gl.allocate_shared_memory(fp8, [NUM_STAGES] + k_desc.block_type.shape, k_desc.layout)
    # V staging: V_STAGES slots of (BLOCK_N // 128) x (HEAD_DIM // 64) boxes (128 keys, 64
    # columns) each (64-byte swizzle); V^T: NUM_STAGES slots of BLOCK_N // 128 tiles (HEAD_DIM,
    # 128 keys) each
    NKC: gl.constexpr = BLOCK_N // 128
    vs_smem = gl.allocate_shared_memory(
        fp8, [V_STAGES * NKC * (HEAD_DIM // 64)] + v_desc.block_type.shape, v_desc.layout)
    vt_smem = gl.allocate_shared_memory(fp8, [NUM_STAGES * NKC, HEAD_DIM, 128], vt_layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    vt_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    vt_empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    vs_ready = gl.allocate_shared_memory(gl.int64, [V_STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=2)    # one arrival per consumer warpgroup
        mbarrier.init(vt_ready.index(i), count=1)   # the producer warpgroup, after its barrier
        mbarrier.init(vt_empty.index(i), count=2)
    for i in gl.static_range(V_STAGES):
        mbarrier.init(vs_ready.index(i), count=1)

    if PERSISTENT:
        # grid = min(tiles, SMs); each program walks tiles pid, pid + grid, ...
        q_empty = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        mbarrier.init(q_empty, count=2)  # one arrival per consumer warpgroup
        num_tiles = q_desc.shape[0] * heads * num_m_tiles
        if o_desc is not None:
            if O_RING:
                # o_ring: O through V staging slot WG; o_turn[WG] completes when warpgroup WG's
                # store has read it (the producer's V_0 of the next tile waits for both)
                o_buf = vs_smem
            else:
                # o_half: one M_WG-row O buffer of its own, the consumer warpgroups in turn
                o_buf = gl.allocate_shared_memory(o_desc.dtype, o_desc.block_type.shape,
                                                  o_desc.layout)
            o_turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
            mbarrier.init(o_turn.index(0), count=1)
            mbarrier.init(o_turn.index(1), count=1)
        else:
            o_buf: gl.constexpr = None   # (a constexpr: warp_specialize's arguments need one)
            o_turn: gl.constexpr = None
        gl.warp_specialize([
            (_consumer_persistent_wg0, (q_smem, k_smem, vt_smem, q_bar, q_empty, k_ready, k_empty,
                vt_ready, vt_empty, out_ptr, lse_ptr, qs_ptr, ks_ptr, vs_ptr,
                heads, kv_heads, seqlen_q, seqlen_k, num_m_tiles, qk_scale, q_block, q_nblk,
                kv_nblk, num_tiles, sched_ptr, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM, NUM_STAGES,
                OVERLAP, PREFETCH, SOFTMAX_FMA, PACK_P, PINGPONG, STAMPS, EARLY_Q, SCHED,
                o_desc, o_buf, o_turn, O_RING)),
            (_consumer_persistent_wg1, (q_smem, k_smem, vt_smem, q_bar, q_empty, k_ready, k_empty,
                vt_ready, vt_empty, out_ptr, lse_ptr, qs_ptr, ks_ptr, vs_ptr,
                heads, kv_heads, seqlen_q, seqlen_k, num_m_tiles, qk_scale, q_block, q_nblk,
                kv_nblk, num_tiles, sched_ptr, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM, NUM_STAGES,
                OVERLAP, PREFETCH, SOFTMAX_FMA, PACK_P, PINGPONG, EARLY_Q, SCHED,
                o_desc, o_buf, o_turn, O_RING)),
            (_producer_persistent, (q_desc, k_desc, v_desc, q_smem, k_smem, vs_smem, vt_smem,
                q_bar, q_empty, k_ready, k_empty, vs_ready, vt_ready, vt_empty,
                seqlen_q, seqlen_k, heads, kv_heads, num_m_tiles, num_tiles, sched_ptr,
                CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM, NUM_STAGES, V_STAGES, LDSM_T, lse_ptr,
                STAMPS, EARLY_Q, SCHED, o_turn, O_RING)),
        ], [4, 4], [CONSUMER_REGS, PRODUCER_REGS])
        return

    if SPLIT:
        # loader (1 warp) and transposer (2 warps) in the third warpgroup (see _loader); the
        # consumer entries are those of the call below (Gluon takes the list literally)
        vs_empty = gl.allocate_shared_memory(gl.int64, [V_STAGES, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(V_STAGES):
            mbarrier.init(vs_empty.index(i), count=1)   # the transposer, after its barrier
        gl.warp_specialize([
            (_consumer_wg0, (q_smem, k_smem, vt_smem, q_bar, k_ready, k_empty, vt_ready, vt_empty,
                             out_ptr, lse_ptr, qs_ptr, ks_ptr, vs_ptr,
                             heads, kv_heads, seqlen_q, seqlen_k, num_m_tiles, qk_scale, q_block,
                             q_nblk, kv_nblk,
                             CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM, NUM_STAGES, OVERLAP, PREFETCH,
                             SOFTMAX_FMA, PACK_P, PINGPONG, LPT)),
            (_consumer_wg1, (q_smem, k_smem, vt_smem, q_bar, k_ready, k_empty, vt_ready, vt_empty,
                             out_ptr, lse_ptr, qs_ptr, ks_ptr, vs_ptr,
                             heads, kv_heads, seqlen_q, seqlen_k, num_m_tiles, qk_scale, q_block,
                             q_nblk, kv_nblk,
                             CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM, NUM_STAGES, OVERLAP, PREFETCH,
                             SOFTMAX_FMA, PACK_P, PINGPONG, LPT)),
            (_transposer, (vs_smem, vt_smem, vs_ready, vs_empty, vt_ready, vt_empty, n_blocks,
                           BLOCK_N, HEAD_DIM, NUM_STAGES, V_STAGES)),
            (_loader, (q_desc, k_desc, v_desc, q_smem, k_smem, vs_smem, q_bar, k_ready, k_empty,
                       vs_ready, vs_empty, b, h, kvh, m_start, n_blocks, BLOCK_N, HEAD_DIM,
                       NUM_STAGES, V_STAGES)),
        ], [4, 2, 1], [CONSUMER_REGS, PRODUCER_REGS, PRODUCER_REGS])
        return
    gl.warp_specialize([
        (_consumer_wg0, (q_smem, k_smem, vt_smem, q_bar, k_ready, k_empty, vt_ready, vt_empty,
                         out_ptr, lse_ptr, qs_ptr, ks_ptr, vs_ptr,
                         heads, kv_heads, seqlen_q, seqlen_k, num_m_tiles, qk_scale, q_block,
                         q_nblk, kv_nblk,
                         CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM, NUM_STAGES, OVERLAP, PREFETCH,
                         SOFTMAX_FMA, PACK_P, PINGPONG, LPT, STAMPS, o_desc, vs_smem)),
        (_consumer_wg1, (q_smem, k_smem, vt_smem, q_bar, k_ready, k_empty, vt_ready, vt_empty,
                         out_ptr, lse_ptr, qs_ptr, ks_ptr, vs_ptr,
                         heads, kv_heads, seqlen_q, seqlen_k, num_m_tiles, qk_scale, q_block,
                         q_nblk, kv_nblk,
                         CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM, NUM_STAGES, OVERLAP, PREFETCH,
                         SOFTMAX_FMA, PACK_P, PINGPONG, LPT, o_desc, vs_smem)),
        (_producer, (q_desc, k_desc, v_desc, q_smem, k_smem, vs_smem, vt_smem,
                     q_bar, k_ready, k_empty, vs_ready, vt_ready, vt_empty,
                     b, h, kvh, m_start, n_blocks, BLOCK_N, HEAD_DIM, NUM_STAGES, V_STAGES, 0,
                     False, LDSM_T, lse_ptr, (b * heads + h) * seqlen_q + m_start, STAMPS)),
    ], [4, 4], [CONSUMER_REGS, PRODUCER_REGS])   # (o_desc: o_tma's O descriptor, or None)


# --------------------------------------------------------------------------------------------
# Host side
# --------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)  # one object per shape: building it costs host time per launch
def smem_layout(head_dim: int, rank: int = 4) -> gl.NVMMASharedLayout:
    """Shared layout of a [1, BLOCK, 1, head_dim] e4m3 TMA box: the widest swizzle of a row."""
    return gl.NVMMASharedLayout(swizzle_byte_width=min(128, head_dim), element_bitwidth=8,
                                rank=rank)


_NUM_SMS = {}


def _num_sms(device) -> int:
    idx = torch.device(device).index or 0
    if idx not in _NUM_SMS:
        _NUM_SMS[idx] = (torch.cuda.get_device_properties(idx).multi_processor_count
                         if torch.device(device).type == "cuda" else 132)
    return _NUM_SMS[idx]


def shared_memory_bytes(head_dim: int, cfg: Fp8FwdConfig) -> int:
    """Shared memory of the tiles (1 byte each): Q, the K ring, the V staging ring, the V^T ring;
    with o_half, O's half-tile buffer (2 bytes each)."""
    return head_dim * (cfg.block_m + (2 * cfg.num_stages + cfg.v_stages) * cfg.block_n
                       + (cfg.block_m if cfg.o_half else 0))


def _tma_ready(t: torch.Tensor) -> torch.Tensor:
    """TMA needs a 16-byte aligned base and 16-byte multiple strides; copy if not."""
    es = t.element_size()
    if t.stride(-1) != 1 or t.data_ptr() % 16 or any((s * es) % 16 for s in t.stride()[:-1]):
        t = t.contiguous()
    return t


@functools.lru_cache(maxsize=None)
def o_smem_layout() -> gl.NVMMASharedLayout:
    """o_tma: shared layout of O's [1, rows, 1, head_dim] 16-bit TMA box (128-byte swizzle)."""
    return gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=4)


def _descriptor(t: torch.Tensor, block: int, cols: int, layout=None):
    """The TMA descriptor of t (batch, seqlen, heads, head_dim) in boxes [1, block, 1, cols]
    (layout: smem_layout(cols), the e4m3 boxes', unless given; o_tma gives O's).

    Built without TensorDescriptor's own checks (~10 us of Python per descriptor, three per
    launch): t comes from _tma_ready (16-byte aligned base and strides, last stride 1), its
    shape is positive (forward() refuses empty inputs) and the box is a power of two.
    test_descriptor_matches_the_checked_one compares it with the checked construction."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    d = object.__new__(TensorDescriptor)
    d.base, d.shape, d.strides = t, list(t.shape), list(t.stride())
    d.block_shape, d.padding = [1, block, 1, cols], "zero"
    d.layout = smem_layout(cols) if layout is None else layout
    return d


@functools.lru_cache(maxsize=256)
def _launch_consts(head_dim: int, causal: bool, cfg: "Fp8FwdConfig") -> dict:
    # _constexprs, once per (head_dim, causal, configuration): forward() copies it per call
    return _constexprs(head_dim, causal, cfg)


_OUT_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16"}


def _f32(s: torch.Tensor) -> torch.Tensor:
    # the scales as contiguous float32 (quantize_fp8 makes them so: then no call at all)
    if s.dtype == torch.float32 and s.is_contiguous():
        return s
    return s.to(torch.float32).contiguous()


def _block_size_error(kq, vq, cfg: Fp8FwdConfig) -> str | None:
    for name, t in (("kq", kq), ("vq", vq)):
        if t.block_size % cfg.block_n:
            return (f"{name} was quantised with block_size={t.block_size}, but the FP8 kernel's key "
                    f"tile is BLOCK_N={cfg.block_n}: quantise k and v with "
                    f"quantize_fp8(..., block_size={cfg.block_n}) or a multiple of it (one scale "
                    f"per key tile)")
    return None


def supports(qq, kq, vq, causal: bool = False) -> str | None:
    """None if this kernel can run the call, else a plain-English reason.

    Takes QuantizedTensors from fusedattn.quantize_fp8 (q, k, v roles)."""
    from ..fp8 import QuantizedTensor
    for name, t in (("qq", qq), ("kq", kq), ("vq", vq)):
        if not isinstance(t, QuantizedTensor):
            return f"{name} must be a QuantizedTensor (fusedattn.quantize_fp8), got {type(t).__name__}"
    if not (qq.data.is_cuda and kq.data.is_cuda and vq.data.is_cuda):
        return "the hopper FP8 kernel needs CUDA tensors"
    major, minor = torch.cuda.get_device_capability(qq.data.device)
    if (major, minor) != (9, 0):
        return f"the hopper FP8 kernel needs an sm_90 GPU (H100/H200); this one is sm_{major}{minor}"
    d = qq.shape[-1]
    if d not in SUPPORTED_HEAD_DIMS:
        return f"the hopper FP8 kernel supports head_dim in {SUPPORTED_HEAD_DIMS}, got {d}"
    if qq.data.dtype != torch.float8_e4m3fn:
        return f"the hopper FP8 kernel takes float8_e4m3fn data, got {qq.data.dtype}"
    if qq.shape[2] % kq.shape[2] != 0:
        return "heads must be a multiple of kv_heads"
    return kv_block_error(d, causal, kq.block_size)


@functools.lru_cache(maxsize=1024)
def lpt_section_heads(n_bh: int, kv_group: int, seqlen_k: int, head_dim: int,
                      section_kb: int) -> int:
    """(batch, head)s per L2 section of the lpt_order grid: the largest divisor of n_bh whose
    heads' e4m3 K and V fit in section_kb KB (at least one kv head's q heads), preferring
    multiples of kv_group (the q heads that share one kv head)."""
    fit = max(1, section_kb * 1024 // (2 * seqlen_k * head_dim)) * kv_group
    small = [d for d in range(1, math.isqrt(n_bh) + 1) if n_bh % d == 0]
    divisors = [d for d in set(small + [n_bh // d for d in small]) if d <= fit]
    grouped = [d for d in divisors if d % kv_group == 0]
    return max(grouped or divisors)


# tile_schedule's cost of a tile, in key blocks: its blocks plus the per-tile work outside the
# key loop (device run 36, clock stamps of the persistent early_q loop: 0.94-1.01 blocks)
TILE_FIXED_BLOCKS = 1.0


def _schedule_entries(n_bh: int, sec: int, seqlen_q: int, seqlen_k: int, block_m: int,
                      block_n: int, programs: int) -> list[int]:
    """tile_schedule's table as a list (no device): see there."""
    num_m = -(-seqlen_q // block_m)
    off = seqlen_k - seqlen_q
    # cost of the tile pid_idx (the pid_m = num_m - 1 - pid_idx of _tile_of's causal order)
    cost = []
    for i in range(num_m):
        m_end = min((num_m - i) * block_m, seqlen_q)
        kv_end = max(min(m_end + off, seqlen_k), 0)
        cost.append(-(-kv_end // block_n) + TILE_FIXED_BLOCKS)
    heap = [(0.0, p) for p in range(programs)]
    lists: list[list[int]] = [[] for _ in range(programs)]
    for s0 in range(0, n_bh, sec):              # L2 sections of (batch, head)s, in order
        for i in range(num_m):                  # longest tiles first within the section
            for bh in range(s0, min(n_bh, s0 + sec)):
                load, p = heapq.heappop(heap)   # the program predicted to be free first
                lists[p].append(bh * num_m + i)
                heapq.heappush(heap, (load + cost[i], p))
    offsets = [0]
    for lst in lists:
        offsets.append(offsets[-1] + len(lst))
    return offsets + [t for lst in lists for t in lst] + [0]


_SCHEDULES: dict[tuple, torch.Tensor] = {}


def tile_schedule(n_bh: int, kv_group: int, seqlen_q: int, seqlen_k: int, head_dim: int,
                  block_m: int, block_n: int, section_kb: int, programs: int,
                  device: torch.device) -> torch.Tensor:
    """The causal persistent loop's tile table (sched_table), int32 on `device`:
    [programs + 1 offsets | each program's tile indices in order | one pad entry].

    The one-tile grid's order (L2 sections of lpt_section_heads (batch, head)s; in a section the
    longest tiles first) dealt out as the hardware deals one-tile programs: each tile to the
    program predicted to be free first, with a tile costing its key blocks plus
    TILE_FIXED_BLOCKS. Deterministic (a tile is computed the same way on any program). Built on
    the host on a shape's first call (~1 s per million tiles) and kept for the process (4 bytes
    per tile; never freed, so that a CUDA graph that captured a launch keeps a valid table;
    clear_tile_schedules() frees them). A first call inside CUDA graph capture is a
    RuntimeError (the table's copy to the device cannot be captured): call once before."""
    key = (n_bh, kv_group, seqlen_q, seqlen_k, head_dim, block_m, block_n, section_kb, programs,
           device)
    table = _SCHEDULES.get(key)
    if table is None:
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            raise RuntimeError(
                "attention_fp8 (causal) builds a tile table on the first call with a new shape, "
                "which cannot run during CUDA graph capture: make the same call once before "
                "capturing")
        sec = lpt_section_heads(n_bh, kv_group, seqlen_k, head_dim, section_kb)
        entries = _schedule_entries(n_bh, sec, seqlen_q, seqlen_k, block_m, block_n, programs)
        table = torch.tensor(entries, dtype=torch.int32, device=device)
        _SCHEDULES[key] = table
    return table


def clear_tile_schedules() -> None:
    """Free the causal FP8 kernel's cached tile tables (tile_schedule). CUDA graphs captured
    before must not be replayed afterwards."""
    _SCHEDULES.clear()


# Host time per call: after the first launch for a given specialisation, later launches with
# the same specialisation go straight to the compiled kernel (fast_launch.py; the 16-bit kernel
# does the same since session 2). forward() builds the key; tests/test_hopper_fp8_compile.py
# checks with Triton's own binder that equal keys mean equal specialisations and that the
# argument list is Triton's. FAST_LAUNCH = False turns this off.
FAST_LAUNCH = True
_FAST: dict = {}
_RUNTIME_ARGS = ("q_desc", "k_desc", "v_desc", "out_ptr", "lse_ptr", "qs_ptr", "ks_ptr", "vs_ptr",
                 "seqlen_q", "seqlen_k", "heads", "kv_heads", "num_m_tiles", "qk_scale",
                 "q_block", "q_nblk", "kv_nblk", "sched_ptr", "o_desc")


@functools.lru_cache(maxsize=None)
def _no_schedule(device: torch.device) -> torch.Tensor:
    # the kernel's sched_ptr where no table is used (never read)
    return torch.zeros(1, dtype=torch.int32, device=device)


def forward(qq, kq, vq, causal: bool, softmax_scale: float | None = None,
            config: Fp8FwdConfig | None = None, out_dtype: torch.dtype = torch.bfloat16,
            _out: torch.Tensor | None = None, _lse: torch.Tensor | None = None,
            _warmup: bool = False, _diagnostic: bool = False, _programs: int | None = None,
            _key_only: bool = False):
    """FP8 attention forward: (out, lse) as fusedattn.fp8_reference.fp8_attention_forward.

    qq, kq, vq: QuantizedTensors (roles "q", "k", "v"; q and k both rotated with one seed or both
    not; v not rotated). kq and vq's block_size must be a multiple of the key tile BLOCK_N:
    without ``config`` the table's tile for (head_dim, causal) is the largest one (128 or 256)
    that divides it (get_config); a block_size below 128 is a ValueError naming the argument. A
    multiple runs with its scales repeated per tile (QuantizedTensor.reblocked: the same values).
    qq may have any block_size. out: (batch, seqlen_q, heads, head_dim) in
    out_dtype (bf16 default); lse: float32 (batch, heads, seqlen_q), natural log, -inf for rows
    that see no key. softmax_scale defaults to 1/sqrt(head_dim). _out/_lse: preallocated
    contiguous outputs (tests poison them before the launch). _warmup: compile (into triton's
    on-disk cache) with exactly this call's specialisation, launch nothing, return the compiled
    kernel (scripts/hopper_fp8_dev.py precompiles its kernels in parallel processes).
    _programs: the persistent loop's grid at most this many programs (default: one per SM), so
    that tests and the sanitizer run many tiles per program on small shapes. _key_only: return
    (fast-launch key, args, kwargs, grid) of the launch instead (the test of the key).
    """
    from ..fp8_reference import _check
    _check(qq, kq, vq)   # types, roles, rotation/seed consistency, shapes, devices
    batch, seqlen_q, heads, head_dim = qq.shape
    _, seqlen_k, kv_heads, _ = kq.shape
    if head_dim not in SUPPORTED_HEAD_DIMS:
        raise ValueError(f"head_dim must be one of {SUPPORTED_HEAD_DIMS}, got {head_dim}")
    cfg = config or get_config(head_dim, causal, kq.block_size)
    if cfg.diag_no_transpose and not (_diagnostic or _warmup):
        raise ValueError("diag_no_transpose is a timing diagnostic that computes wrong results; "
                         "forward() runs it only with _diagnostic=True")
    if cfg.diag_stamps and not (_diagnostic or _warmup):
        raise ValueError("diag_stamps is a timing diagnostic that overwrites lse; forward() runs "
                         "it only with _diagnostic=True")
    if cfg.block_m != 128 or cfg.block_n not in (128, 256):
        raise ValueError("the kernel's tiles are BLOCK_M = 128 and BLOCK_N = 128 or 256 (the "
                         "transpose and the key permutation work on 128-key chunks)")
    if cfg.block_n == 256 and cfg.overlap:
        raise ValueError("BLOCK_N = 256 runs block by block (overlap=False): the overlapped loop "
                         "would hold two 256-key score tiles")
    if cfg.v_stages < 2:
        raise ValueError("v_stages must be >= 2 (V_{j+1} is loaded while V_j is transposed)")
    err = _block_size_error(kq, vq, cfg)
    if err:
        raise ValueError(err)
    # k and v quantised with blocks larger than the key tile: the same values, one scale per tile
    kq, vq = kq.reblocked(cfg.block_n), vq.reblocked(cfg.block_n)
    if out_dtype not in _OUT_DTYPES:
        raise ValueError(f"out_dtype must be bfloat16 or float16, got {out_dtype}")
    if seqlen_q == 0 or seqlen_k == 0 or batch == 0 or heads == 0:
        raise ValueError("empty inputs are handled by the caller (seqlen_k == 0 gives zeros)")
    scale = head_dim ** -0.5 if softmax_scale is None else float(softmax_scale)
    q, k, v = _tma_ready(qq.data), _tma_ready(kq.data), _tma_ready(vq.data)
    qs, ks, vs = (_f32(t.scales) for t in (qq, kq, vq))
    dev = q.device
    out = _out if _out is not None else torch.empty((batch, seqlen_q, heads, head_dim),
                                                    dtype=out_dtype, device=dev)
    lse = _lse if _lse is not None else torch.empty((batch, heads, seqlen_q),
                                                    dtype=torch.float32, device=dev)
    if out.dtype != out_dtype or not out.is_contiguous() or not lse.is_contiguous():
        raise ValueError("_out/_lse must be contiguous, _out of out_dtype")
    num_m_tiles = -(-seqlen_q // cfg.block_m)   # (triton.cdiv costs ~5 us of host time here)
    grid = (batch * heads * num_m_tiles,)
    if _programs is not None and not cfg.persistent:
        raise ValueError("_programs caps the persistent loop's grid; this configuration runs one "
                         "program per tile")
    if cfg.persistent:
        if _programs is not None and _programs < 1:
            raise ValueError(f"_programs must be >= 1, got {_programs}")
        grid = (min(grid[0], _num_sms(dev), _programs or grid[0]),)
    cx = dict(_launch_consts(head_dim, bool(causal), cfg))
    if cx["LPT"]:
        sec = lpt_section_heads(batch * heads, heads // kv_heads, seqlen_k, head_dim,
                                cfg.l2_section_kb)
        grid = (sec, num_m_tiles, batch * heads // sec)
        if max(grid[1:]) > 65535:   # CUDA's limit on grid y / z: the 1-D (batch, head)-major order
            cx["LPT"] = False
            grid = (batch * heads * num_m_tiles,)
    if cx["SOFTMAX_FMA"] & 1 and not scale > 0:   # the raw-score max needs a positive scale
        cx["SOFTMAX_FMA"] = cx["SOFTMAX_FMA"] & 14 or False
    if cx["SCHED"]:
        sched = tile_schedule(batch * heads, heads // kv_heads, seqlen_q, seqlen_k, head_dim,
                              cfg.block_m, cfg.block_n, cfg.l2_section_kb, grid[0], dev)
    else:
        sched = _no_schedule(dev)
    ints = (seqlen_q, seqlen_k, heads, kv_heads, num_m_tiles)
    blocks = (qq.block_size, qs.shape[-1], ks.shape[-1])
    o_store = cfg.o_tma or cfg.o_half or cfg.o_ring   # O leaves by TMA store: O's descriptor
    # the arguments after the three input descriptors, in the kernel's order (_RUNTIME_ARGS)
    tail = (out, lse, qs, ks, vs, *ints, scale * LOG2E, *blocks, sched)
    key = None
    if _key_only or (FAST_LAUNCH and not _warmup):
        # everything the launch's specialisation depends on (see FAST_LAUNCH): the config,
        # causal, head_dim and output dtype make the descriptors' block shapes and every
        # constexpr but the two set per call (LPT, SOFTMAX_FMA); the int arguments are not
        # specialised (_INT_ARGS) but for their width; pointers by their 16-byte alignment
        key = (dev, out_dtype, lse.dtype, q.dtype, k.dtype, v.dtype, cfg, bool(causal), head_dim,
               cx["LPT"], cx["SOFTMAX_FMA"],
               tuple(t.data_ptr() % 16 == 0 for t in (out, lse, qs, ks, vs, sched)),
               tuple(-2 ** 31 <= x < 2 ** 31 for x in ints + blocks), _fl.context_key(dev))
        hit = None if _key_only else _FAST.get(key)
        if hit is not None:
            compiled, template, index = hit
            runtime = dict(zip(_RUNTIME_ARGS[:-1],
                               (_fl.DescArg(q), _fl.DescArg(k), _fl.DescArg(v), *tail)))
            if o_store:
                runtime["o_desc"] = _fl.DescArg(out)
            compiled[tuple(grid) + (1,) * (3 - len(grid))](*_fl.arglist(template, index, runtime))
            return out, lse
    args = (_descriptor(q, cfg.block_m, head_dim), _descriptor(k, cfg.block_n, head_dim),
            _descriptor(v, 128, 64),      # boxes of 128 keys (BLOCK_N // 128 per key block)
            *tail)
    cx["o_desc"] = (_descriptor(out, cfg.block_m // 2, head_dim, o_smem_layout())
                    if o_store else None)
    kwargs = dict(cx, num_warps=cfg.num_warps, maxnreg=cfg.maxnreg)
    if _key_only:
        return key, args, kwargs, grid
    if _warmup:
        return attn_fp8_fwd_kernel.warmup(*args, grid=grid, **kwargs)
    compiled = attn_fp8_fwd_kernel[grid](*args, **kwargs)
    if key is not None:
        _fl.remember(_FAST, key, attn_fp8_fwd_kernel, compiled, args, kwargs, _RUNTIME_ARGS)
    return out, lse


# --------------------------------------------------------------------------------------------
# Ahead-of-time compilation for sm_90a (no GPU needed): the CPU tests and the inspect report.
# --------------------------------------------------------------------------------------------
def _signature(head_dim: int, cfg: Fp8FwdConfig, out_dtype: str = "bf16") -> dict:
    qk_lay = repr(smem_layout(head_dim))
    v_lay = repr(smem_layout(64))
    return {
        "q_desc": f"tensordesc<fp8e4nv[1, {cfg.block_m}, 1, {head_dim}],{qk_lay}>",
        "k_desc": f"tensordesc<fp8e4nv[1, {cfg.block_n}, 1, {head_dim}],{qk_lay}>",
        "v_desc": f"tensordesc<fp8e4nv[1, 128, 1, 64],{v_lay}>",
        "out_ptr": f"*{out_dtype}", "lse_ptr": "*fp32",
        "qs_ptr": "*fp32", "ks_ptr": "*fp32", "vs_ptr": "*fp32",
        "seqlen_q": "i32", "seqlen_k": "i32", "heads": "i32", "kv_heads": "i32",
        "num_m_tiles": "i32", "qk_scale": "fp32", "q_block": "i32", "q_nblk": "i32",
        "kv_nblk": "i32", "sched_ptr": "*i32",
    }


def _constexprs(head_dim: int, causal: bool, cfg: Fp8FwdConfig) -> dict:
    if cfg.k_after_vt and not (cfg.early_q and not cfg.split_producer):
        raise ValueError("k_after_vt reorders the one-warpgroup producer's early_q loop: it needs "
                         "early_q=True and split_producer=False")
    if cfg.k_mid_vt and not (cfg.k_after_vt and not cfg.diag_no_transpose):
        raise ValueError("k_mid_vt splits the transpose of k_after_vt's loop: it needs "
                         "k_after_vt=True and diag_no_transpose=False")
    check_exp_poly(cfg.exp_poly)
    if cfg.early_q and (not cfg.persistent or cfg.overlap):
        raise ValueError("early_q is for the persistent loop block by block (persistent=True, "
                         "overlap=False)")
    if cfg.sched_table and not cfg.persistent:
        raise ValueError("sched_table is for the persistent loop (persistent=True)")
    if cfg.diag_stamps and cfg.split_producer:
        raise ValueError("diag_stamps is for the one-warpgroup producer")
    if cfg.split_producer and (cfg.persistent or not cfg.ldsm_transpose or cfg.diag_no_transpose):
        raise ValueError("split_producer needs ldsm_transpose=True, persistent=False and "
                         "diag_no_transpose=False (its transposer is the ldmatrix one, on two "
                         "warps; the persistent loop keeps the one-warpgroup producer)")
    if cfg.o_half and not (cfg.persistent and not cfg.o_tma):
        raise ValueError("o_half is for the persistent rows (persistent=True, o_tma=False): the "
                         "one-tile rows store O through the staging ring instead (o_tma)")
    if cfg.release_expect and cfg.overlap:
        raise ValueError("release_expect is for the block-by-block loop (overlap=False): the "
                         "overlapped loop's releases are mbarrier.arrive")
    if cfg.vt_signal_expect and cfg.split_producer:
        raise ValueError("vt_signal_expect is for the one-warpgroup producer (split_producer=False): "
                         "the split producer's transposer signals V^T with mbarrier.arrive")
    if cfg.o_ring and not (cfg.persistent and cfg.early_q and not cfg.o_tma and not cfg.o_half
                           and cfg.v_stages * cfg.block_n >= cfg.block_m * 2):
        raise ValueError("o_ring is for the persistent rows with early_q (persistent=True, "
                         "early_q=True, o_tma=False, o_half=False) whose V staging ring holds "
                         "both warpgroups' O tiles (v_stages * block_n >= 2 * block_m)")
    if cfg.o_tma and (cfg.persistent or cfg.split_producer or cfg.v_stages < 2):
        raise ValueError("o_tma is for the one-tile rows with the one-warpgroup producer and two "
                         "V staging slots (persistent=False, split_producer=False, v_stages >= 2): "
                         "O goes through staging slot WG, which a persistent program reloads")
    if cfg.v_perm and not (cfg.ldsm_transpose and not cfg.diag_no_transpose
                           and not cfg.split_producer):
        raise ValueError("v_perm needs ldsm_transpose=True, diag_no_transpose=False and "
                         "split_producer=False (it permutes the one-warpgroup producer's "
                         "ldmatrix transpose)")
    causal_cx = 2 if causal and cfg.causal_mask_only else bool(causal)   # 2: causal_mask_only
    return dict(CAUSAL=causal_cx, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, HEAD_DIM=head_dim,
                NUM_STAGES=cfg.num_stages, V_STAGES=cfg.v_stages, OVERLAP=cfg.overlap,
                CONSUMER_REGS=cfg.consumer_regs, PRODUCER_REGS=cfg.producer_regs,
                PREFETCH=cfg.prefetch_scales,
                SOFTMAX_FMA=_fma_bits(cfg),
                PACK_P=(2 if cfg.pack_p and cfg.unpack_prmt else cfg.pack_p),
                PINGPONG=cfg.pingpong, PERSISTENT=cfg.persistent,
                LDSM_T=_ldsm_bits(cfg),
                LPT=bool(cfg.lpt_order and causal and not cfg.persistent),
                SPLIT=cfg.split_producer, STAMPS=cfg.diag_stamps,
                EARLY_Q=cfg.early_q, SCHED=bool(cfg.sched_table and causal),
                O_RING=cfg.o_ring)


def _ldsm_bits(cfg: Fp8FwdConfig):
    """The kernel's LDSM_T: 1 the ldmatrix transpose, 2 diag_no_transpose, 3 with v_perm; bit 2
    vt_signal_expect, bit 3 k_after_vt, bit 4 k_mid_vt (the rows without them keep their earlier
    value)."""
    t = 2 if cfg.diag_no_transpose else (3 if cfg.v_perm else cfg.ldsm_transpose)
    t = int(t) | 4 if cfg.vt_signal_expect else t
    t = int(t) | 8 if cfg.k_after_vt else t
    return int(t) | 16 if cfg.k_mid_vt else t


def _fma_bits(cfg: Fp8FwdConfig):
    """The kernel's SOFTMAX_FMA: bit 0 softmax_fma, bit 1 mask_split, bit 2 v_perm (O's columns
    put back in the epilogue), bit 3 release_expect, bits 4-5 exp_poly (1: one score in 2, 2: in
    4, 3: in 8), bit 6 row_tree; the rows without the later bits keep their earlier value."""
    bits = (int(cfg.softmax_fma) | 2) if cfg.mask_split else cfg.softmax_fma
    bits = int(bits) | 4 if cfg.v_perm else bits
    bits = int(bits) | 8 if cfg.release_expect else bits
    bits = int(bits) | 64 if cfg.row_tree else bits
    if cfg.exp_poly:
        bits = int(bits) | (cfg.exp_poly.bit_length() - 1) << 4
    return bits


def compile_sm90(head_dim: int = 128, causal: bool = False, config: Fp8FwdConfig | None = None,
                 out_dtype: str = "bf16"):
    """Compile attn_fp8_fwd_kernel for sm_90a with the bundled ptxas (no GPU needed)."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    cfg = config or get_config(head_dim, causal)
    signature = _signature(head_dim, cfg, out_dtype)
    constexprs = _constexprs(head_dim, causal, cfg)
    for name in constexprs:
        signature[name] = "constexpr"
    if cfg.o_tma or cfg.o_half or cfg.o_ring:
        signature["o_desc"] = (f"tensordesc<{out_dtype}[1, {cfg.block_m // 2}, 1, {head_dim}],"
                               f"{o_smem_layout()!r}>")
    src = GluonASTSource(attn_fp8_fwd_kernel, signature, constexprs=constexprs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": cfg.num_warps, "maxnreg": cfg.maxnreg})
