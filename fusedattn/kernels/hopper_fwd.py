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
The shipped table (CONFIGS, per (head_dim, causal)) has PINGPONG off everywhere and OVERLAP on
except at head_dim 64 non-causal: measured on an H200, overlap gave +10..12% at hdim 128 and
pingpong cost 1-9% (benchmarks/hopper_log.md, RESULTS.md run 5).

Switches added for issue #4 (FwdConfig fields; scripts/hopper_dev2.py verifies and times them in
one run). persistent, tma_store, softmax_fma and num_consumers=3 are in the shipped table since
device run 5 (GPU grid passed in run 6); the others are off:
    warp_specialize=False  attn_fwd_nows_kernel: no producer, no setmaxnreg; one 8-warp partition
                           issues its own TMA loads (ablation "without warp specialisation").
    persistent             grid = number of SMs; every program walks a static tile sequence
                           (causal: longest first); producer and consumers carry the K/V ring
                           counter (stage, phase), the q_bar phase and the pingpong turn counter
                           across tiles; a q_empty mbarrier lets the producer load the next Q
                           under the current tile's last P V and epilogue.
    tma_store              O written to the warpgroup's own rows of the Q tile in shared memory,
                           then one TMA store (clips the sequence tail and padded columns).
    pingpong_mode          0: the verified turn placement (a turn around every GEMM issue
                           group); 1: FA3's placement (no turn around the first QK^T and the last
                           P V; without overlap the turn spans P V_{j-1} + QK^T_j); 2: as 1 with
                           named hardware barriers (bar.sync/bar.arrive, FA3) instead of
                           mbarrier polling.
    softmax_fma (v4)       FA3's softmax arithmetic: the row max over the raw scores, the exponent
                           s * scale - m * scale as one FFMA (SASS hdim 128: FFMA 64 -> 612,
                           FADD 1068 -> 536, FMUL 920 -> 664 over the whole kernel).
    num_consumers=3 (v4)   three consumer warpgroups of BLOCK_M // 3 rows (FA3's 192-row tile at
                           hdim 64): 16 warps, entry cap 128 registers, workers setmaxnreg 160,
                           the default partition 168, producer 24; the Q tile is three TMA boxes
                           in a [4, 1, 64, 1, D] buffer (shared shapes must be powers of two).
    scheduler=1 (v5)       with persistent: FA3's dynamic scheduler for causal: longest tiles
                           first over L2 sections of (batch, head)s, the next tile id from a
                           global atomic counter (self-resetting; _producer_dynamic), handed to
                           the consumers through shared memory with q_bar.
    wg_bounds (v5)         causal: each consumer warpgroup stops at the last K/V block its own
                           rows see and masks only the blocks its first row does not fully see
                           (hdim 256: warpgroup 0 skips one 64-key block per tile; 3 warpgroups
                           of 64 rows with BLOCK_N 128: 1.5 of 3 skip one block on average).
    o_buffer (v6)          with persistent + tma_store: O in its own shared-memory tile, so the
                           next tile's Q loads after the last QK^T instead of after O's store
                           (shipped at hdim 128; three consumers since session 11: Q in boxes
                           0..2 and O in 4..6 of an 8-box buffer, shipped at hdim 64 causal).
    o_half (session 10)    where O's own tile does not fit (hdim 256): one half-tile O buffer
                           that the two consumer warpgroups take in turn (turn mbarriers);
                           shipped at hdim 256 non-causal since session 11.
    kv_reverse (session 11) FA3's key-block order: the last (masked) block first, the steady
                           loop unmasked (candidate, off: at most 1.5% of cycles, device run 52).
    head_dim not in (64, 128, 256) (a multiple of 8, <= 256): runs at the next native head dim;
                           the TMA boxes are wider than the tensors, the copy engine zero-fills the
                           missing columns of Q, K, V, and the store masks them (D_REAL).
                           supports() accepts these while PAD_HEAD_DIMS is True (since device run 7).
"""
from __future__ import annotations

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
    warpgroup_mma_init,
    warpgroup_mma_wait,
)

# the timing diagnostic's clock stamps (diag_stamps) are the FP8 kernel's
from .hopper_fp8_fwd import (_CLOCK, _GTIMER, _SMID, _exp2_mixed, _row_tree, _stamp,
                             check_exp_poly)
from . import fast_launch as _fl

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453

NATIVE_HEAD_DIMS = (64, 128, 256)
# Head dims other than 64/128/256 run padded to the next native one (forward() always does this;
# see the module docstring). supports() accepts them only when this flag is on. Device run 7
# (scripts/hopper_dev2.py job "pad") checked head dims 32/80/96/192, causal and not, against float64:
# all passed, so it is on; the GPU test grid covers 40/96/192.
PAD_HEAD_DIMS = True
SUPPORTED_HEAD_DIMS = NATIVE_HEAD_DIMS if not PAD_HEAD_DIMS else tuple(range(8, 257, 8))


def padded_head_dim(head_dim: int) -> int:
    """The native head dim a call runs at: the smallest of 64/128/256 that is >= head_dim."""
    for d in NATIVE_HEAD_DIMS:
        if head_dim <= d:
            return d
    raise ValueError(f"head_dim {head_dim} > 256")


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
    # --- added for issue #4, all off by default until measured on a GPU (module docstring) ---
    warp_specialize: bool = True  # False: attn_fwd_nows_kernel (8 warps, no producer)
    persistent: bool = False      # grid = #SMs, static tile loop
    tma_store: bool = False       # O through shared memory + TMA store
    pingpong_mode: int = 0        # 0 verified placement, 1 FA3 placement, 2 FA3 + named barriers
    # --- v4 candidates (hopper_log.md v4), off by default until measured on a GPU ---
    softmax_fma: bool = False     # row max of the raw scores, exp2(s*scale - m*scale) as one FFMA
    num_consumers: int = 2        # 3: BLOCK_M // 3 rows per warpgroup (FA3's hdim-64 192-row tile);
                                  # 1 (session 12 candidate): one consumer partition of two
                                  # warpgroups (8 warps, BLOCK_M rows, 64 per warpgroup), so both
                                  # run one copy of the consumer code (as FA3's do)
    # --- v5 candidates (hopper_log.md v5), off by default until measured on a GPU ---
    scheduler: int = 0            # with persistent: 0 static strided (v3), 1 dynamic
                                  # longest-first over L2 sections (FA3's causal scheduler)
    l2_section_mb: int = 32       # scheduler 1: K+V bytes per L2 section (FA3: 32 MB); 0: one
                                  # section of every (batch, head) (pure longest-first)
    wg_bounds: bool = False       # causal: each consumer warpgroup computes only the K/V blocks
                                  # its own rows see (not with pingpong or the static persistent)
    # --- v6 candidate (hopper_log.md v6), off by default until measured on a GPU ---
    skip_empty_wg: bool = False   # v9: a consumer warpgroup whose rows all lie past seqlen_q
                                  # computes nothing (kernel WG_SKIP == 2; causal: with wg_bounds)
    split_loops: bool = False     # v8: unmasked and masked K/V blocks in two loops, one softmax
                                  # each (smaller hot loop; block 0 always the masked softmax)
    q_prefetch: bool = False      # v10, with the dynamic scheduler + tma_store (2 consumers):
                                  # two Q buffers; the next tile's Q loads during this tile and O
                                  # leaves through its own tile's buffer (kernel TMA_STORE == 3)
    o_half: bool = False          # session 10, with persistent + tma_store (2 consumers, no
                                  # pingpong): one half-tile O buffer (BLOCK_M // 2 rows) that the
                                  # two consumer warpgroups take in turn (kernel TMA_STORE == 4),
                                  # so Q is released after the last QK^T as with o_buffer, where a
                                  # whole O tile does not fit (hdim 256: 192 + 32 KB)
    o_buffer: bool = False        # with persistent + tma_store (2 or 3 consumers): O gets its own
                                  # shared-memory tile instead of reusing Q's, so the next tile's
                                  # Q load starts after the last QK^T, not after the TMA store
    # --- diagnostics of q_prefetch at hdim 64 causal (scripts/qpf_diag2.py); off, never in the
    # table; each acts only with q_prefetch (kernel TMA_STORE == 3; forward() refuses it
    # otherwise) and reaches the kernel as one bit of QPF_DIAG (_qpf_diag_bits) ---
    diag_fence_init: bool = False   # 1: fence.proxy.async.shared::cta right after the mbarrier
                                    # inits (before the warp-specialised region and any TMA)
    diag_store_wait: bool = False   # 2: each consumer warpgroup waits for its own O TMA store
                                    # (store_wait 0 + warpgroup barrier) at the end of every tile,
                                    # as TMA_STORE == 1 does (the loop's exit already waits)
    diag_joint_exit: bool = False   # 4: the consumer warpgroups leave their tile loop together:
                                    # each arrives on an mbarrier (the unused pingpong turn
                                    # barrier 0, count NUM_CONSUMERS) and waits for the others
    # (bit 8, compile-time Q buffer indices with three consumers, passed in device run 20 and is
    # now the only form)
    # --- timing diagnostic (session 10), off, never in the table: QPF_DIAG bit 16, persistent
    # rows with two consumer warpgroups, or three with the dynamic scheduler
    # (_check_switch_support); forward() runs it only with _diagnostic=True (it overwrites lse) ---
    diag_stamps: bool = False       # SM clock stamps of each tile's phases over the tile's first
                                    # 32 lse entries (scripts/hopper_tile_phases.py reads them)
    mask_limit: bool = False        # session 12 candidate, off (with softmax_fma; kernel
                                    # SOFTMAX_FMA == 2): the masked blocks' test in FA3's form,
                                    # one compare per score against a per-row limit
    # --- session 11 candidate, off: QPF_DIAG bit 32 (dynamic scheduler, two consumer
    # warpgroups, overlap; _check_switch_support) ---
    kv_reverse: bool = False        # key blocks from the last to the first (FA3's order): the
                                    # masked blocks (causal: the diagonal) come first, block 0's
                                    # non-overlapped softmax takes the mask, and the steady loop
                                    # has the unmasked softmax only
    asm_waits: bool = False         # session 12 candidate, off: the consumers' K / V ready waits
                                    # as inline PTX on the barriers' shared-memory addresses
                                    # (_asm_wait; offsets from a first compile, checked in the
                                    # second), which Triton's membar pass does not fence with a
                                    # partition-wide bar.sync per key block
    kv_release_nb: bool = False     # session 11 candidate, off (QPF_DIAG bit 64; same rows as
                                    # kv_reverse): the consumers release K / V stages with a
                                    # named-barrier bar.arrive, which Gluon's mbarrier.arrive
                                    # precedes with a warpgroup bar.sync (two per key block
                                    # in the loop); the producer waits with bar.sync
    q_release_early: bool = False   # session 13 (QPF_DIAG bit 128), in the hdim 64 causal
                                    # row: each consumer warpgroup releases Q right after its
                                    # last QK^T (the overlapped loop: before that block's
                                    # softmax) instead of after its last P V, so the next tile's
                                    # Q loads under the last warpgroup's last softmax and P V.
                                    # Needs O in its own buffer (o_buffer). Run 64's stamps: at
                                    # hdim 64 causal 1k warpgroup 0 waited ~2300 cycles per
                                    # tile for the next Q
    q_per_warpgroup: bool = False   # session 13 candidate, off (QPF_DIAG bit 256; the three-
                                    # consumer dynamic rows with o_buffer): each consumer
                                    # warpgroup has its own Q box, work item, q_bar and q_empty
                                    # (_producer_dynamic_qw), so the first to finish a tile
                                    # starts the next without waiting for the others' last
                                    # QK^T (run 66's stamps: ~1600 cycles per tile left at hdim
                                    # 64 causal 1k after q_release_early)
    cross_tile: int = 0             # session 26 candidate, off (QPF_DIAG bits 512 / 1024; the
                                    # dynamic scheduler's two-consumer rows with the overlap,
                                    # o_buffer and q_release_early): 1 the next tile's work item
                                    # and first QK^T issued before this tile's O store
                                    # (_consumer_xt); 2 the same with two Q buffers, the next
                                    # tile's Q loaded a tile ahead (v10's producer)
    early_fetch: int = 0            # session 27 candidate, off (the dynamic scheduler's one-Q-
                                    # buffer producer, _producer_dynamic). 1 (QPF_DIAG bit 2048):
                                    # the next tile's id is fetched (Triton's atomic_add) at the
                                    # start of this tile instead of after its last K/V load. Run
                                    # 107's producer stamps: that atomic waits for its value
                                    # (~2600-3000 cycles) wherever it is, so 1 only moves the wait
                                    # before the Q load. 2 (bit 4096): the fetch after the
                                    # tile's first num_stages K/V loads, where the producer
                                    # would wait for block 0's stage anyway (_producer_mid_fetch;
                                    # an atom.global in inline PTX whose value is read later is
                                    # no way out: ptxas aggregates it over the warp and
                                    # broadcasts the value at once, so it waits there too)
    q_l2_prefetch: bool = False     # session 27 candidate, off (QPF_DIAG bit 8192; with
                                    # early_fetch 2): once the next tile's id is fetched, the
                                    # producer prefetches that tile's Q rows into L2
                                    # (prefetch.global.L2 per 128-byte line), so its TMA load
                                    # reads L2, not HBM. Run 108's stamps: 3500-4500 cycles from
                                    # a free Q buffer to warpgroup 0 seeing Q (hdim 256 causal 1k)
    diag_half: bool = False         # session 27 candidate, off (QPF_DIAG bit 16384; the causal
                                    # two-consumer overlapped rows with 128 x 128 tiles):
                                    # consumer warpgroup 0 computes the tile's diagonal key block
                                    # on its first 64 keys only (an N = 64 QK^T and a K = 64 P V,
                                    # _half_last_block) when its rows see none of the rest: a
                                    # quarter of the diagonal block's products per tile (5.5% of
                                    # the MMA work at 1k, 2.9% at 2k; hopper_log.md v5 item 3)
    bottom_tiles: bool = False      # session 28 candidate, off (QPF_DIAG bit 32768; the dynamic
                                    # scheduler's causal rows): m-tiles aligned to seqlen_q's end,
                                    # m_start = seqlen_q - (t + 1) * block_m, so that a ragged
                                    # tile is the first (rows below 0 zero-filled by the copy
                                    # engine, never stored), whose few keys make its idle
                                    # warpgroups cheap, not the last with every key. hdim 64's
                                    # 192-row tiles at seqlen 1k: the last m-tile's one busy
                                    # warpgroup of three took 23300 cycles (run 113's stamps)
    ragged_split: bool = False      # session 31 candidate, off, not adopted (runs 127-128:
                                    # the split tile was no shorter at 1k; QPF_DIAG bit 65536; with
                                    # q_per_warpgroup): in an m-tile whose rows all belong to
                                    # consumer warpgroup 0 (the 192-row tiling's last at seqlen
                                    # 1024: 64 rows) the three warpgroups take the same Q rows
                                    # and split the key blocks (block j to warpgroup j % 3);
                                    # warpgroups 1-2 hand m, l and fp32 O over in shared memory
                                    # and warpgroup 0 merges them (_consumer_ragged). Run 109's
                                    # stamps: that tile's one busy warpgroup took 17.5k cycles
                                    # against 22.1k for a full tile, 14% of each SM's tile cycles
    # --- session 25 candidates, off (with softmax_fma; kernel SOFTMAX_FMA bits 2-5) ---
    row_tree: int = 0               # 1: each row's max over a block as a tree inside the thread
                                    # (hopper_fp8_fwd._row_tree), not the reduction's chain
                                    # of 31 dependent FMNMX; 2: the row sum too (FADD). Kernel
                                    # SOFTMAX_FMA bits 4-5; with softmax_fma. The sum's tree
                                    # spills 8 B at hdim 64 causal and 4 B at hdim 256 causal
                                    # (CPU), the max's alone nothing
    exp_poly: int = 0               # 0, 2, 4 or 8: one score in exp_poly takes its exp2 on the
                                    # FMA pipe (a degree-3 polynomial, hopper_fp8_fwd's
                                    # _exp2_mixed) instead of MUFU.EX2. At hdim 64 each
                                    # consumer warp's 64 exp2 per key block hold its sub-
                                    # partition's MUFU pipe ~512 cycles (4 lanes per clock),
                                    # as long as its QK^T and P V take on the tensor cores
    # --- session 37 candidate, off (with softmax_fma; kernel SOFTMAX_FMA bit 6) ---
    lazy_rescale: bool = False      # FA4's rescale threshold: a row moves its running max only
                                    # when its block max exceeds it by more than 2^8, and the
                                    # one FMUL per O register per key block runs only when some
                                    # row of the warpgroup moved (_softmax_update_lazy). The
                                    # overlapped loops of _consumer only (two consumers). Run
                                    # 131 (first form, one max per warpgroup): -4..-9%
    # --- session 38 candidate, off (with softmax_fma; kernel SOFTMAX_FMA bit 7) ---
    q_regs: bool = False            # each consumer warpgroup loads its Q rows from shared
                                    # memory into registers once per tile, and its QK^T takes
                                    # A from registers (as P V takes P): Q is not re-read from
                                    # shared memory for every key block

    @property
    def num_warps(self) -> int:
        # warps of the default partition (consumer warpgroup 0; with num_consumers 1 both
        # consumer warpgroups), or of the whole non-specialised kernel (two warpgroups)
        return 4 if self.warp_specialize and self.num_consumers != 1 else 8

    @property
    def launch_maxnreg(self):
        return self.maxnreg if self.warp_specialize else None


# The v3 rows, the base that VARIANTS (below) override and that the ablations are relative to.
# Chosen from the shared-memory / register budget, then measured (benchmarks/hopper_log.md):
# hdim 64/128: 128x128 tiles (FA3 uses 128 x 128..176); hdim 256: BLOCK_N 64 keeps the fp32
# accumulator (128 regs/thread) plus S and P under 240 registers and shared memory at 192 KB.
# H200 run 2, hdim 128, s=8192: overlap 599 TFLOP/s (causal 549) vs no overlap 534 (499);
# pingpong on top of overlap gave nothing (599 / 532), 3 stages nothing either -> overlap on,
# pingpong off, 2 stages at hdim 128.
BASE_CONFIGS = {
    64: FwdConfig(block_m=128, block_n=128, num_stages=3),
    128: FwdConfig(block_m=128, block_n=128, num_stages=2),
    256: FwdConfig(block_m=128, block_n=64, num_stages=2),
}


def _base(head_dim: int, **overrides) -> FwdConfig:
    return replace(BASE_CONFIGS[head_dim], **overrides)


# The shipped table, one row per (head dim, causal). Each row names the measurement that chose
# it: H200 device runs 5 and 7 (2026-12-02, benchmarks/hopper_log.md "v4 results" / "v5 results",
# scripts/hopper_dev2.py; TFLOP/s, each variant beside the previous row in the same process, median
# of 2 rounds).
CONFIGS = {
    # 3 consumer warpgroups x 64 rows, BLOCK_N 128 without overlap (FA3's 192-row tile):
    # s=2048 441 vs v3 347 (+27%), s=8192 516 vs 405 (+27%); best of 6 variants at both (run 5).
    # Made persistent (static order) with the TMA store (variant d64_3wg_n128_ptma), device run 11:
    # s=1k/2k/8k 381/444/495 vs the previous row 353/429/504 (+7.8/+3.4/-1.7%); the dynamic
    # order won 1k (389) but lost 5% at 8k, 3 stages gave nothing.
    # Split loops on top (variant split, v8), device run 13: s=1k/2k 381/450 vs 375/442 (+1.7/+1.6%).
    # The next tile's Q loaded during this tile, on the dynamic scheduler (variant qpf, v10),
    # device run 19: s=512/1k/2k/4k/8k/16k 385/418/500/506/503/505 vs 315/379/449/467/487/495
    # (+22/+10/+11/+8/+3/+2%).
    # Per-warpgroup Q boxes, work items and barriers with 3 K / V stages (q_per_warpgroup,
    # variant qw3, session 14; Q released after each warpgroup's last QK^T, O in its own boxes,
    # no Q prefetch): device runs 71-72 (stamps; rotated rounds, 5): each SM's busy cycles
    # -4.5 / -3.2 / -4.4 / -5.0 / -5.8% at 512 / 1k / 4k / 8k / 16k against the row before
    # (variant no_qw). Then the empty warpgroups of the last m-tile skip their blocks (variant
    # skip_empty: with per-warpgroup Q they move on to the next tile), device run 74: busy
    # cycles -5.1 / -4.2 / -1.9%, time +4.8 / +8.2 / +0.2% at 512 / 1k / 2k; the row before it
    # (runs 72-73) is variant qw3.
    (64, False): _base(64, block_m=192, block_n=128, num_stages=3, num_consumers=3,
                       consumer_regs=160, maxnreg=128, softmax_fma=True, overlap=False,
                       persistent=True, tma_store=True, split_loops=True, q_prefetch=False,
                       o_buffer=True, scheduler=1, q_per_warpgroup=True, q_release_early=True,
                       skip_empty_wg=True),
    # 3 warpgroups x 64 rows, BLOCK_N 128, dynamic longest-first persistent scheduler, TMA store,
    # per-warpgroup causal bounds (variant d64_3wg_n128_pdyn_wgb), device run 7: causal
    # s=1k/2k/4k/8k 259/362/415/463 vs the previous row (v3+FFMA) 213/295/363/409
    # (+21/+23/+14/+13%); best of 7 at 2k-8k (pdyn_fma wins 1k: 276).
    # Split loops on top (variant split, v8), device run 13: s=2k 371 vs 362 (+2.5%).
    # Empty warpgroups of the last m-tile skip their work (variant skip_empty, v9), device run 15:
    # s=1k/2k 279/381 vs 264/367 (+5.9/+3.9%); the old row is variant keep_empty.
    # O in its own shared-memory boxes (variant o_buf3, session 11), device run 48 (rotated
    # rounds, each timing after 300 ms of its own load, 5 rounds): s=1k/2k/4k 282/364/414 vs
    # 276/356/410 (+2.2/+2.1/+1.0%). The stamps: the gap between tiles falls only 2692 -> 2286
    # cycles; most of it is warpgroup 0 waiting for warpgroups 1-2's diagonal blocks (wg_bounds).
    # The previous row is variant no_o_buf3.
    # The masked blocks' test as one compare per score against a per-row limit (mask_limit,
    # variant mlim, session 12), device run 58 (stamps: each SM's busy cycles; rotated rounds,
    # 5): hdim 64 / 128 / 256 causal cycles -3.4..-1.9 / -1.2..-0.9 / -1.6..-1.4% at 1k-4k.
    # The previous row is variant no_mlim.
    # Q released after each warpgroup's last QK^T instead of after its last P V
    # (q_release_early, variant qrel, session 13): the stamps of device run 64 showed warpgroup
    # 0 waiting ~2300 cycles per tile for the next Q, which loaded only after warpgroup 2's last
    # P V. Device run 66 (stamps: each SM's busy cycles; rotated rounds, 5): causal 1k / 2k / 4k
    # cycles -5.4 / -5.6 / -2.9%, time +2.9 / +5.2 / -0.7% (its SM clock 2% lower). The previous
    # row is variant no_qrel.
    # m-tiles aligned to seqlen_q's end (bottom_tiles, variant bt, session 28): the ragged
    # m-tile of the 192-row tiling (1024 = 5 x 192 + 64) becomes the first, with one key block,
    # instead of the last, where one busy warpgroup of three took all 8 (23300 cycles, the
    # longest tile; run 113's stamps). Device run 115 (H100; stamps, rotated rounds, 5):
    # causal 512 / 1k / 2k / 4k time +4.6 / +10.4 / -1.1 / -2.6%, each SM's busy cycles (mean
    # span) -5.0 / -8.2 / -0.2 / -0.8% (the 4k rounds at a 3.7% lower clock); 1k 0.96x cuDNN
    # against the row's 0.87x in that process. The previous row is variant no_bt.
    # L2 sections of 16 MB of K and V instead of FA3's 32 (l2_section_mb, variant l2_16, session
    # 29; the kernel is the same, only the tile order changes): at 32 MB each head's m-tiles were
    # spread over a section of 64 heads (hdim 128 1k) and the causal rows read 1.3-1.6x the
    # inputs' bytes from DRAM (run 120, Nsight). Device run 121 (H100; Nsight, rotated rounds, 5):
    # DRAM read at causal 1k hdim 128 / 256 / 64 312 -> 208, 268 -> 205, 311 -> 204 MB; time
    # +6.5 / +3.2 / +2.2% at 1k, energy per call -3.8 / -3.2 / -0.8%; run 122: 2k +5.0 / +4.0 /
    # +0.5%, hdim 128 4k +0.3%. (l2_8: 201-202 MB, +5.6 / -0.6 / -1.8% at 1k.) The previous
    # rows are variant l2_32.
    (64, True): _base(64, block_m=192, block_n=128, num_stages=2, num_consumers=3,
                      consumer_regs=160, maxnreg=128, softmax_fma=True, overlap=False,
                      persistent=True, scheduler=1, tma_store=True, wg_bounds=True,
                      split_loops=True, skip_empty_wg=True, o_buffer=True, mask_limit=True,
                      q_release_early=True, bottom_tiles=True, l2_section_mb=16),
    # persistent + TMA-store epilogue + FFMA softmax: s=2048 615 vs 538 (+14%), s=8192 707 vs
    # 631 (+12%) (run 5). Then O in its own shared-memory tile (o_buffer, variant
    # persistent_tmao_fma), device run 11: s=1k/2k/8k 598/618/641 vs 560/598/638 (+6.8/+3.3/+0.3%).
    # Pingpong between the two consumer warpgroups, FA3's placement with named barriers (variant
    # pp2), device run 132 (H100, rotated rounds against the previous row): s=1k/2k/4k/8k/16k
    # +0.2/+2.4/-0.8/+0.4/0.0%; run 129 (b4 s8448 h16): +2.2%; run 134 (H100, 7 rounds against
    # the previous row): 1k -0.3%, 2k +1.3%. Bench run 135: 2k 1.05x cuDNN (run 130: 0.984x).
    # The previous row is variant no_pp.
    (128, False): _base(128, persistent=True, tma_store=True, softmax_fma=True, o_buffer=True,
                        pingpong=True, pingpong_mode=2),
    # dynamic longest-first persistent scheduler (FA3's, over L2 sections) + TMA store + FFMA
    # (variant pdyn_tma_fma), device run 7: causal s=1k/2k/4k/8k 384/481/551/603 vs the previous
    # row (v3+FFMA) 329/443/530/575 (+17/+9/+4/+5%); one L2 section instead: 335/412/496/591.
    # Then O in its own shared-memory tile (o_buffer, variant pdyn_tmao_fma), device run 11:
    # s=1k/2k/4k 417/511/569 vs 384/482/557 (+8.7/+6.1/+2.2%); 8k 615 vs 649, but the old row's
    # two rounds there differed by 18.9% (the new one's by 1.8%; the old row made 601 in run 10).
    # mask_limit as in the (64, True) row (device run 58); the previous row is variant no_mlim.
    # Q released after each warpgroup's last QK^T (q_release_early, variant qrel), device run 79:
    # tile cycles -2.2 / -0.4 / 0% at 1k / 2k / 4k; 1k 1.02x cuDNN against the row's 0.99x in
    # that process. The previous row is variant no_qrel. 16 MB L2 sections (l2_16) as in the
    # (64, True) row's comment (runs 120-122).
    (128, True): _base(128, persistent=True, scheduler=1, tma_store=True, softmax_fma=True,
                       o_buffer=True, mask_limit=True, q_release_early=True, l2_section_mb=16),
    # persistent + TMA store + FFMA: s=512 488 vs 398 (+23%), s=2048 645 vs 595 (+8.5%),
    # s=8192 704 vs 680 (+3.6%).
    # Split loops on top (variant split, v8), device run 13: s=2k/8k 678/712 vs 675/672
    # (+0.4/+5.9%).
    # One half-tile O buffer that the two warpgroups take in turn (o_half, session 10), so the
    # next tile's Q loads after the last QK^T instead of after O's store (the stamps: each tile
    # waited 2000-3300 cycles for its Q, 150 with o_half). Rotated rounds (300 ms of own load per
    # timing), device runs 47-48: s=1k/2k/4k/8k/16k 562/640/663/684/691 vs 543/611/637/664/674
    # (+3.4/+4.8/+4.1/+3.0/+2.5%), the SM clock no lower. (Causal: +1.6/+0.8% at 1k/2k but -4.7%
    # at 8k in run 47, -5.7% in run 46: not there.) The previous row is variant no_o_half.
    (256, False): _base(256, persistent=True, tma_store=True, softmax_fma=True, split_loops=True,
                        o_half=True),
    # dynamic longest-first persistent scheduler + FFMA (variant pdyn_fma), device run 7: causal
    # s=1k/2k/4k/8k 396/527/610/662 vs the previous row (v3+FFMA) 367/471/546/603
    # (+8/+12/+12/+10%); with wg_bounds 411/525/603/637 (wins only at 1k). TMA store spills 4 B
    # here (hopper_log.md v5), so the epilogue stayed on pointer stores. v8, device run 13: split
    # loops + TMA store (variant split_tma; the 4 B spill removed by passing batch * heads as a
    # kernel argument) s=2k/4k 575/644 vs 524/611 (+9.9/+5.4%); split alone +1.9/+4.0%.
    # mask_limit as in the (64, True) row (device run 58); the previous row is variant no_mlim.
    # 16 MB L2 sections (l2_16) as in the (64, True) row's comment (runs 120-122).
    (256, True): _base(256, persistent=True, scheduler=1, softmax_fma=True, split_loops=True,
                       tma_store=True, mask_limit=True, l2_section_mb=16),
}


# hdim 64 is where the kernel is furthest behind cuDNN (0.88x at s=8192); FA3 uses 192-row tiles
# there (3 consumer warpgroups). With 2 consumer warpgroups the larger tile is BLOCK_N 256 (the
# gl.arange shapes must be powers of two, so 192 is out): S of 64 x 256 fp32 per warpgroup, half
# the K/V blocks (and per-block overheads) of BLOCK_N 128. Candidate, off: VARIANTS "d64_bn256".
# Named variants (config overrides) for the ablation and the new switches; used by
# scripts/hopper_dev2.py and `python -m fusedattn.inspect --variants`. "dims": the head dims a
# variant is meant for (None: all). Paper ablation (FA3 tab. 2: batch 4, seqlen 8448, 16 heads,
# hdim 128, non-causal): full design = WS + overlap + pingpong; without WS; without overlap;
# without pingpong (= the shipped default).
# Pingpong off: the hdim 128 non-causal row before session 37 (variant no_pp). Variants measured
# on that row which do not go with pingpong take it as their "non_causal" overrides.
_NO_PP = {"pingpong": False, "pingpong_mode": 0}

VARIANTS = {
    "default": ({}, None),                          # the shipped table row (variant_config)
    "v3": ({}, None),                               # BASE: WS + overlap, no pingpong (runs 2-4)
    "full": ({"pingpong": True}, None),                      # + pingpong as verified (mode 0)
    "full_pp_fa3": ({"pingpong": True, "pingpong_mode": 1}, None),
    "full_pp_named": ({"pingpong": True, "pingpong_mode": 2}, None),
    "no_ws": ({"warp_specialize": False}, None),             # overlap, no producer / setmaxnreg
    "no_ws_no_overlap": ({"warp_specialize": False, "overlap": False}, None),
    "no_overlap": ({"overlap": False, "pingpong": True}, None),  # WS + pingpong (mode 0)
    "no_overlap_pp_fa3": ({"overlap": False, "pingpong": True, "pingpong_mode": 1}, None),
    "no_overlap_pp_named": ({"overlap": False, "pingpong": True, "pingpong_mode": 2}, None),
    "persistent": ({"persistent": True}, None),
    "tma_store": ({"tma_store": True}, None),
    "persistent_tma": ({"persistent": True, "tma_store": True}, None),
    "persistent_tma_pp_named": ({"persistent": True, "tma_store": True, "pingpong": True,
                                 "pingpong_mode": 2}, None),
    # hdim 64 candidates: BLOCK_N 256 spills with overlap (96 B at 240 registers), so without it
    "d64_bn256": ({"block_n": 256, "num_stages": 2, "overlap": False}, (64,)),
    "d64_bn256_pp_named": ({"block_n": 256, "num_stages": 2, "overlap": False, "pingpong": True,
                            "pingpong_mode": 2}, (64,)),
    # v4 candidates (hopper_log.md v4)
    "fma": ({"softmax_fma": True}, None),
    "persistent_fma": ({"persistent": True, "softmax_fma": True}, None),
    "persistent_tma_fma": ({"persistent": True, "tma_store": True, "softmax_fma": True}, None),
    # hdim 64: FA3's 192-row tile, three consumer warpgroups of 64 rows; 16 warps = 512 threads,
    # so the entry cap is 128 registers: workers setmaxnreg 160, producer 24, the default
    # partition (consumer 0) the rest, 168. BLOCK_N 128 with overlap spills 16 B at 160
    # registers, so: BLOCK_N 64 with overlap, or BLOCK_N 128 without.
    "d64_3wg": ({"block_m": 192, "block_n": 64, "num_stages": 3, "num_consumers": 3,
                 "consumer_regs": 160, "maxnreg": 128, "softmax_fma": True}, (64,)),
    "d64_3wg_persistent": ({"block_m": 192, "block_n": 64, "num_stages": 3, "num_consumers": 3,
                            "consumer_regs": 160, "maxnreg": 128, "softmax_fma": True,
                            "persistent": True}, (64,)),
    "d64_3wg_n128": ({"block_m": 192, "block_n": 128, "num_stages": 2, "num_consumers": 3,
                      "consumer_regs": 160, "maxnreg": 128, "softmax_fma": True,
                      "overlap": False}, (64,)),
    # v5 candidates (hopper_log.md v5), for causal: persistent with FA3's dynamic longest-first
    # scheduler over L2 sections (scheduler 1); "_lpt" = one section (pure longest-first: tells
    # the L2 sectioning from the load balance)
    "pdyn_fma": ({"persistent": True, "scheduler": 1, "softmax_fma": True}, None),
    "pdyn_tma_fma": ({"persistent": True, "scheduler": 1, "tma_store": True,
                      "softmax_fma": True}, None),
    "pdyn_lpt_tma_fma": ({"persistent": True, "scheduler": 1, "l2_section_mb": 0,
                          "tma_store": True, "softmax_fma": True}, None),
    "d64_3wg_n128_pdyn": ({"block_m": 192, "block_n": 128, "num_stages": 2, "num_consumers": 3,
                           "consumer_regs": 160, "maxnreg": 128, "softmax_fma": True,
                           "overlap": False, "persistent": True, "scheduler": 1,
                           "tma_store": True}, (64,)),
    # per-warpgroup causal bounds (wg_bounds): pays where a warpgroup's rows end a K/V block
    # before the tile's last row does: hdim 256 (BLOCK_N 64) and the 3-warpgroup hdim-64 tile
    "wgb_fma": ({"softmax_fma": True, "wg_bounds": True}, (64, 256)),
    "pdyn_wgb_fma": ({"persistent": True, "scheduler": 1, "softmax_fma": True,
                      "wg_bounds": True}, (256,)),
    "d64_3wg_n128_wgb": ({"block_m": 192, "block_n": 128, "num_stages": 2, "num_consumers": 3,
                          "consumer_regs": 160, "maxnreg": 128, "softmax_fma": True,
                          "overlap": False, "wg_bounds": True}, (64,)),
    # v6 candidates (hopper_log.md v6): O in its own shared-memory tile, so that the next
    # tile's Q load is not held back by this tile's TMA store (hdim 128: 160 -> 192 KB)
    "pdyn_tmao_fma": ({"persistent": True, "scheduler": 1, "tma_store": True, "o_buffer": True,
                       "softmax_fma": True}, (128,)),
    "persistent_tmao_fma": ({"persistent": True, "tma_store": True, "o_buffer": True,
                             "softmax_fma": True}, (128,)),
    "d64_3wg_n128_pdyn_wgb": ({"block_m": 192, "block_n": 128, "num_stages": 2,
                               "num_consumers": 3, "consumer_regs": 160, "maxnreg": 128,
                               "softmax_fma": True, "overlap": False, "persistent": True,
                               "scheduler": 1, "tma_store": True, "wg_bounds": True}, (64,)),
    # v7 candidates (hopper_log.md v7), hdim 64 non-causal, where cuDNN leads at 1k-2k: the
    # shipped 3-warpgroup row made persistent (static and dynamic order) with the TMA store
    "d64_3wg_n128_ptma": ({"block_m": 192, "block_n": 128, "num_stages": 2, "num_consumers": 3,
                           "consumer_regs": 160, "maxnreg": 128, "softmax_fma": True,
                           "overlap": False, "persistent": True, "tma_store": True}, (64,)),
    "d64_3wg_n128_ptma_s3": ({"block_m": 192, "block_n": 128, "num_stages": 3,
                              "num_consumers": 3, "consumer_regs": 160, "maxnreg": 128,
                              "softmax_fma": True, "overlap": False, "persistent": True,
                              "tma_store": True}, (64,)),
    "d64_3wg_n128_s3": ({"block_m": 192, "block_n": 128, "num_stages": 3, "num_consumers": 3,
                         "consumer_regs": 160, "maxnreg": 128, "softmax_fma": True,
                         "overlap": False}, (64,)),
    # v8 (hopper_log.md v8): the shipped row with its unmasked and masked K/V blocks in two
    # loops (in ON_TABLE: applied on top of the table's row, not of BASE)
    "split": ({"split_loops": True}, None),
    # hdim 256 causal (pointer-store epilogue: run 12's profile shows LSU-throttle stalls there)
    "split_tma": ({"split_loops": True, "tma_store": True}, (256,)),
    # v9 (hopper_log.md v9): hdim 64's 192-row tiles: empty warpgroups of the last m-tile skip
    # (adopted for hdim 64 causal after device run 15; non-causal: flat there, not adopted)
    "skip_empty": ({"skip_empty_wg": True}, (64,)),
    # hdim 64 causal's row before run 15
    "keep_empty": ({"bottom_tiles": False, "l2_section_mb": 32, "skip_empty_wg": False,
                    "o_buffer": False, "mask_limit": False, "q_release_early": False}, (64,)),
    # the dynamic scheduler's L2 section (FA3's 32 MB) halved and doubled, on the causal rows
    # (since run 122 the causal rows use 16 MB; the earlier rows' variants set 32)
    "l2_16": ({"l2_section_mb": 16}, None),
    "l2_64": ({"l2_section_mb": 64}, None),
    # session 29: run 120's Nsight counts found the causal rows reading 1.3-1.6x the inputs' bytes
    # from DRAM at 1k (hdim 128: 314 MB, FA3 226, cuDNN 201; non-causal 201), FA3's TMA loads
    # carrying an L2 cache hint and ours none: smaller sections keep each section's K / V in L2
    "l2_8": ({"l2_section_mb": 8}, None),
    "l2_32": ({"l2_section_mb": 32}, None),   # the causal rows before run 122 (FA3's 32 MB)
    # v10 (hopper_log.md v10): hdim 128 causal: two Q buffers instead of O's own tile, the next
    # tile's Q loaded during this tile (run 12's profile: consumers wait at each tile's start)
    # (non-causal: on the dynamic scheduler, which q_prefetch needs). Device run 15: hdim 128
    # lost 1-11% in all six cells; hdim 64 non-causal +16% at 1k, flat at 2k, but hdim 64 causal
    # left outputs unwritten (smoke check failed, cause not found yet): not adopted.
    # Device run 19: hdim 64 non-causal +2..22% at every seqlen (512-16k): adopted for that row.
    # Device run 20: the grid failed with it at small shapes (one tile per program) and so did
    # the causal diagnosis; with three consumers the Q buffer indices are compile-time constants
    # since. Device run 21 (fixed form): non-causal +17.5/+9.4/+1.8/-0.5/+3.8% at 512/1k/2k/4k/16k
    # over no_qpf, grid and diagnosis passed causal and not; causal -5..-8% at 1k-8k: not there.
    # (since session 14 with q_per_warpgroup off and 2 stages: the rows of their measurements)
    "qpf": ({"q_prefetch": True, "o_buffer": False, "scheduler": 1, "q_release_early": False,
             "q_per_warpgroup": False, "num_stages": 2, "non_causal": {"skip_empty_wg": False}},
            (128, 64)),
    # hdim 64 non-causal's row before run 19 (static persistent order, one Q buffer)
    "no_qpf": ({"q_prefetch": False, "scheduler": 0, "q_release_early": False,
                "q_per_warpgroup": False, "num_stages": 2, "o_buffer": False,
                "non_causal": {"skip_empty_wg": False}}, (64,)),
    # session 10: pingpong on the shipped (persistent) rows at hdim 128 / 256. FA3 orders its two
    # consumer warpgroups' GEMMs (scheduler barriers) together with the intra-warpgroup overlap
    # at hdim 128; our pingpong was measured flat only on the non-persistent v3 rows (runs 2-5).
    # With tiles of 16 key blocks (seqlen 2k) a warpgroup's epilogue and first softmax could run
    # under the other's GEMMs. pp2: FA3's placement with named barriers; pp1: with mbarriers
    # (o_half off: pingpong is not implemented with it; the hdim 256 non-causal row has it since
    # session 11, these variants were measured without it)
    "pp2": ({"pingpong": True, "pingpong_mode": 2, "o_half": False, "q_release_early": False},
            (128, 256)),
    # session 37: FA4's lazy O rescale on the shipped rows (lazy_rescale); at hdim 128 the O
    # rescale is 64 of the ~471 instructions per key block (sass_loops), and the 1k / 2k cells
    # run at the power cap, where instructions cost energy and energy sets the time
    "lazy": ({"lazy_rescale": True}, (128, 256)),
    # session 38: hdim 256 causal with both: o_half (run 112: +2.3 / +0.1 / +5.0% at 1k / 2k / 4k)
    # and lazy (run 133: +4.3 / +3.6 / +1.5%) each gained at short causal seqlens on their own.
    # Spills 12 B (Q's wgmma descriptors, reloaded before each QK^T), as lazy does at hdim 256
    # causal (60 B non-causal): no compile case until it earns one
    "ohlazy": ({"o_half": True, "lazy_rescale": True}, (256,)),
    # session 38: lazy on the hdim 256 non-causal row spills 60 B (Q's wgmma descriptors, reloaded
    # before every QK^T) with split_loops and o_half together; without split_loops it spills
    # nothing (runs 133 / 136 timed the spilling form)
    "lazy_ns": ({"lazy_rescale": True, "split_loops": False}, (256,)),
    # session 38: Q in registers (q_regs) on the shipped rows
    "qreg": ({"q_regs": True}, (64, 128)),
    # session 37: the hdim 128 non-causal row before pingpong (pp2) went into it
    "no_pp": (_NO_PP, (128,)),
    "pp1": ({"pingpong": True, "pingpong_mode": 1, "o_half": False, "q_release_early": False},
            (128, 256)),
    # session 10: per-warpgroup causal bounds on the shipped hdim 256 causal row (64-key blocks:
    # warpgroup 0's 64 rows skip the tile's last key block). Run 7 measured it on an older row
    # (no split loops, no TMA store): +4% at causal 1k, -1..-4% from 2k
    "wgb": ({"wg_bounds": True}, (256,)),
    # session 10: hdim 256's rows put O through the Q tile (TMA store), so the next tile's Q (and
    # behind it its K / V) loads only once O has left: device run 42's stamps show each hdim 256
    # tile waiting 2400 (non-causal) to 3700 (causal) cycles for its Q, 1.1-1.7 key blocks. With
    # one half-tile O buffer (32 KB; Q + the K / V ring use 192 of 227 KB) the two consumer
    # warpgroups store O in turn and Q is released after the last QK^T
    "o_half": ({"o_half": True}, (256,)),
    # session 11: hdim 64 at 1k is where cuDNN leads most (causal 0.85x, non-causal 0.94x, run
    # 45). Run 7 measured a two-warpgroup 128-row tile (pdyn_fma) ahead of the three-warpgroup
    # row at causal 1k (276 vs 259); since then hdim 128 gained +7..9% at 1k from the TMA store
    # and O's own tile (runs 7, 11). This is hdim 128's shipped causal row at hdim 64: 128 x 128
    # tiles, two consumer warpgroups with the overlap, dynamic scheduler, TMA store through O's
    # own tile, FFMA softmax, split loops (16 + 16 + 3 x 32 KB of shared memory)
    "d64_pdyn_tmao": ({"persistent": True, "scheduler": 1, "tma_store": True, "o_buffer": True,
                       "softmax_fma": True, "split_loops": True}, (64,)),
    # session 13: the same with hdim 128's causal mask form (mask_limit, run 58); cuDNN's hdim 64
    # kernel is this shape (run 61: two consumer warpgroups of 64 rows, 128-row tiles, persistent)
    "d64_2wg_ml": ({"persistent": True, "scheduler": 1, "tma_store": True, "o_buffer": True,
                    "softmax_fma": True, "split_loops": True, "mask_limit": True}, (64,)),
    # session 11: the hdim 64 rows (three warpgroups) with O in its own shared-memory boxes
    # (o_buffer; Q in boxes 0..2 of 8, O in 4..6), so Q is released before the epilogue and the
    # next tile's Q loads under it. Device run 47's stamps, causal row (O through Q's boxes):
    # 2559 cycles between a tile's end and the next tile's entry at 1k (2784 at 2k), 14% of a
    # tile; the d64_pdyn_tmao tiles, with O's own tile, 385. On the non-causal row it replaces
    # the Q prefetch (gap 295 there already)
    "o_buf3": ({"o_buffer": True, "q_prefetch": False, "q_per_warpgroup": False,
                "num_stages": 2, "q_release_early": False,
                "non_causal": {"skip_empty_wg": False}}, (64,)),
    # the rows before session 11's adoptions (device run 48): hdim 256 non-causal without o_half,
    # hdim 64 causal without o_buffer
    "no_o_half": ({"o_half": False}, (256,)),
    "no_o_buf3": ({"bottom_tiles": False, "l2_section_mb": 32, "o_buffer": False,
                   "mask_limit": False, "q_release_early": False}, (64,)),
    # session 11: FA3's key-block order on the hdim 128 causal row (device run 51's stamps: the
    # causal loop costs 2788 cycles per block at 2k against the non-causal loop's 2441; FA3 leads
    # by 4-14% at 1k-4k). The diagonal block first, where block 0's softmax waits for its QK^T
    # anyway; the steady loop then runs the unmasked softmax only, with no run-time mask choice
    # (hdim 256 causal: its row's split loops off, which kv_reverse replaces)
    # (rev, nbr_rev and the joint forms: q_release_early off, which they do not support, since it
    # joined hdim 128's causal row in session 17)
    "rev": ({"kv_reverse": True, "split_loops": False, "q_release_early": False}, (128, 256)),
    # session 11: a third K/V stage, so that the producer runs one more block ahead and the next
    # tile's first blocks load earlier (run 52's stamps: block 0 at hdim 128 causal takes ~2500
    # cycles, about one steady block, for half a block's GEMMs). hdim 128 causal: O back through
    # Q's tile (Q 32 KB + 3 x 64 KB = 224 KB; O's own tile no longer fits); hdim 64 (three
    # warpgroups): Q + O boxes 64 KB + 3 x 32 KB
    "s3_128": ({"num_stages": 3, "o_buffer": False, "q_release_early": False}, (128,)),
    "s3_64": ({"num_stages": 3}, (64,)),
    # session 13: Q released after each warpgroup's last QK^T (q_release_early) on the rows
    # whose O has its own buffer (hdim 64: o_buf3's boxes; non-causal: o_buf3's row, the Q
    # prefetch off; hdim 128: before the last softmax instead of after it). Device run 67: hdim
    # 128 causal 1k -3.1% cycles, flat from 2k, but 4 B spilled; since session 14 the rows go
    # through an opaque move per tile there (_consumer) and it compiles without spills (not yet
    # timed in that form)
    "qrel": ({"q_release_early": True, "o_buffer": True, "q_prefetch": False,
              "q_per_warpgroup": False, "num_stages": 2,
              "non_causal": {"skip_empty_wg": False, **_NO_PP}},
             (64, 128)),
    # hdim 64 causal's row before q_release_early was adopted (device run 66); hdim 128 causal's
    # (session 17, after device run 79)
    "no_qrel": ({"q_release_early": False, "bottom_tiles": False, "l2_section_mb": 32},
                (64, 128)),
    # session 13 candidates: per-warpgroup Q boxes and barriers on the hdim 64 rows
    # (non-causal: o_buf3's row), with 2 and 3 K / V stages (with 3 the next tile's first block
    # can load one block earlier). Device run 71 (tile cycles against the rows of then): causal
    # 1k / 2k / 4k qw +0.6 / +5.6 / +5.4%, qw3 -2.4 / -0.1 / +1.7% (the warpgroups drift apart:
    # the wg1-wg0 skew doubles, and the shared K / V ring paces the leader); non-causal 1k / 2k
    # qw -1.0 / -2.7%, qw3 -1.7 / -3.0%: qw3 became the non-causal row (the causal row keeps
    # one Q tile)
    "qw": ({"q_per_warpgroup": True, "q_release_early": True, "o_buffer": True,
            "q_prefetch": False, "num_stages": 2, "non_causal": {"skip_empty_wg": False}}, (64,)),
    "qw3": ({"q_per_warpgroup": True, "q_release_early": True, "o_buffer": True,
             "q_prefetch": False, "num_stages": 3, "non_causal": {"skip_empty_wg": False}},
            (64,)),
    # session 14 candidates, not yet run on a GPU: per-warpgroup Q with 4 K / V stages (causal:
    # run 71 showed the leading warpgroup held by the 2-3 stage ring; non-causal: the row + 1)
    "qw4": ({"q_per_warpgroup": True, "q_release_early": True, "o_buffer": True,
             "q_prefetch": False, "num_stages": 4}, (64,)),
    # hdim 64 non-causal's row before qw3 was adopted (session 14): one Q tile for the three
    # warpgroups, the next tile's Q prefetched into a second buffer (non-causal only)
    "no_qw": ({"q_per_warpgroup": False, "q_release_early": False, "o_buffer": False,
               "q_prefetch": True, "num_stages": 2, "skip_empty_wg": False}, (64,)),
    # session 11: the K / V stages released through named barriers (kv_release_nb). The SASS of
    # the hdim 128 causal row against FA3's (helper comparison, RESULTS.md run 52): the steady
    # loop executes the same instructions per key block (466 against 469), but ours has three
    # warpgroup bar.sync per block, two of them from Gluon's mbarrier.arrive (its lowering
    # syncs the partition before one thread arrives); FA3 releases per warp with no barrier
    # (also on the non-causal rows: the static persistent producer)
    "nbr": ({"kv_release_nb": True, "non_causal": _NO_PP}, (128, 256)),
    "nbr_rev": ({"kv_release_nb": True, "kv_reverse": True, "split_loops": False,
                 "q_release_early": False}, (128, 256)),
    # session 12: both consumer warpgroups in one 8-warp partition, so that they run one copy of
    # the consumer code. Run 12's profile (hdim 128 causal 2k): "no instruction" stalls per
    # consumer warp ~9x FA3's, 44% of the cycle gap; FA3's two consumer warpgroups share one
    # 7.5 KB hot loop, ours run two copies of ~16 KB (one per warp_specialize partition).
    # Split loops (run 13) halved each copy and changed neither the stalls nor the cycles; this
    # tests the other half of that reading. Cost: Gluon's mbarrier.arrive syncs the partition,
    # so the two warpgroups meet at every K / V release
    "joint": ({"num_consumers": 1, "o_half": False, "q_release_early": False,
               "non_causal": _NO_PP}, (128, 256)),
    # and with the K / V stages released through named barriers (no partition-wide bar.sync per
    # release, so the warpgroups are not held together there)
    "joint_nbr": ({"num_consumers": 1, "o_half": False, "kv_release_nb": True,
                   "q_release_early": False, "non_causal": _NO_PP}, (128, 256)),
    # session 12: the masked blocks' test in FA3's form (mask_limit). Stamps of the hdim 128
    # causal row (runs 56-57): the loop's cycles per block fit 2430 + (tile-end cost) / blocks,
    # with ~3200 cycles per tile at causal against ~1600 at non-causal: about 1600 per masked
    # diagonal block. Per score the test is now one compare, not two and an AND. Run 58: causal
    # cycles -0.9..-3.4% (adopted in the causal rows); the per-tile cost barely moved (~150
    # cycles at hdim 128 causal 1k), so the masked block's cost is not its arithmetic. Non-causal
    # (masks only at ragged tails): +1.1 / +3.6% cycles at hdim 128 2k / hdim 64 1k, not adopted
    "mlim": ({"mask_limit": True}, None),
    # session 12: the K / V ready waits as inline PTX (asm_waits), which Triton's membar pass
    # does not fence (runs 57 and 62: its partition-wide bar.sync before each wait is what holds
    # one 8-warp consumer partition's warpgroups together; one code copy removes the
    # no-instruction stalls). With one consumer partition and named-barrier releases
    # (joint_aw) the loop has no partition-wide barrier left; aw: the same on the rows' two
    # partitions (one 128-thread barrier less per key block)
    "joint_aw": ({"num_consumers": 1, "o_half": False, "kv_release_nb": True, "asm_waits": True,
                  "q_release_early": False, "non_causal": _NO_PP}, (128, 256)),
    "aw": ({"kv_release_nb": True, "asm_waits": True, "non_causal": _NO_PP}, (128, 256)),
    "no_mlim": ({"mask_limit": False, "q_release_early": False, "bottom_tiles": False,
                 "l2_section_mb": 32},
                (64, 128, 256)),
    # session 25: one score in 4 / 8 takes its exp2 on the FMA pipe (exp_poly), on the shipped
    # rows. Run 101 (hdim 64): slower, not adopted
    "ep4": ({"exp_poly": 4}, (64, 128)),
    "ep8": ({"exp_poly": 8}, (64, 128)),
    # session 25: the rows' max (rtm) or max and sum (rt) as trees inside the thread (row_tree),
    # alone and with exp_poly 8. Run 101 (hdim 64): slower, not adopted
    "rt": ({"row_tree": 2}, (64, 128, 256)),
    "rtep8": ({"row_tree": 2, "exp_poly": 8}, (64, 128)),
    "rtm": ({"row_tree": 1}, (64, 128, 256)),
    "rtmep8": ({"row_tree": 1, "exp_poly": 8}, (64, 128)),
    # session 26: the tile boundary pipelined (cross_tile, _consumer_xt) on hdim 128's causal
    # row; non-causal on the same dynamic form (the row there is the static scheduler's)
    "xt": ({"cross_tile": 1, "non_causal": {"scheduler": 1, "q_release_early": True, **_NO_PP}},
           (128,)),
    "xt_dyn": ({"non_causal": {"scheduler": 1, "q_release_early": True, **_NO_PP}}, (128,)),
    # the same with two Q buffers (cross_tile 2): the next tile's Q loaded a tile ahead, where
    # run 104's stamps put the wait for it (xt moved it before the O store, it did not remove it)
    "xt2": ({"cross_tile": 2, "non_causal": {"scheduler": 1, "q_release_early": True, **_NO_PP}},
            (128,)),
    # session 27: the next tile's id fetched at the start of a tile (early_fetch), on the causal
    # rows (the dynamic scheduler's). Run 106's stamps at hdim 128 causal 1k: the next tile's Q
    # was seen ~6000 cycles after the last warpgroup released Q's buffer, ~1700 after warpgroup
    # 0's epilogue; the producer reaches the next Q only after this tile's last K/V load and the
    # atomic's round trip. Runs 107-108: the wait moved with the atomic (below); time 0.95-1.02x
    "ef": ({"early_fetch": 1}, (64, 128, 256)),
    # run 107's producer stamps: Triton's atomic waits for its value (~2600-3000 cycles) where
    # it is issued, so ef only moved the wait; efa fetches after the tile's first K/V loads,
    # where the producer waits for block 0's stage anyway. Runs 108 / 110, hdim 128 causal 1k:
    # Q's buffer free 113-154 cycles after the release (row ~1880), the gap between tiles 352
    # (row 1100-1156), but the tile 5-6% longer: time 0.98-0.99x (2k 0.98-0.99x, hdim 64 / 256
    # causal 1k 1.01 / 0.97x). Not adopted
    "efa": ({"early_fetch": 2}, (64, 128, 256)),
    # and with the next tile's Q prefetched into L2 once its id is known (q_l2_prefetch). Run
    # 110: 0.92-0.98x at the causal 1k / 2k cells; Q still seen 3400-4900 cycles after its
    # buffer was free. Not adopted. (Its 24-register producer spills at hdim 128 / 256: 32 / 48
    # B of stack; none at 64)
    "efq": ({"early_fetch": 2, "q_l2_prefetch": True}, (64, 128, 256)),
    # session 27: hdim 64 with 128-row tiles and two consumer warpgroups (the overlap), in the
    # forms of the hdim 128 rows: at seqlen 1k the 192-row tile leaves a last m-tile of 64 rows
    # (one warpgroup of three busy) in every sixth tile. d64w2: the (128, False) row's switches
    # (static scheduler), d64w2c: the (128, True) row's (dynamic scheduler, q_release_early);
    # three K/V stages (BASE's at hdim 64), "2": two. Runs 109-111 (H100, against the rows):
    # d64w2c causal 1k 1.044 / 1.025 / 1.038x (each SM's cycles -8%, at a lower clock), 512
    # 0.971x, 2k 0.936 / 0.949x; non-causal 1k d64w2 0.964x, d64w2c 0.923x. The win is at 1k
    # only and leaves the cell at ~0.9x cuDNN: not adopted (run 111 ran the GPU grid with d64w2c
    # as the row up to seqlen 1024: passed)
    "d64w2": ({"persistent": True, "tma_store": True, "softmax_fma": True, "o_buffer": True},
              (64,)),
    "d64w2s2": ({"persistent": True, "tma_store": True, "softmax_fma": True, "o_buffer": True,
                 "num_stages": 2}, (64,)),
    "d64w2c": ({"persistent": True, "scheduler": 1, "tma_store": True, "softmax_fma": True,
                "o_buffer": True, "mask_limit": True, "q_release_early": True}, (64,)),
    "d64w2c2": ({"persistent": True, "scheduler": 1, "tma_store": True, "softmax_fma": True,
                 "o_buffer": True, "mask_limit": True, "q_release_early": True,
                 "num_stages": 2}, (64,)),
    # hdim 256 causal: o_half (Q released after each warpgroup's last QK^T; run 110's producer
    # stamps: the Q buffer is free only ~40 cycles after the epilogue, 3400-4300 cycles before
    # warpgroup 0 sees the next Q) with the fetch mid-tile. Run 112 (H100, 7 rounds): o_half
    # (variant o_half) at causal 1k / 2k / 4k 1.023 / 1.001 / 1.050x the row (tile + gap cycles
    # -6.5 / -6.3 / -3.5%); ohefa 1.003 / 0.945 / 0.942x. o_half lost 4.7% at causal 8k in run
    # 47, on the row of then: next, 8k / 16k, then the grid and racecheck if it holds
    "ohefa": ({"o_half": True, "early_fetch": 2}, (256,)),
    # session 27: hdim 256 causal with o_half and wg_bounds together (warpgroup 0 skips the
    # tile's last 64-key block, all masked for its rows: 5.5% of the MMA work at 1k; wg_bounds
    # alone won at 1k only in run 7, on the row of then). Spills 4 B (one store, one load): no
    # compile case until it earns one
    "ohwgb": ({"o_half": True, "wg_bounds": True}, (256,)),
    # session 27: warpgroup 0's diagonal block on its first 64 keys (diag_half), on the hdim 128
    # causal row, and on hdim 64's two-warpgroup form (d64w2c). Prediction: cycles -2..-4% at
    # causal 1k, -1..-2% at 2k
    "dh": ({"diag_half": True, "non_causal": _NO_PP}, (128,)),
    "d64w2cdh": ({"persistent": True, "scheduler": 1, "tma_store": True, "softmax_fma": True,
                  "o_buffer": True, "mask_limit": True, "q_release_early": True,
                  "diag_half": True}, (64,)),
    # session 28: the causal rows' m-tiles aligned to seqlen_q's end (bottom_tiles). hdim 64's
    # 192-row tiles at 1k: the ragged tile (64 rows) becomes the first, with 1 key block, not
    # the last, with 8 for one busy warpgroup (23300 cycles, the longest tile; run 113's stamps).
    # Prediction: causal cycles -8..-12% at 1k, -4..-6% at 512, -2..-4% at 2k, 0 at 768 / 1536
    # (multiples of 192). At hdim 128 / 256 the bench's seqlens are multiples of 128: the same
    # tiles (a control for the switch's cost)
    "bt": ({"bottom_tiles": True}, (64, 128, 256)),
    "no_bt": ({"bottom_tiles": False, "l2_section_mb": 32}, (64,)),  # (64, True) before run 116
    # d64w2c with the next tile's fetch mid-tile and its Q prefetched into L2 (efq)
    "d64w2cq": ({"persistent": True, "scheduler": 1, "tma_store": True, "softmax_fma": True,
                 "o_buffer": True, "mask_limit": True, "q_release_early": True,
                 "early_fetch": 2, "q_l2_prefetch": True}, (64,)),
    # session 31: hdim 64 non-causal's ragged m-tile (1024 = 5 x 192 + 64) computed by the three
    # consumer warpgroups, the key blocks split between them and merged (ragged_split). Run 126's
    # stamps: that tile 17.5k cycles, a full tile 22.1k (no ragged tile at 1152: 1.10x cuDNN
    # there, 0.97x at 1024). Run 127 (first form: every warpgroup released every block in order,
    # K / V loaded block by block): the GPU test passed, but the ragged tile took 18.2k at 1k
    # (each round of three blocks waited for its loads: the three-stage ring had none ahead) and
    # 42.2k against 54.0k at 4k; time 0.996x / 0.952x. Run 128 (second form: a round's other
    # blocks released early, ragged tiles loaded K before V three blocks at a time): the test
    # passed, the ragged tile 19.2k against the row's 17.8k at 1k (each round still waits for
    # all six of its loads), 43.0k against 54.2k at 4k; time 0.98x / 0.95x. Not adopted
    "rs": ({"ragged_split": True}, (64,)),
    # session 34: the paper's ablation on today's hdim 128 rows (README's is run 5's, on the v3
    # row). With "default" (the row: WS + overlap, no pingpong), pp2 / pp1 (+ pingpong) and
    # no_ws (one 8-warp program, no producer or setmaxnreg: the same kernel whatever the row):
    # the row without the intra-warpgroup overlap, with and without pingpong (FA3's placement,
    # named barriers). Since session 37 the non-causal row has pingpong (pp2): these keep run
    # 129's meaning there, switches of the row before it (no_pp).
    "ship_no_ov": ({"overlap": False, "non_causal": _NO_PP},
                   (128,)),
    "ship_no_ov_pp": ({"overlap": False, "pingpong": True, "pingpong_mode": 2,
                       "q_release_early": False}, (128,)),
}
# variants whose switches go on top of the shipped row for (head_dim, causal) instead of BASE
# (those measured on the hdim 128 non-causal row before pingpong joined it, session 37, and
# that do not go with pingpong turn it off there: qrel, nbr, joint, joint_nbr, joint_aw, aw, dh,
# xt, xt_dyn, xt2)
ON_TABLE = {"split", "split_tma", "skip_empty", "keep_empty", "l2_16", "l2_64", "l2_8", "l2_32",
            "qpf", "no_qpf", "pp2", "pp1", "wgb", "o_half", "o_buf3",
            "no_o_half", "no_o_buf3", "rev", "s3_128", "s3_64", "nbr", "qrel", "no_qrel", "qw",
            "qw3", "no_qw", "qw4",
            "nbr_rev", "joint", "joint_nbr", "mlim", "no_mlim", "joint_aw", "aw", "ep4", "ep8",
            "rt", "rtep8", "rtm", "rtmep8", "xt", "xt_dyn", "xt2", "ef", "efa", "efq", "ohefa",
            "dh", "ohwgb", "bt", "no_bt", "rs", "ship_no_ov", "ship_no_ov_pp", "lazy",
            "no_pp", "ohlazy", "qreg", "lazy_ns"}


def get_config(head_dim: int, causal: bool = False, **overrides) -> FwdConfig:
    """The shipped table's config for (head_dim, causal) (a padded head dim uses its native one's
    row), with overrides on top."""
    cfg = CONFIGS[(padded_head_dim(head_dim), bool(causal))]
    if overrides:
        cfg = replace(cfg, **overrides)
    return cfg


def base_config(head_dim: int, **overrides) -> FwdConfig:
    """The v3 row for head_dim (BASE_CONFIGS) with overrides on top: what VARIANTS are relative
    to (the ablations and scripts/hopper_dev*.py)."""
    return _base(padded_head_dim(head_dim), **overrides)


def variant_config(name: str, head_dim: int, causal: bool = False, **overrides) -> FwdConfig:
    """A named variant, overrides on top: "default" is the shipped table row, any other name BASE
    plus its VARIANTS entry."""
    if name == "default":
        return get_config(head_dim, causal, **overrides)
    if name in ON_TABLE:
        over = dict(VARIANTS[name][0])
        # "non_causal": overrides for the non-causal row only (a variant measured on a row that
        # has since changed in one direction)
        nc = over.pop("non_causal", {})
        if not causal:
            over.update(nc)
        merged = {**over, **overrides}
        cfg = get_config(head_dim, causal, **merged)
        if cfg.bottom_tiles and "bottom_tiles" not in merged and not bottom_tiles_fit(cfg):
            # a variant measured on the row before bottom_tiles (the hdim 64 causal row's since
            # run 116) whose switches bottom_tiles does not go with: on that row, without it
            cfg = replace(cfg, bottom_tiles=False)
        return cfg
    return base_config(head_dim, **{**VARIANTS[name][0], **overrides})


# --------------------------------------------------------------------------------------------
# Kernel
# --------------------------------------------------------------------------------------------
@gluon.jit
def _producer(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, k_ready, v_ready, kv_empty,
              b, h, kvh, m_start, n_blocks,
              BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr, kv_base=0, NC: gl.constexpr = 2,
              REV: gl.constexpr = 0, NB: gl.constexpr = 0):
    if NC == 3:
        # three Q boxes of BLOCK_M // 3 rows, one per consumer warpgroup (shared-memory shapes
        # must be powers of two, so a 192-row tile is q_smem[0..2] of a [4, 1, 64, 1, D] buffer)
        M_Q: gl.constexpr = q_desc.block_type.shape[1]
        mbarrier.expect(q_bar, 3 * q_desc.block_type.nbytes)
        for i in gl.static_range(3):
            tma.async_copy_global_to_shared(q_desc, [b, m_start + i * M_Q, h, 0], q_bar,
                                            q_smem.index(i))
    else:
        mbarrier.expect(q_bar, q_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(q_desc, [b, m_start, h, 0], q_bar, q_smem)
    for j in range(n_blocks):
        s = (kv_base + j) % NUM_STAGES
        ph = ((kv_base + j) // NUM_STAGES) & 1
        # both consumer warpgroups must have released this stage's K (kv_empty[s]) and V
        # (kv_empty[NUM_STAGES + s]); a fresh barrier passes at once. K is released as soon as
        # the scores are computed, so the next K can land while P V still reads V.
        if REV:  # kv_reverse: the ring's j-th stage holds key block n_blocks - 1 - j
            key = (n_blocks - 1 - j) * BLOCK_N
        else:
            key = j * BLOCK_N
        if NB:  # kv_release_nb: the stage's first use needs no wait
            if kv_base + j >= NUM_STAGES:
                _nb_op(4 + s, True)
        else:
            mbarrier.wait(kv_empty.index(s), ph ^ 1)
        kb = k_ready.index(s)
        mbarrier.expect(kb, k_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [b, key, kvh, 0], kb, k_smem.index(s))
        if NB:
            if kv_base + j >= NUM_STAGES:
                _nb_op(4 + NUM_STAGES + s, True)
        else:
            mbarrier.wait(kv_empty.index(NUM_STAGES + s), ph ^ 1)
        vb = v_ready.index(s)
        mbarrier.expect(vb, v_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(v_desc, [b, key, kvh, 0], vb, v_smem.index(s))


@gluon.jit
def _tile_info(tile, n_bh, num_m_tiles, heads, kv_group, seqlen_q, seqlen_k,
               CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr):
    """Work item `tile` of the persistent schedule -> (b, h, kvh, m_start, n_blocks, n_unmasked).

    Non-causal: (batch, head) major, as the one-tile-per-program grid (neighbours share K/V in
    L2). Causal: longest tiles first over all (batch, head)s: tile t has m-tile
    num_m_tiles - 1 - t // n_bh, so the static round-robin hands every program a descending
    sequence of lengths (LPT-like balance).
    """
    if CAUSAL:
        pid_m = num_m_tiles - 1 - tile // n_bh
        bh = tile % n_bh
    else:
        bh = tile // num_m_tiles
        pid_m = tile % num_m_tiles
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
        full_end = gl.maximum(gl.minimum(m_start + causal_off + 1, seqlen_k), 0)
        n_unmasked = gl.minimum(full_end // BLOCK_N, n_blocks)
    else:
        n_blocks = gl.cdiv(seqlen_k, BLOCK_N)
        n_unmasked = seqlen_k // BLOCK_N
    return b, h, kvh, m_start, n_blocks, n_unmasked


@gluon.jit
def _producer_persistent(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, q_empty,
                         k_ready, v_ready, kv_empty,
                         n_bh, num_m_tiles, heads, kv_group, seqlen_q, seqlen_k,
                         CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                         NUM_STAGES: gl.constexpr, NC: gl.constexpr = 2, DIAG: gl.constexpr = 0):
    # Same tile sequence as the consumers; the K/V ring counter c runs on across tiles, so the
    # stage index and mbarrier phase carry over. Q of the next tile is loaded as soon as both
    # consumer warpgroups have read the current one (q_empty), i.e. under their last P V and
    # epilogue. DIAG: the kernel's QPF_DIAG (bit 64: kv_release_nb).
    num_tiles = n_bh * num_m_tiles
    c = gl.program_id(0) * 0
    i = gl.program_id(0) * 0
    for tile in range(gl.program_id(0), num_tiles, gl.num_programs(0)):
        b, h, kvh, m_start, n_blocks, n_unmasked = _tile_info(
            tile, n_bh, num_m_tiles, heads, kv_group, seqlen_q, seqlen_k, CAUSAL, BLOCK_M, BLOCK_N)
        mbarrier.wait(q_empty, (i & 1) ^ 1)
        _producer(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, k_ready, v_ready,
                  kv_empty, b, h, kvh, m_start, n_blocks, BLOCK_N, NUM_STAGES, c, NC, 0,
                  DIAG & 64)
        c += n_blocks
        i += 1
    if DIAG & 64:
        _nb_drain(c, NUM_STAGES)


@gluon.jit
def _softmax_update(s_acc, m_i, l_i, rows, j, seqlen_k, causal_off, qk_scale,
                    MASK: gl.constexpr, CAUSAL: gl.constexpr,
                    BLOCK_N: gl.constexpr, s_layout: gl.constexpr, FMA: gl.constexpr = False):
    """One block of the running softmax in the log2 domain. Returns p (fp32), alpha, m, l.

    FMA (FA3's form): the row max is taken over the raw scores and m is kept unscaled; the
    exponent s * scale - m * scale is one FFMA per score instead of an FMUL (scaling) plus an
    FADD. Needs qk_scale > 0 (forward() checks)."""
    if FMA:
        return _softmax_update_fma(s_acc, m_i, l_i, rows, j, seqlen_k, causal_off, qk_scale,
                                   MASK, CAUSAL, BLOCK_N, s_layout, (FMA & 3) == 2,
                                   (FMA >> 2) & 3, (FMA >> 4) & 3)
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
def _mask_block(s_acc, rows, j, seqlen_k, causal_off, MASK: gl.constexpr, CAUSAL: gl.constexpr,
                BLOCK_N: gl.constexpr, s_layout: gl.constexpr, LIM: gl.constexpr):
    # key block j's scores with the keys past seqlen_k (and, CAUSAL, right of each row's diagonal)
    # at -inf, where MASK. LIM (FwdConfig.mask_limit, kernel SOFTMAX_FMA == 2): the mask as FA3
    # forms it, one limit per row (keys of this block before it are visible) and one compare per
    # score against the column's offset within the block, which is the same in every block (the
    # two-sided test needs the absolute column, a second compare and an AND per score)
    qk = s_acc
    if LIM:
        if MASK:
            lim = seqlen_k - j * BLOCK_N
            cl = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
            if CAUSAL:
                lim_r = gl.minimum(rows + (causal_off + 1 - j * BLOCK_N), lim)
                valid = gl.expand_dims(cl, 0) < gl.expand_dims(lim_r, 1)
            else:
                valid = gl.expand_dims(cl < lim, 0)
            qk = gl.where(valid, qk, float("-inf"))
    elif MASK:
        cols = j * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        valid = gl.expand_dims(cols < seqlen_k, 0)
        if CAUSAL:
            valid = valid & (gl.expand_dims(cols, 0) <= gl.expand_dims(rows + causal_off, 1))
        qk = gl.where(valid, qk, float("-inf"))
    return qk


@gluon.jit
def _softmax_update_fma(s_acc, m_i, l_i, rows, j, seqlen_k, causal_off, qk_scale,
                        MASK: gl.constexpr, CAUSAL: gl.constexpr,
                        BLOCK_N: gl.constexpr, s_layout: gl.constexpr, LIM: gl.constexpr = False,
                        EP: gl.constexpr = 0, TREE: gl.constexpr = 0):
    # m_i, m_new: row max of the raw (unscaled) scores. LIM: mask_limit's mask (_mask_block)
    qk = _mask_block(s_acc, rows, j, seqlen_k, causal_off, MASK, CAUSAL, BLOCK_N, s_layout, LIM)
    if TREE & 1:   # row_tree (session 25): the rows' max (and, TREE & 2, sum) as trees
        m_new = gl.maximum(m_i, gl.convert_layout(_row_tree(qk, True), m_i.type.layout,
                                                  assert_trivial=True))
    else:
        m_new = gl.maximum(m_i, gl.max(qk, axis=1))
    if MASK:
        m_use = gl.where(m_new == float("-inf"), 0.0, m_new)
    else:
        m_use = m_new
    m_scaled = m_use * qk_scale
    if EP == 0:   # (the call below only with exp_poly: the rows' code stays as pinned)
        p = gl.exp2(gl.fma(qk, qk_scale, -gl.expand_dims(m_scaled, 1)))
    else:
        p = _exp2_mixed(gl.fma(qk, qk_scale, -gl.expand_dims(m_scaled, 1)), EP, 3)
    alpha = gl.exp2(gl.fma(m_i, qk_scale, -m_scaled))
    if TREE & 2:
        l_i = l_i * alpha + gl.convert_layout(_row_tree(p, False), m_i.type.layout,
                                              assert_trivial=True)
    else:
        l_i = l_i * alpha + gl.sum(p, axis=1)
    return p, alpha, m_new, l_i


# Pingpong turn between the two consumer warpgroups. PP_MODE 0 and 1: two mbarriers (phase by
# turn count t); PP_MODE 2: two named hardware barriers as FA3 (bar.sync on one's own, bar.arrive
# on the other's; 256 threads each), issued as inline PTX because Gluon 3.6 has no named-barrier
# op. Ids 10/11: Triton itself uses 0..3 for the partitions' own barriers.
@gluon.jit
def _named_bar(WG: gl.constexpr, ARRIVE: gl.constexpr):
    lay: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    x = gl.full([128], 0, gl.int32, layout=lay)  # one element per thread: the asm runs once
    if ARRIVE:
        if WG == 0:
            gl.inline_asm_elementwise("bar.arrive 11, 256;\n\tmov.b32 $0, $1;", "=r,r", [x],
                                      dtype=gl.int32, is_pure=False, pack=1)
        else:
            gl.inline_asm_elementwise("bar.arrive 10, 256;\n\tmov.b32 $0, $1;", "=r,r", [x],
                                      dtype=gl.int32, is_pure=False, pack=1)
    else:
        if WG == 0:
            gl.inline_asm_elementwise("bar.sync 10, 256;\n\tmov.b32 $0, $1;", "=r,r", [x],
                                      dtype=gl.int32, is_pure=False, pack=1)
        else:
            gl.inline_asm_elementwise("bar.sync 11, 256;\n\tmov.b32 $0, $1;", "=r,r", [x],
                                      dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _turn_wait(turn_bars, t, WG: gl.constexpr, PINGPONG: gl.constexpr, PP_MODE: gl.constexpr = 0):
    # Warpgroup 0 goes first: its first wait is on the "previous" phase of a fresh barrier.
    if PINGPONG:
        if PP_MODE == 2:
            _named_bar(WG, False)
        else:
            if WG == 0:
                mbarrier.wait(turn_bars.index(0), (t & 1) ^ 1)
            else:
                mbarrier.wait(turn_bars.index(1), t & 1)


@gluon.jit
def _turn_pass(turn_bars, WG: gl.constexpr, PINGPONG: gl.constexpr, PP_MODE: gl.constexpr = 0):
    if PINGPONG:
        if PP_MODE == 2:
            _named_bar(WG, True)
        else:
            mbarrier.arrive(turn_bars.index(1 - WG), count=1)


# kv_release_nb (QPF_DIAG bit 64): the K / V stages released through named hardware barriers
# instead of the kv_empty mbarriers. Stage s's K is barrier 4 + s and its V 4 + NUM_STAGES + s
# (Triton's partitions use 0..3, pingpong 10 / 11; NUM_STAGES <= 3). Each barrier counts the two
# consumer warpgroups' bar.arrive (256 threads, no wait) and the producer warp's bar.sync (32):
# 288. The producer waits before it reuses a stage (block g + NUM_STAGES waits for block g's
# release) and, at its end, absorbs the last NUM_STAGES releases, so no barrier is left half
# counted. A consumer's release of block g + NUM_STAGES cannot come before the producer has
# waited for block g's (it needs block g + NUM_STAGES loaded), so the phases cannot mix. FA3
# hands Q over the same way (NamedBarrier QueryEmpty).
@gluon.jit
def _nb_op(bar_id, SYNC: gl.constexpr):
    # SYNC False: a consumer partition (128 or 256 threads) arrives without waiting; True: the producer
    # warp (32 threads) waits until both consumer warpgroups have arrived. One element per thread.
    if SYNC:
        lay: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
        x = gl.full([32], 0, gl.int32, layout=lay) + bar_id
        gl.inline_asm_elementwise("bar.sync $1, 288;\n\tmov.b32 $0, $1;", "=r,r", [x],
                                  dtype=gl.int32, is_pure=False, pack=1)
    else:
        W: gl.constexpr = gl.num_warps()   # the partition's: 4, or 8 with num_consumers 1
        lay: gl.constexpr = gl.BlockedLayout([1], [32], [W], [0])
        x = gl.full([32 * W], 0, gl.int32, layout=lay) + bar_id
        gl.inline_asm_elementwise("bar.arrive $1, 288;\n\tmov.b32 $0, $1;", "=r,r", [x],
                                  dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _nb_drain(c, NUM_STAGES: gl.constexpr):
    # producer, after its last load (c blocks in all): absorb the consumers' releases of the last
    # NUM_STAGES blocks, which no later load waited for
    for g in range(gl.maximum(c - NUM_STAGES, 0), c):
        _nb_op(4 + g % NUM_STAGES, True)
        _nb_op(4 + NUM_STAGES + g % NUM_STAGES, True)


@gluon.jit
def _asm_wait(OFF: gl.constexpr, s, phase):
    # asm_waits (session 12 candidate): the consumers' wait on the K / V ready mbarrier of stage
    # s, as inline PTX on its shared-memory address (global_smem + OFF + 8 s; OFF is the
    # barrier array's offset from Triton's own allocation, _barrier_offsets). Triton's membar
    # pass puts a partition-wide bar.sync between two waits on the same mbarrier allocation (a
    # warp must not run ahead in a chain of waits); our release protocol already orders them (a
    # stage is refilled only after every consumer thread released it), and the inline wait is not
    # an operation that pass sees. One element per thread.
    W: gl.constexpr = gl.num_warps()
    lay: gl.constexpr = gl.BlockedLayout([1], [32], [W], [0])
    a = gl.full([32 * W], 0, gl.int32, layout=lay) + (s * 8 + OFF)
    ph = gl.full([32 * W], 0, gl.int32, layout=lay) + phase
    gl.inline_asm_elementwise(
        "{\n\t.reg .pred P1;\n\t.reg .b32 A1;\n\tmov.b32 A1, global_smem;\n\t"
        "add.s32 A1, A1, $1;\n\twaitLoop:\n\t"
        "mbarrier.try_wait.parity.shared::cta.b64 P1, [A1], $2;\n\t@!P1 bra waitLoop;\n\t"
        "}\n\tmov.b32 $0, $1;", "=r,r,r", [a, ph], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _q_box(q_smem, q_base, WG: gl.constexpr, TMA_STORE: gl.constexpr):
    # warpgroup WG's Q box of a 3-warpgroup tile; with Q prefetch (TMA_STORE == 3) q_smem holds
    # both buffers' boxes and this tile's start at q_base
    if TMA_STORE == 3:
        return q_smem.index(q_base + WG)
    else:
        return q_smem.index(WG)


@gluon.jit
def _release_q_buffer(q_free):
    # v10 Q prefetch (TMA_STORE == 3): the previous tile's O left through the other Q buffer with a
    # TMA store; once this warpgroup's store has read its rows (store_wait covers the issuing
    # thread's copies, the barrier the others), that buffer may take the next tile's Q. A no-op
    # wait at the program's first tile (no store yet): that arrival frees the second buffer.
    tma.store_wait(0)
    gl.thread_barrier()
    mbarrier.arrive(q_free, count=1)


@gluon.jit
def _masked_softmax(s_acc, m_i, l_i, rows, j, seqlen_k, causal_off, qk_scale, n_unmasked,
                    MASK: gl.constexpr, CAUSAL: gl.constexpr, BLOCK_N: gl.constexpr,
                    s_layout: gl.constexpr, FMA: gl.constexpr):
    # _softmax_update of block j; MASK 2: the mask chosen at run time (j >= n_unmasked)
    if MASK == 2:
        if j < n_unmasked:
            p, alpha, m_i, l_i = _softmax_update(s_acc, m_i, l_i, rows, j, seqlen_k, causal_off,
                                                 qk_scale, False, CAUSAL, BLOCK_N, s_layout, FMA)
        else:
            p, alpha, m_i, l_i = _softmax_update(s_acc, m_i, l_i, rows, j, seqlen_k, causal_off,
                                                 qk_scale, True, CAUSAL, BLOCK_N, s_layout, FMA)
    else:
        p, alpha, m_i, l_i = _softmax_update(s_acc, m_i, l_i, rows, j, seqlen_k, causal_off,
                                             qk_scale, MASK, CAUSAL, BLOCK_N, s_layout, FMA)
    return p, alpha, m_i, l_i


# lazy_rescale (session 37): a row's running max m, that its P is taken against, moves only when
# the row's block max exceeds m by more than 2^LAZY_LOG2 (in exp2's units); otherwise its m, l
# and O keep their scale (alpha exactly 1), and P is at most 2^LAZY_LOG2 (bf16 and fp16 carry it
# with the same relative precision, fp32 O and l the sums). O's rescale, one FMUL per O
# register, runs only when some row of the warpgroup moved: a scalar flag, uniform over the
# warpgroup that issues the wgmma, so the branch around it is too (FA4's rescale threshold, on
# Hopper's registers). Rows whose m did not move are scaled by exactly 1.
LAZY_LOG2 = gl.constexpr(8.0)


@gluon.jit
def _softmax_update_lazy(s_acc, m_i, l_i, rows, j, seqlen_k, causal_off, qk_scale,
                         MASK: gl.constexpr, CAUSAL: gl.constexpr, BLOCK_N: gl.constexpr,
                         s_layout: gl.constexpr, LIM: gl.constexpr = False):
    """_softmax_update_fma's form (raw-score max, needs qk_scale > 0; LIM: mask_limit's mask)
    with the lazy max, row by row. Returns p, alpha, m, l and grow (per row: m moved, alpha is
    not 1). The caller reduces grow to the warpgroup's scalar where its latency hides (run 131:
    reduced here, before the exponentials, it cost 4-9%)."""
    qk = _mask_block(s_acc, rows, j, seqlen_k, causal_off, MASK, CAUSAL, BLOCK_N, s_layout, LIM)
    m_blk = gl.maximum(m_i, gl.max(qk, axis=1))
    # a row's first visible key: -inf to finite grows by +inf; a row with none so far: -inf -
    # -inf is NaN, which compares false
    grow = (m_blk - m_i) * qk_scale > LAZY_LOG2
    m_new = gl.where(grow, m_blk, m_i)
    if MASK:
        m_use = gl.where(m_new == float("-inf"), 0.0, m_new)
    else:
        m_use = m_new
    m_scaled = m_use * qk_scale
    p = gl.exp2(gl.fma(qk, qk_scale, -gl.expand_dims(m_scaled, 1)))
    alpha = gl.where(grow, gl.exp2(gl.fma(m_i, qk_scale, -m_scaled)), 1.0)
    l_i = l_i * alpha + gl.sum(p, axis=1)
    return p, alpha, m_new, l_i, grow


@gluon.jit
def _masked_softmax_lazy(s_acc, m_i, l_i, rows, j, seqlen_k, causal_off, qk_scale, n_unmasked,
                         MASK: gl.constexpr, CAUSAL: gl.constexpr, BLOCK_N: gl.constexpr,
                         s_layout: gl.constexpr, FMA: gl.constexpr):
    # _masked_softmax with _softmax_update_lazy (MASK 2: masked iff j >= n_unmasked; FMA: the
    # kernel's SOFTMAX_FMA, bits 0-1 == 2 for mask_limit)
    LIM: gl.constexpr = (FMA & 3) == 2
    if MASK == 2:
        if j < n_unmasked:
            p, alpha, m_i, l_i, grow = _softmax_update_lazy(
                s_acc, m_i, l_i, rows, j, seqlen_k, causal_off, qk_scale, False, CAUSAL,
                BLOCK_N, s_layout, LIM)
        else:
            p, alpha, m_i, l_i, grow = _softmax_update_lazy(
                s_acc, m_i, l_i, rows, j, seqlen_k, causal_off, qk_scale, True, CAUSAL,
                BLOCK_N, s_layout, LIM)
    else:
        p, alpha, m_i, l_i, grow = _softmax_update_lazy(
            s_acc, m_i, l_i, rows, j, seqlen_k, causal_off, qk_scale, MASK, CAUSAL, BLOCK_N,
            s_layout, LIM)
    return p, alpha, m_i, l_i, grow


@gluon.jit
def _overlap_step(j, q, k_smem, v_smem, k_ready, v_ready, kv_empty, turn_bars, acc, p_prev, alpha_o,
                  m_i, l_i, s_zero, rows, seqlen_k, causal_off, qk_scale, kv_base, turn_base,
                  MASK: gl.constexpr, WG: gl.constexpr, CAUSAL: gl.constexpr,
                  BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, NUM_STAGES: gl.constexpr,
                  PINGPONG: gl.constexpr, PP_MODE: gl.constexpr, s_layout: gl.constexpr,
                  row_o: gl.constexpr, p_layout: gl.constexpr, FMA: gl.constexpr, n_unmasked=0,
                  REV: gl.constexpr = 0, n_rev=0, NB: gl.constexpr = 0,
                  KOFF: gl.constexpr = -1, VOFF: gl.constexpr = -1,
                  q_rel=None, j_end=0, QREL: gl.constexpr = 0, lse_ptr=None, stamp_base=0,
                  STAMP: gl.constexpr = 0, resc=0):
    # one steady-state iteration of _consumer's overlapped loop: QK^T of block j and P V of block
    # j - 1 in flight together. MASK: False / True, or 2: masked iff j >= n_unmasked (one loop
    # over every block; False / True serve the v8 split loops). REV (kv_reverse): step j of the
    # ring holds key block n_rev - 1 - j (its columns for the mask). QREL (q_release_early): at
    # step j_end - 1 Q is released (q_rel) once its QK^T has completed, before the softmax;
    # STAMP (diag_stamps): the SM clock then in slot 8 + WG of the tile's stamps. FMA bit 64
    # (lazy_rescale): the softmax is _softmax_update_lazy's and O is scaled only where the
    # previous block moved some row's m (resc > 0). The step returns resc as a sixth value (as
    # passed, without lazy_rescale)
    LAZY: gl.constexpr = (FMA >> 6) & 1
    s = (kv_base + j) % NUM_STAGES
    sp = (kv_base + j - 1) % NUM_STAGES
    if KOFF >= 0:  # asm_waits: K_ready / V_ready at these shared-memory offsets (_asm_wait)
        _asm_wait(KOFF, s, ((kv_base + j) // NUM_STAGES) & 1)
    else:
        mbarrier.wait(k_ready.index(s), ((kv_base + j) // NUM_STAGES) & 1)
    if PP_MODE == 0:
        _turn_wait(turn_bars, turn_base + j, WG, PINGPONG)
    else:
        _turn_wait(turn_bars, turn_base + j - 1, WG, PINGPONG, PP_MODE)
    k_t = k_smem.index(s).reshape([BLOCK_N, HEAD_DIM]).permute((1, 0))
    s_tok = warpgroup_mma(q, k_t, s_zero, use_acc=False, is_async=True)
    if LAZY:
        if resc > 0:
            acc = acc * gl.expand_dims(alpha_o, 1)
    else:
        acc = acc * gl.expand_dims(alpha_o, 1)
    if VOFF >= 0:
        _asm_wait(VOFF, sp, ((kv_base + j - 1) // NUM_STAGES) & 1)
    else:
        mbarrier.wait(v_ready.index(sp), ((kv_base + j - 1) // NUM_STAGES) & 1)
    v = v_smem.index(sp).reshape([BLOCK_N, HEAD_DIM])
    o_tok = warpgroup_mma(p_prev, v, acc, is_async=True)
    _turn_pass(turn_bars, WG, PINGPONG, PP_MODE)
    s_acc = warpgroup_mma_wait(1, deps=[s_tok])
    if NB:  # K_j read
        _nb_op(4 + s, False)
    else:
        mbarrier.arrive(kv_empty.index(s), count=1)
    if QREL:
        if j + 1 == j_end:
            mbarrier.arrive(q_rel, count=1)  # the warpgroup's last QK^T has read Q
            if STAMP:
                _stamp(lse_ptr, stamp_base, 8 + WG, _CLOCK)
    if REV:
        jb = n_rev - 1 - j
    else:
        jb = j
    if LAZY:
        p, alpha, m_i, l_i, grow = _masked_softmax_lazy(s_acc, m_i, l_i, rows, jb, seqlen_k,
                                                        causal_off, qk_scale, n_unmasked, MASK,
                                                        CAUSAL, BLOCK_N, s_layout, FMA)
    else:
        p, alpha, m_i, l_i = _masked_softmax(s_acc, m_i, l_i, rows, jb, seqlen_k, causal_off,
                                             qk_scale, n_unmasked, MASK, CAUSAL, BLOCK_N,
                                             s_layout, FMA)
    alpha_o = gl.convert_layout(alpha, row_o)
    p_prev = gl.convert_layout(p.to(p_prev.dtype), p_layout)
    if LAZY:  # the warpgroup's flag, while P V_{j-1} runs (shared memory and bar.sync)
        resc = gl.max(grow.to(gl.int32), axis=0)
    acc = warpgroup_mma_wait(0, deps=[o_tok])
    if NB:  # V_{j-1} read
        _nb_op(4 + NUM_STAGES + sp, False)
    else:
        mbarrier.arrive(kv_empty.index(NUM_STAGES + sp), count=1)
    return acc, p_prev, alpha_o, m_i, l_i, resc


@gluon.jit
def _half_last_block(j, q, k_smem, v_smem, k_ready, v_ready, kv_empty, acc, p_prev, alpha_o,
                     m_i, l_i, rows, seqlen_k, causal_off, qk_scale, kv_base,
                     WG: gl.constexpr, CAUSAL: gl.constexpr, BLOCK_N: gl.constexpr,
                     HEAD_DIM: gl.constexpr, NUM_STAGES: gl.constexpr, s_layout: gl.constexpr,
                     row_o: gl.constexpr, o_layout: gl.constexpr, FMA: gl.constexpr,
                     q_rel=None, QREL: gl.constexpr = 0, lse_ptr=None, stamp_base=0,
                     STAMP: gl.constexpr = 0):
    """diag_half (session 27 candidate; warpgroup 0 of the causal two-consumer rows with 128 x
    128 tiles): the tile's last key block j, the diagonal one, when this warpgroup's rows see
    none of its second half (the caller checks). The overlapped step of _overlap_step with the
    scores of the block's first BLOCK_N // 2 keys only (an N = 64 QK^T, its softmax, masked),
    then the last P V with those keys (K = 64). The dropped keys are invisible to every row of
    the warpgroup, so the result is the full block's. Releases K_j, V_{j-1}, V_j (and Q, with
    QREL). Returns acc (the tile's P V done), m_i, l_i."""
    HALF: gl.constexpr = BLOCK_N // 2
    M_WG: gl.constexpr = s_layout.warps_per_cta[0] * 16
    h_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0],
                                                       warps_per_cta=s_layout.warps_per_cta,
                                                       instr_shape=[16, HALF, 16])
    row_h: gl.constexpr = gl.SliceLayout(1, h_layout)
    ph_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    s = (kv_base + j) % NUM_STAGES
    sp = (kv_base + j - 1) % NUM_STAGES
    mbarrier.wait(k_ready.index(s), ((kv_base + j) // NUM_STAGES) & 1)
    k_t = k_smem.index(s).reshape([BLOCK_N, HEAD_DIM]).slice(0, HALF, dim=0).permute((1, 0))
    h_zero = gl.zeros([M_WG, HALF], gl.float32, layout=h_layout)
    s_tok = warpgroup_mma(q, k_t, h_zero, use_acc=False, is_async=True)
    acc = acc * gl.expand_dims(alpha_o, 1)
    mbarrier.wait(v_ready.index(sp), ((kv_base + j - 1) // NUM_STAGES) & 1)
    v = v_smem.index(sp).reshape([BLOCK_N, HEAD_DIM])
    o_tok = warpgroup_mma(p_prev, v, acc, is_async=True)
    s_acc = warpgroup_mma_wait(1, deps=[s_tok])
    mbarrier.arrive(kv_empty.index(s), count=1)
    if QREL:
        mbarrier.arrive(q_rel, count=1)  # the warpgroup's last QK^T has read Q
        if STAMP:
            _stamp(lse_ptr, stamp_base, 8 + WG, _CLOCK)
    # the block's first half as 64-key block 2 j (its mask's columns)
    p, alpha, m_h, l_h = _softmax_update(s_acc, gl.convert_layout(m_i, row_h),
                                         gl.convert_layout(l_i, row_h),
                                         gl.convert_layout(rows, row_h), 2 * j, seqlen_k,
                                         causal_off, qk_scale, True, CAUSAL, HALF, h_layout, FMA)
    alpha_o = gl.convert_layout(alpha, row_o)
    p_h = gl.convert_layout(p.to(p_prev.dtype), ph_layout)
    acc = warpgroup_mma_wait(0, deps=[o_tok])
    mbarrier.arrive(kv_empty.index(NUM_STAGES + sp), count=1)
    # the last P V: keys [0, HALF) of block j
    acc = acc * gl.expand_dims(alpha_o, 1)
    mbarrier.wait(v_ready.index(s), ((kv_base + j) // NUM_STAGES) & 1)
    v_h = v_smem.index(s).reshape([BLOCK_N, HEAD_DIM]).slice(0, HALF, dim=0)
    o_tok = warpgroup_mma(p_h, v_h, acc, is_async=True)
    acc = warpgroup_mma_wait(0, deps=[o_tok])
    mbarrier.arrive(kv_empty.index(NUM_STAGES + s), count=1)
    return acc, gl.convert_layout(m_h, m_i.type.layout), gl.convert_layout(l_h, l_i.type.layout)


@gluon.jit
def _last_pv(acc, alpha_o, p_prev, v_smem, v_ready, kv_empty, kv_base, n_blocks,
             BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, NUM_STAGES: gl.constexpr):
    # diag_half's warpgroup 0 without the half block: _consumer's last P V (no pingpong turns,
    # no asm_waits or kv_release_nb: _check_switch_support)
    jl = kv_base + n_blocks - 1
    sl = jl % NUM_STAGES
    acc = acc * gl.expand_dims(alpha_o, 1)
    mbarrier.wait(v_ready.index(sl), (jl // NUM_STAGES) & 1)
    v = v_smem.index(sl).reshape([BLOCK_N, HEAD_DIM])
    o_tok = warpgroup_mma(p_prev, v, acc, is_async=True)
    acc = warpgroup_mma_wait(0, deps=[o_tok])
    mbarrier.arrive(kv_empty.index(NUM_STAGES + sl), count=1)
    return acc


@gluon.jit
def _plain_step(j, q, k_smem, v_smem, k_ready, v_ready, kv_empty, turn_bars, acc, m_i, l_i, s_zero,
                rows, seqlen_k, causal_off, qk_scale, kv_base, turn_base,
                MASK: gl.constexpr, WG: gl.constexpr, CAUSAL: gl.constexpr,
                BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, NUM_STAGES: gl.constexpr,
                PINGPONG: gl.constexpr, PP_MODE: gl.constexpr, s_layout: gl.constexpr,
                row_o: gl.constexpr, p_layout: gl.constexpr, FMA: gl.constexpr, n_unmasked=0,
                q_rel=None, j_end=0, QREL: gl.constexpr = False, lse_ptr=None, stamp_base=0,
                STAMP: gl.constexpr = 0):
    # one iteration of _consumer's block-by-block loop; MASK as in _overlap_step. QREL
    # (q_release_early): at block j_end - 1 (the warpgroup's last) Q is released (q_rel) as soon
    # as its QK^T has completed (STAMP: the SM clock then in slot 8 + WG, as _overlap_step)
    s = (kv_base + j) % NUM_STAGES
    ph = ((kv_base + j) // NUM_STAGES) & 1
    mbarrier.wait(k_ready.index(s), ph)
    if PP_MODE == 0:
        _turn_wait(turn_bars, turn_base + j, WG, PINGPONG)
    else:
        if j == 0:
            _turn_wait(turn_bars, turn_base, WG, PINGPONG, PP_MODE)
    k_t = k_smem.index(s).reshape([BLOCK_N, HEAD_DIM]).permute((1, 0))
    s_tok = warpgroup_mma(q, k_t, s_zero, use_acc=False, is_async=True)
    _turn_pass(turn_bars, WG, PINGPONG, PP_MODE)
    s_acc = warpgroup_mma_wait(0, deps=[s_tok])
    mbarrier.arrive(kv_empty.index(s), count=1)  # K_j read
    if QREL:
        if j + 1 == j_end:
            mbarrier.arrive(q_rel, count=1)  # this warpgroup's last QK^T has read Q
            if STAMP:
                _stamp(lse_ptr, stamp_base, 8 + WG, _CLOCK)
    p, alpha, m_i, l_i = _masked_softmax(s_acc, m_i, l_i, rows, j, seqlen_k, causal_off, qk_scale,
                                         n_unmasked, MASK, CAUSAL, BLOCK_N, s_layout, FMA)
    acc = acc * gl.expand_dims(gl.convert_layout(alpha, row_o), 1)
    p_op = gl.convert_layout(p.to(q.dtype), p_layout)
    mbarrier.wait(v_ready.index(s), ph)
    if PP_MODE != 0:
        _turn_wait(turn_bars, turn_base + j + 1, WG, PINGPONG, PP_MODE)
    v = v_smem.index(s).reshape([BLOCK_N, HEAD_DIM])
    o_tok = warpgroup_mma(p_op, v, acc, is_async=True)
    acc = warpgroup_mma_wait(0, deps=[o_tok])
    mbarrier.arrive(kv_empty.index(NUM_STAGES + s), count=1)  # V_j read
    return acc, m_i, l_i


@gluon.jit
def _consumer(q_smem, k_smem, v_smem, q_bar, k_ready, v_ready, kv_empty, turn_bars,
              out_ptr, lse_ptr, b, h, heads, seqlen_q, seqlen_k, causal_off, qk_scale,
              m_start, n_blocks, n_unmasked,
              WG: gl.constexpr, CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
              HEAD_DIM: gl.constexpr, NUM_STAGES: gl.constexpr,
              OVERLAP: gl.constexpr, PINGPONG: gl.constexpr,
              kv_base=0, turn_base=0, q_phase=0, q_empty=None, o_desc=None,
              D_REAL: gl.constexpr = None, PERSISTENT: gl.constexpr = False,
              TMA_STORE: gl.constexpr = False, PP_MODE: gl.constexpr = 0,
              NC: gl.constexpr = 2, FMA: gl.constexpr = False, WGB: gl.constexpr = False,
              SPLIT: gl.constexpr = False, q_base=0, DIAG: gl.constexpr = 0, o_half=None,
              KOFF: gl.constexpr = -1, VOFF: gl.constexpr = -1):
    """One (batch, head, m-tile) work item of one consumer warpgroup.

    KOFF / VOFF >= 0 (asm_waits): the K / V ready waits as inline PTX at these offsets
    (_asm_wait).

    WGB (v5, causal, no pingpong): this warpgroup's own causal bounds: it computes only the K/V
    blocks its own rows can see (n_blocks of its last row) and masks only those its first row
    does not fully see; the tile's remaining blocks are released (kv_empty) without being read.

    kv_base / turn_base: K/V ring and pingpong-turn counters at the start of the tile (0 for the
    one-tile-per-program grid; carried across tiles when PERSISTENT); q_phase: phase of q_bar.
    o_half (TMA_STORE == 4): the half-tile O buffer, taken by warpgroup 0 then 1 each tile; the
    turn mbarriers (unused without pingpong) order it: turn_bars[0] "warpgroup 0's store has read
    it", turn_bars[1] "warpgroup 1's has". q_phase (the program's tile count & 1) gives the phases.
    DIAG: the QPF_DIAG bits of the kernel (FwdConfig.diag_*); bit 16 (diag_stamps) writes SM
    clock stamps of the tile's phases as int64 over its first 32 lse entries: warpgroup 0's
    thread 0 at 0 entry, 1 Q arrived, 2 block 0's softmax done, 3 last P V done, 4 epilogue
    issued, 6 SM id, 7 global timer; warpgroup 1's at 5 last P V done; with q_release_early
    each warpgroup's at 8 + WG when it released Q (session 26).
    Returns the counters after the tile.
    """
    M_WG: gl.constexpr = BLOCK_M // NC  # rows per consumer warpgroup (NC warpgroups)
    QREL: gl.constexpr = DIAG & 128  # q_release_early (_plain_step, _overlap_step)
    LAZY: gl.constexpr = (FMA >> 6) & 1  # lazy_rescale (_softmax_update_lazy; the overlap only)
    # bottom_tiles moves the causal tiles only (_tile_info_lpt): rows below 0 in causal launches
    BOTTOM: gl.constexpr = (DIAG & 32768) * CAUSAL
    if TMA_STORE == 2:
        if NC != 3:  # [2, ...]: Q tile, then O's own tile (v6 o_buffer)
            o_buf = q_smem.index(1)
            q_smem = q_smem.index(0)
        # (three consumers: [8, ...] boxes, Q in 0..2 and O in 4..6, session 11)
    dtype: gl.constexpr = q_smem.dtype
    # the partition's warps: 4 (one warpgroup), or 8 with NC == 1 (two warpgroups, one partition)
    CW: gl.constexpr = 8 if NC == 1 else 4
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[CW, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[CW, 1],
                                                       instr_shape=[16, HEAD_DIM, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)

    if NC == 3:
        q = _q_box(q_smem, q_base, WG, TMA_STORE).reshape([M_WG, HEAD_DIM])
    else:
        q = q_smem.reshape([BLOCK_M, HEAD_DIM]).slice(WG * M_WG, M_WG, dim=0)
    rows = m_start + WG * M_WG + gl.arange(0, M_WG, layout=row_s)
    if DIAG & 128:
        if HEAD_DIM == 128:
            # q_release_early at hdim 128 (session 14): the row indices through an opaque move,
            # once per tile. Without it LLVM hoists a per-thread constant of the causal mask's
            # limit to the kernel's entry and ptxas spills it (4 B, reloaded per tile)
            rows = gl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [rows], dtype=gl.int32,
                                             is_pure=False, pack=1)

    m_i = gl.full([M_WG], float("-inf"), gl.float32, layout=row_s)
    l_i = gl.zeros([M_WG], gl.float32, layout=row_s)
    acc = gl.zeros([M_WG, HEAD_DIM], gl.float32, layout=o_layout)
    s_zero = gl.zeros([M_WG, BLOCK_N], gl.float32, layout=s_layout)

    stamp_base = (b * heads + h) * seqlen_q + m_start  # diag_stamps
    if BOTTOM:  # bottom_tiles: the stamps in the tile's last 32 rows (its first may be < 0)
        stamp_base += BLOCK_M - 32
    if DIAG & 16:
        if WG == 0:
            _stamp(lse_ptr, stamp_base, 0, _CLOCK)
            _stamp(lse_ptr, stamp_base, 6, _SMID)
            _stamp(lse_ptr, stamp_base, 7, _GTIMER)
    n_tile = n_blocks
    if WGB:
        if CAUSAL:
            wg_first = m_start + WG * M_WG
            wg_end = gl.minimum(wg_first + M_WG, seqlen_q)
            kv_end_wg = gl.maximum(gl.minimum(wg_end + causal_off, seqlen_k), 0)
            n_blocks = gl.minimum(gl.cdiv(kv_end_wg, BLOCK_N), n_tile)
            full_end_wg = gl.maximum(gl.minimum(wg_first + causal_off + 1, seqlen_k), 0)
            n_unmasked = gl.minimum(full_end_wg // BLOCK_N, n_blocks)
        if WGB == 2:
            # v9: a warpgroup whose rows all lie past seqlen_q (the last m-tile of a 192-row
            # tiling: at seqlen 1024, 1152 rows for 1024) computes nothing; its blocks are
            # released unread below and its TMA store is clipped by the copy engine
            n_blocks = gl.where(m_start + WG * M_WG >= seqlen_q, 0, n_blocks)
            if BOTTOM:  # bottom_tiles: and one whose rows all lie below 0
                n_blocks = gl.where(m_start + WG * M_WG + M_WG <= 0, 0, n_blocks)
            n_unmasked = gl.minimum(n_unmasked, n_blocks)

    mbarrier.wait(q_bar, q_phase)
    if (FMA >> 7) & 1:  # q_regs: Q in registers for the tile, A of every QK^T
        q = q.load(gl.DotOperandLayout(operand_index=0, parent=s_layout, k_width=2))
    if DIAG & 16:
        if WG == 0:
            _stamp(lse_ptr, stamp_base, 1, _CLOCK)
    if TMA_STORE == 3:
        if not OVERLAP:
            _release_q_buffer(q_empty)
        else:
            if n_blocks == 0:
                _release_q_buffer(q_empty)

    if OVERLAP:
        # FA3 alg. 2: iteration j issues QK^T_j, rescales O (block j-1's alpha) while it runs,
        # issues P_{j-1} V_{j-1}, then does the softmax of block j while P V is in flight.
        # PP_MODE 0: a turn around every GEMM issue group (the first QK^T and the last P V
        # included); PP_MODE >= 1: as FA3, turns only around the steady-state pairs.
        p_prev = gl.zeros([M_WG, BLOCK_N], dtype, layout=p_layout)
        alpha_o = gl.full([M_WG], 1.0, gl.float32, layout=row_o)
        resc = n_blocks * 0  # lazy_rescale: O needs no scale before the next P V (an i32 scalar)
        if n_blocks > 0:
            # block 0: scores and softmax only
            s0 = kv_base % NUM_STAGES
            if KOFF >= 0:
                _asm_wait(KOFF, s0, (kv_base // NUM_STAGES) & 1)
            else:
                mbarrier.wait(k_ready.index(s0), (kv_base // NUM_STAGES) & 1)
            if PP_MODE == 0:
                _turn_wait(turn_bars, turn_base, WG, PINGPONG)
            k_t = k_smem.index(s0).reshape([BLOCK_N, HEAD_DIM]).permute((1, 0))
            s_tok = warpgroup_mma(q, k_t, s_zero, use_acc=False, is_async=True)
            if PP_MODE == 0:
                _turn_pass(turn_bars, WG, PINGPONG)
            if TMA_STORE == 3:  # while QK^T_0 runs: release the other Q buffer (v10)
                _release_q_buffer(q_empty)
            s_acc = warpgroup_mma_wait(0, deps=[s_tok])
            if DIAG & 64:  # K_0 read
                _nb_op(4 + s0, False)
            else:
                mbarrier.arrive(kv_empty.index(s0), count=1)
            if QREL:
                if n_blocks == 1:
                    mbarrier.arrive(q_empty, count=1)  # the only QK^T has read Q
                    if DIAG & 16:
                        _stamp(lse_ptr, stamp_base, 8 + WG, _CLOCK)
            if DIAG & 32:
                # kv_reverse: the first step holds the last key block (causal: the diagonal),
                # masked (exact for a fully visible block)
                p, alpha, m_i, l_i = _masked_softmax(s_acc, m_i, l_i, rows, n_blocks - 1,
                                                     seqlen_k, causal_off, qk_scale, n_unmasked,
                                                     True, CAUSAL, BLOCK_N, s_layout, FMA)
            else:
                # split loops: block 0 always masked (once per tile; exact for a fully visible
                # block)
                if LAZY:  # (O is zero: no rescale before block 0's P V)
                    p, alpha, m_i, l_i, _resc0 = _masked_softmax_lazy(
                        s_acc, m_i, l_i, rows, 0, seqlen_k, causal_off, qk_scale, n_unmasked,
                        True if SPLIT else 2, CAUSAL, BLOCK_N, s_layout, FMA)
                else:
                    p, alpha, m_i, l_i = _masked_softmax(s_acc, m_i, l_i, rows, 0, seqlen_k,
                                                         causal_off, qk_scale, n_unmasked,
                                                         True if SPLIT else 2, CAUSAL, BLOCK_N,
                                                         s_layout, FMA)
            p_prev = gl.convert_layout(p.to(dtype), p_layout)
            if DIAG & 16:
                if WG == 0:
                    _stamp(lse_ptr, stamp_base, 2, _CLOCK)
        if SPLIT:
            # v8: the unmasked blocks and the masked ones in two loops, each with one softmax in
            # its body (one loop with both spent 2x the instruction working set in the hot loop:
            # run 12's profile, no-instruction stalls 6x FA3's)
            for j in range(1, n_unmasked):
                acc, p_prev, alpha_o, m_i, l_i, resc = _overlap_step(
                    j, q, k_smem, v_smem, k_ready, v_ready, kv_empty, turn_bars, acc, p_prev,
                    alpha_o, m_i, l_i, s_zero, rows, seqlen_k, causal_off, qk_scale, kv_base,
                    turn_base, False, WG, CAUSAL, BLOCK_N, HEAD_DIM, NUM_STAGES, PINGPONG,
                    PP_MODE, s_layout, row_o, p_layout, FMA, 0, 0, 0, DIAG & 64, KOFF, VOFF,
                    q_empty, n_blocks, QREL,
                    lse_ptr, stamp_base, DIAG & 16, resc)
            for j in range(gl.maximum(n_unmasked, 1), n_blocks):
                acc, p_prev, alpha_o, m_i, l_i, resc = _overlap_step(
                    j, q, k_smem, v_smem, k_ready, v_ready, kv_empty, turn_bars, acc, p_prev,
                    alpha_o, m_i, l_i, s_zero, rows, seqlen_k, causal_off, qk_scale, kv_base,
                    turn_base, True, WG, CAUSAL, BLOCK_N, HEAD_DIM, NUM_STAGES, PINGPONG,
                    PP_MODE, s_layout, row_o, p_layout, FMA, 0, 0, 0, DIAG & 64, KOFF, VOFF,
                    q_empty, n_blocks, QREL,
                    lse_ptr, stamp_base, DIAG & 16, resc)
        if DIAG & 32:
            # kv_reverse: steps 1 .. n_blocks - n_unmasked - 1 hold the other masked blocks
            # (none when seqlen_q == seqlen_k and BLOCK_M == BLOCK_N), the rest unmasked ones
            for j in range(1, n_blocks - n_unmasked):
                acc, p_prev, alpha_o, m_i, l_i, resc = _overlap_step(
                    j, q, k_smem, v_smem, k_ready, v_ready, kv_empty, turn_bars, acc, p_prev,
                    alpha_o, m_i, l_i, s_zero, rows, seqlen_k, causal_off, qk_scale, kv_base,
                    turn_base, True, WG, CAUSAL, BLOCK_N, HEAD_DIM, NUM_STAGES, PINGPONG,
                    PP_MODE, s_layout, row_o, p_layout, FMA, 0, 32, n_blocks, DIAG & 64, KOFF,
                    VOFF, q_empty, n_blocks, QREL,
                    lse_ptr, stamp_base, DIAG & 16, resc)
            for j in range(gl.maximum(n_blocks - n_unmasked, 1), n_blocks):
                acc, p_prev, alpha_o, m_i, l_i, resc = _overlap_step(
                    j, q, k_smem, v_smem, k_ready, v_ready, kv_empty, turn_bars, acc, p_prev,
                    alpha_o, m_i, l_i, s_zero, rows, seqlen_k, causal_off, qk_scale, kv_base,
                    turn_base, False, WG, CAUSAL, BLOCK_N, HEAD_DIM, NUM_STAGES, PINGPONG,
                    PP_MODE, s_layout, row_o, p_layout, FMA, 0, 32, n_blocks, DIAG & 64, KOFF,
                    VOFF, q_empty, n_blocks, QREL,
                    lse_ptr, stamp_base, DIAG & 16, resc)
        # diag_half (session 27 candidate): warpgroup 0's diagonal block on its first half only
        HALF_DIAG: gl.constexpr = (DIAG & 16384) and CAUSAL and WG == 0
        if HALF_DIAG:
            # this warpgroup's last visible key, over its rows that exist
            w0_end = gl.maximum(gl.minimum(gl.minimum(m_start + M_WG, seqlen_q) + causal_off,
                                           seqlen_k), 0)
            half = (n_blocks >= 2) & (w0_end <= (n_blocks - 1) * BLOCK_N + BLOCK_N // 2)
        # steady state: QK^T of block j and P V of block j-1 in flight together
        if HALF_DIAG:
            for j in range(1, gl.where(half, n_blocks - 1, n_blocks)):
                acc, p_prev, alpha_o, m_i, l_i, resc = _overlap_step(
                    j, q, k_smem, v_smem, k_ready, v_ready, kv_empty, turn_bars, acc, p_prev,
                    alpha_o, m_i, l_i, s_zero, rows, seqlen_k, causal_off, qk_scale, kv_base,
                    turn_base, 2, WG, CAUSAL, BLOCK_N, HEAD_DIM, NUM_STAGES, PINGPONG,
                    PP_MODE, s_layout, row_o, p_layout, FMA, n_unmasked, 0, 0, DIAG & 64, KOFF,
                    VOFF, q_empty, n_blocks, QREL,
                    lse_ptr, stamp_base, DIAG & 16, resc)
            if half:
                acc, m_i, l_i = _half_last_block(
                    n_blocks - 1, q, k_smem, v_smem, k_ready, v_ready, kv_empty, acc, p_prev,
                    alpha_o, m_i, l_i, rows, seqlen_k, causal_off, qk_scale, kv_base, WG, CAUSAL,
                    BLOCK_N, HEAD_DIM, NUM_STAGES, s_layout, row_o, o_layout, FMA, q_empty,
                    QREL, lse_ptr, stamp_base, DIAG & 16)
        elif not SPLIT and not (DIAG & 32):
            for j in range(1, n_blocks):
                acc, p_prev, alpha_o, m_i, l_i, resc = _overlap_step(
                    j, q, k_smem, v_smem, k_ready, v_ready, kv_empty, turn_bars, acc, p_prev,
                    alpha_o, m_i, l_i, s_zero, rows, seqlen_k, causal_off, qk_scale, kv_base,
                    turn_base, 2, WG, CAUSAL, BLOCK_N, HEAD_DIM, NUM_STAGES, PINGPONG,
                    PP_MODE, s_layout, row_o, p_layout, FMA, n_unmasked, 0, 0, DIAG & 64, KOFF,
                    VOFF, q_empty, n_blocks, QREL,
                    lse_ptr, stamp_base, DIAG & 16, resc)
        if PERSISTENT:
            if TMA_STORE != 1:
                if TMA_STORE != 3:
                    if QREL:
                        if n_blocks == 0:  # (otherwise released after the last QK^T)
                            mbarrier.arrive(q_empty, count=1)
                    else:
                        mbarrier.arrive(q_empty, count=1)  # every QK^T of this tile has completed
        if HALF_DIAG:
            if gl.where(half, 0, n_blocks) > 0:   # (with half, _half_last_block did it)
                acc = _last_pv(acc, alpha_o, p_prev, v_smem, v_ready, kv_empty, kv_base,
                               n_blocks, BLOCK_N, HEAD_DIM, NUM_STAGES)
        elif n_blocks > 0:
            jl = kv_base + n_blocks - 1
            sl = jl % NUM_STAGES
            if LAZY:
                if resc > 0:
                    acc = acc * gl.expand_dims(alpha_o, 1)
            else:
                acc = acc * gl.expand_dims(alpha_o, 1)
            if VOFF >= 0:
                _asm_wait(VOFF, sl, (jl // NUM_STAGES) & 1)
            else:
                mbarrier.wait(v_ready.index(sl), (jl // NUM_STAGES) & 1)
            if PP_MODE == 0:
                _turn_wait(turn_bars, turn_base + n_blocks, WG, PINGPONG)
            v = v_smem.index(sl).reshape([BLOCK_N, HEAD_DIM])
            o_tok = warpgroup_mma(p_prev, v, acc, is_async=True)
            if PP_MODE == 0:
                _turn_pass(turn_bars, WG, PINGPONG)
            acc = warpgroup_mma_wait(0, deps=[o_tok])
            if DIAG & 64:
                _nb_op(4 + NUM_STAGES + sl, False)
            else:
                mbarrier.arrive(kv_empty.index(NUM_STAGES + sl), count=1)
        if DIAG & 16:  # (also for a warpgroup without blocks: every slot is written)
            _stamp(lse_ptr, stamp_base, 3 if WG == 0 else 5, _CLOCK)
            if NC == 1:  # one partition: slot 5 from warpgroup 1's first thread (128)
                _stamp(lse_ptr, stamp_base, 5, _CLOCK, 128)
        if PP_MODE == 0:
            turns = gl.where(n_blocks > 0, n_blocks + 1, 0)
        else:
            turns = gl.maximum(n_blocks - 1, 0)
    else:
        # PP_MODE >= 1 (FA3's non-overlapped schedule): a turn covers P V_{j-1} and QK^T_j.
        if SPLIT:  # v8: unmasked and masked blocks in two loops (see the overlapped path)
            for j in range(0, n_unmasked):
                acc, m_i, l_i = _plain_step(
                    j, q, k_smem, v_smem, k_ready, v_ready, kv_empty, turn_bars, acc, m_i, l_i,
                    s_zero, rows, seqlen_k, causal_off, qk_scale, kv_base, turn_base, False, WG,
                    CAUSAL, BLOCK_N, HEAD_DIM, NUM_STAGES, PINGPONG, PP_MODE, s_layout, row_o,
                    p_layout, FMA, 0, q_empty, n_blocks, QREL,
                    lse_ptr, stamp_base, DIAG & 16)
            for j in range(gl.maximum(n_unmasked, 0), n_blocks):
                acc, m_i, l_i = _plain_step(
                    j, q, k_smem, v_smem, k_ready, v_ready, kv_empty, turn_bars, acc, m_i, l_i,
                    s_zero, rows, seqlen_k, causal_off, qk_scale, kv_base, turn_base, True, WG,
                    CAUSAL, BLOCK_N, HEAD_DIM, NUM_STAGES, PINGPONG, PP_MODE, s_layout, row_o,
                    p_layout, FMA, 0, q_empty, n_blocks, QREL,
                    lse_ptr, stamp_base, DIAG & 16)
        if not SPLIT:
            for j in range(n_blocks):
                acc, m_i, l_i = _plain_step(
                    j, q, k_smem, v_smem, k_ready, v_ready, kv_empty, turn_bars, acc, m_i, l_i,
                    s_zero, rows, seqlen_k, causal_off, qk_scale, kv_base, turn_base, 2, WG,
                    CAUSAL, BLOCK_N, HEAD_DIM, NUM_STAGES, PINGPONG, PP_MODE, s_layout, row_o,
                    p_layout, FMA, n_unmasked, q_empty, n_blocks, QREL,
                    lse_ptr, stamp_base, DIAG & 16)
        if PP_MODE != 0:
            if n_blocks > 0:
                _turn_pass(turn_bars, WG, PINGPONG, PP_MODE)
            turns = gl.where(n_blocks > 0, n_blocks + 1, 0)
        else:
            turns = n_blocks
        if DIAG & 16:  # (no block-0 stamp 2 without the overlap)
            _stamp(lse_ptr, stamp_base, 3 if WG == 0 else 5, _CLOCK)
        if PERSISTENT:
            if TMA_STORE != 1:
                if TMA_STORE != 3:
                    if QREL:
                        if n_blocks == 0:  # (otherwise released after the last QK^T)
                            mbarrier.arrive(q_empty, count=1)
                    else:
                        mbarrier.arrive(q_empty, count=1)
    if WGB:
        # blocks of the tile that no row of this warpgroup sees: release them unread. Wait for
        # each load first: its k_ready/v_ready phase means the stage's previous use is released
        # by every warpgroup, so this arrival cannot complete that earlier phase.
        for j in range(n_blocks, n_tile):
            sj = (kv_base + j) % NUM_STAGES
            phj = ((kv_base + j) // NUM_STAGES) & 1
            mbarrier.wait(k_ready.index(sj), phj)
            mbarrier.arrive(kv_empty.index(sj), count=1)
            mbarrier.wait(v_ready.index(sj), phj)
            mbarrier.arrive(kv_empty.index(NUM_STAGES + sj), count=1)

    # epilogue: one normalisation; rows that saw no key give 0 and lse = -inf
    l_o = gl.convert_layout(l_i, row_o)
    l_safe = gl.where(l_o == 0.0, 1.0, l_o)
    out = acc / gl.expand_dims(l_safe, 1)
    if FMA:
        m_i = m_i * qk_scale  # FMA kept the raw-score max
    lse = gl.where(l_i == 0.0, float("-inf"), (m_i + gl.log2(l_i)) * 0.6931471805599453)  # ln 2

    o_row = m_start + WG * M_WG  # the first row of this warpgroup's O box
    if BOTTOM:
        if TMA_STORE:
            # bottom_tiles: a TMA store whose box starts below row 0 is an illegal instruction
            # (run 114; loads there are zero-filled). Such a warpgroup's rows go out by pointer
            # stores, and its box is aimed at seqlen_q, where the copy engine clips every row
            if o_row < 0:
                rows_b = o_row + gl.arange(0, M_WG, layout=row_o)
                cols_b = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, o_layout))
                off_b = ((b.to(gl.int64) * seqlen_q + rows_b) * heads + h) * D_REAL
                mask_b = (gl.expand_dims((rows_b >= 0) & (rows_b < seqlen_q), 1)
                          & gl.expand_dims(cols_b < D_REAL, 0))
                gl.store(out_ptr + gl.expand_dims(off_b, 1) + gl.expand_dims(cols_b, 0),
                         out.to(dtype), mask=mask_b)
            o_row = gl.where(o_row < 0, seqlen_q, o_row)

    if TMA_STORE == 4:
        # o_half: warpgroup 0 waits until warpgroup 1's store of the previous tile has read the
        # buffer (the first tile passes: parity 1 of a fresh barrier), warpgroup 1 until
        # warpgroup 0's store of this tile has; write, store, wait until the copy has read the
        # buffer (.read: shared memory only), hand it on
        if WG == 0:
            mbarrier.wait(turn_bars.index(1), q_phase ^ 1)
        else:
            mbarrier.wait(turn_bars.index(0), q_phase)
        o_half.reshape([M_WG, HEAD_DIM]).store(out.to(dtype))
        fence_async_shared()
        gl.thread_barrier()
        tma.async_copy_shared_to_global(o_desc, [b, o_row, h, 0], o_half)
        tma.store_wait(0)
        gl.thread_barrier()
        mbarrier.arrive(turn_bars.index(WG), count=1)
    elif TMA_STORE == 2:
        # O's own tile (v6): wait until this warpgroup's previous TMA store has read its rows
        # (store_wait covers the issuing thread's copies; the barrier holds the others), write,
        # store; the wait for this store happens at the next tile's epilogue or at the exit.
        tma.store_wait(0)
        gl.thread_barrier()
        if NC == 3:  # this warpgroup's own O box, 4 + WG
            o_view = q_smem.index(4 + WG).reshape([M_WG, HEAD_DIM])
        else:
            o_view = o_buf.reshape([BLOCK_M, HEAD_DIM]).slice(WG * M_WG, M_WG, dim=0)
        o_view.store(out.to(dtype))
        fence_async_shared()
        gl.thread_barrier()
        if NC == 3:
            tma.async_copy_shared_to_global(o_desc, [b, o_row, h, 0],
                                            q_smem.index(4 + WG))
        else:
            tma.async_copy_shared_to_global(o_desc, [b, o_row, h, 0],
                                            o_buf.slice(WG * M_WG, M_WG, dim=1))
    elif TMA_STORE:
        # O goes through this warpgroup's own rows of the Q tile in shared memory (every QK^T
        # that read them has completed) and out with one TMA store; the copy engine clips rows
        # past seqlen_q and padded head-dim columns.
        if NC == 3:
            o_view = _q_box(q_smem, q_base, WG, TMA_STORE).reshape([M_WG, HEAD_DIM])
        else:
            o_view = q_smem.reshape([BLOCK_M, HEAD_DIM]).slice(WG * M_WG, M_WG, dim=0)
        o_view.store(out.to(dtype))
        fence_async_shared()
        gl.thread_barrier()  # the whole warpgroup has written its rows (a named barrier of 128)
        if NC == 3:
            tma.async_copy_shared_to_global(o_desc, [b, o_row, h, 0],
                                            _q_box(q_smem, q_base, WG, TMA_STORE))
        else:
            tma.async_copy_shared_to_global(o_desc, [b, o_row, h, 0],
                                            q_smem.slice(WG * M_WG, M_WG, dim=1))
        if TMA_STORE == 1:
            tma.store_wait(0)
            if PERSISTENT:
                gl.thread_barrier()
                mbarrier.arrive(q_empty, count=1)  # Q rows free again once the store has read them
        # TMA_STORE == 3 (v10): this buffer is released during the next tile (_release_q_buffer)
        if TMA_STORE == 3:
            if DIAG & 2:  # diagnostic (diag_store_wait): this warpgroup's store has read its rows
                tma.store_wait(0)
                gl.thread_barrier()
    else:
        rows_o = m_start + WG * M_WG + gl.arange(0, M_WG, layout=row_o)
        cols_o = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, o_layout))
        row_off = ((b.to(gl.int64) * seqlen_q + rows_o) * heads + h) * D_REAL
        o_ptrs = out_ptr + gl.expand_dims(row_off, 1) + gl.expand_dims(cols_o, 0)
        o_mask = gl.expand_dims(rows_o < seqlen_q, 1) & gl.expand_dims(cols_o < D_REAL, 0)
        if BOTTOM:  # bottom_tiles: rows below 0
            o_mask = o_mask & gl.expand_dims(rows_o >= 0, 1)
        gl.store(o_ptrs, out.to(dtype), mask=o_mask)
    lse_ptrs = lse_ptr + (b.to(gl.int64) * heads + h) * seqlen_q + rows
    if DIAG & 16:  # the stamps own the tile's first 32 lse entries (bottom_tiles: its last 32)
        if BOTTOM:
            gl.store(lse_ptrs, lse, mask=(rows < m_start + BLOCK_M - 32) & (rows >= 0))
        else:
            gl.store(lse_ptrs, lse, mask=(rows < seqlen_q) & (rows >= m_start + 32))
        if WG == 0:
            _stamp(lse_ptr, stamp_base, 4, _CLOCK)
    elif BOTTOM:
        gl.store(lse_ptrs, lse, mask=(rows < seqlen_q) & (rows >= 0))
    else:
        gl.store(lse_ptrs, lse, mask=rows < seqlen_q)
    return kv_base + n_tile, turn_base + turns


@gluon.jit
def _consumer_wg1(q_smem, k_smem, v_smem, q_bar, k_ready, v_ready, kv_empty, turn_bars,
                  out_ptr, lse_ptr, b, h, heads, seqlen_q, seqlen_k, causal_off, qk_scale,
                  m_start, n_blocks, n_unmasked, o_desc,
                  CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                  HEAD_DIM: gl.constexpr, NUM_STAGES: gl.constexpr,
                  OVERLAP: gl.constexpr, PINGPONG: gl.constexpr, D_REAL: gl.constexpr,
                  TMA_STORE: gl.constexpr, PP_MODE: gl.constexpr,
                  NC: gl.constexpr = 2, FMA: gl.constexpr = False, WGB: gl.constexpr = False,
                  SPLIT: gl.constexpr = False):
    _consumer(q_smem, k_smem, v_smem, q_bar, k_ready, v_ready, kv_empty, turn_bars,
              out_ptr, lse_ptr, b, h, heads, seqlen_q, seqlen_k, causal_off, qk_scale,
              m_start, n_blocks, n_unmasked,
              1, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM, NUM_STAGES, OVERLAP, PINGPONG,
              0, 0, 0, None, o_desc, D_REAL, False, TMA_STORE, PP_MODE, NC, FMA, WGB, SPLIT)


@gluon.jit
def _consumer_wg2(q_smem, k_smem, v_smem, q_bar, k_ready, v_ready, kv_empty, turn_bars,
                  out_ptr, lse_ptr, b, h, heads, seqlen_q, seqlen_k, causal_off, qk_scale,
                  m_start, n_blocks, n_unmasked, o_desc,
                  CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                  HEAD_DIM: gl.constexpr, NUM_STAGES: gl.constexpr,
                  OVERLAP: gl.constexpr, PINGPONG: gl.constexpr, D_REAL: gl.constexpr,
                  TMA_STORE: gl.constexpr, PP_MODE: gl.constexpr,
                  NC: gl.constexpr = 2, FMA: gl.constexpr = False, WGB: gl.constexpr = False,
                  SPLIT: gl.constexpr = False):
    _consumer(q_smem, k_smem, v_smem, q_bar, k_ready, v_ready, kv_empty, turn_bars,
              out_ptr, lse_ptr, b, h, heads, seqlen_q, seqlen_k, causal_off, qk_scale,
              m_start, n_blocks, n_unmasked,
              2, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM, NUM_STAGES, OVERLAP, PINGPONG,
              0, 0, 0, None, o_desc, D_REAL, False, TMA_STORE, PP_MODE, NC, FMA, WGB, SPLIT)


@gluon.jit
def _consumer_wg0(q_smem, k_smem, v_smem, q_bar, k_ready, v_ready, kv_empty, turn_bars,
                  out_ptr, lse_ptr, b, h, heads, seqlen_q, seqlen_k, causal_off, qk_scale,
                  m_start, n_blocks, n_unmasked, o_desc,
                  CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                  HEAD_DIM: gl.constexpr, NUM_STAGES: gl.constexpr,
                  OVERLAP: gl.constexpr, PINGPONG: gl.constexpr, D_REAL: gl.constexpr,
                  TMA_STORE: gl.constexpr, PP_MODE: gl.constexpr,
                  NC: gl.constexpr = 2, FMA: gl.constexpr = False, WGB: gl.constexpr = False,
                  SPLIT: gl.constexpr = False):
    if PINGPONG:
        if PP_MODE == 2:
            _named_bar(1, True)  # warpgroup 0 opens its own first turn (FA3's mma_init)
    _consumer(q_smem, k_smem, v_smem, q_bar, k_ready, v_ready, kv_empty, turn_bars,
              out_ptr, lse_ptr, b, h, heads, seqlen_q, seqlen_k, causal_off, qk_scale,
              m_start, n_blocks, n_unmasked,
              0, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM, NUM_STAGES, OVERLAP, PINGPONG,
              0, 0, 0, None, o_desc, D_REAL, False, TMA_STORE, PP_MODE, NC, FMA, WGB, SPLIT)


@gluon.jit
def _consumer_persistent(q_smem, k_smem, v_smem, q_bar, q_empty, k_ready, v_ready, kv_empty,
                         turn_bars, out_ptr, lse_ptr, o_desc,
                         n_bh, num_m_tiles, heads, kv_group, seqlen_q, seqlen_k, qk_scale,
                         WG: gl.constexpr, CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr,
                         BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, NUM_STAGES: gl.constexpr,
                         OVERLAP: gl.constexpr, PINGPONG: gl.constexpr, D_REAL: gl.constexpr,
                         TMA_STORE: gl.constexpr, PP_MODE: gl.constexpr,
                         NC: gl.constexpr = 2, FMA: gl.constexpr = False,
                         SPLIT: gl.constexpr = False, WGB: gl.constexpr = False,
                         DIAG: gl.constexpr = 0, o_half=None, KOFF: gl.constexpr = -1,
                         VOFF: gl.constexpr = -1):
    if PINGPONG:
        if PP_MODE == 2:
            if WG == 0:
                _named_bar(1, True)
    num_tiles = n_bh * num_m_tiles
    causal_off = seqlen_k - seqlen_q
    c = gl.program_id(0) * 0  # K/V ring counter, carried across tiles (as the producer's)
    t = gl.program_id(0) * 0  # pingpong turn counter
    i = gl.program_id(0) * 0  # tiles done by this program: phase of q_bar
    for tile in range(gl.program_id(0), num_tiles, gl.num_programs(0)):
        b, h, kvh, m_start, n_blocks, n_unmasked = _tile_info(
            tile, n_bh, num_m_tiles, heads, kv_group, seqlen_q, seqlen_k, CAUSAL, BLOCK_M, BLOCK_N)
        c, t = _consumer(q_smem, k_smem, v_smem, q_bar, k_ready, v_ready, kv_empty, turn_bars,
                         out_ptr, lse_ptr, b, h, heads, seqlen_q, seqlen_k, causal_off, qk_scale,
                         m_start, n_blocks, n_unmasked,
                         WG, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM, NUM_STAGES, OVERLAP, PINGPONG,
                         c, t, i & 1, q_empty, o_desc, D_REAL, True, TMA_STORE, PP_MODE,
                         NC, FMA, WGB, SPLIT, 0, DIAG, o_half, KOFF, VOFF)
        i += 1
    if TMA_STORE == 2:
        tma.store_wait(0)  # the last tile's O store has read its shared memory


@gluon.jit
def _consumer_persistent_wg0(q_smem, k_smem, v_smem, q_bar, q_empty, k_ready, v_ready, kv_empty,
                             turn_bars, out_ptr, lse_ptr, o_desc,
                             n_bh, num_m_tiles, heads, kv_group, seqlen_q, seqlen_k, qk_scale,
                             CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                             HEAD_DIM: gl.constexpr, NUM_STAGES: gl.constexpr,
                             OVERLAP: gl.constexpr, PINGPONG: gl.constexpr, D_REAL: gl.constexpr,
                             TMA_STORE: gl.constexpr, PP_MODE: gl.constexpr,
                             NC: gl.constexpr = 2, FMA: gl.constexpr = False,
                             SPLIT: gl.constexpr = False, WGB: gl.constexpr = False,
                             DIAG: gl.constexpr = 0, o_half=None,
                             KOFF: gl.constexpr = -1, VOFF: gl.constexpr = -1):
    _consumer_persistent(q_smem, k_smem, v_smem, q_bar, q_empty, k_ready, v_ready, kv_empty,
                         turn_bars, out_ptr, lse_ptr, o_desc,
                         n_bh, num_m_tiles, heads, kv_group, seqlen_q, seqlen_k, qk_scale,
                         0, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM, NUM_STAGES, OVERLAP, PINGPONG,
                         D_REAL, TMA_STORE, PP_MODE, NC, FMA, SPLIT, WGB, DIAG, o_half, KOFF, VOFF)


@gluon.jit
def _consumer_persistent_wg1(q_smem, k_smem, v_smem, q_bar, q_empty, k_ready, v_ready, kv_empty,
                             turn_bars, out_ptr, lse_ptr, o_desc,
                             n_bh, num_m_tiles, heads, kv_group, seqlen_q, seqlen_k, qk_scale,
                             CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                             HEAD_DIM: gl.constexpr, NUM_STAGES: gl.constexpr,
                             OVERLAP: gl.constexpr, PINGPONG: gl.constexpr, D_REAL: gl.constexpr,
                             TMA_STORE: gl.constexpr, PP_MODE: gl.constexpr,
                             NC: gl.constexpr = 2, FMA: gl.constexpr = False,
                             SPLIT: gl.constexpr = False, WGB: gl.constexpr = False,
                             DIAG: gl.constexpr = 0, o_half=None,
                             KOFF: gl.constexpr = -1, VOFF: gl.constexpr = -1):
    _consumer_persistent(q_smem, k_smem, v_smem, q_bar, q_empty, k_ready, v_ready, kv_empty,
                         turn_bars, out_ptr, lse_ptr, o_desc,
                         n_bh, num_m_tiles, heads, kv_group, seqlen_q, seqlen_k, qk_scale,
                         1, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM, NUM_STAGES, OVERLAP, PINGPONG,
                         D_REAL, TMA_STORE, PP_MODE, NC, FMA, SPLIT, WGB, DIAG, o_half, KOFF, VOFF)


@gluon.jit
def _consumer_persistent_wg2(q_smem, k_smem, v_smem, q_bar, q_empty, k_ready, v_ready, kv_empty,
                             turn_bars, out_ptr, lse_ptr, o_desc,
                             n_bh, num_m_tiles, heads, kv_group, seqlen_q, seqlen_k, qk_scale,
                             CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                             HEAD_DIM: gl.constexpr, NUM_STAGES: gl.constexpr,
                             OVERLAP: gl.constexpr, PINGPONG: gl.constexpr, D_REAL: gl.constexpr,
                             TMA_STORE: gl.constexpr, PP_MODE: gl.constexpr,
                             NC: gl.constexpr = 2, FMA: gl.constexpr = False,
                             SPLIT: gl.constexpr = False, WGB: gl.constexpr = False):
    _consumer_persistent(q_smem, k_smem, v_smem, q_bar, q_empty, k_ready, v_ready, kv_empty,
                         turn_bars, out_ptr, lse_ptr, o_desc,
                         n_bh, num_m_tiles, heads, kv_group, seqlen_q, seqlen_k, qk_scale,
                         2, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM, NUM_STAGES, OVERLAP, PINGPONG,
                         D_REAL, TMA_STORE, PP_MODE, NC, FMA, SPLIT, WGB)


# --------------------------------------------------------------------------------------------
# v5: dynamic persistent scheduler (FA3's DynamicPersistentTileScheduler, hopper/tile_scheduler.hpp:
# facts taken over, code written here). Longest-processing-time-first: tile ids run over L2
# "sections" of l2_heads (batch, head)s (K and V of one section fit in ~32 MB of L2); inside a
# section the m-tiles go from the last (most K/V blocks when causal) to the first, heads fastest.
# Every program takes tile pid first, then the next id from a global atomic counter (one
# atomic_add by the producer per tile, issued after the tile's last K/V load so that its latency
# hides under the consumers' last blocks), so an SM that finishes early takes the next-longest
# tile. The producer decodes the id and hands the work item (b, h, m_start, n_blocks,
# n_unmasked) to the consumer warpgroups through shared memory: it stores it, syncs its warp,
# then arms q_bar (mbarrier arrive: release); the consumers read it after waiting on q_bar
# (acquire), so they hold none of the schedule's scalars (hdim 256 spilled 20 B when they
# decoded the id themselves). After the last tile the producer stores more = 0 and arrives on
# q_bar without a load: the consumers' stop signal. The counter resets itself: the
# fetches of one launch return exactly 0 .. num_tiles - 1 (num_tiles - grid of them succeed and
# every program's last fails), so the program that gets num_tiles - 1 is the launch's last
# reader and writes 0 back for the next launch (stream order). forward() keeps one counter per
# (device, stream).
# --------------------------------------------------------------------------------------------
@gluon.jit
def _tile_info_lpt(tile, n_bh, num_m_tiles, l2_heads, heads, kv_group, seqlen_q, seqlen_k,
                   CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                   BOTTOM: gl.constexpr = 0):
    """Tile id of the dynamic schedule -> (b, h, kvh, m_start, n_blocks, n_unmasked). BOTTOM
    (bottom_tiles, causal): m-tiles counted from seqlen_q's end, the first may start below 0."""
    sec_tiles = l2_heads * num_m_tiles
    sec = tile // sec_tiles
    r = tile - sec * sec_tiles
    sec_heads = gl.minimum(l2_heads, n_bh - sec * l2_heads)  # the last section may be short
    m_rev = r // sec_heads
    bh = sec * l2_heads + (r - m_rev * sec_heads)
    pid_m = num_m_tiles - 1 - m_rev  # longest first
    b = bh // heads
    h = bh % heads
    kvh = h // kv_group
    if BOTTOM and CAUSAL:
        m_start = seqlen_q - (m_rev + 1) * BLOCK_M  # still longest first
    else:
        m_start = pid_m * BLOCK_M
    causal_off = seqlen_k - seqlen_q
    if CAUSAL:
        m_end = gl.minimum(m_start + BLOCK_M, seqlen_q)
        kv_end = gl.minimum(m_end + causal_off, seqlen_k)
        kv_end = gl.maximum(kv_end, 0)
        n_blocks = gl.cdiv(kv_end, BLOCK_N)
        full_end = gl.maximum(gl.minimum(m_start + causal_off + 1, seqlen_k), 0)
        n_unmasked = gl.minimum(full_end // BLOCK_N, n_blocks)
    else:
        n_blocks = gl.cdiv(seqlen_k, BLOCK_N)
        n_unmasked = seqlen_k // BLOCK_N
    return b, h, kvh, m_start, n_blocks, n_unmasked


@gluon.jit
def _publish_tile(tile_smem, more, b, h, m_start, n_blocks, n_unmasked, heads, seqlen_q,
                  seqlen_k):
    # producer (1 warp): the decoded work item into shared memory, then a warp barrier so that
    # the lane that arms q_bar next (release) orders every lane's store before it. The shapes
    # (heads, seqlen_q, seqlen_k) travel along: values the consumers derive from kernel
    # arguments are hoisted to the kernel's entry, live across every partition and spilled in
    # the 24-register producer (hdim 256: 16-20 B); read from shared memory they are not.
    lay: gl.constexpr = gl.BlockedLayout([16], [32], [1], [0])
    idx = gl.arange(0, 16, layout=lay)
    vec = gl.where(idx == 0, more, gl.where(idx == 1, b, gl.where(idx == 2, h, gl.where(
        idx == 3, m_start, gl.where(idx == 4, n_blocks, gl.where(idx == 5, n_unmasked, gl.where(
            idx == 6, heads, gl.where(idx == 7, seqlen_q, gl.where(idx == 8, seqlen_k, 0)))))))))
    tile_smem.store(vec)
    gl.thread_barrier()


@gluon.jit
def _item(x, idx, k: gl.constexpr):
    return gl.sum(gl.where(idx == k, x, 0), axis=0)


@gluon.jit
def _read_tile(tile_smem, W: gl.constexpr = 4):
    # consumer partition (W warps: one warpgroup, or two with num_consumers 1), after waiting on
    # q_bar: (more, b, h, m_start, n_blocks, n_unmasked, heads, seqlen_q, seqlen_k); every thread
    # holds the 16 words, the extraction is in-thread
    lay: gl.constexpr = gl.BlockedLayout([16], [32], [W], [0])
    x = tile_smem.load(lay)
    idx = gl.arange(0, 16, layout=lay)
    return (_item(x, idx, 0), _item(x, idx, 1), _item(x, idx, 2), _item(x, idx, 3),
            _item(x, idx, 4), _item(x, idx, 5), _item(x, idx, 6), _item(x, idx, 7),
            _item(x, idx, 8))


@gluon.jit
def _q_l2_prefetch(q_ptr, b, h, m_start, seqlen_q, heads, D_REAL: gl.constexpr,
                   BLOCK_M: gl.constexpr):
    """q_l2_prefetch: prefetch.global.L2 of every 128-byte line of a tile's Q rows (rows past
    seqlen_q skipped), 32 lines per step of the (one-warp) producer, so that the tile's Q TMA
    load later reads L2, not HBM (run 108's stamps: 3500-4500 cycles from a free Q buffer to
    warpgroup 0 seeing Q at hdim 256 causal 1k). A hint only: nothing waits for it. q is
    contiguous (forward() makes it so with q_l2_prefetch): row r of (b, h) starts at element
    ((b * seqlen_q + r) * heads + h) * D_REAL (strides as arguments spilled the hdim 256
    producer)."""
    LINES: gl.constexpr = (D_REAL * 2 + 127) // 128   # 16-bit elements, 64 per line
    W: gl.constexpr = 32 * gl.num_warps()
    lay: gl.constexpr = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    lane = gl.arange(0, W, layout=lay)
    row0 = b.to(gl.int64) * seqlen_q + m_start
    for it in range(0, (BLOCK_M * LINES + W - 1) // W):
        idx = it * W + lane
        row = idx // LINES
        line = idx - row * LINES
        ok = (row < BLOCK_M) & (m_start + row < seqlen_q)
        ptrs = q_ptr + ((row0 + row) * heads + h) * D_REAL + line * 64
        gl.inline_asm_elementwise(
            "{ .reg .pred p; setp.ne.u32 p, $2, 0; @p prefetch.global.L2 [$1]; mov.u32 $0, 0; }",
            "=r,l,r", [ptrs, ok.to(gl.int32)], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _producer_mid_fetch(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, k_ready, v_ready,
                        kv_empty, tile_counter, b, h, kvh, m_start, n_blocks,
                        BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr, kv_base,
                        NC: gl.constexpr = 2, PF: gl.constexpr = False, q_ptr=None, n_bh=0,
                        num_m_tiles=0, l2_heads=0, heads=0, kv_group=0, seqlen_q=0,
                        seqlen_k=0, CAUSAL: gl.constexpr = False,
                        BLOCK_M: gl.constexpr = 128, D_REAL: gl.constexpr = 128):
    """early_fetch 2: _producer's loads (no kv_reverse / kv_release_nb) with the next tile's
    fetch (Triton's atomic_add, which waits for its value: ~2600-3000 cycles in run 107's
    stamps) after the tile's first NUM_STAGES K/V loads, where the producer would otherwise wait
    for block 0's stage to be released (Q's load, block 0's QK^T); with fewer blocks, after the
    last. PF (q_l2_prefetch): then the next tile's Q rows prefetched into L2 (_q_l2_prefetch).
    Returns the fetched value. (Its Q load restates _producer's: a shared helper called from
    _producer changed the SASS of two pinned earlier rows, no_mlim at hdim 256 and no_qrel at
    hdim 128 causal.)"""
    if NC == 3:
        M_Q: gl.constexpr = q_desc.block_type.shape[1]
        mbarrier.expect(q_bar, 3 * q_desc.block_type.nbytes)
        for i in gl.static_range(3):
            tma.async_copy_global_to_shared(q_desc, [b, m_start + i * M_Q, h, 0], q_bar,
                                            q_smem.index(i))
    else:
        mbarrier.expect(q_bar, q_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(q_desc, [b, m_start, h, 0], q_bar, q_smem)
    r = gl.program_id(0) * 0
    for j in range(n_blocks):
        if j == NUM_STAGES:
            r = gl.atomic_add(tile_counter, 1)
            if PF:
                _next_q_l2_prefetch(r, q_ptr, n_bh, num_m_tiles, l2_heads, heads, kv_group,
                                    seqlen_q, seqlen_k, CAUSAL, BLOCK_M, BLOCK_N, D_REAL)
        _load_kv_block(k_desc, v_desc, k_smem, v_smem, k_ready, v_ready, kv_empty, b, kvh, j,
                       kv_base + j, BLOCK_N, NUM_STAGES)
    if n_blocks <= NUM_STAGES:
        r = gl.atomic_add(tile_counter, 1)
        if PF:
            _next_q_l2_prefetch(r, q_ptr, n_bh, num_m_tiles, l2_heads, heads, kv_group,
                                seqlen_q, seqlen_k, CAUSAL, BLOCK_M, BLOCK_N, D_REAL)
    return r


@gluon.jit
def _next_q_l2_prefetch(r, q_ptr, n_bh, num_m_tiles, l2_heads, heads,
                        kv_group, seqlen_q, seqlen_k, CAUSAL: gl.constexpr,
                        BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, D_REAL: gl.constexpr):
    # the fetched value r names this program's next tile, r + grid (none past the last)
    nxt = r + gl.num_programs(0)
    if nxt < n_bh * num_m_tiles:
        b, h, kvh, m_start, n_blocks, n_unmasked = _tile_info_lpt(
            nxt, n_bh, num_m_tiles, l2_heads, heads, kv_group, seqlen_q, seqlen_k, CAUSAL,
            BLOCK_M, BLOCK_N)
        _q_l2_prefetch(q_ptr, b, h, m_start, seqlen_q, heads, D_REAL, BLOCK_M)


@gluon.jit
def _producer_dynamic(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, q_empty,
                      k_ready, v_ready, kv_empty, tile_smem, tile_counter,
                      n_bh, num_m_tiles, l2_heads, heads, kv_group, seqlen_q, seqlen_k,
                      CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                      NUM_STAGES: gl.constexpr, NC: gl.constexpr = 2, DIAG: gl.constexpr = 0,
                      lse_ptr=None, q_ptr=None, D_REAL: gl.constexpr = 128):
    # DIAG: the kernel's QPF_DIAG; bit 32 (kv_reverse) reverses the key blocks' order; bit 2048
    # (early_fetch 1) fetches the next tile's id at the start of this tile, not after its last
    # K/V load; bit 4096 (early_fetch 2) fetches it after the tile's first NUM_STAGES K/V loads
    # (_producer_mid_fetch), with bit 8192 (q_l2_prefetch) the next tile's Q rows then
    # prefetched into L2 (q_ptr, contiguous; D_REAL: the tensors' head dim); bit 16
    # (diag_stamps) the producer's clock stamps in the tile's slots 12-14 (lse_ptr): 13 at the
    # tile's top (its id known), 12 once Q's buffer was free (the Q load follows), 14 after the
    # tile's last K/V load was issued
    num_tiles = n_bh * num_m_tiles
    grid = gl.num_programs(0)
    c = gl.program_id(0) * 0  # K/V ring counter, carried across tiles
    i = gl.program_id(0) * 0  # tiles done: q_empty / q_bar phase
    tile = gl.program_id(0)
    while tile < num_tiles:
        b, h, kvh, m_start, n_blocks, n_unmasked = _tile_info_lpt(
            tile, n_bh, num_m_tiles, l2_heads, heads, kv_group, seqlen_q, seqlen_k,
            CAUSAL, BLOCK_M, BLOCK_N, DIAG & 32768)
        if DIAG & 2048:  # early_fetch 1: the fetch at the top (its wait before the Q load)
            r = gl.atomic_add(tile_counter, 1)
        if DIAG & 16:
            stamp_base = (b * heads + h) * seqlen_q + m_start
            if (DIAG & 32768) * CAUSAL:  # bottom_tiles: the tile's last 32 rows (the first
                stamp_base += BLOCK_M - 32   # may start below 0)
            _stamp(lse_ptr, stamp_base, 13, _CLOCK)
        mbarrier.wait(q_empty, (i & 1) ^ 1)  # the consumers have read Q and the item of tile i-1
        if DIAG & 16:
            _stamp(lse_ptr, stamp_base, 12, _CLOCK)
        _publish_tile(tile_smem, 1, b, h, m_start, n_blocks, n_unmasked, heads, seqlen_q,
                      seqlen_k)
        if DIAG & 4096:  # early_fetch 2: the fetch among the loads (_producer_mid_fetch)
            r = _producer_mid_fetch(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar,
                                    k_ready, v_ready, kv_empty, tile_counter, b, h,
                                    kvh, m_start, n_blocks, BLOCK_N, NUM_STAGES, c, NC,
                                    DIAG & 8192, q_ptr, n_bh, num_m_tiles,
                                    l2_heads, heads, kv_group, seqlen_q, seqlen_k, CAUSAL,
                                    BLOCK_M, D_REAL)
        else:
            _producer(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, k_ready, v_ready,
                      kv_empty, b, h, kvh, m_start, n_blocks, BLOCK_N, NUM_STAGES, c, NC,
                      DIAG & 32, DIAG & 64)
        if DIAG & 16:
            _stamp(lse_ptr, stamp_base, 14, _CLOCK)
        if not (DIAG & (2048 | 4096)):
            r = gl.atomic_add(tile_counter, 1)
        if r == num_tiles - 1:  # the launch's last fetch: reset the counter for the next launch
            gl.atomic_xchg(tile_counter, 0)
        c += n_blocks
        i += 1
        tile = r + grid
    # stop signal: more = 0, q_bar completed by a plain arrive (no load)
    mbarrier.wait(q_empty, (i & 1) ^ 1)
    _publish_tile(tile_smem, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    mbarrier.arrive(q_bar, count=1)
    if DIAG & 64:
        _nb_drain(c, NUM_STAGES)


@gluon.jit
def _load_kv_block(k_desc, v_desc, k_smem, v_smem, k_ready, v_ready, kv_empty, b, kvh, j, pos,
                   BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr):
    # key block j of (b, kvh) into ring position pos, once every consumer released that stage's
    # K (kv_empty[s]) and V (kv_empty[NUM_STAGES + s]) of position pos - NUM_STAGES
    _load_ring(k_desc, k_smem, k_ready, kv_empty, b, kvh, j, pos, 0, BLOCK_N, NUM_STAGES)
    _load_ring(v_desc, v_smem, v_ready, kv_empty, b, kvh, j, pos, NUM_STAGES, BLOCK_N,
               NUM_STAGES)


@gluon.jit
def _see_release(ready, kv_empty, kv_base, j, n_blocks, OFF: gl.constexpr,
                 NUM_STAGES: gl.constexpr):
    # ragged_split: a block this warpgroup does not read: once its K (OFF 0) or V (OFF
    # NUM_STAGES) has landed, release that stage (kv_empty's one arrival of this warpgroup)
    if j < n_blocks:
        s = (kv_base + j) % NUM_STAGES
        mbarrier.wait(ready.index(s), ((kv_base + j) // NUM_STAGES) & 1)
        mbarrier.arrive(kv_empty.index(OFF + s), count=1)


@gluon.jit
def _load_ring(desc, smem, ready, kv_empty, b, kvh, j, pos, OFF: gl.constexpr,
               BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr):
    # key block j's K (OFF 0) or V (OFF NUM_STAGES) into ring position pos once that stage's K
    # or V of position pos - NUM_STAGES is released (_load_kv_block: both; ragged_split's
    # producer: a round's three K, then its three V)
    s = pos % NUM_STAGES
    mbarrier.wait(kv_empty.index(OFF + s), ((pos // NUM_STAGES) & 1) ^ 1)
    mbarrier.expect(ready.index(s), desc.block_type.nbytes)
    tma.async_copy_global_to_shared(desc, [b, j * BLOCK_N, kvh, 0], ready.index(s),
                                    smem.index(s))


@gluon.jit
def _prefetch_q(q_desc, q_smem, q_bar, q_empty, tile_smem, nxt, kk, num_tiles, n_bh, num_m_tiles,
                l2_heads, heads, kv_group, seqlen_q, seqlen_k,
                CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                NC: gl.constexpr = 2):
    # v10: the work item and Q of this program's kk-th tile (nxt) into buffer kk % 2, once the
    # consumers released that buffer (their arrival during tile kk - 1); past the last tile the
    # stop signal (more = 0, q_bar completed by a plain arrive)
    sb = kk % 2
    # completion (kk - 1) // 2 of q_empty[sb] for kk >= 1; for kk = 0 the "previous" phase of a
    # fresh barrier, which passes at once (written without a negative division: -1 & 1 = 1)
    mbarrier.wait(q_empty.index(sb), ((kk + 1) // 2 - 1) & 1)
    if nxt < num_tiles:
        b, h, kvh, m_start, n_blocks, n_unmasked = _tile_info_lpt(
            nxt, n_bh, num_m_tiles, l2_heads, heads, kv_group, seqlen_q, seqlen_k,
            CAUSAL, BLOCK_M, BLOCK_N)
        _publish_tile(tile_smem.index(sb), 1, b, h, m_start, n_blocks, n_unmasked, heads,
                      seqlen_q, seqlen_k)
        if NC == 3:  # three boxes of BLOCK_M // 3 rows into q_smem[4 sb .. 4 sb + 2]
            M_Q: gl.constexpr = q_desc.block_type.shape[1]
            mbarrier.expect(q_bar.index(sb), 3 * q_desc.block_type.nbytes)
            for i in gl.static_range(3):
                tma.async_copy_global_to_shared(q_desc, [b, m_start + i * M_Q, h, 0],
                                                q_bar.index(sb), q_smem.index(4 * sb + i))
        else:
            mbarrier.expect(q_bar.index(sb), q_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(q_desc, [b, m_start, h, 0], q_bar.index(sb),
                                            q_smem.index(sb))
    else:
        _publish_tile(tile_smem.index(sb), 0, 0, 0, 0, 0, 0, 0, 0, 0)
        mbarrier.arrive(q_bar.index(sb), count=1)


@gluon.jit
def _producer_dynamic_pf(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, q_empty,
                         k_ready, v_ready, kv_empty, tile_smem, tile_counter,
                         n_bh, num_m_tiles, l2_heads, heads, kv_group, seqlen_q, seqlen_k,
                         CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                         NUM_STAGES: gl.constexpr, NC: gl.constexpr = 2):
    # v10 (TMA_STORE == 3): _producer_dynamic with two Q buffers. The next tile's id is fetched
    # at the start of a tile, and its work item and Q are loaded after this tile's first
    # NUM_STAGES K/V loads (by then the consumers have released the other buffer), so a tile's
    # Q is in shared memory before the previous tile ends.
    num_tiles = n_bh * num_m_tiles
    grid = gl.num_programs(0)
    c = gl.program_id(0) * 0  # K/V ring counter, carried across tiles
    k = gl.program_id(0) * 0  # tiles of this program so far
    tile = gl.program_id(0)
    # the first tile: buffer 0 is free (a fresh q_empty: the phase-1 wait passes at once)
    _prefetch_q(q_desc, q_smem, q_bar, q_empty, tile_smem, tile, 0, num_tiles, n_bh, num_m_tiles,
                l2_heads, heads, kv_group, seqlen_q, seqlen_k, CAUSAL, BLOCK_M, BLOCK_N, NC)
    while tile < num_tiles:
        b, h, kvh, m_start, n_blocks, n_unmasked = _tile_info_lpt(
            tile, n_bh, num_m_tiles, l2_heads, heads, kv_group, seqlen_q, seqlen_k,
            CAUSAL, BLOCK_M, BLOCK_N)
        r = gl.atomic_add(tile_counter, 1)
        if r == num_tiles - 1:  # the launch's last fetch: reset the counter for the next launch
            gl.atomic_xchg(tile_counter, 0)
        nxt = r + grid
        for j in range(n_blocks):
            if j == NUM_STAGES:
                _prefetch_q(q_desc, q_smem, q_bar, q_empty, tile_smem, nxt, k + 1, num_tiles,
                            n_bh, num_m_tiles, l2_heads, heads, kv_group, seqlen_q, seqlen_k,
                            CAUSAL, BLOCK_M, BLOCK_N, NC)
            # (the K/V load of _producer's loop, as a helper here; calling it from _producer
            # changes the shipped hdim-128 causal row's SASS, pinned until a GPU run re-verifies)
            _load_kv_block(k_desc, v_desc, k_smem, v_smem, k_ready, v_ready, kv_empty, b, kvh,
                           j, c + j, BLOCK_N, NUM_STAGES)
        if n_blocks <= NUM_STAGES:
            _prefetch_q(q_desc, q_smem, q_bar, q_empty, tile_smem, nxt, k + 1, num_tiles,
                        n_bh, num_m_tiles, l2_heads, heads, kv_group, seqlen_q, seqlen_k,
                        CAUSAL, BLOCK_M, BLOCK_N, NC)
        c += n_blocks
        k += 1
        tile = nxt


@gluon.jit
def _q_box_for(q_desc, q_smem, q_bar, q_empty, tile_smem, w: gl.constexpr, k, more, b, h,
               m_start, n_blocks, n_unmasked, heads, seqlen_q, seqlen_k,
               RAGGED: gl.constexpr = 0):
    # q_per_warpgroup: consumer warpgroup w's work item and Q box (rows m_start + 64 w ..) of the
    # program's k-th tile, once that warpgroup released its box of tile k - 1 (its last QK^T);
    # past the last tile (more == 0) the stop signal, q_bar[w] completed by a plain arrive
    mbarrier.wait(q_empty.index(w), (k & 1) ^ 1)
    _publish_tile(tile_smem.index(w), more, b, h, m_start, n_blocks, n_unmasked, heads,
                  seqlen_q, seqlen_k)
    if more != 0:
        M_Q: gl.constexpr = q_desc.block_type.shape[1]
        q_row = m_start + w * M_Q
        if RAGGED:  # ragged_split: a tile of warpgroup 0's rows only gives every box those rows
            q_row = gl.where(m_start + M_Q >= seqlen_q, m_start, q_row)
        mbarrier.expect(q_bar.index(w), q_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(q_desc, [b, q_row, h, 0], q_bar.index(w),
                                        q_smem.index(w))
    else:
        mbarrier.arrive(q_bar.index(w), count=1)


@gluon.jit
def _producer_dynamic_qw(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, q_empty,
                         k_ready, v_ready, kv_empty, tile_smem, tile_counter,
                         n_bh, num_m_tiles, l2_heads, heads, kv_group, seqlen_q, seqlen_k,
                         CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                         NUM_STAGES: gl.constexpr, RAGGED: gl.constexpr = 0):
    # RAGGED (ragged_split): see _q_box_for.
    # q_per_warpgroup (session 13 candidate; three consumer warpgroups, O in its own boxes): each
    # consumer warpgroup has its own Q box, work-item slot, q_bar and q_empty, so a warpgroup that
    # finished its tile (under wg_bounds warpgroup 0 sees fewer key blocks than 1 and 2) starts
    # the next one without waiting for the others' last QK^T. Per tile: warpgroup 0's box, the
    # first K / V block, then warpgroups 1 and 2's boxes (the last to be released), then the
    # other blocks. The K / V ring is shared as before (every warpgroup releases every stage).
    num_tiles = n_bh * num_m_tiles
    grid = gl.num_programs(0)
    c = gl.program_id(0) * 0  # K/V ring counter, carried across tiles
    k = gl.program_id(0) * 0  # tiles of this program so far
    tile = gl.program_id(0)
    while tile < num_tiles:
        b, h, kvh, m_start, n_blocks, n_unmasked = _tile_info_lpt(
            tile, n_bh, num_m_tiles, l2_heads, heads, kv_group, seqlen_q, seqlen_k,
            CAUSAL, BLOCK_M, BLOCK_N)
        _q_box_for(q_desc, q_smem, q_bar, q_empty, tile_smem, 0, k, 1, b, h, m_start, n_blocks,
                   n_unmasked, heads, seqlen_q, seqlen_k)
        if RAGGED:
            # ragged_split: a tile of warpgroup 0's rows only is loaded three blocks at a time,
            # their K before their V (a round's K stages are all released by the end of its
            # QK^Ts: _consumer_ragged); other tiles block by block as below (g = 1)
            g = gl.where(m_start + BLOCK_M // 3 >= seqlen_q, 3, 1)
            for j0 in range(0, n_blocks, g):
                for j in range(j0, gl.minimum(j0 + g, n_blocks)):
                    _load_ring(k_desc, k_smem, k_ready, kv_empty, b, kvh, j, c + j, 0, BLOCK_N,
                               NUM_STAGES)
                    if j == 0:
                        for w in gl.static_range(1, 3):
                            _q_box_for(q_desc, q_smem, q_bar, q_empty, tile_smem, w, k, 1, b, h,
                                       m_start, n_blocks, n_unmasked, heads, seqlen_q, seqlen_k,
                                       RAGGED)
                for j in range(j0, gl.minimum(j0 + g, n_blocks)):
                    _load_ring(v_desc, v_smem, v_ready, kv_empty, b, kvh, j, c + j, NUM_STAGES,
                               BLOCK_N, NUM_STAGES)
        else:
            for j in range(n_blocks):
                _load_kv_block(k_desc, v_desc, k_smem, v_smem, k_ready, v_ready, kv_empty, b,
                               kvh, j, c + j, BLOCK_N, NUM_STAGES)
                if j == 0:
                    for w in gl.static_range(1, 3):
                        _q_box_for(q_desc, q_smem, q_bar, q_empty, tile_smem, w, k, 1, b, h,
                                   m_start, n_blocks, n_unmasked, heads, seqlen_q, seqlen_k)
        if n_blocks == 0:
            for w in gl.static_range(1, 3):
                _q_box_for(q_desc, q_smem, q_bar, q_empty, tile_smem, w, k, 1, b, h, m_start,
                           n_blocks, n_unmasked, heads, seqlen_q, seqlen_k, RAGGED)
        r = gl.atomic_add(tile_counter, 1)
        if r == num_tiles - 1:  # the launch's last fetch: reset the counter for the next launch
            gl.atomic_xchg(tile_counter, 0)
        c += n_blocks
        k += 1
        tile = r + grid
    for w in gl.static_range(3):  # the stop signal, per warpgroup
        _q_box_for(q_desc, q_smem, q_bar, q_empty, tile_smem, w, k, 0, 0, 0, 0, 0, 0, 0, 0, 0)


@gluon.jit
def _producer_dynamic_nc3(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, q_empty,
                          k_ready, v_ready, kv_empty, tile_smem, tile_counter,
                          n_bh, num_m_tiles, l2_heads, heads, kv_group, seqlen_q, seqlen_k,
                          CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                          NUM_STAGES: gl.constexpr, DIAG: gl.constexpr = 0, lse_ptr=None,
                          q_ptr=None, D_REAL: gl.constexpr = 128):
    # the three-consumer dynamic rows' producer: per-warpgroup Q (q_per_warpgroup, DIAG bit 256)
    # or one Q tile for the three (with its stamps, early_fetch and q_l2_prefetch: DIAG bits 16,
    # 2048, 4096, 8192)
    if DIAG & 256:
        _producer_dynamic_qw(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, q_empty,
                             k_ready, v_ready, kv_empty, tile_smem, tile_counter, n_bh,
                             num_m_tiles, l2_heads, heads, kv_group, seqlen_q, seqlen_k, CAUSAL,
                             BLOCK_M, BLOCK_N, NUM_STAGES, DIAG & 65536)
    else:
        _producer_dynamic(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, q_empty,
                          k_ready, v_ready, kv_empty, tile_smem, tile_counter, n_bh, num_m_tiles,
                          l2_heads, heads, kv_group, seqlen_q, seqlen_k, CAUSAL, BLOCK_M,
                          BLOCK_N, NUM_STAGES, 3, DIAG & (16 | 2048 | 4096 | 8192 | 32768),
                          lse_ptr,
                          q_ptr, D_REAL)


@gluon.jit
def _consumer_dynamic(q_smem, k_smem, v_smem, q_bar, q_empty, k_ready, v_ready, kv_empty,
                      turn_bars, out_ptr, lse_ptr, o_desc, tile_smem,
                      heads, seqlen_q, seqlen_k, qk_scale,
                      WG: gl.constexpr, CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr,
                      BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, NUM_STAGES: gl.constexpr,
                      OVERLAP: gl.constexpr, PINGPONG: gl.constexpr, D_REAL: gl.constexpr,
                      TMA_STORE: gl.constexpr, PP_MODE: gl.constexpr,
                      NC: gl.constexpr = 2, FMA: gl.constexpr = False, WGB: gl.constexpr = False,
                  SPLIT: gl.constexpr = False, DIAG: gl.constexpr = 0, o_half=None,
                  KOFF: gl.constexpr = -1, VOFF: gl.constexpr = -1, mbuf=None, mml=None):
    # DIAG: the kernel's QPF_DIAG bits (FwdConfig.diag_*); o_half: TMA_STORE == 4's O buffer;
    # KOFF / VOFF: asm_waits' barrier offsets (_consumer); mbuf / mml: ragged_split's hand-over
    # buffers (_consumer_ragged)
    if PINGPONG:
        if PP_MODE == 2:
            if WG == 0:
                _named_bar(1, True)
    # heads, seqlen_q, seqlen_k: taken from the work item instead (_publish_tile)
    c = gl.program_id(0) * 0  # K/V ring counter
    t = gl.program_id(0) * 0  # pingpong turn counter
    i = gl.program_id(0) * 0  # tiles done: q_bar phase
    more = gl.program_id(0) * 0 + 1
    if DIAG & 65536:
        r = gl.program_id(0) * 0  # ragged_split: ragged tiles done (the hand-over's phase)
    while more != 0:
        if TMA_STORE == 3:
            # v10: two Q buffers / work-item slots, tile i in buffer i % 2; the other buffer's
            # q_empty is arrived during this tile (_release_q_buffer)
            sb = i % 2
            mbarrier.wait(q_bar.index(sb), (i // 2) & 1)
            more, b, h, m_start, n_blocks, n_unmasked, hs, sq, sk = _read_tile(
                tile_smem.index(sb))
            if more != 0:
                if NC == 3:  # the boxes of buffer sb are q_smem[4 sb .. 4 sb + 2]
                    # one copy of the tile body per buffer, every Q box / q_bar / q_empty index a
                    # compile-time constant. The run-time-indexed form (4 * sb + WG, q_bar[sb],
                    # q_empty[1 - sb]) gave wrong rows and illegal addresses (device runs 15, 17,
                    # 20: even with one tile per program, sb == 0); this form passed the same
                    # cases (scripts/qpf_diag2.py, device run 20). Cause below the source level.
                    if sb == 0:
                        c, t = _consumer(q_smem, k_smem, v_smem, q_bar.index(0), k_ready,
                                         v_ready, kv_empty, turn_bars, out_ptr, lse_ptr, b, h,
                                         hs, sq, sk, sk - sq, qk_scale, m_start, n_blocks,
                                         n_unmasked, WG, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM,
                                         NUM_STAGES, OVERLAP, PINGPONG, c, t, (i // 2) & 1,
                                         q_empty.index(1), o_desc, D_REAL, True, TMA_STORE,
                                         PP_MODE, NC, FMA, WGB, SPLIT, 0, DIAG)
                    else:
                        c, t = _consumer(q_smem, k_smem, v_smem, q_bar.index(1), k_ready,
                                         v_ready, kv_empty, turn_bars, out_ptr, lse_ptr, b, h,
                                         hs, sq, sk, sk - sq, qk_scale, m_start, n_blocks,
                                         n_unmasked, WG, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM,
                                         NUM_STAGES, OVERLAP, PINGPONG, c, t, (i // 2) & 1,
                                         q_empty.index(0), o_desc, D_REAL, True, TMA_STORE,
                                         PP_MODE, NC, FMA, WGB, SPLIT, 4, DIAG)
                else:
                    c, t = _consumer(q_smem.index(sb), k_smem, v_smem, q_bar.index(sb), k_ready,
                                     v_ready, kv_empty, turn_bars, out_ptr, lse_ptr, b, h, hs,
                                     sq, sk, sk - sq, qk_scale, m_start, n_blocks, n_unmasked,
                                     WG, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM, NUM_STAGES, OVERLAP,
                                     PINGPONG, c, t, (i // 2) & 1, q_empty.index(1 - sb), o_desc,
                                     D_REAL, True, TMA_STORE, PP_MODE, NC, FMA, WGB, SPLIT, 0,
                                     DIAG)
                i += 1
        elif DIAG & 256:
            # q_per_warpgroup: this warpgroup's own Q box, work-item slot and barriers
            mbarrier.wait(q_bar.index(WG), i & 1)
            more, b, h, m_start, n_blocks, n_unmasked, hs, sq, sk = _read_tile(
                tile_smem.index(WG))
            if more != 0:
                if DIAG & 65536:  # ragged_split: a tile of warpgroup 0's rows only
                    if m_start + BLOCK_M // 3 >= sq:
                        c = _consumer_ragged(q_smem, k_smem, v_smem, q_bar.index(WG), k_ready,
                                             v_ready, kv_empty, turn_bars, mbuf, mml, lse_ptr,
                                             o_desc, b, h, hs, sq, sk, qk_scale, m_start,
                                             n_blocks, n_unmasked, WG, CAUSAL, BLOCK_M,
                                             BLOCK_N, HEAD_DIM, NUM_STAGES, c, i & 1,
                                             q_empty.index(WG), r, FMA, DIAG)
                        r += 1
                    else:
                        c, t = _consumer(q_smem, k_smem, v_smem, q_bar.index(WG), k_ready,
                                         v_ready, kv_empty, turn_bars, out_ptr, lse_ptr, b, h,
                                         hs, sq, sk, sk - sq, qk_scale, m_start, n_blocks,
                                         n_unmasked, WG, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM,
                                         NUM_STAGES, OVERLAP, PINGPONG, c, t, i & 1,
                                         q_empty.index(WG), o_desc, D_REAL, True, TMA_STORE,
                                         PP_MODE, NC, FMA, WGB, SPLIT, 0, DIAG)
                else:
                    c, t = _consumer(q_smem, k_smem, v_smem, q_bar.index(WG), k_ready,
                                     v_ready, kv_empty, turn_bars, out_ptr, lse_ptr, b, h, hs,
                                     sq, sk, sk - sq, qk_scale, m_start, n_blocks, n_unmasked,
                                     WG, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM, NUM_STAGES,
                                     OVERLAP, PINGPONG, c, t, i & 1, q_empty.index(WG), o_desc,
                                     D_REAL, True, TMA_STORE, PP_MODE, NC, FMA, WGB, SPLIT, 0,
                                     DIAG)
                i += 1
        else:
            mbarrier.wait(q_bar, i & 1)  # this tile's Q (or the stop signal) and its work item
            more, b, h, m_start, n_blocks, n_unmasked, hs, sq, sk = _read_tile(
                tile_smem, 8 if NC == 1 else 4)
            if more != 0:
                c, t = _consumer(q_smem, k_smem, v_smem, q_bar, k_ready, v_ready, kv_empty,
                                 turn_bars, out_ptr, lse_ptr, b, h, hs, sq, sk,
                                 sk - sq, qk_scale, m_start, n_blocks, n_unmasked,
                                 WG, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM, NUM_STAGES, OVERLAP,
                                 PINGPONG, c, t, i & 1, q_empty, o_desc, D_REAL, True, TMA_STORE,
                                 PP_MODE, NC, FMA, WGB, SPLIT, 0, DIAG, o_half, KOFF, VOFF)
                i += 1
    if TMA_STORE == 2:
        tma.store_wait(0)  # the last tile's O store has read its shared memory
    if TMA_STORE == 3:
        tma.store_wait(0)
        if DIAG & 4:
            # diagnostic (diag_joint_exit): no consumer warpgroup leaves before every one has
            # finished its last tile (turn_bars[0], unused without pingpong, initialised with
            # count NUM_CONSUMERS for this; used once: phase 0)
            gl.thread_barrier()
            mbarrier.arrive(turn_bars.index(0), count=1)
            mbarrier.wait(turn_bars.index(0), 0)


@gluon.jit
def _consumer_dynamic_wg0(q_smem, k_smem, v_smem, q_bar, q_empty, k_ready, v_ready, kv_empty,
                          turn_bars, out_ptr, lse_ptr, o_desc, tile_smem,
                          heads, seqlen_q, seqlen_k, qk_scale,
                          CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                          HEAD_DIM: gl.constexpr, NUM_STAGES: gl.constexpr,
                          OVERLAP: gl.constexpr, PINGPONG: gl.constexpr, D_REAL: gl.constexpr,
                          TMA_STORE: gl.constexpr, PP_MODE: gl.constexpr,
                          NC: gl.constexpr = 2, FMA: gl.constexpr = False,
                          WGB: gl.constexpr = False, SPLIT: gl.constexpr = False,
                          DIAG: gl.constexpr = 0, o_half=None,
                          KOFF: gl.constexpr = -1, VOFF: gl.constexpr = -1,
                          mbuf=None, mml=None):
    if DIAG & 512:  # cross_tile (session 26 candidate)
        _consumer_xt(q_smem, k_smem, v_smem, q_bar, q_empty, k_ready, v_ready, kv_empty,
                     turn_bars, lse_ptr, o_desc, tile_smem, qk_scale, 0, CAUSAL, BLOCK_M,
                     BLOCK_N, HEAD_DIM, NUM_STAGES, FMA, DIAG)
    else:
        _consumer_dynamic(q_smem, k_smem, v_smem, q_bar, q_empty, k_ready, v_ready, kv_empty,
                          turn_bars, out_ptr, lse_ptr, o_desc, tile_smem,
                          heads, seqlen_q, seqlen_k, qk_scale,
                          0, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM, NUM_STAGES, OVERLAP,
                          PINGPONG, D_REAL, TMA_STORE, PP_MODE, NC, FMA, WGB, SPLIT, DIAG,
                          o_half, KOFF, VOFF, mbuf, mml)


@gluon.jit
def _consumer_dynamic_wg1(q_smem, k_smem, v_smem, q_bar, q_empty, k_ready, v_ready, kv_empty,
                          turn_bars, out_ptr, lse_ptr, o_desc, tile_smem,
                          heads, seqlen_q, seqlen_k, qk_scale,
                          CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                          HEAD_DIM: gl.constexpr, NUM_STAGES: gl.constexpr,
                          OVERLAP: gl.constexpr, PINGPONG: gl.constexpr, D_REAL: gl.constexpr,
                          TMA_STORE: gl.constexpr, PP_MODE: gl.constexpr,
                          NC: gl.constexpr = 2, FMA: gl.constexpr = False,
                          WGB: gl.constexpr = False, SPLIT: gl.constexpr = False,
                          DIAG: gl.constexpr = 0, o_half=None,
                          KOFF: gl.constexpr = -1, VOFF: gl.constexpr = -1,
                          mbuf=None, mml=None):
    if DIAG & 512:  # cross_tile (session 26 candidate)
        _consumer_xt(q_smem, k_smem, v_smem, q_bar, q_empty, k_ready, v_ready, kv_empty,
                     turn_bars, lse_ptr, o_desc, tile_smem, qk_scale, 1, CAUSAL, BLOCK_M,
                     BLOCK_N, HEAD_DIM, NUM_STAGES, FMA, DIAG)
    else:
        _consumer_dynamic(q_smem, k_smem, v_smem, q_bar, q_empty, k_ready, v_ready, kv_empty,
                          turn_bars, out_ptr, lse_ptr, o_desc, tile_smem,
                          heads, seqlen_q, seqlen_k, qk_scale,
                          1, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM, NUM_STAGES, OVERLAP,
                          PINGPONG, D_REAL, TMA_STORE, PP_MODE, NC, FMA, WGB, SPLIT, DIAG,
                          o_half, KOFF, VOFF, mbuf, mml)


@gluon.jit
def _consumer_dynamic_wg2(q_smem, k_smem, v_smem, q_bar, q_empty, k_ready, v_ready, kv_empty,
                          turn_bars, out_ptr, lse_ptr, o_desc, tile_smem,
                          heads, seqlen_q, seqlen_k, qk_scale,
                          CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                          HEAD_DIM: gl.constexpr, NUM_STAGES: gl.constexpr,
                          OVERLAP: gl.constexpr, PINGPONG: gl.constexpr, D_REAL: gl.constexpr,
                          TMA_STORE: gl.constexpr, PP_MODE: gl.constexpr,
                          NC: gl.constexpr = 2, FMA: gl.constexpr = False,
                          WGB: gl.constexpr = False, SPLIT: gl.constexpr = False,
                          DIAG: gl.constexpr = 0, mbuf=None, mml=None):
    _consumer_dynamic(q_smem, k_smem, v_smem, q_bar, q_empty, k_ready, v_ready, kv_empty,
                      turn_bars, out_ptr, lse_ptr, o_desc, tile_smem,
                      heads, seqlen_q, seqlen_k, qk_scale,
                      2, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM, NUM_STAGES, OVERLAP, PINGPONG,
                      D_REAL, TMA_STORE, PP_MODE, NC, FMA, WGB, SPLIT, DIAG, None, -1, -1, mbuf,
                      mml)


@gluon.jit
def _consumer_ragged(q_smem, k_smem, v_smem, q_bar, k_ready, v_ready, kv_empty, mbars, mbuf, mml,
                     lse_ptr, o_desc, b, h, heads, seqlen_q, seqlen_k, qk_scale, m_start,
                     n_blocks, n_unmasked, WG: gl.constexpr, CAUSAL: gl.constexpr,
                     BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr,
                     NUM_STAGES: gl.constexpr, kv_base, q_phase, q_empty, r,
                     FMA: gl.constexpr = False, DIAG: gl.constexpr = 0):
    """ragged_split (session 31 candidate): one m-tile whose rows all belong to warpgroup 0 (its
    rows m_start .. m_start + BLOCK_M / 3), computed by the three consumer warpgroups together.

    The producer loaded those rows into every warpgroup's Q box (_q_box_for). The key blocks go
    in rounds of three, block r0 + w to warpgroup w. Every warpgroup still waits for and releases
    every block, in order (a stage refills only once all three released it, and a parity wait
    is sound only for a waiter that saw the stage's previous load land), but a round's other
    two blocks are released early: their K before this warpgroup's QK^T, their V before its P V.
    The producer loads such a tile three K, then three V (_producer_dynamic_qw), so the next
    round's K loads while this round's softmax and P V run. (Run 127's first form released the
    others' blocks in plain loop order, after its own earlier block, and loaded K / V block by
    block: each round waited ~2k cycles for its loads.) Warpgroups 1 and 2 then hand
    their running max, sum and unnormalised fp32 O to warpgroup 0 in shared memory (mbuf: O,
    [2, M_WG, HEAD_DIM]; mml: m and l, [4, M_WG]) and warpgroup 0 merges the three, normalises
    and stores O and lse as _consumer does (TMA_STORE == 2, its O box 4). mbars[2] (count 2):
    both partials written; mbars[3] (count 1): warpgroup 0 has read them. r: the ragged tiles
    this warpgroup has done, the hand-over's phase. DIAG bit 16: the stamps of _consumer's slots
    0, 1, 3 / 5, 4, 6, 7 and 8 + WG. Returns the K/V ring counter after the tile."""
    M_WG: gl.constexpr = BLOCK_M // 3
    dtype: gl.constexpr = q_smem.dtype
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HEAD_DIM, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    STAMP: gl.constexpr = DIAG & 16

    q = q_smem.index(WG).reshape([M_WG, HEAD_DIM])
    rows = m_start + gl.arange(0, M_WG, layout=row_s)  # every warpgroup: warpgroup 0's rows
    causal_off = seqlen_k - seqlen_q
    m_i = gl.full([M_WG], float("-inf"), gl.float32, layout=row_s)
    l_i = gl.zeros([M_WG], gl.float32, layout=row_s)
    acc = gl.zeros([M_WG, HEAD_DIM], gl.float32, layout=o_layout)
    s_zero = gl.zeros([M_WG, BLOCK_N], gl.float32, layout=s_layout)
    stamp_base = (b * heads + h) * seqlen_q + m_start
    if STAMP:
        if WG == 0:
            _stamp(lse_ptr, stamp_base, 0, _CLOCK)
            _stamp(lse_ptr, stamp_base, 6, _SMID)
            _stamp(lse_ptr, stamp_base, 7, _GTIMER)
    mbarrier.wait(q_bar, q_phase)
    if STAMP:
        if WG == 0:
            _stamp(lse_ptr, stamp_base, 1, _CLOCK)
    p_op = gl.zeros([M_WG, BLOCK_N], dtype, layout=p_layout)
    for r0 in range(0, n_blocks, 3):  # rounds of three blocks, block r0 + w to warpgroup w
        jo = r0 + WG
        so = (kv_base + jo) % NUM_STAGES
        pho = ((kv_base + jo) // NUM_STAGES) & 1
        # the round's other K: seen to land and released before this warpgroup's QK^T
        for u in gl.static_range(3):
            if u != WG:
                _see_release(k_ready, kv_empty, kv_base, r0 + u, n_blocks, 0, NUM_STAGES)
        if jo < n_blocks:
            mbarrier.wait(k_ready.index(so), pho)
            k_t = k_smem.index(so).reshape([BLOCK_N, HEAD_DIM]).permute((1, 0))
            s_tok = warpgroup_mma(q, k_t, s_zero, use_acc=False, is_async=True)
            s_acc = warpgroup_mma_wait(0, deps=[s_tok])
            mbarrier.arrive(kv_empty.index(so), count=1)  # K read
            p, alpha, m_i, l_i = _masked_softmax(s_acc, m_i, l_i, rows, jo, seqlen_k, causal_off,
                                                 qk_scale, n_unmasked, 2, CAUSAL, BLOCK_N,
                                                 s_layout, FMA)
            acc = acc * gl.expand_dims(gl.convert_layout(alpha, row_o), 1)
            p_op = gl.convert_layout(p.to(dtype), p_layout)
        # the round's other V: the same, before this warpgroup's P V
        for u in gl.static_range(3):
            if u != WG:
                _see_release(v_ready, kv_empty, kv_base, r0 + u, n_blocks, NUM_STAGES,
                             NUM_STAGES)
        if jo < n_blocks:
            mbarrier.wait(v_ready.index(so), pho)
            v = v_smem.index(so).reshape([BLOCK_N, HEAD_DIM])
            o_tok = warpgroup_mma(p_op, v, acc, is_async=True)
            acc = warpgroup_mma_wait(0, deps=[o_tok])
            mbarrier.arrive(kv_empty.index(NUM_STAGES + so), count=1)  # V read
    mbarrier.arrive(q_empty, count=1)  # every QK^T of this warpgroup has completed
    if STAMP:
        _stamp(lse_ptr, stamp_base, 8 + WG, _CLOCK)
        _stamp(lse_ptr, stamp_base, 3 if WG == 0 else 5, _CLOCK)
    if WG != 0:
        mbarrier.wait(mbars.index(3), (r & 1) ^ 1)  # warpgroup 0 read the previous hand-over
        mbuf.index(WG - 1).store(acc)
        mml.index(2 * WG - 2).store(m_i)
        mml.index(2 * WG - 1).store(l_i)
        gl.thread_barrier()
        mbarrier.arrive(mbars.index(2), count=1)
    else:
        mbarrier.wait(mbars.index(2), r & 1)
        acc1 = mbuf.index(0).load(o_layout)
        acc2 = mbuf.index(1).load(o_layout)
        m1 = mml.index(0).load(row_s)
        l1 = mml.index(1).load(row_s)
        m2 = mml.index(2).load(row_s)
        l2 = mml.index(3).load(row_s)
        gl.thread_barrier()
        mbarrier.arrive(mbars.index(3), count=1)
        if FMA:  # FMA kept the raw-score maxima: to log2 units
            m_i = m_i * qk_scale
            m1 = m1 * qk_scale
            m2 = m2 * qk_scale
        mx = gl.maximum(gl.maximum(m_i, m1), m2)
        mx_safe = gl.where(mx == float("-inf"), 0.0, mx)
        f0 = gl.exp2(m_i - mx_safe)  # 0 for a warpgroup whose blocks held no visible key
        f1 = gl.exp2(m1 - mx_safe)
        f2 = gl.exp2(m2 - mx_safe)
        l_i = l_i * f0 + l1 * f1 + l2 * f2
        acc = (acc * gl.expand_dims(gl.convert_layout(f0, row_o), 1)
               + acc1 * gl.expand_dims(gl.convert_layout(f1, row_o), 1)
               + acc2 * gl.expand_dims(gl.convert_layout(f2, row_o), 1))
        # epilogue as _consumer's (TMA_STORE == 2, three consumers: O box 4)
        l_o = gl.convert_layout(l_i, row_o)
        out = acc / gl.expand_dims(gl.where(l_o == 0.0, 1.0, l_o), 1)
        lse = gl.where(l_i == 0.0, float("-inf"), (mx + gl.log2(l_i)) * 0.6931471805599453)
        tma.store_wait(0)
        gl.thread_barrier()
        q_smem.index(4).reshape([M_WG, HEAD_DIM]).store(out.to(dtype))
        fence_async_shared()
        gl.thread_barrier()
        tma.async_copy_shared_to_global(o_desc, [b, m_start, h, 0], q_smem.index(4))
        lse_ptrs = lse_ptr + (b.to(gl.int64) * heads + h) * seqlen_q + rows
        if STAMP:  # the stamps own the tile's first 32 lse entries
            gl.store(lse_ptrs, lse, mask=(rows < seqlen_q) & (rows >= m_start + 32))
            _stamp(lse_ptr, stamp_base, 4, _CLOCK)
        else:
            gl.store(lse_ptrs, lse, mask=rows < seqlen_q)
    return kv_base + n_blocks


@gluon.jit
def attn_fwd_kernel(q_desc, k_desc, v_desc, out_ptr, lse_ptr,
                    seqlen_q, seqlen_k, heads, kv_group, num_m_tiles, qk_scale,
                    CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                    HEAD_DIM: gl.constexpr, NUM_STAGES: gl.constexpr,
                    OVERLAP: gl.constexpr, PINGPONG: gl.constexpr,
                    CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr,
                    o_desc=None, D_REAL: gl.constexpr = None, PERSISTENT: gl.constexpr = False,
                    TMA_STORE: gl.constexpr = False, PP_MODE: gl.constexpr = 0,
                    NUM_CONSUMERS: gl.constexpr = 2, SOFTMAX_FMA: gl.constexpr = False,
                    tile_counter=None, l2_heads=None, DYNAMIC: gl.constexpr = False,
                    WG_SKIP: gl.constexpr = False, SPLIT_LOOPS: gl.constexpr = False,
                    n_bh_arg=None, QPF_DIAG: gl.constexpr = 0, KR_OFF: gl.constexpr = -1,
                    VR_OFF: gl.constexpr = -1, q_ptr=None):
    # 1-D grid over (batch * heads) x m-tiles, (batch, head) major so that neighbouring programs
    # share K/V in L2; with a causal mask the longest tiles (largest m) go first.
    # PERSISTENT: grid = number of SMs, each program walks the tiles pid, pid + grid, ...
    # (_tile_info); o_desc (TMA_STORE only): descriptor of out, box [1, BLOCK_M // 2, 1, HEAD_DIM].
    # D_REAL: the tensors' head_dim when HEAD_DIM is a padded (native) one.
    # DYNAMIC (with PERSISTENT, v5): FA3's dynamic longest-first schedule (_producer_dynamic):
    # tile_counter an int32 in global memory (0 at launch, 0 again at exit), l2_heads the
    # (batch, head)s per L2 section.
    # QPF_DIAG: diagnostic bits (FwdConfig.diag_*, _qpf_diag_bits), 0 in every shipped row:
    # with TMA_STORE == 3, 1 fence after the mbarrier inits, 2 O store waited at each tile's end,
    # 4 consumer warpgroups leave together (8: Q buffer indices as constants, now the only form);
    # 16 (diag_stamps, where _check_switch_support allows it) clock stamps per tile.
    # KR_OFF / VR_OFF (asm_waits, session 12 candidate): the shared-memory offsets of k_ready /
    # v_ready in this kernel's own allocation (_barrier_offsets); -1: mbarrier.wait.
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
    if NUM_CONSUMERS == 3:  # q_desc box: BLOCK_M // 3 rows; buffers 0..2 used
        if TMA_STORE >= 2:  # v10: two tiles' boxes, 0..2 and 4..6; o_buffer: Q 0..2, O 4..6
            q_smem = gl.allocate_shared_memory(dtype, [8] + q_desc.block_type.shape,
                                               q_desc.layout)
        else:
            q_smem = gl.allocate_shared_memory(dtype, [4] + q_desc.block_type.shape,
                                               q_desc.layout)
        q_load = q_smem
    elif QPF_DIAG & 1024:  # cross_tile 2: two Q tiles alternating by tile, then O's (index 2)
        q_smem = gl.allocate_shared_memory(dtype, [3] + q_desc.block_type.shape, q_desc.layout)
        q_load = q_smem
    elif TMA_STORE == 2:  # Q's tile and O's own tile (v6 o_buffer; the consumers split it)
        q_smem = gl.allocate_shared_memory(dtype, [2] + q_desc.block_type.shape, q_desc.layout)
        q_load = q_smem.index(0)
    elif TMA_STORE == 3:  # two Q tiles, alternating by tile; O leaves through its tile's (v10)
        q_smem = gl.allocate_shared_memory(dtype, [2] + q_desc.block_type.shape, q_desc.layout)
        q_load = q_smem
    else:
        q_smem = gl.allocate_shared_memory(dtype, q_desc.block_type.shape, q_desc.layout)
        q_load = q_smem
    k_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES] + k_desc.block_type.shape, k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES] + v_desc.block_type.shape, v_desc.layout)
    if TMA_STORE == 4:  # o_half: one O buffer of BLOCK_M // 2 rows, the consumers in turn
        o_half = gl.allocate_shared_memory(dtype, o_desc.block_type.shape, o_desc.layout)
    else:  # unused (None cannot be a warp_specialize argument)
        o_half = k_smem
    if TMA_STORE == 3:
        q_bar = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    elif QPF_DIAG & 1024:
        q_bar = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    elif QPF_DIAG & 256:  # q_per_warpgroup: one per consumer warpgroup
        q_bar = gl.allocate_shared_memory(gl.int64, [4, 1], mbarrier.MBarrierLayout())
    else:
        q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    # kv_empty[s]: K of stage s free; kv_empty[NUM_STAGES + s]: V of stage s free
    kv_empty = gl.allocate_shared_memory(gl.int64, [2 * NUM_STAGES, 1], mbarrier.MBarrierLayout())
    if QPF_DIAG & 65536:  # ragged_split: [2] both partials written, [3] warpgroup 0 read them
        turn_bars = gl.allocate_shared_memory(gl.int64, [4, 1], mbarrier.MBarrierLayout())
        mbarrier.init(turn_bars.index(2), count=2)
        mbarrier.init(turn_bars.index(3), count=1)
    else:
        turn_bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    if TMA_STORE == 3:
        mbarrier.init(q_bar.index(0), count=1)
        mbarrier.init(q_bar.index(1), count=1)
    elif QPF_DIAG & 1024:
        mbarrier.init(q_bar.index(0), count=1)
        mbarrier.init(q_bar.index(1), count=1)
    elif QPF_DIAG & 256:
        for i in gl.static_range(3):
            mbarrier.init(q_bar.index(i), count=1)
    else:
        mbarrier.init(q_bar, count=1)
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(kv_empty.index(i), count=NUM_CONSUMERS)  # one arrival per consumer wg
        mbarrier.init(kv_empty.index(NUM_STAGES + i), count=NUM_CONSUMERS)
    if TMA_STORE == 3:
        if QPF_DIAG & 4:  # diag_joint_exit: turn_bars[0] is the consumers' exit barrier
            mbarrier.init(turn_bars.index(0), count=NUM_CONSUMERS)
        else:
            mbarrier.init(turn_bars.index(0), count=1)
    else:
        mbarrier.init(turn_bars.index(0), count=1)
    mbarrier.init(turn_bars.index(1), count=1)

    # (the argument tuples are written inline: a tuple assigned to a local first would turn its
    # constexpr entries into tensors)
    if PERSISTENT:
        if TMA_STORE == 3:
            q_empty = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
            mbarrier.init(q_empty.index(0), count=NUM_CONSUMERS)
            mbarrier.init(q_empty.index(1), count=NUM_CONSUMERS)
            if QPF_DIAG & 1:  # diag_fence_init: the inits (all done by now) before any TMA
                fence_async_shared()
        elif QPF_DIAG & 1024:  # cross_tile 2: one per Q buffer, one arrival per warpgroup
            q_empty = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
            mbarrier.init(q_empty.index(0), count=NUM_CONSUMERS)
            mbarrier.init(q_empty.index(1), count=NUM_CONSUMERS)
        elif QPF_DIAG & 256:  # q_per_warpgroup: one per consumer warpgroup, one arrival each
            q_empty = gl.allocate_shared_memory(gl.int64, [4, 1], mbarrier.MBarrierLayout())
            for i in gl.static_range(3):
                mbarrier.init(q_empty.index(i), count=1)
        else:
            q_empty = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
            mbarrier.init(q_empty, count=NUM_CONSUMERS)  # one arrival per consumer warpgroup
        if DYNAMIC:
            # batch * heads from the host: computed here (from two kernel arguments) it was
            # hoisted to the kernel's entry and carried in a register into the producer, which
            # spilled it (4 B) in the hdim-256 causal kernel with the TMA store and split loops
            n_bh = n_bh_arg
        else:
            n_bh = q_desc.shape[0] * heads
        if DYNAMIC:
            # the current work item (_publish_tile)
            if TMA_STORE == 3:  # one work-item slot per Q buffer
                tile_smem = gl.allocate_shared_memory(gl.int32, [2, 16],
                                                      gl.SwizzledSharedLayout(1, 1, 1, [0]))
            elif QPF_DIAG & 1024:  # cross_tile 2: the same
                tile_smem = gl.allocate_shared_memory(gl.int32, [2, 16],
                                                      gl.SwizzledSharedLayout(1, 1, 1, [0]))
            elif QPF_DIAG & 256:  # q_per_warpgroup: one slot per consumer warpgroup
                tile_smem = gl.allocate_shared_memory(gl.int32, [4, 16],
                                                      gl.SwizzledSharedLayout(1, 1, 1, [0]))
            else:
                tile_smem = gl.allocate_shared_memory(gl.int32, [16],
                                                      gl.SwizzledSharedLayout(1, 1, 1, [0]))
            if NUM_CONSUMERS == 3 and TMA_STORE == 3:
                gl.warp_specialize([
                    (_consumer_dynamic_wg0, (q_smem, k_smem, v_smem, q_bar, q_empty, k_ready,
                        v_ready, kv_empty, turn_bars, out_ptr, lse_ptr, o_desc, tile_smem,
                        heads, seqlen_q, seqlen_k, qk_scale, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM,
                        NUM_STAGES, OVERLAP, PINGPONG, D_REAL, TMA_STORE, PP_MODE, NUM_CONSUMERS,
                        SOFTMAX_FMA, WG_SKIP, SPLIT_LOOPS, QPF_DIAG)),
                    (_consumer_dynamic_wg1, (q_smem, k_smem, v_smem, q_bar, q_empty, k_ready,
                        v_ready, kv_empty, turn_bars, out_ptr, lse_ptr, o_desc, tile_smem,
                        heads, seqlen_q, seqlen_k, qk_scale, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM,
                        NUM_STAGES, OVERLAP, PINGPONG, D_REAL, TMA_STORE, PP_MODE, NUM_CONSUMERS,
                        SOFTMAX_FMA, WG_SKIP, SPLIT_LOOPS, QPF_DIAG)),
                    (_consumer_dynamic_wg2, (q_smem, k_smem, v_smem, q_bar, q_empty, k_ready,
                        v_ready, kv_empty, turn_bars, out_ptr, lse_ptr, o_desc, tile_smem,
                        heads, seqlen_q, seqlen_k, qk_scale, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM,
                        NUM_STAGES, OVERLAP, PINGPONG, D_REAL, TMA_STORE, PP_MODE, NUM_CONSUMERS,
                        SOFTMAX_FMA, WG_SKIP, SPLIT_LOOPS, QPF_DIAG)),
                    (_producer_dynamic_pf, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem,
                        q_bar, q_empty, k_ready, v_ready, kv_empty, tile_smem, tile_counter, n_bh,
                        num_m_tiles, l2_heads, heads, kv_group, seqlen_q, seqlen_k, CAUSAL,
                        BLOCK_M, BLOCK_N, NUM_STAGES, NUM_CONSUMERS)),
                ], [4, 4, 1], [CONSUMER_REGS, CONSUMER_REGS, PRODUCER_REGS])
            elif (NUM_CONSUMERS == 3) and (QPF_DIAG & 65536):
                # ragged_split: the hand-over buffers of _consumer_ragged (fp32 O of warpgroups
                # 1-2, 32 KB at hdim 64, swizzled against the accumulator layout's bank
                # conflicts; their m and l)
                M3: gl.constexpr = BLOCK_M // 3
                mbuf = gl.allocate_shared_memory(gl.float32, [2, M3, HEAD_DIM],
                                                 gl.SwizzledSharedLayout(2, 1, 8, [1, 0]))
                mml = gl.allocate_shared_memory(gl.float32, [4, M3],
                                                gl.SwizzledSharedLayout(1, 1, 1, [0]))
                gl.warp_specialize([
                    (_consumer_dynamic_wg0, (q_smem, k_smem, v_smem, q_bar, q_empty, k_ready,
                        v_ready, kv_empty, turn_bars, out_ptr, lse_ptr, o_desc, tile_smem,
                        heads, seqlen_q, seqlen_k, qk_scale, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM,
                        NUM_STAGES, OVERLAP, PINGPONG, D_REAL, TMA_STORE, PP_MODE, NUM_CONSUMERS,
                        SOFTMAX_FMA, WG_SKIP, SPLIT_LOOPS, QPF_DIAG, o_half, -1, -1, mbuf, mml)),
                    (_consumer_dynamic_wg1, (q_smem, k_smem, v_smem, q_bar, q_empty, k_ready,
                        v_ready, kv_empty, turn_bars, out_ptr, lse_ptr, o_desc, tile_smem,
                        heads, seqlen_q, seqlen_k, qk_scale, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM,
                        NUM_STAGES, OVERLAP, PINGPONG, D_REAL, TMA_STORE, PP_MODE, NUM_CONSUMERS,
                        SOFTMAX_FMA, WG_SKIP, SPLIT_LOOPS, QPF_DIAG, o_half, -1, -1, mbuf, mml)),
                    (_consumer_dynamic_wg2, (q_smem, k_smem, v_smem, q_bar, q_empty, k_ready,
                        v_ready, kv_empty, turn_bars, out_ptr, lse_ptr, o_desc, tile_smem,
                        heads, seqlen_q, seqlen_k, qk_scale, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM,
                        NUM_STAGES, OVERLAP, PINGPONG, D_REAL, TMA_STORE, PP_MODE, NUM_CONSUMERS,
                        SOFTMAX_FMA, WG_SKIP, SPLIT_LOOPS, QPF_DIAG, mbuf, mml)),
                    (_producer_dynamic_nc3, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem,
                        q_bar, q_empty, k_ready, v_ready, kv_empty, tile_smem, tile_counter, n_bh,
                        num_m_tiles, l2_heads, heads, kv_group, seqlen_q, seqlen_k, CAUSAL,
                        BLOCK_M, BLOCK_N, NUM_STAGES, QPF_DIAG, lse_ptr,
                        q_ptr, D_REAL)),
                ], [4, 4, 1], [CONSUMER_REGS, CONSUMER_REGS, PRODUCER_REGS])
            elif NUM_CONSUMERS == 3:
                gl.warp_specialize([
                    (_consumer_dynamic_wg0, (q_smem, k_smem, v_smem, q_bar, q_empty, k_ready,
                        v_ready, kv_empty, turn_bars, out_ptr, lse_ptr, o_desc, tile_smem,
                        heads, seqlen_q, seqlen_k, qk_scale, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM,
                        NUM_STAGES, OVERLAP, PINGPONG, D_REAL, TMA_STORE, PP_MODE, NUM_CONSUMERS,
                        SOFTMAX_FMA, WG_SKIP, SPLIT_LOOPS, QPF_DIAG)),
                    (_consumer_dynamic_wg1, (q_smem, k_smem, v_smem, q_bar, q_empty, k_ready,
                        v_ready, kv_empty, turn_bars, out_ptr, lse_ptr, o_desc, tile_smem,
                        heads, seqlen_q, seqlen_k, qk_scale, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM,
                        NUM_STAGES, OVERLAP, PINGPONG, D_REAL, TMA_STORE, PP_MODE, NUM_CONSUMERS,
                        SOFTMAX_FMA, WG_SKIP, SPLIT_LOOPS, QPF_DIAG)),
                    (_consumer_dynamic_wg2, (q_smem, k_smem, v_smem, q_bar, q_empty, k_ready,
                        v_ready, kv_empty, turn_bars, out_ptr, lse_ptr, o_desc, tile_smem,
                        heads, seqlen_q, seqlen_k, qk_scale, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM,
                        NUM_STAGES, OVERLAP, PINGPONG, D_REAL, TMA_STORE, PP_MODE, NUM_CONSUMERS,
                        SOFTMAX_FMA, WG_SKIP, SPLIT_LOOPS, QPF_DIAG)),
                    (_producer_dynamic_nc3, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem,
                        q_bar, q_empty, k_ready, v_ready, kv_empty, tile_smem, tile_counter, n_bh,
                        num_m_tiles, l2_heads, heads, kv_group, seqlen_q, seqlen_k, CAUSAL,
                        BLOCK_M, BLOCK_N, NUM_STAGES, QPF_DIAG, lse_ptr,
                        q_ptr, D_REAL)),
                ], [4, 4, 1], [CONSUMER_REGS, CONSUMER_REGS, PRODUCER_REGS])
            elif (TMA_STORE == 3) or (QPF_DIAG & 1024):  # v10's producer (two Q buffers)
                gl.warp_specialize([
                    (_consumer_dynamic_wg0, (q_smem, k_smem, v_smem, q_bar, q_empty, k_ready,
                        v_ready, kv_empty, turn_bars, out_ptr, lse_ptr, o_desc, tile_smem,
                        heads, seqlen_q, seqlen_k, qk_scale, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM,
                        NUM_STAGES, OVERLAP, PINGPONG, D_REAL, TMA_STORE, PP_MODE, NUM_CONSUMERS,
                        SOFTMAX_FMA, WG_SKIP, SPLIT_LOOPS, QPF_DIAG)),
                    (_consumer_dynamic_wg1, (q_smem, k_smem, v_smem, q_bar, q_empty, k_ready,
                        v_ready, kv_empty, turn_bars, out_ptr, lse_ptr, o_desc, tile_smem,
                        heads, seqlen_q, seqlen_k, qk_scale, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM,
                        NUM_STAGES, OVERLAP, PINGPONG, D_REAL, TMA_STORE, PP_MODE, NUM_CONSUMERS,
                        SOFTMAX_FMA, WG_SKIP, SPLIT_LOOPS, QPF_DIAG)),
                    (_producer_dynamic_pf, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem,
                        q_bar, q_empty, k_ready, v_ready, kv_empty, tile_smem, tile_counter, n_bh,
                        num_m_tiles, l2_heads, heads, kv_group, seqlen_q, seqlen_k, CAUSAL,
                        BLOCK_M, BLOCK_N, NUM_STAGES)),
                ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])
            elif NUM_CONSUMERS == 1:  # one 8-warp consumer partition (session 12 candidate)
                gl.warp_specialize([
                    (_consumer_dynamic_wg0, (q_smem, k_smem, v_smem, q_bar, q_empty, k_ready,
                        v_ready, kv_empty, turn_bars, out_ptr, lse_ptr, o_desc, tile_smem,
                        heads, seqlen_q, seqlen_k, qk_scale, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM,
                        NUM_STAGES, OVERLAP, PINGPONG, D_REAL, TMA_STORE, PP_MODE, NUM_CONSUMERS,
                        SOFTMAX_FMA, WG_SKIP, SPLIT_LOOPS, QPF_DIAG, o_half, KR_OFF, VR_OFF)),
                    (_producer_dynamic, (q_desc, k_desc, v_desc, q_load, k_smem, v_smem, q_bar,
                        q_empty, k_ready, v_ready, kv_empty, tile_smem, tile_counter, n_bh,
                        num_m_tiles, l2_heads, heads, kv_group, seqlen_q, seqlen_k, CAUSAL,
                        BLOCK_M, BLOCK_N, NUM_STAGES, 1, QPF_DIAG, lse_ptr,
                        q_ptr, D_REAL)),
                ], [1], [PRODUCER_REGS])
            else:
                gl.warp_specialize([
                    (_consumer_dynamic_wg0, (q_smem, k_smem, v_smem, q_bar, q_empty, k_ready,
                        v_ready, kv_empty, turn_bars, out_ptr, lse_ptr, o_desc, tile_smem,
                        heads, seqlen_q, seqlen_k, qk_scale, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM,
                        NUM_STAGES, OVERLAP, PINGPONG, D_REAL, TMA_STORE, PP_MODE, NUM_CONSUMERS,
                        SOFTMAX_FMA, WG_SKIP, SPLIT_LOOPS, QPF_DIAG, o_half, KR_OFF, VR_OFF)),
                    (_consumer_dynamic_wg1, (q_smem, k_smem, v_smem, q_bar, q_empty, k_ready,
                        v_ready, kv_empty, turn_bars, out_ptr, lse_ptr, o_desc, tile_smem,
                        heads, seqlen_q, seqlen_k, qk_scale, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM,
                        NUM_STAGES, OVERLAP, PINGPONG, D_REAL, TMA_STORE, PP_MODE, NUM_CONSUMERS,
                        SOFTMAX_FMA, WG_SKIP, SPLIT_LOOPS, QPF_DIAG, o_half, KR_OFF, VR_OFF)),
                    (_producer_dynamic, (q_desc, k_desc, v_desc, q_load, k_smem, v_smem, q_bar,
                        q_empty, k_ready, v_ready, kv_empty, tile_smem, tile_counter, n_bh,
                        num_m_tiles, l2_heads, heads, kv_group, seqlen_q, seqlen_k, CAUSAL,
                        BLOCK_M, BLOCK_N, NUM_STAGES, 2, QPF_DIAG, lse_ptr,
                        q_ptr, D_REAL)),
                ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])
        elif NUM_CONSUMERS == 3:
            gl.warp_specialize([
                (_consumer_persistent_wg0, (q_smem, k_smem, v_smem, q_bar, q_empty, k_ready,
                    v_ready, kv_empty, turn_bars, out_ptr, lse_ptr, o_desc, n_bh, num_m_tiles,
                    heads, kv_group, seqlen_q, seqlen_k, qk_scale, CAUSAL, BLOCK_M, BLOCK_N,
                    HEAD_DIM, NUM_STAGES, OVERLAP, PINGPONG, D_REAL, TMA_STORE, PP_MODE,
                    NUM_CONSUMERS, SOFTMAX_FMA, SPLIT_LOOPS, WG_SKIP)),
                (_consumer_persistent_wg1, (q_smem, k_smem, v_smem, q_bar, q_empty, k_ready,
                    v_ready, kv_empty, turn_bars, out_ptr, lse_ptr, o_desc, n_bh, num_m_tiles,
                    heads, kv_group, seqlen_q, seqlen_k, qk_scale, CAUSAL, BLOCK_M, BLOCK_N,
                    HEAD_DIM, NUM_STAGES, OVERLAP, PINGPONG, D_REAL, TMA_STORE, PP_MODE,
                    NUM_CONSUMERS, SOFTMAX_FMA, SPLIT_LOOPS, WG_SKIP)),
                (_consumer_persistent_wg2, (q_smem, k_smem, v_smem, q_bar, q_empty, k_ready,
                    v_ready, kv_empty, turn_bars, out_ptr, lse_ptr, o_desc, n_bh, num_m_tiles,
                    heads, kv_group, seqlen_q, seqlen_k, qk_scale, CAUSAL, BLOCK_M, BLOCK_N,
                    HEAD_DIM, NUM_STAGES, OVERLAP, PINGPONG, D_REAL, TMA_STORE, PP_MODE,
                    NUM_CONSUMERS, SOFTMAX_FMA, SPLIT_LOOPS, WG_SKIP)),
                (_producer_persistent, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar,
                    q_empty, k_ready, v_ready, kv_empty, n_bh, num_m_tiles, heads, kv_group,
                    seqlen_q, seqlen_k, CAUSAL, BLOCK_M, BLOCK_N, NUM_STAGES, NUM_CONSUMERS)),
            ], [4, 4, 1], [CONSUMER_REGS, CONSUMER_REGS, PRODUCER_REGS])
        elif NUM_CONSUMERS == 1:  # one 8-warp consumer partition (session 12 candidate)
            gl.warp_specialize([
                (_consumer_persistent_wg0, (q_smem, k_smem, v_smem, q_bar, q_empty, k_ready,
                    v_ready, kv_empty, turn_bars, out_ptr, lse_ptr, o_desc, n_bh, num_m_tiles,
                    heads, kv_group, seqlen_q, seqlen_k, qk_scale, CAUSAL, BLOCK_M, BLOCK_N,
                    HEAD_DIM, NUM_STAGES, OVERLAP, PINGPONG, D_REAL, TMA_STORE, PP_MODE,
                    NUM_CONSUMERS, SOFTMAX_FMA, SPLIT_LOOPS, WG_SKIP, QPF_DIAG, o_half, KR_OFF,
                    VR_OFF)),
                (_producer_persistent, (q_desc, k_desc, v_desc, q_load, k_smem, v_smem, q_bar,
                    q_empty, k_ready, v_ready, kv_empty, n_bh, num_m_tiles, heads, kv_group,
                    seqlen_q, seqlen_k, CAUSAL, BLOCK_M, BLOCK_N, NUM_STAGES, 1, QPF_DIAG)),
            ], [1], [PRODUCER_REGS])
        else:
            gl.warp_specialize([
                (_consumer_persistent_wg0, (q_smem, k_smem, v_smem, q_bar, q_empty, k_ready,
                    v_ready, kv_empty, turn_bars, out_ptr, lse_ptr, o_desc, n_bh, num_m_tiles,
                    heads, kv_group, seqlen_q, seqlen_k, qk_scale, CAUSAL, BLOCK_M, BLOCK_N,
                    HEAD_DIM, NUM_STAGES, OVERLAP, PINGPONG, D_REAL, TMA_STORE, PP_MODE,
                    NUM_CONSUMERS, SOFTMAX_FMA, SPLIT_LOOPS, WG_SKIP, QPF_DIAG, o_half, KR_OFF,
                    VR_OFF)),
                (_consumer_persistent_wg1, (q_smem, k_smem, v_smem, q_bar, q_empty, k_ready,
                    v_ready, kv_empty, turn_bars, out_ptr, lse_ptr, o_desc, n_bh, num_m_tiles,
                    heads, kv_group, seqlen_q, seqlen_k, qk_scale, CAUSAL, BLOCK_M, BLOCK_N,
                    HEAD_DIM, NUM_STAGES, OVERLAP, PINGPONG, D_REAL, TMA_STORE, PP_MODE,
                    NUM_CONSUMERS, SOFTMAX_FMA, SPLIT_LOOPS, WG_SKIP, QPF_DIAG, o_half, KR_OFF,
                    VR_OFF)),
                (_producer_persistent, (q_desc, k_desc, v_desc, q_load, k_smem, v_smem, q_bar,
                    q_empty, k_ready, v_ready, kv_empty, n_bh, num_m_tiles, heads, kv_group,
                    seqlen_q, seqlen_k, CAUSAL, BLOCK_M, BLOCK_N, NUM_STAGES, 2, QPF_DIAG)),
            ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])
    else:
        if NUM_CONSUMERS == 3:
            gl.warp_specialize([
                (_consumer_wg0, (q_smem, k_smem, v_smem, q_bar, k_ready, v_ready, kv_empty,
                    turn_bars, out_ptr, lse_ptr, b, h, heads, seqlen_q, seqlen_k, causal_off,
                    qk_scale, m_start, n_blocks, n_unmasked, o_desc, CAUSAL, BLOCK_M, BLOCK_N,
                    HEAD_DIM, NUM_STAGES, OVERLAP, PINGPONG, D_REAL, TMA_STORE, PP_MODE,
                    NUM_CONSUMERS, SOFTMAX_FMA, WG_SKIP, SPLIT_LOOPS)),
                (_consumer_wg1, (q_smem, k_smem, v_smem, q_bar, k_ready, v_ready, kv_empty,
                    turn_bars, out_ptr, lse_ptr, b, h, heads, seqlen_q, seqlen_k, causal_off,
                    qk_scale, m_start, n_blocks, n_unmasked, o_desc, CAUSAL, BLOCK_M, BLOCK_N,
                    HEAD_DIM, NUM_STAGES, OVERLAP, PINGPONG, D_REAL, TMA_STORE, PP_MODE,
                    NUM_CONSUMERS, SOFTMAX_FMA, WG_SKIP, SPLIT_LOOPS)),
                (_consumer_wg2, (q_smem, k_smem, v_smem, q_bar, k_ready, v_ready, kv_empty,
                    turn_bars, out_ptr, lse_ptr, b, h, heads, seqlen_q, seqlen_k, causal_off,
                    qk_scale, m_start, n_blocks, n_unmasked, o_desc, CAUSAL, BLOCK_M, BLOCK_N,
                    HEAD_DIM, NUM_STAGES, OVERLAP, PINGPONG, D_REAL, TMA_STORE, PP_MODE,
                    NUM_CONSUMERS, SOFTMAX_FMA, WG_SKIP, SPLIT_LOOPS)),
                (_producer, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, k_ready,
                    v_ready, kv_empty, b, h, kvh, m_start, n_blocks, BLOCK_N, NUM_STAGES, 0,
                    NUM_CONSUMERS)),
            ], [4, 4, 1], [CONSUMER_REGS, CONSUMER_REGS, PRODUCER_REGS])
        else:
            gl.warp_specialize([
                (_consumer_wg0, (q_smem, k_smem, v_smem, q_bar, k_ready, v_ready, kv_empty,
                    turn_bars, out_ptr, lse_ptr, b, h, heads, seqlen_q, seqlen_k, causal_off,
                    qk_scale, m_start, n_blocks, n_unmasked, o_desc, CAUSAL, BLOCK_M, BLOCK_N,
                    HEAD_DIM, NUM_STAGES, OVERLAP, PINGPONG, D_REAL, TMA_STORE, PP_MODE,
                    NUM_CONSUMERS, SOFTMAX_FMA, WG_SKIP, SPLIT_LOOPS)),
                (_consumer_wg1, (q_smem, k_smem, v_smem, q_bar, k_ready, v_ready, kv_empty,
                    turn_bars, out_ptr, lse_ptr, b, h, heads, seqlen_q, seqlen_k, causal_off,
                    qk_scale, m_start, n_blocks, n_unmasked, o_desc, CAUSAL, BLOCK_M, BLOCK_N,
                    HEAD_DIM, NUM_STAGES, OVERLAP, PINGPONG, D_REAL, TMA_STORE, PP_MODE,
                    NUM_CONSUMERS, SOFTMAX_FMA, WG_SKIP, SPLIT_LOOPS)),
                (_producer, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, k_ready,
                    v_ready, kv_empty, b, h, kvh, m_start, n_blocks, BLOCK_N, NUM_STAGES)),
            ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])


# --------------------------------------------------------------------------------------------
# Session 26 candidate, off (FwdConfig.cross_tile, QPF_DIAG bit 512): the dynamic scheduler's
# two-consumer rows with the overlap, o_buffer and q_release_early (hdim 128's causal row) with
# the tile boundary pipelined. Each warpgroup issues its last P V of tile i, then waits for tile
# i+1's Q and work item and issues that tile's first QK^T, and only then waits for the P V and
# runs tile i's epilogue; the next tile's block-0 softmax follows. So the first QK^T and the wait
# for the next work item run under the epilogue, where in _consumer both warpgroups leave the
# tensor cores idle between the last P V and the next tile's first softmax (run 79's stamps at
# hdim 128 causal 1k: gap 360 + Q wait 154 + epilogue 1336 cycles per tile of ~14600).
# The ring, the producer and the Q release are _consumer's: Q is released after each
# warpgroup's last QK^T, before its last softmax, and the next tile's Q lands in the same
# buffer, so no second Q buffer is needed.
@gluon.jit
def _xt_rows(m_start, WG: gl.constexpr, M_WG: gl.constexpr, HEAD_DIM: gl.constexpr,
             row_s: gl.constexpr):
    rows = m_start + WG * M_WG + gl.arange(0, M_WG, layout=row_s)
    if HEAD_DIM == 128:  # as in _consumer with q_release_early (a 4 B spill otherwise)
        rows = gl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [rows], dtype=gl.int32,
                                         is_pure=False, pack=1)
    return rows


@gluon.jit
def _xt_tile(q_smem, q_bar, q_empty, tile_smem, i, WG: gl.constexpr, M_WG: gl.constexpr,
             BLOCK_M: gl.constexpr, HEAD_DIM: gl.constexpr, Q2: gl.constexpr):
    # the program's tile i once its q_bar completed: the work item (_read_tile's nine values),
    # this warpgroup's Q rows and the barrier that releases them; Q2 (two Q buffers): buffer i % 2
    if Q2:
        sb = i % 2
        mbarrier.wait(q_bar.index(sb), (i // 2) & 1)
        slot = tile_smem.index(sb)
        more, b, h, m_start, n_blocks, n_unmasked, heads, sq, sk = _read_tile(slot, 4)
        q_box = q_smem.index(sb)
        q_rel = q_empty.index(sb)
    else:
        mbarrier.wait(q_bar, i & 1)
        more, b, h, m_start, n_blocks, n_unmasked, heads, sq, sk = _read_tile(tile_smem, 4)
        q_box = q_smem.index(0)
        q_rel = q_empty
    q = q_box.reshape([BLOCK_M, HEAD_DIM]).slice(WG * M_WG, M_WG, dim=0)
    return more, b, h, m_start, n_blocks, n_unmasked, heads, sq, sk, q, q_rel


@gluon.jit
def _xt_block0(s_acc, c, n_blocks, n_unmasked, rows, seqlen_k, causal_off, qk_scale, kv_empty,
               q_empty, m_i, l_i, dtype: gl.constexpr, CAUSAL: gl.constexpr,
               BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr, s_layout: gl.constexpr,
               p_layout: gl.constexpr, FMA: gl.constexpr, Q2: gl.constexpr):
    # block 0 of a tile once its QK^T has completed: K_0 released, Q too if it was the only
    # QK^T (q_release_early; with two Q buffers, Q2, they are released a tile later), the
    # softmax (masked at run time, as _consumer's block 0)
    mbarrier.arrive(kv_empty.index(c % NUM_STAGES), count=1)
    if not Q2:
        if n_blocks == 1:
            mbarrier.arrive(q_empty, count=1)
    p, alpha, m_i, l_i = _masked_softmax(s_acc, m_i, l_i, rows, 0, seqlen_k, causal_off,
                                         qk_scale, n_unmasked, 2, CAUSAL, BLOCK_N, s_layout, FMA)
    return gl.convert_layout(p.to(dtype), p_layout), m_i, l_i


@gluon.jit
def _xt_store(out, lse, rows, o_buf, o_desc, lse_ptr, b, h, heads, seqlen_q, m_start,
              WG: gl.constexpr, BLOCK_M: gl.constexpr, HEAD_DIM: gl.constexpr,
              M_WG: gl.constexpr, DIAG: gl.constexpr, stamp_base):
    # a tile's O through its own buffer and lse (_consumer's o_buffer epilogue); the wait for
    # this store happens at the next tile's store or at the exit
    tma.store_wait(0)
    gl.thread_barrier()
    o_view = o_buf.reshape([BLOCK_M, HEAD_DIM]).slice(WG * M_WG, M_WG, dim=0)
    o_view.store(out)
    fence_async_shared()
    gl.thread_barrier()
    tma.async_copy_shared_to_global(o_desc, [b, m_start + WG * M_WG, h, 0],
                                    o_buf.slice(WG * M_WG, M_WG, dim=1))
    lse_ptrs = lse_ptr + (b.to(gl.int64) * heads + h) * seqlen_q + rows
    if DIAG & 16:  # the stamps own the tile's first 32 lse entries
        gl.store(lse_ptrs, lse, mask=(rows < seqlen_q) & (rows >= m_start + 32))
        if WG == 0:
            _stamp(lse_ptr, stamp_base, 4, _CLOCK)
    else:
        gl.store(lse_ptrs, lse, mask=rows < seqlen_q)


@gluon.jit
def _consumer_xt(q_smem, k_smem, v_smem, q_bar, q_empty, k_ready, v_ready, kv_empty, turn_bars,
                 lse_ptr, o_desc, tile_smem, qk_scale,
                 WG: gl.constexpr, CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr,
                 BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, NUM_STAGES: gl.constexpr,
                 FMA: gl.constexpr, DIAG: gl.constexpr):
    # One loop iteration: blocks 1.. of tile i, its last P V, its normalisation, tile i+1's work
    # item and first QK^T, tile i's O store under that QK^T, then tile i+1's block-0 softmax.
    # No product is in flight across the iteration's end or across a branch's merge (ptxas
    # serialises every wgmma of the kernel otherwise: "insufficient register resources for the
    # wgmma pipeline"), so the store is written in both branches of "is there a next block 0".
    # DIAG & 1024 (cross_tile 2, Q2): tile i's Q in buffer i % 2 (q_bar, q_empty and the work
    # item too, as v10's producer loads them), O in buffer 2; each warpgroup releases the
    # previous tile's buffer at the start of tile i (v10's schedule, _release_q_buffer's
    # arrival; O no longer passes through it), so the producer loads Q_{i+1} early in tile i.
    M_WG: gl.constexpr = BLOCK_M // 2
    Q2: gl.constexpr = (DIAG & 1024) != 0
    QREL: gl.constexpr = 0 if Q2 else 128
    dtype: gl.constexpr = q_smem.dtype
    if Q2:
        o_buf = q_smem.index(2)
    else:
        o_buf = q_smem.index(1)  # O's own tile (o_buffer), Q's is index 0
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HEAD_DIM, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    s_zero = gl.zeros([M_WG, BLOCK_N], gl.float32, layout=s_layout)

    c = gl.program_id(0) * 0  # K/V ring counter at the current tile's first block
    i = gl.program_id(0) * 0  # tiles done: q_bar phase
    (more, b, h, m_start, n_blocks, n_unmasked, heads, seqlen_q, seqlen_k, q,
     q_rel) = _xt_tile(q_smem, q_bar, q_empty, tile_smem, i, WG, M_WG, BLOCK_M, HEAD_DIM, Q2)
    rows = _xt_rows(m_start, WG, M_WG, HEAD_DIM, row_s)
    m_i = gl.full([M_WG], float("-inf"), gl.float32, layout=row_s)
    l_i = gl.zeros([M_WG], gl.float32, layout=row_s)
    p_prev = gl.zeros([M_WG, BLOCK_N], dtype, layout=p_layout)
    stamp_base = (b * heads + h) * seqlen_q + m_start  # diag_stamps
    if DIAG & 16:
        if WG == 0:
            if more != 0:
                _stamp(lse_ptr, stamp_base, 0, _CLOCK)
                _stamp(lse_ptr, stamp_base, 1, _CLOCK)
    if more != 0:
        if n_blocks > 0:
            mbarrier.wait(k_ready.index(0), 0)
            k_t = k_smem.index(0).reshape([BLOCK_N, HEAD_DIM]).permute((1, 0))
            s_tok = warpgroup_mma(q, k_t, s_zero, use_acc=False, is_async=True)
            s_acc = warpgroup_mma_wait(0, deps=[s_tok])
            p_prev, m_i, l_i = _xt_block0(s_acc, c, n_blocks, n_unmasked, rows, seqlen_k,
                                          seqlen_k - seqlen_q, qk_scale, kv_empty, q_rel, m_i,
                                          l_i, dtype, CAUSAL, BLOCK_N, NUM_STAGES, s_layout,
                                          p_layout, FMA, Q2)
    while more != 0:
        causal_off = seqlen_k - seqlen_q
        if Q2:  # the previous tile's Q buffer (at the first tile: the second buffer, unused)
            mbarrier.arrive(q_empty.index((i + 1) % 2), count=1)
        if DIAG & 16:
            if WG == 0:
                _stamp(lse_ptr, stamp_base, 2, _CLOCK)
                _stamp(lse_ptr, stamp_base, 6, _SMID)
                _stamp(lse_ptr, stamp_base, 7, _GTIMER)
        acc = gl.zeros([M_WG, HEAD_DIM], gl.float32, layout=o_layout)
        alpha_o = gl.full([M_WG], 1.0, gl.float32, layout=row_o)
        for j in range(1, n_blocks):
            acc, p_prev, alpha_o, m_i, l_i, _resc = _overlap_step(
                j, q, k_smem, v_smem, k_ready, v_ready, kv_empty, turn_bars, acc, p_prev,
                alpha_o, m_i, l_i, s_zero, rows, seqlen_k, causal_off, qk_scale, c, 0, 2, WG,
                CAUSAL, BLOCK_N, HEAD_DIM, NUM_STAGES, False, 0, s_layout, row_o, p_layout, FMA,
                n_unmasked, 0, 0, 0, -1, -1, q_rel, n_blocks, QREL, lse_ptr, stamp_base,
                DIAG & 16)
        if not Q2:
            if n_blocks == 0:
                mbarrier.arrive(q_empty, count=1)  # (otherwise released after the last QK^T)
        if n_blocks > 0:
            jl = c + n_blocks - 1
            sl = jl % NUM_STAGES
            acc = acc * gl.expand_dims(alpha_o, 1)
            mbarrier.wait(v_ready.index(sl), (jl // NUM_STAGES) & 1)
            v = v_smem.index(sl).reshape([BLOCK_N, HEAD_DIM])
            o_tok = warpgroup_mma(p_prev, v, acc, is_async=True)
            acc = warpgroup_mma_wait(0, deps=[o_tok])
            mbarrier.arrive(kv_empty.index(NUM_STAGES + sl), count=1)
        if DIAG & 16:
            _stamp(lse_ptr, stamp_base, 3 if WG == 0 else 5, _CLOCK)
        # this tile's normalisation: rows that saw no key give 0 and lse = -inf
        l_o = gl.convert_layout(l_i, row_o)
        l_safe = gl.where(l_o == 0.0, 1.0, l_o)
        out = (acc / gl.expand_dims(l_safe, 1)).to(dtype)
        if FMA:
            m_i = m_i * qk_scale  # FMA kept the raw-score max
        lse = gl.where(l_i == 0.0, float("-inf"), (m_i + gl.log2(l_i)) * 0.6931471805599453)
        # the next tile's work item (the stop signal completes q_bar with more = 0, no load)
        c_next = c + n_blocks
        (more_n, b_n, h_n, m_start_n, n_blocks_n, n_unmasked_n, heads_n, sq_n, sk_n, q_n,
         q_rel_n) = _xt_tile(q_smem, q_bar, q_empty, tile_smem, i + 1, WG, M_WG, BLOCK_M,
                             HEAD_DIM, Q2)
        rows_n = _xt_rows(m_start_n, WG, M_WG, HEAD_DIM, row_s)
        stamp_n = (b_n * heads_n + h_n) * sq_n + m_start_n
        if DIAG & 16:
            if WG == 0:
                if more_n != 0:
                    _stamp(lse_ptr, stamp_n, 0, _CLOCK)
                    _stamp(lse_ptr, stamp_n, 1, _CLOCK)
        m_i = gl.full([M_WG], float("-inf"), gl.float32, layout=row_s)
        l_i = gl.zeros([M_WG], gl.float32, layout=row_s)
        p_prev = gl.zeros([M_WG, BLOCK_N], dtype, layout=p_layout)
        if (more_n != 0) & (n_blocks_n > 0):
            # its first QK^T runs under this tile's store
            sn = c_next % NUM_STAGES
            mbarrier.wait(k_ready.index(sn), (c_next // NUM_STAGES) & 1)
            k_t = k_smem.index(sn).reshape([BLOCK_N, HEAD_DIM]).permute((1, 0))
            s_tok = warpgroup_mma(q_n, k_t, s_zero, use_acc=False, is_async=True)
            _xt_store(out, lse, rows, o_buf, o_desc, lse_ptr, b, h, heads, seqlen_q, m_start,
                      WG, BLOCK_M, HEAD_DIM, M_WG, DIAG, stamp_base)
            s_acc = warpgroup_mma_wait(0, deps=[s_tok])
            p_prev, m_i, l_i = _xt_block0(s_acc, c_next, n_blocks_n, n_unmasked_n, rows_n,
                                          sk_n, sk_n - sq_n, qk_scale, kv_empty, q_rel_n, m_i,
                                          l_i, dtype, CAUSAL, BLOCK_N, NUM_STAGES, s_layout,
                                          p_layout, FMA, Q2)
        else:
            _xt_store(out, lse, rows, o_buf, o_desc, lse_ptr, b, h, heads, seqlen_q, m_start,
                      WG, BLOCK_M, HEAD_DIM, M_WG, DIAG, stamp_base)
        more = more_n
        b = b_n
        h = h_n
        m_start = m_start_n
        n_blocks = n_blocks_n
        n_unmasked = n_unmasked_n
        heads = heads_n
        seqlen_q = sq_n
        seqlen_k = sk_n
        rows = rows_n
        stamp_base = stamp_n
        q = q_n
        q_rel = q_rel_n
        c = c_next
        i += 1
    tma.store_wait(0)  # the last tile's O store has read its shared memory

# --------------------------------------------------------------------------------------------
# Non-specialised variant (ablation "without warp specialisation"): one partition of two
# warpgroups (8 warps, BLOCK_M rows, 64 per warpgroup as above) issues its own TMA loads and
# waits on them; no producer warp, no setmaxnreg (every thread may use up to 255 registers).
# K_{j+S} is loaded into the stage of K_j once both warpgroups have read K_j (a CTA barrier after
# the QK^T wait), V likewise after P V: the same prefetch depth as the specialised kernel, but
# the refill is on the consumers' critical path and costs two CTA-wide barriers per block.
# --------------------------------------------------------------------------------------------
@gluon.jit
def _nows_load(desc, smem, bar, b, j, kvh, BLOCK_N: gl.constexpr):
    mbarrier.expect(bar, desc.block_type.nbytes)
    tma.async_copy_global_to_shared(desc, [b, j * BLOCK_N, kvh, 0], bar, smem)


@gluon.jit
def attn_fwd_nows_kernel(q_desc, k_desc, v_desc, out_ptr, lse_ptr,
                         seqlen_q, seqlen_k, heads, kv_group, num_m_tiles, qk_scale,
                         CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                         HEAD_DIM: gl.constexpr, NUM_STAGES: gl.constexpr,
                         OVERLAP: gl.constexpr, D_REAL: gl.constexpr):
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
    mbarrier.init(q_bar, count=1)
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
    fence_async_shared()
    gl.thread_barrier()

    mbarrier.expect(q_bar, q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [b, m_start, h, 0], q_bar, q_smem)
    for i in gl.static_range(NUM_STAGES):
        if i < n_blocks:
            _nows_load(k_desc, k_smem.index(i), k_ready.index(i), b, i, kvh, BLOCK_N)
            _nows_load(v_desc, v_smem.index(i), v_ready.index(i), b, i, kvh, BLOCK_N)

    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[8, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[8, 1],
                                                       instr_shape=[16, HEAD_DIM, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    q = q_smem.reshape([BLOCK_M, HEAD_DIM])
    rows = m_start + gl.arange(0, BLOCK_M, layout=row_s)
    m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, layout=row_s)
    l_i = gl.zeros([BLOCK_M], gl.float32, layout=row_s)
    acc = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, layout=o_layout)
    s_zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, layout=s_layout)
    mbarrier.wait(q_bar, 0)

    if OVERLAP:
        p_prev = gl.zeros([BLOCK_M, BLOCK_N], dtype, layout=p_layout)
        alpha_o = gl.full([BLOCK_M], 1.0, gl.float32, layout=row_o)
        if n_blocks > 0:
            mbarrier.wait(k_ready.index(0), 0)
            k_t = k_smem.index(0).reshape([BLOCK_N, HEAD_DIM]).permute((1, 0))
            s_tok = warpgroup_mma(q, k_t, s_zero, use_acc=False, is_async=True)
            s_acc = warpgroup_mma_wait(0, deps=[s_tok])
            gl.thread_barrier()  # both warpgroups have read K_0
            if NUM_STAGES < n_blocks:
                _nows_load(k_desc, k_smem.index(0), k_ready.index(0), b, NUM_STAGES, kvh, BLOCK_N)
            if n_unmasked > 0:
                p, alpha, m_i, l_i = _softmax_update(s_acc, m_i, l_i, rows, 0, seqlen_k, causal_off,
                                                     qk_scale, False, CAUSAL, BLOCK_N, s_layout)
            else:
                p, alpha, m_i, l_i = _softmax_update(s_acc, m_i, l_i, rows, 0, seqlen_k, causal_off,
                                                     qk_scale, True, CAUSAL, BLOCK_N, s_layout)
            p_prev = gl.convert_layout(p.to(dtype), p_layout)
        for j in range(1, n_blocks):
            s = j % NUM_STAGES
            sp = (j - 1) % NUM_STAGES
            mbarrier.wait(k_ready.index(s), (j // NUM_STAGES) & 1)
            k_t = k_smem.index(s).reshape([BLOCK_N, HEAD_DIM]).permute((1, 0))
            s_tok = warpgroup_mma(q, k_t, s_zero, use_acc=False, is_async=True)
            acc = acc * gl.expand_dims(alpha_o, 1)
            mbarrier.wait(v_ready.index(sp), ((j - 1) // NUM_STAGES) & 1)
            v = v_smem.index(sp).reshape([BLOCK_N, HEAD_DIM])
            o_tok = warpgroup_mma(p_prev, v, acc, is_async=True)
            s_acc = warpgroup_mma_wait(1, deps=[s_tok])
            gl.thread_barrier()  # K_j read by both warpgroups
            if j + NUM_STAGES < n_blocks:
                _nows_load(k_desc, k_smem.index(s), k_ready.index(s), b, j + NUM_STAGES, kvh, BLOCK_N)
            if j < n_unmasked:
                p, alpha, m_i, l_i = _softmax_update(s_acc, m_i, l_i, rows, j, seqlen_k, causal_off,
                                                     qk_scale, False, CAUSAL, BLOCK_N, s_layout)
            else:
                p, alpha, m_i, l_i = _softmax_update(s_acc, m_i, l_i, rows, j, seqlen_k, causal_off,
                                                     qk_scale, True, CAUSAL, BLOCK_N, s_layout)
            alpha_o = gl.convert_layout(alpha, row_o)
            p_prev = gl.convert_layout(p.to(dtype), p_layout)
            acc = warpgroup_mma_wait(0, deps=[o_tok])
            gl.thread_barrier()  # V_{j-1} read by both warpgroups
            if j - 1 + NUM_STAGES < n_blocks:
                _nows_load(v_desc, v_smem.index(sp), v_ready.index(sp), b, j - 1 + NUM_STAGES, kvh,
                           BLOCK_N)
        if n_blocks > 0:
            jl = n_blocks - 1
            sl = jl % NUM_STAGES
            acc = acc * gl.expand_dims(alpha_o, 1)
            mbarrier.wait(v_ready.index(sl), (jl // NUM_STAGES) & 1)
            v = v_smem.index(sl).reshape([BLOCK_N, HEAD_DIM])
            o_tok = warpgroup_mma(p_prev, v, acc, is_async=True)
            acc = warpgroup_mma_wait(0, deps=[o_tok])
    else:
        for j in range(n_blocks):
            s = j % NUM_STAGES
            ph = (j // NUM_STAGES) & 1
            mbarrier.wait(k_ready.index(s), ph)
            k_t = k_smem.index(s).reshape([BLOCK_N, HEAD_DIM]).permute((1, 0))
            s_tok = warpgroup_mma(q, k_t, s_zero, use_acc=False, is_async=True)
            s_acc = warpgroup_mma_wait(0, deps=[s_tok])
            gl.thread_barrier()  # K_j read by both warpgroups
            if j + NUM_STAGES < n_blocks:
                _nows_load(k_desc, k_smem.index(s), k_ready.index(s), b, j + NUM_STAGES, kvh, BLOCK_N)
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
            gl.thread_barrier()  # V_j read by both warpgroups
            if j + NUM_STAGES < n_blocks:
                _nows_load(v_desc, v_smem.index(s), v_ready.index(s), b, j + NUM_STAGES, kvh, BLOCK_N)

    l_o = gl.convert_layout(l_i, row_o)
    l_safe = gl.where(l_o == 0.0, 1.0, l_o)
    out = acc / gl.expand_dims(l_safe, 1)
    lse = gl.where(l_i == 0.0, float("-inf"), (m_i + gl.log2(l_i)) * 0.6931471805599453)
    rows_o = m_start + gl.arange(0, BLOCK_M, layout=row_o)
    cols_o = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, o_layout))
    row_off = ((b.to(gl.int64) * seqlen_q + rows_o) * heads + h) * D_REAL
    o_ptrs = out_ptr + gl.expand_dims(row_off, 1) + gl.expand_dims(cols_o, 0)
    o_mask = gl.expand_dims(rows_o < seqlen_q, 1) & gl.expand_dims(cols_o < D_REAL, 0)
    gl.store(o_ptrs, out.to(dtype), mask=o_mask)
    lse_ptrs = lse_ptr + (b.to(gl.int64) * heads + h) * seqlen_q + rows
    gl.store(lse_ptrs, lse, mask=rows < seqlen_q)


# --------------------------------------------------------------------------------------------
# Host side
# --------------------------------------------------------------------------------------------
_GL_DTYPES = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16}


# Built once: constructing the layout object costs about as much host time as the rest of a TMA
# descriptor (measured on the CPU, 2026-12-02), and every launch makes three or four descriptors.
_SMEM_LAYOUT_16BIT = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=4)


def smem_layout(dtype) -> gl.NVMMASharedLayout:
    """Shared layout of a [1, BLOCK, 1, head_dim] TMA box: 128-byte swizzle, 16-bit elements."""
    return _SMEM_LAYOUT_16BIT


def shared_memory_bytes(head_dim: int, cfg: FwdConfig, elem: int = 2) -> int:
    """Shared memory the kernel allocates for its tiles (the barriers add a few bytes), at the
    native head dim the call runs at (a padded head dim allocates the padded tiles)."""
    head_dim = padded_head_dim(head_dim)
    # three consumers: the Q tile is 4 power-of-two buffers of block_m // 3 rows (3 used)
    q_rows = cfg.block_m // 3 * 4 if cfg.num_consumers == 3 else cfg.block_m
    if cfg.o_buffer or cfg.q_prefetch:
        # a second tile of the same size: O's own (o_buffer) or the other Q buffer (q_prefetch);
        # three consumers: the second half of 8 boxes
        q_rows *= 2
    if cfg.cross_tile == 2:  # Q, Q and O (session 26 candidate)
        q_rows += cfg.block_m
    if cfg.o_half:
        q_rows += cfg.block_m // 2
    tiles = elem * head_dim * (q_rows + 2 * cfg.num_stages * cfg.block_n)
    if cfg.ragged_split:  # warpgroups 1-2's fp32 O, m and l (session 31 candidate)
        tiles += 4 * (2 * head_dim + 4) * (cfg.block_m // 3)
    return tiles


def supports(q, k, v, causal) -> str | None:
    """None if this backend can run the call, else a plain-English reason."""
    if not (q.is_cuda and k.is_cuda and v.is_cuda):
        return "the hopper backend needs CUDA tensors"
    if torch.cuda.get_device_capability(q.device) != (9, 0):
        major, minor = torch.cuda.get_device_capability(q.device)
        return f"the hopper backend needs an sm_90 GPU (H100/H200); this one is sm_{major}{minor}"
    if q.dtype not in _GL_DTYPES:
        return f"the hopper backend takes bfloat16 or float16, not {q.dtype}"
    d = q.shape[-1]
    if d not in NATIVE_HEAD_DIMS:
        if d % 8 or d > 256:
            return f"the hopper backend supports head_dim a multiple of 8 up to 256, got {d}"
        if not PAD_HEAD_DIMS:
            return (f"the hopper backend supports head_dim in {NATIVE_HEAD_DIMS}; head_dim {d} runs "
                    f"padded to {padded_head_dim(d)} once verified on a GPU; not yet enabled "
                    f"(hopper_fwd.PAD_HEAD_DIMS)")
    if q.shape[2] % k.shape[2] != 0:
        return "heads must be a multiple of kv_heads"
    return None


def _tma_ready(t: torch.Tensor) -> torch.Tensor:
    """TMA needs a 16-byte aligned base and 16-byte multiple strides; copy if not."""
    es = t.element_size()
    if t.stride(-1) != 1 or t.data_ptr() % 16 or any((s * es) % 16 for s in t.stride()[:-1]):
        t = t.contiguous()
    return t


def _descriptor(t: torch.Tensor, block: int, box_d: int | None = None):
    """4-D TMA descriptor with box [1, block, 1, box_d]; box_d > head_dim (a padded head dim):
    the copy engine zero-fills the columns past the tensor's head_dim on loads and drops them on
    stores (boxes <= 256 per dim; Triton splits the 128-byte-swizzled box into 64-column copies;
    the tensor's dims need not be multiples of the box)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    d = t.shape[-1] if box_d is None else box_d
    return TensorDescriptor(t, list(t.shape), list(t.stride()), [1, block, 1, d],
                            smem_layout(t.dtype))


def l2_section_heads(n_bh: int, seqlen_k: int, head_dim: int, kv_group: int, elem: int,
                     section_mb: int) -> int:
    """(batch, head)s per L2 section of the dynamic scheduler (FA3's swizzle): the largest power
    of two of kv heads whose K and V fit in section_mb MB, times the q heads per kv head; at
    least one kv head; every head when section_mb <= 0."""
    if section_mb <= 0:
        return n_bh
    kv_bytes = seqlen_k * 2 * head_dim * elem
    budget = section_mb * 1024 * 1024
    n = 1 if budget < kv_bytes else 1 << ((budget // kv_bytes).bit_length() - 1)
    return max(1, min(n_bh, n * kv_group))


_TILE_COUNTERS = {}


def _tile_counter(device) -> torch.Tensor:
    """The dynamic scheduler's int32 counter, one per (device, stream): 0 between launches (the
    kernel resets it); two launches in flight on different streams never share one."""
    device = torch.device(device)
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
    key = (device.type, device.index, stream)
    t = _TILE_COUNTERS.get(key)
    if t is None:
        t = _TILE_COUNTERS[key] = torch.zeros(4, dtype=torch.int32, device=device)
    return t


def _tma_store_mode(cfg: FwdConfig):
    """The kernel's TMA_STORE: False (pointer stores), True (through Q's tile), 2 (O's own tile,
    o_buffer), 3 (two alternating Q tiles, q_prefetch), 4 (one half-tile O buffer that the two
    consumer warpgroups take in turn, o_half)."""
    if cfg.q_prefetch:
        return 3
    if cfg.o_half:
        return 4
    return 2 if cfg.o_buffer else cfg.tma_store


def bottom_tiles_fit(cfg: FwdConfig) -> bool:
    """Whether bottom_tiles can go with cfg's other switches: _producer_dynamic's tile decode
    (the dynamic scheduler, one Q buffer; not early_fetch 2's second decode) and not diag_half."""
    return (cfg.warp_specialize and cfg.persistent and cfg.scheduler == 1
            and not (cfg.q_prefetch or cfg.cross_tile or cfg.q_per_warpgroup
                     or cfg.early_fetch == 2 or cfg.diag_half))


def _check_tile_shape(cfg: FwdConfig) -> None:
    """The tile sizes, stages and register counts the kernel can be built with, refused by name
    before compiling (a bad value otherwise ends in a compiler error, or an abort of the process
    inside LLVM)."""
    nc = cfg.num_consumers
    ok_int = lambda x: isinstance(x, int) and not isinstance(x, bool)  # noqa: E731
    if not (ok_int(cfg.block_m) and nc in (1, 2, 3) and cfg.block_m > 0 and cfg.block_m % nc == 0
            and cfg.block_m // nc in (64, 128)):
        raise ValueError(f"block_m must give each of the {nc} consumer warpgroup(s) 64 or 128 "
                         f"query rows (block_m {64 * nc} or {128 * nc}), got {cfg.block_m!r}")
    if not (ok_int(cfg.block_n) and cfg.block_n in (16, 32, 64, 128, 256)):
        raise ValueError(f"block_n must be a power of two from 16 to 256 (a wgmma's N, a tensor "
                         f"shape in Triton), got {cfg.block_n!r}")
    if not (ok_int(cfg.num_stages) and 1 <= cfg.num_stages <= 8):
        raise ValueError(f"num_stages must be an int from 1 to 8, got {cfg.num_stages!r}")
    for name in ("consumer_regs", "producer_regs"):
        val = getattr(cfg, name)
        if not (ok_int(val) and 24 <= val <= 256 and val % 8 == 0):
            raise ValueError(f"{name} must be a multiple of 8 from 24 to 256 (setmaxnreg's "
                             f"range), got {val!r}")


def _check_switch_support(cfg: FwdConfig) -> None:
    """o_half, o_buffer, q_prefetch and diag_stamps only where the kernel implements them
    (forward and compile_sm90, before any kernel work; scripts/hopper_tile_phases.py asks it
    too); the tile shape first (_check_tile_shape)."""
    _check_tile_shape(cfg)
    # (first: its refusal names it even where another switch's check would also refuse)
    if cfg.lazy_rescale and not (cfg.warp_specialize and cfg.overlap and cfg.softmax_fma
                                 and cfg.num_consumers == 2
                                 and not (cfg.kv_reverse or cfg.diag_half or cfg.cross_tile
                                          or cfg.q_per_warpgroup or cfg.ragged_split
                                          or cfg.exp_poly or cfg.row_tree)):
        raise ValueError("lazy_rescale: the warp-specialised rows with two consumer warpgroups, "
                         "the overlap and softmax_fma, in _consumer's loops only (no "
                         "kv_reverse, diag_half, cross_tile, q_per_warpgroup, ragged_split, "
                         "exp_poly or row_tree)")
    if cfg.q_regs and not (cfg.warp_specialize and cfg.softmax_fma and cfg.num_consumers in (2, 3)
                           and not (cfg.cross_tile or cfg.ragged_split)):
        raise ValueError("q_regs: the warp-specialised rows with two or three consumer "
                         "warpgroups and softmax_fma, in _consumer only (no cross_tile or "
                         "ragged_split)")
    if cfg.cross_tile not in (0, 1, 2):
        raise ValueError(f"cross_tile must be 0, 1 or 2, got {cfg.cross_tile!r}")
    if cfg.cross_tile and not (cfg.warp_specialize and cfg.persistent and cfg.scheduler == 1
                               and cfg.num_consumers == 2 and cfg.overlap and cfg.o_buffer
                               and cfg.q_release_early and cfg.softmax_fma
                               and not (cfg.pingpong or cfg.split_loops or cfg.wg_bounds
                                        or cfg.q_prefetch or cfg.kv_reverse
                                        or cfg.kv_release_nb or cfg.asm_waits
                                        or cfg.exp_poly or cfg.row_tree)):
        raise ValueError("cross_tile: the dynamic scheduler's rows with two consumer warpgroups, "
                         "the overlap, o_buffer, q_release_early and softmax_fma only (no "
                         "pingpong, split_loops, wg_bounds or the other loop candidates)")
    # early_fetch: _producer_dynamic only (not v10's two-buffer producer, which fetches early
    # already, nor q_per_warpgroup's)
    if cfg.early_fetch not in (0, 1, 2):
        raise ValueError(f"early_fetch must be 0, 1 or 2, got {cfg.early_fetch!r}")
    if cfg.early_fetch and not (cfg.warp_specialize and cfg.persistent and cfg.scheduler == 1
                                and not (cfg.q_prefetch or cfg.cross_tile == 2
                                         or cfg.q_per_warpgroup
                                         or (cfg.early_fetch == 2
                                             and (cfg.kv_reverse or cfg.kv_release_nb)))):
        raise ValueError("early_fetch: the dynamic scheduler's rows with one Q buffer only (no "
                         "q_prefetch, cross_tile 2 or q_per_warpgroup; early_fetch 2: no "
                         "kv_reverse or kv_release_nb)")
    if cfg.diag_half and not (cfg.warp_specialize and cfg.persistent and cfg.overlap
                              and cfg.num_consumers == 2 and cfg.block_m == cfg.block_n == 128
                              and not (cfg.pingpong or cfg.split_loops or cfg.kv_reverse
                                       or cfg.wg_bounds or cfg.cross_tile or cfg.asm_waits
                                       or cfg.kv_release_nb or cfg.q_prefetch)):
        raise ValueError("diag_half: the persistent rows with two consumer warpgroups, the "
                         "overlap and 128 x 128 tiles only (no pingpong, split_loops, kv_reverse, "
                         "wg_bounds, cross_tile, asm_waits, kv_release_nb or q_prefetch)")
    # bottom_tiles: _producer_dynamic's tile decode only (not early_fetch 2's or q_l2_prefetch's
    # second decode, v10's or q_per_warpgroup's producers); causal only (non-causal tiles all
    # cost the same); not with diag_half, whose half block assumes the row's tile alignment
    if cfg.bottom_tiles and not bottom_tiles_fit(cfg):
        raise ValueError("bottom_tiles: the dynamic scheduler's rows with one Q buffer only (no "
                         "q_prefetch, cross_tile, q_per_warpgroup, early_fetch 2 or diag_half)")
    if cfg.q_l2_prefetch and cfg.early_fetch != 2:
        raise ValueError("q_l2_prefetch: with early_fetch 2 only (the next tile's id is known "
                         "mid-tile there)")
    if cfg.o_buffer and not (cfg.tma_store and cfg.persistent):
        raise ValueError("o_buffer needs tma_store and persistent")
    # kv_release_nb: the persistent producers (one warp, static or dynamic schedule) and two
    # consumer warpgroups with the overlap (288 threads per named barrier), barriers
    # 4 .. 4 + 2 NUM_STAGES - 1 < 10
    # both reach only the two-consumer persistent producers and the overlapped consumer loop
    # (not q_prefetch's producer, not the wg_bounds release loop, not pingpong's turns)
    # num_consumers 1 (one 8-warp consumer partition): the persistent loops' partition lists and
    # the overlapped loop only
    if cfg.num_consumers == 1 and not (
            cfg.warp_specialize and cfg.persistent and cfg.overlap and cfg.block_m == 128
            and not (cfg.pingpong or cfg.q_prefetch or cfg.o_half or cfg.wg_bounds
                     or cfg.skip_empty_wg)):
        raise ValueError("num_consumers 1: persistent rows with block_m 128 and the overlap only "
                         "(no pingpong, q_prefetch, o_half, wg_bounds or skip_empty_wg)")
    # (two consumer warpgroups: two partitions, or one of 8 warps)
    plain_two_wg = (cfg.warp_specialize and cfg.persistent and cfg.num_consumers in (1, 2)
                    and cfg.overlap and not cfg.q_prefetch
                    and not (cfg.wg_bounds or cfg.skip_empty_wg or cfg.pingpong))
    # asm_waits: the persistent loops' consumer partitions (one or two) with the overlap
    # and with kv_release_nb: with mbarrier.arrive releases Gluon's arrive syncs the partition
    # anyway and the membar barrier just moves before the QK^T (three per block, as before)
    if cfg.asm_waits and not (plain_two_wg and cfg.kv_release_nb):
        raise ValueError("asm_waits: the persistent rows with one or two consumer partitions, "
                         "the overlap and kv_release_nb only (no q_prefetch, wg_bounds, "
                         "skip_empty_wg or pingpong)")
    if cfg.kv_release_nb and not (plain_two_wg and cfg.num_stages <= 3):
        raise ValueError("kv_release_nb: the persistent rows with two consumer warpgroups, the "
                         "overlap and at most 3 stages only (no q_prefetch, wg_bounds, "
                         "skip_empty_wg or pingpong)")
    # kv_reverse reaches the dynamic scheduler's producer and the overlapped consumer loop only
    if cfg.kv_reverse and not (plain_two_wg and cfg.scheduler == 1 and not cfg.split_loops):
        raise ValueError("kv_reverse: the dynamic scheduler with two consumer warpgroups and the "
                         "overlap only (no q_prefetch, wg_bounds, skip_empty_wg, pingpong or "
                         "split_loops)")
    # q_release_early: the loops (_plain_step, _overlap_step) of the persistent rows whose O
    # leaves through its own buffer (o_buffer), so that nothing reads Q after the last QK^T; not
    # the static three-consumer partitions, which are not given QPF_DIAG
    if cfg.q_release_early and not (cfg.warp_specialize and cfg.persistent and cfg.o_buffer
                                    and (cfg.scheduler or cfg.num_consumers != 3)
                                    and not (cfg.pingpong or cfg.q_prefetch or cfg.kv_reverse
                                             or cfg.num_consumers == 1)):
        raise ValueError("q_release_early: the persistent rows with o_buffer (no pingpong, "
                         "q_prefetch, kv_reverse or num_consumers 1)")
    if cfg.q_per_warpgroup and not (cfg.warp_specialize and cfg.persistent and cfg.scheduler
                                    and cfg.num_consumers == 3 and cfg.o_buffer
                                    and not (cfg.q_prefetch or cfg.pingpong)):
        raise ValueError("q_per_warpgroup: the dynamic-scheduler rows with three consumer "
                         "warpgroups and o_buffer only (no q_prefetch or pingpong)")
    if cfg.q_prefetch and not (cfg.tma_store and cfg.persistent and cfg.scheduler
                               and not cfg.o_buffer):
        raise ValueError("q_prefetch needs tma_store, the dynamic scheduler and no o_buffer")
    if cfg.o_half and not (cfg.warp_specialize and cfg.tma_store and cfg.persistent
                           and cfg.num_consumers == 2
                           and not (cfg.pingpong or cfg.o_buffer or cfg.q_prefetch)):
        raise ValueError("o_half needs tma_store, persistent, two consumer warpgroups and no "
                         "pingpong / o_buffer / q_prefetch")
    # (num_stages >= 3: each warpgroup waits for a round's three K / V loads before releasing
    # its own block's stage, so the ring must hold a whole round; with 2 stages it deadlocks)
    if cfg.ragged_split and not (cfg.q_per_warpgroup and cfg.num_stages >= 3):
        raise ValueError("ragged_split: with q_per_warpgroup (its producer loads each "
                         "warpgroup's Q box on its own) and num_stages >= 3 only")
    # the stamps reach _consumer through the persistent loops' partitions: every two-consumer
    # one, and the dynamic scheduler's three-consumer ones (the hdim 64 rows)
    if cfg.diag_stamps and not (cfg.warp_specialize and cfg.persistent
                                and (cfg.num_consumers == 2 or cfg.scheduler == 1)):
        raise ValueError("diag_stamps: persistent warp-specialised rows with two consumer "
                         "warpgroups, or three with the dynamic scheduler, only")
    # (last: the other switches' refusals name themselves first)
    if cfg.mask_limit and not (cfg.softmax_fma and cfg.warp_specialize):
        raise ValueError("mask_limit: with softmax_fma and warp_specialize only")


def _qpf_diag_bits(cfg: FwdConfig) -> int:
    """The kernel's QPF_DIAG (0 unless a FwdConfig.diag_* switch is on): 1, 2, 4 diagnostics of
    the Q prefetch (scripts/qpf_diag2.py; they act only with q_prefetch, TMA_STORE == 3), 16 the
    clock stamps (diag_stamps; where they apply: _check_switch_support)."""
    bits = 1 * cfg.diag_fence_init + 2 * cfg.diag_store_wait + 4 * cfg.diag_joint_exit
    if bits and not cfg.q_prefetch:
        raise ValueError("the diag_* switches act only with q_prefetch")
    return (bits + 16 * cfg.diag_stamps + 32 * cfg.kv_reverse + 64 * cfg.kv_release_nb
            + 128 * cfg.q_release_early + 256 * cfg.q_per_warpgroup
            + 512 * (cfg.cross_tile >= 1) + 1024 * (cfg.cross_tile == 2)
            + 2048 * (cfg.early_fetch == 1) + 4096 * (cfg.early_fetch == 2)
            + 8192 * cfg.q_l2_prefetch + 16384 * cfg.diag_half + 32768 * cfg.bottom_tiles
            + 65536 * cfg.ragged_split)


def _softmax_fma_value(cfg: FwdConfig):
    """The kernel's SOFTMAX_FMA with softmax_fma on: True, or 2 with mask_limit; with exp_poly
    or row_tree (session 25) bits 0-1 hold 1, or 2 with mask_limit, bits 2-3 log2(exp_poly), bit
    4 the tree max and bit 5 the tree sum (row_tree 1 / 2), bit 6 lazy_rescale, bit 7 q_regs.
    The rows without them keep their earlier value (and so their compiled kernels)."""
    check_exp_poly(cfg.exp_poly)
    if cfg.row_tree not in (0, 1, 2):
        raise ValueError(f"row_tree must be 0, 1 (the row max as a tree) or 2 (max and sum), "
                         f"got {cfg.row_tree!r}")
    bits = (2 if cfg.mask_limit else 1) | 16 * (cfg.row_tree >= 1) | 32 * (cfg.row_tree >= 2)
    if cfg.exp_poly:
        bits |= (cfg.exp_poly.bit_length() - 1) << 2
    # lazy_rescale (its own softmax: _check_switch_support refuses exp_poly / row_tree with it)
    bits |= 64 * cfg.lazy_rescale | 128 * cfg.q_regs
    return bits if bits & ~3 else (2 if cfg.mask_limit else True)


def _v4_constexprs(cfg: FwdConfig) -> dict:
    """Constexprs of the v4 switches, passed only when they differ from the kernel's defaults."""
    extra = {}
    if (cfg.exp_poly or cfg.row_tree) and not cfg.softmax_fma:
        raise ValueError("exp_poly and row_tree change softmax_fma's form: they need "
                         "softmax_fma=True (forward() turns them off for softmax_scale <= 0)")
    if cfg.softmax_fma:
        extra["SOFTMAX_FMA"] = _softmax_fma_value(cfg)
    if cfg.num_consumers != 2:
        if cfg.num_consumers not in (1, 3) or cfg.pingpong or cfg.block_m % 3 * (
                cfg.num_consumers == 3):
            raise ValueError("num_consumers: 2, 1 or 3 without pingpong, and 3 with block_m % 3 "
                             "== 0")
        extra["NUM_CONSUMERS"] = cfg.num_consumers
    return extra


_NUM_SMS = {}

# forward() refused q_prefetch with three consumer warpgroups under a causal mask (wrong on the
# GPU, device run 17). Fixed in run 20 (compile-time Q buffer indices), GPU grid passed causal and
# not in run 21: the refusal is off; the switch stays for scripts/qpf_diag2.py's history
_REFUSE_QPF_CAUSAL_3WG = False


def _num_sms(device) -> int:
    idx = torch.device(device).index or 0
    if idx not in _NUM_SMS:
        _NUM_SMS[idx] = torch.cuda.get_device_properties(idx).multi_processor_count
    return _NUM_SMS[idx]


def _launch(kernel, grid, warmup, *args, **kwargs):
    if warmup:
        return kernel.warmup(*args, grid=grid, **kwargs)
    return kernel.run(*args, grid=grid, warmup=False, **kwargs)


# Host time per call: after the first launch of a kernel for a given specialisation, later
# launches with the same specialisation go straight to the compiled kernel (fast_launch.py). The
# key holds every input of Triton 3.6's specialisation of our arguments: the constexprs and
# options (from the config and the call) and, per runtime argument, what Triton looks at: an
# int's value == 1, its divisibility by 16 and whether it fits in 32 bits; a pointer's 16-byte
# alignment; a descriptor's dtype, block shape and layout (all fixed by the config and dtype).
# tests/test_hopper_compile.py checks that equal keys mean equal specialisations, with Triton's
# own binder. FAST_LAUNCH = False turns this off.
FAST_LAUNCH = True
_FAST = {}
_ASM_OFFSETS = {}   # asm_waits: (k_ready, v_ready) offsets per launch key
_DescArg = _fl.DescArg
_int_key = _fl.int_key
_fast_arglist = _fl.arglist

# the kernel's runtime arguments (everything else is a constexpr, fixed by the key)
_RUNTIME_ARGS = ("q_desc", "k_desc", "v_desc", "out_ptr", "lse_ptr", "seqlen_q", "seqlen_k",
                 "heads", "kv_group", "num_m_tiles", "qk_scale", "o_desc", "tile_counter",
                 "l2_heads", "n_bh_arg", "q_ptr")


def _remember(key, kernel, compiled, args, kwargs):
    """After a launch through Triton: its compiled kernel and argument list as the key's
    template (fast_launch.remember)."""
    _fl.remember(_FAST, key, kernel, compiled, args, kwargs, _RUNTIME_ARGS)


def forward(q, k, v, causal: bool, softmax_scale: float, config: FwdConfig | None = None,
            _out: torch.Tensor | None = None, _lse: torch.Tensor | None = None,
            _warmup: bool = False, _key_only: bool = False, _diagnostic: bool = False):
    """(out, lse) as the launcher contract says; see the module docstring.

    config overrides the tile table (ablations). _out/_lse: preallocated contiguous outputs, for
    tests that poison them before the launch. _warmup: compile (into triton's on-disk cache) with
    exactly the launch's specialisation, launch nothing, and return the compiled kernel
    (scripts/hopper_dev2.py compiles its kernels in parallel processes first). _key_only: return
    (fast-launch key, args, kwargs) of the launch instead (for the test of the key).
    _diagnostic: allow the timing diagnostic diag_stamps (its lse is not the logsumexp).
    """
    batch, seqlen_q, heads, head_dim = q.shape
    _, seqlen_k, kv_heads, _ = k.shape
    cfg = config or get_config(head_dim, causal)
    if cfg.diag_stamps and not (_diagnostic or _warmup or _key_only):
        raise ValueError("diag_stamps is a timing diagnostic that overwrites lse; forward() runs "
                         "it only with _diagnostic=True")
    if cfg.diag_stamps and (seqlen_q % 2 or 0 < seqlen_q % cfg.block_m < 32):
        # a tile's 16 int64 stamp slots need 32 rows of lse of its own, 8-byte aligned
        raise ValueError(f"diag_stamps needs an even seqlen_q whose last tile of {cfg.block_m} "
                         f"rows has at least 32; got {seqlen_q}")
    _check_switch_support(cfg)
    if cfg.q_prefetch and causal and cfg.num_consumers == 3 and _REFUSE_QPF_CAUSAL_3WG:
        # device run 17 (scripts/qpf_diag.py): wrong values (max error 2.7) at 2 x 1000 x 4
        # heads, then an illegal memory access at 1 x 1152; cause not found yet
        raise ValueError("q_prefetch with three consumer warpgroups is wrong with a causal mask "
                         "(benchmarks/hopper_log.md v10): not available")
    q, k, v = _tma_ready(q), _tma_ready(k), _tma_ready(v)
    if cfg.q_l2_prefetch:  # its addresses are computed from the shape (_q_l2_prefetch)
        q = q.contiguous()
    out = _out if _out is not None else torch.empty((batch, seqlen_q, heads, head_dim),
                                                    dtype=q.dtype, device=q.device)
    lse = _lse if _lse is not None else torch.empty((batch, heads, seqlen_q),
                                                    dtype=torch.float32, device=q.device)
    d_pad = padded_head_dim(head_dim)
    num_m_tiles = -(-seqlen_q // cfg.block_m)
    n_tiles = batch * heads * num_m_tiles
    kv_group = heads // kv_heads
    ints = (seqlen_q, seqlen_k, heads, kv_group, num_m_tiles)
    if not cfg.warp_specialize:
        args = (_descriptor(q, cfg.block_m, d_pad), _descriptor(k, cfg.block_n, d_pad),
                _descriptor(v, cfg.block_n, d_pad), out, lse, *ints, softmax_scale * LOG2E)
        compiled = _launch(attn_fwd_nows_kernel, (n_tiles,), _warmup, *args,
                CAUSAL=bool(causal), BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, HEAD_DIM=d_pad,
                NUM_STAGES=cfg.num_stages, OVERLAP=cfg.overlap, D_REAL=head_dim,
                num_warps=cfg.num_warps)
        return compiled if _warmup else (out, lse)
    grid = (min(n_tiles, _num_sms(q.device)),) if cfg.persistent else (n_tiles,)
    runtime = {}
    if cfg.scheduler:
        if cfg.scheduler != 1 or not cfg.persistent:
            raise ValueError("scheduler 1 (dynamic) needs persistent=True")
        runtime["tile_counter"] = _tile_counter(q.device)
        runtime["l2_heads"] = l2_section_heads(batch * heads, seqlen_k, head_dim, kv_group,
                                               q.element_size(), cfg.l2_section_mb)
        runtime["n_bh_arg"] = batch * heads
        if cfg.q_l2_prefetch:  # the Q rows' addresses for the L2 prefetch (q is contiguous)
            runtime["q_ptr"] = q
    fma_off = cfg.softmax_fma and not softmax_scale > 0  # the raw-score max needs a positive scale
    key = None
    if _key_only or (FAST_LAUNCH and not _warmup):
        # Everything the launch's specialisation depends on: the config, causal, head_dim and
        # fma_off make every constexpr and option and the descriptors' block shapes; the rest
        # is what Triton looks at in the runtime arguments (see FAST_LAUNCH).
        key = (q.device, q.dtype, cfg, bool(causal), head_dim, fma_off,
               out.data_ptr() % 16 == 0, lse.data_ptr() % 16 == 0, tuple(map(_int_key, ints)),
               _int_key(runtime["l2_heads"]) if cfg.scheduler else None,
               _int_key(runtime["n_bh_arg"]) if cfg.scheduler else None,
               runtime["tile_counter"].data_ptr() % 16 == 0 if cfg.scheduler else None,
               _fl.context_key(q.device))
        hit = None if _key_only else _FAST.get(key)
        if hit is not None:
            compiled, template, index = hit
            runtime.update(q_desc=_DescArg(q), k_desc=_DescArg(k), v_desc=_DescArg(v),
                           out_ptr=out, lse_ptr=lse, seqlen_q=seqlen_q, seqlen_k=seqlen_k,
                           heads=heads, kv_group=kv_group, num_m_tiles=num_m_tiles,
                           qk_scale=softmax_scale * LOG2E)
            if cfg.tma_store:
                runtime["o_desc"] = _DescArg(out)
            compiled[(grid[0], 1, 1)](*_fast_arglist(template, index, runtime))
            return out, lse
    extra = _v4_constexprs(cfg)
    if cfg.scheduler:
        extra.update(DYNAMIC=True, **runtime)
    if cfg.wg_bounds or cfg.skip_empty_wg:
        if cfg.pingpong:
            raise ValueError("wg_bounds / skip_empty_wg: not with pingpong")
        if cfg.wg_bounds and cfg.persistent and not cfg.scheduler:
            raise ValueError("wg_bounds: not with the static persistent schedule")
        extra["WG_SKIP"] = 2 if cfg.skip_empty_wg else True
    if fma_off:
        extra["SOFTMAX_FMA"] = False
    if cfg.split_loops:
        extra["SPLIT_LOOPS"] = True
    qpf_diag = _qpf_diag_bits(cfg)
    if qpf_diag:  # passed only when on: the kernels without it keep their specialisation
        extra["QPF_DIAG"] = qpf_diag
    # o_desc=None (no TMA store) is specialised away: with every new switch off the kernel
    # compiles to the verified SASS (tests/test_hopper_compile.py checks the instruction hash).
    o_desc = _descriptor(out, cfg.block_m // cfg.num_consumers, d_pad) if cfg.tma_store else None
    q_rows = cfg.block_m // (3 if cfg.num_consumers == 3 else 1)
    args = (_descriptor(q, q_rows, d_pad), _descriptor(k, cfg.block_n, d_pad),
            _descriptor(v, cfg.block_n, d_pad), out, lse, *ints, softmax_scale * LOG2E)
    kwargs = dict(
        CAUSAL=bool(causal), BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, HEAD_DIM=d_pad,
        NUM_STAGES=cfg.num_stages, OVERLAP=cfg.overlap, PINGPONG=cfg.pingpong,
        CONSUMER_REGS=cfg.consumer_regs, PRODUCER_REGS=cfg.producer_regs,
        o_desc=o_desc, D_REAL=head_dim, PERSISTENT=cfg.persistent,
        TMA_STORE=_tma_store_mode(cfg),
        PP_MODE=cfg.pingpong_mode if cfg.pingpong else 0, **extra,
        num_warps=cfg.num_warps, maxnreg=cfg.maxnreg,
    )
    if _key_only:
        return key, args, kwargs, grid
    if cfg.asm_waits:
        offs = _ASM_OFFSETS.get(key)
        if offs is None:
            def build(o):
                return attn_fwd_kernel.warmup(*args, grid=grid, **kwargs, KR_OFF=o[0],
                                              VR_OFF=o[1])
            offs = _with_barrier_offsets(build, cfg.num_stages)[1]
            if key is not None:
                _ASM_OFFSETS[key] = offs
        kwargs.update(KR_OFF=offs[0], VR_OFF=offs[1])
    compiled = _launch(attn_fwd_kernel, grid, _warmup, *args, **kwargs)
    if key is not None:
        _remember(key, attn_fwd_kernel, compiled, args, kwargs)
    return compiled if _warmup else (out, lse)


# --------------------------------------------------------------------------------------------
# Ahead-of-time compilation for sm_90a (no GPU needed): used by `python -m fusedattn.inspect`
# and by the CPU tests.
# --------------------------------------------------------------------------------------------
def compile_sm90(head_dim: int = 128, causal: bool = False, dtype: str = "bf16",
                 config: FwdConfig | None = None):
    """Compile the kernel `config` selects for sm_90a with the bundled ptxas (triton's
    CompiledKernel). head_dim may be a padded one (e.g. 96: compiled at 128 with D_REAL 96)."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    cfg = config or get_config(head_dim, causal)
    _check_switch_support(cfg)
    d_pad = padded_head_dim(head_dim)
    lay = repr(gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=4))
    q_rows = cfg.block_m // (3 if cfg.num_consumers == 3 else 1)
    signature = {
        "q_desc": f"tensordesc<{dtype}[1, {q_rows}, 1, {d_pad}],{lay}>",
        "k_desc": f"tensordesc<{dtype}[1, {cfg.block_n}, 1, {d_pad}],{lay}>",
        "v_desc": f"tensordesc<{dtype}[1, {cfg.block_n}, 1, {d_pad}],{lay}>",
        "out_ptr": f"*{dtype}", "lse_ptr": "*fp32",
        "seqlen_q": "i32", "seqlen_k": "i32", "heads": "i32", "kv_group": "i32",
        "num_m_tiles": "i32", "qk_scale": "fp32",
    }
    constexprs = dict(CAUSAL=bool(causal), BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
                      HEAD_DIM=d_pad, NUM_STAGES=cfg.num_stages, OVERLAP=cfg.overlap)
    if cfg.warp_specialize:
        kernel = attn_fwd_kernel
        constexprs.update(PINGPONG=cfg.pingpong, CONSUMER_REGS=cfg.consumer_regs,
                          PRODUCER_REGS=cfg.producer_regs)
        if cfg.tma_store:
            signature["o_desc"] = (f"tensordesc<{dtype}[1, {cfg.block_m // cfg.num_consumers}, 1, "
                                   f"{d_pad}],{lay}>")
        else:
            constexprs["o_desc"] = None
        constexprs.update(D_REAL=head_dim, PERSISTENT=cfg.persistent,
                          TMA_STORE=_tma_store_mode(cfg),
                          PP_MODE=cfg.pingpong_mode if cfg.pingpong else 0,
                          NUM_CONSUMERS=cfg.num_consumers,
                          SOFTMAX_FMA=_softmax_fma_value(cfg) if cfg.softmax_fma else False)
        if cfg.scheduler:
            signature["tile_counter"] = "*i32"
            signature["l2_heads"] = "i32"
            signature["n_bh_arg"] = "i32"
            constexprs["DYNAMIC"] = True
            if cfg.q_l2_prefetch:  # (forward passes q as a runtime argument)
                signature["q_ptr"] = f"*{dtype}"
        else:
            constexprs.update(tile_counter=None, l2_heads=None, DYNAMIC=False)
        if not cfg.scheduler:
            constexprs["n_bh_arg"] = None
        constexprs["WG_SKIP"] = 2 if cfg.skip_empty_wg else cfg.wg_bounds
        if cfg.split_loops:
            constexprs["SPLIT_LOOPS"] = True
        # always given: a constexpr left out here is None in the kernel (not its default)
        constexprs["QPF_DIAG"] = _qpf_diag_bits(cfg)
        constexprs.update(KR_OFF=-1, VR_OFF=-1)   # asm_waits: set by _with_barrier_offsets
        options = {"num_warps": cfg.num_warps, "maxnreg": cfg.maxnreg}
    else:
        kernel = attn_fwd_nows_kernel
        constexprs["D_REAL"] = head_dim
        options = {"num_warps": cfg.num_warps}
    for name in constexprs:
        signature[name] = "constexpr"
    target = GPUTarget("cuda", 90, 32)
    if cfg.asm_waits:   # two compiles: the barriers' offsets from the first (_barrier_offsets)
        def build(offs):
            cx = dict(constexprs, KR_OFF=offs[0], VR_OFF=offs[1])
            return triton.compile(GluonASTSource(kernel, signature, constexprs=cx),
                                  target=target, options=options)
        return _with_barrier_offsets(build, cfg.num_stages)[0]
    src = GluonASTSource(kernel, signature, constexprs=constexprs)
    return triton.compile(src, target=target, options=options)


def _barrier_offsets(ttgir: str) -> tuple[int, int]:
    """(k_ready, v_ready): the shared-memory offsets that Triton's allocation gives the kernel's
    K / V ready barrier arrays. Runs the NVIDIA backend's passes up to the shared-memory
    allocation (as make_llir runs them) on the compiled kernel's TTGIR and reads the
    allocation.offset of the allocations named %k_ready and %v_ready."""
    import os
    import re
    import tempfile
    from triton._C.libtriton import ir, nvidia, passes
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import CUDABackend
    ctx = ir.context()
    ir.load_dialects(ctx)
    CUDABackend(GPUTarget("cuda", 90, 32)).load_dialects(ctx)
    with tempfile.NamedTemporaryFile("w", suffix=".ttgir", delete=False) as f:
        f.write(ttgir)
    try:
        mod = ir.parse_mlir_module(f.name, ctx)
    finally:
        os.unlink(f.name)
    mod.context = ctx
    pm = ir.pass_manager(ctx)
    passes.ttgpuir.add_combine_tensor_select_and_if(pm)
    passes.ttgpuir.add_allocate_warp_groups(pm)
    passes.convert.add_scf_to_cf(pm)
    passes.gluon.add_inliner(pm)
    from triton.backends.nvidia.compiler import get_ptx_version_from_options
    backend = CUDABackend(GPUTarget("cuda", 90, 32))
    ptx_version = get_ptx_version_from_options(backend.parse_options({}), 90)
    nvidia.passes.ttgpuir.add_allocate_shared_memory_nv(pm, 90, ptx_version)
    pm.run(mod, "barrier_offsets")
    found = dict(re.findall(r"%(k_ready|v_ready) = ttg\.local_alloc \{allocation\.offset = (\d+)",
                            str(mod)))
    if set(found) != {"k_ready", "v_ready"}:
        raise RuntimeError(f"asm_waits: the K / V ready barriers' offsets not found ({found})")
    return int(found["k_ready"]), int(found["v_ready"])


def _with_barrier_offsets(build, num_stages: int):
    """build((k_off, v_off)) -> compiled kernel, with asm_waits' offsets: a first compile at
    (0, 0) gives the allocation (the inline waits allocate nothing, so it does not depend on
    them), the second uses its offsets. Checked: both allocations agree, and the second
    kernel's PTX initialises an mbarrier at each of the num_stages addresses of both arrays.
    Returns (compiled, offsets)."""
    import re
    offs = _barrier_offsets(build((0, 0)).asm["ttgir"])
    compiled = build(offs)
    if _barrier_offsets(compiled.asm["ttgir"]) != offs:
        raise RuntimeError("asm_waits: the barriers moved between the two compiles")
    ptx = compiled.asm["ptx"]
    # mbarrier.init [%rX] with %rX = global_smem (register) + constant, as Triton writes it
    adds = dict(re.findall(r"add\.s32\s+(%r\d+), %r\d+, (\d+);", ptx))
    inits = {int(adds[r]) for r in re.findall(r"mbarrier\.init\.shared::cta\.b64 \[(%r\d+)\]",
                                              ptx) if r in adds}
    want = {o + 8 * i for o in offs for i in range(num_stages)}
    if not want <= inits:
        raise RuntimeError(f"asm_waits: no mbarrier initialised at {sorted(want - inits)}")
    return compiled, offs
