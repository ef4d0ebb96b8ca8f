"""The producer's per-block loop (hdim 256: 4 V boxes of 128 keys x 64 columns per key block,
BLOCK_N = 128, NUM_STAGES = V_STAGES = 2) in a 4-warp worker partition, in several shapes.
The transpose is the real kernel's _transpose_v_ldsm (ldmatrix.trans + prmt + stmatrix).

STRUCT:
  0  ours: one staging allocation [8,128,64] + vs_ready [2,1]; load_next (expect, 4 copies, wait
     k_empty, expect, copy K) then wait vs_ready / vt_empty, 4 chunk transposes into
     vt.index(s).slice(c*64), fence, gl.thread_barrier(), mbarrier.arrive(vt_ready)
  1  restructured: staging split per chunk (4 allocations [2,128,64]) with one mbarrier
     allocation [2,1] per chunk; the expects of block j+2's V issued at the END of block j
     (before the warpgroup barrier), block j+1's V copies at the start of block j; K as before;
     vt_ready signalled with mbarrier.expect(vt_ready, 0) instead of mbarrier.arrive
  2  as 1, V^T stage as 2 allocations [2,128,128] (columns 0-127 / 128-255), chunks stored in
     the order 0, 2, 1, 3
  3  as 1, V^T stage as 4 allocations [2,64,128] (one per 64-column chunk)
  4  as 1 but with mbarrier.arrive(vt_ready) (shows what the arrive costs)
  5  ours (0) with only arrive -> expect(vt_ready, 0)
  6  ours (0) with only the staging split per chunk + per-chunk mbarriers (expects kept before the
     copies in load_next)
  7  as 1 but without the gl.thread_barrier() at the end of the prologue
"""
import os
import sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, fence_async_shared
from harness import compile_kernel, summarize, sass_counts, V_DESC, K_DESC
from fusedattn.kernels.hopper_fp8_fwd import _transpose_v_ldsm

NB = gl.constexpr(128 * 64)      # one V box
KB = gl.constexpr(128 * 128)     # one K tile (head_dim 128 here: a stand-in, one TMA)


@gluon.jit
def _default(n):
    pass


# ---------------------------------------------------------------- STRUCT 0 / 5 (ours)
@gluon.jit
def _load_v_ours(v_desc, vs, bar, n0, slot):
    mbarrier.expect(bar, 4 * NB)
    for c in gl.static_range(4):
        tma.async_copy_global_to_shared(v_desc, [n0, c * 64], bar, vs.index(slot * 4 + c))


@gluon.jit
def _load_k(k_desc, k_smem, k_ready, k_empty, n0, g):
    sn = g % 2
    mbarrier.wait(k_empty.index(sn), ((g // 2) & 1) ^ 1)
    mbarrier.expect(k_ready.index(sn), KB)
    tma.async_copy_global_to_shared(k_desc, [n0, 0], k_ready.index(sn), k_smem.index(sn))


@gluon.jit
def _signal(bar, ARRIVE: gl.constexpr):
    if ARRIVE:
        mbarrier.arrive(bar, count=1)
    else:
        mbarrier.expect(bar, 0)   # arrive.expect_tx with 0 bytes: an arrive (count 1)


@gluon.jit
def _producer_ours(v_desc, k_desc, vs, k_smem, vt, vs_ready, k_ready, k_empty, vt_ready,
                   vt_empty, n, ARRIVE: gl.constexpr):
    _load_v_ours(v_desc, vs, vs_ready.index(0), 0, 0)
    mbarrier.expect(k_ready.index(0), KB)
    tma.async_copy_global_to_shared(k_desc, [0, 0], k_ready.index(0), k_smem.index(0))
    for j in range(n):
        jn = j + 1
        if jn < n:
            _load_v_ours(v_desc, vs, vs_ready.index(jn % 2), jn * 128, jn % 2)
            _load_k(k_desc, k_smem, k_ready, k_empty, jn * 128, jn)
        vsl = j % 2
        s = j % 2
        mbarrier.wait(vs_ready.index(vsl), (j // 2) & 1)
        mbarrier.wait(vt_empty.index(s), ((j // 2) & 1) ^ 1)
        for c in gl.static_range(4):
            _transpose_v_ldsm(vs.index(vsl * 4 + c), vt.index(s).slice(c * 64, 64, dim=0))
        fence_async_shared()
        gl.thread_barrier()
        _signal(vt_ready.index(s), ARRIVE)


# ---------------------------------------------------------------- STRUCT 6
@gluon.jit
def _producer_split_only(v_desc, k_desc, vs0, vs1, vs2, vs3, b0, b1, b2, b3, k_smem, vt,
                         k_ready, k_empty, vt_ready, vt_empty, n):
    for c in gl.static_range(1):
        mbarrier.expect(b0.index(0), NB)
        mbarrier.expect(b1.index(0), NB)
        mbarrier.expect(b2.index(0), NB)
        mbarrier.expect(b3.index(0), NB)
        tma.async_copy_global_to_shared(v_desc, [0, 0], b0.index(0), vs0.index(0))
        tma.async_copy_global_to_shared(v_desc, [0, 64], b1.index(0), vs1.index(0))
        tma.async_copy_global_to_shared(v_desc, [0, 128], b2.index(0), vs2.index(0))
        tma.async_copy_global_to_shared(v_desc, [0, 192], b3.index(0), vs3.index(0))
    mbarrier.expect(k_ready.index(0), KB)
    tma.async_copy_global_to_shared(k_desc, [0, 0], k_ready.index(0), k_smem.index(0))
    for j in range(n):
        jn = j + 1
        if jn < n:
            t = jn % 2
            mbarrier.expect(b0.index(t), NB)
            mbarrier.expect(b1.index(t), NB)
            mbarrier.expect(b2.index(t), NB)
            mbarrier.expect(b3.index(t), NB)
            tma.async_copy_global_to_shared(v_desc, [jn * 128, 0], b0.index(t), vs0.index(t))
            tma.async_copy_global_to_shared(v_desc, [jn * 128, 64], b1.index(t), vs1.index(t))
            tma.async_copy_global_to_shared(v_desc, [jn * 128, 128], b2.index(t), vs2.index(t))
            tma.async_copy_global_to_shared(v_desc, [jn * 128, 192], b3.index(t), vs3.index(t))
            _load_k(k_desc, k_smem, k_ready, k_empty, jn * 128, jn)
        s = j % 2
        ph = (j // 2) & 1
        mbarrier.wait(b0.index(s), ph)
        mbarrier.wait(b1.index(s), ph)
        mbarrier.wait(b2.index(s), ph)
        mbarrier.wait(b3.index(s), ph)
        mbarrier.wait(vt_empty.index(s), ph ^ 1)
        _transpose_v_ldsm(vs0.index(s), vt.index(s).slice(0, 64, dim=0))
        _transpose_v_ldsm(vs1.index(s), vt.index(s).slice(64, 64, dim=0))
        _transpose_v_ldsm(vs2.index(s), vt.index(s).slice(128, 64, dim=0))
        _transpose_v_ldsm(vs3.index(s), vt.index(s).slice(192, 64, dim=0))
        fence_async_shared()
        gl.thread_barrier()
        mbarrier.arrive(vt_ready.index(s), count=1)


# ---------------------------------------------------------------- STRUCT 1-4, 7 (restructured)
@gluon.jit
def _expect_v(b0, b1, b2, b3, t):
    mbarrier.expect(b0.index(t), NB)
    mbarrier.expect(b1.index(t), NB)
    mbarrier.expect(b2.index(t), NB)
    mbarrier.expect(b3.index(t), NB)


@gluon.jit
def _copy_v(v_desc, vs0, vs1, vs2, vs3, b0, b1, b2, b3, n0, t):
    tma.async_copy_global_to_shared(v_desc, [n0, 0], b0.index(t), vs0.index(t))
    tma.async_copy_global_to_shared(v_desc, [n0, 64], b1.index(t), vs1.index(t))
    tma.async_copy_global_to_shared(v_desc, [n0, 128], b2.index(t), vs2.index(t))
    tma.async_copy_global_to_shared(v_desc, [n0, 192], b3.index(t), vs3.index(t))


@gluon.jit
def _transpose_split(vs0, vs1, vs2, vs3, vt, vt1, vt2, vt3, s, VT: gl.constexpr):
    if VT == 1:     # one V^T allocation [2, 256, 128]
        _transpose_v_ldsm(vs0.index(s), vt.index(s).slice(0, 64, dim=0))
        _transpose_v_ldsm(vs1.index(s), vt.index(s).slice(64, 64, dim=0))
        _transpose_v_ldsm(vs2.index(s), vt.index(s).slice(128, 64, dim=0))
        _transpose_v_ldsm(vs3.index(s), vt.index(s).slice(192, 64, dim=0))
    elif VT == 2:   # two allocations [2, 128, 128]: columns 0-127 in vt, 128-255 in vt1
        _transpose_v_ldsm(vs0.index(s), vt.index(s).slice(0, 64, dim=0))
        _transpose_v_ldsm(vs2.index(s), vt1.index(s).slice(0, 64, dim=0))
        _transpose_v_ldsm(vs1.index(s), vt.index(s).slice(64, 64, dim=0))
        _transpose_v_ldsm(vs3.index(s), vt1.index(s).slice(64, 64, dim=0))
    else:           # four allocations [2, 64, 128]
        _transpose_v_ldsm(vs0.index(s), vt.index(s))
        _transpose_v_ldsm(vs1.index(s), vt1.index(s))
        _transpose_v_ldsm(vs2.index(s), vt2.index(s))
        _transpose_v_ldsm(vs3.index(s), vt3.index(s))


@gluon.jit
def _producer_new(v_desc, k_desc, vs0, vs1, vs2, vs3, b0, b1, b2, b3, k_smem,
                  vt, vt1, vt2, vt3, k_ready, k_empty, vt_ready, vt_empty, n,
                  VT: gl.constexpr, ARRIVE: gl.constexpr, PRO_BAR: gl.constexpr):
    # prologue: V_0 and K_0 (expects, then copies), the expects of V_1, one warpgroup barrier
    _expect_v(b0, b1, b2, b3, 0)
    mbarrier.expect(k_ready.index(0), KB)
    _copy_v(v_desc, vs0, vs1, vs2, vs3, b0, b1, b2, b3, 0, 0)
    tma.async_copy_global_to_shared(k_desc, [0, 0], k_ready.index(0), k_smem.index(0))
    if n > 1:
        _expect_v(b0, b1, b2, b3, 1)
    if PRO_BAR:
        gl.thread_barrier()
    for j in range(n):
        jn = j + 1
        s = j % 2
        if jn < n:
            # V_{j+1}: its expects were issued before the previous warpgroup barrier
            _copy_v(v_desc, vs0, vs1, vs2, vs3, b0, b1, b2, b3, jn * 128, jn % 2)
            _load_k(k_desc, k_smem, k_ready, k_empty, jn * 128, jn)
        ph = (j // 2) & 1
        mbarrier.wait(b0.index(s), ph)
        mbarrier.wait(b1.index(s), ph)
        mbarrier.wait(b2.index(s), ph)
        mbarrier.wait(b3.index(s), ph)
        mbarrier.wait(vt_empty.index(s), ph ^ 1)
        _transpose_split(vs0, vs1, vs2, vs3, vt, vt1, vt2, vt3, s, VT)
        if j + 2 < n:
            # V_{j+2} goes to slot s: this block's waits on it are done (in every thread that
            # issues the expect), its copies come after the barrier below
            _expect_v(b0, b1, b2, b3, s)
        fence_async_shared()
        gl.thread_barrier()
        _signal(vt_ready.index(s), ARRIVE)


@gluon.jit
def vt_stages(fp8: gl.constexpr, vt_layout: gl.constexpr, VT: gl.constexpr):
    """Two V^T stages (head_dim 256 x 128 keys) as VT allocations split along head_dim (1, 2 or
    4), returned as the buffers of the four 64-column chunks (chunks of one allocation repeat
    it; the transposer slices its chunk out of it)."""
    if VT == 1:
        vt = gl.allocate_shared_memory(fp8, [2, 256, 128], vt_layout)
        return vt, vt, vt, vt
    elif VT == 2:
        vt = gl.allocate_shared_memory(fp8, [2, 128, 128], vt_layout)
        vt1 = gl.allocate_shared_memory(fp8, [2, 128, 128], vt_layout)
        return vt, vt1, vt, vt
    else:
        return (gl.allocate_shared_memory(fp8, [2, 64, 128], vt_layout),
                gl.allocate_shared_memory(fp8, [2, 64, 128], vt_layout),
                gl.allocate_shared_memory(fp8, [2, 64, 128], vt_layout),
                gl.allocate_shared_memory(fp8, [2, 64, 128], vt_layout))


@gluon.jit
def kernel(v_desc, k_desc, n, STRUCT: gl.constexpr):
    fp8: gl.constexpr = v_desc.dtype
    vt_layout: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=8,
                                                   rank=2)
    k_smem = gl.allocate_shared_memory(fp8, [2, 128, 128], k_desc.layout)
    k_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    vt_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    vt_empty = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=2)
        mbarrier.init(vt_ready.index(i), count=1)
        mbarrier.init(vt_empty.index(i), count=2)
    if STRUCT == 0 or STRUCT == 5:
        vs = gl.allocate_shared_memory(fp8, [8, 128, 64], v_desc.layout)
        vs_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        vt = gl.allocate_shared_memory(fp8, [2, 256, 128], vt_layout)
        for i in gl.static_range(2):
            mbarrier.init(vs_ready.index(i), count=1)
        gl.warp_specialize([
            (_default, (n,)),
            (_producer_ours, (v_desc, k_desc, vs, k_smem, vt, vs_ready, k_ready, k_empty,
                              vt_ready, vt_empty, n, STRUCT == 0)),
        ], [4], [32])
    else:
        vs0 = gl.allocate_shared_memory(fp8, [2, 128, 64], v_desc.layout)
        vs1 = gl.allocate_shared_memory(fp8, [2, 128, 64], v_desc.layout)
        vs2 = gl.allocate_shared_memory(fp8, [2, 128, 64], v_desc.layout)
        vs3 = gl.allocate_shared_memory(fp8, [2, 128, 64], v_desc.layout)
        b0 = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        b1 = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        b2 = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        b3 = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(2):
            mbarrier.init(b0.index(i), count=1)
            mbarrier.init(b1.index(i), count=1)
            mbarrier.init(b2.index(i), count=1)
            mbarrier.init(b3.index(i), count=1)
        VT: gl.constexpr = 2 if STRUCT == 2 else (4 if STRUCT == 3 else 1)
        vt, vt1, vt2, vt3 = vt_stages(fp8, vt_layout, VT)
        if STRUCT == 6:
            gl.warp_specialize([
                (_default, (n,)),
                (_producer_split_only, (v_desc, k_desc, vs0, vs1, vs2, vs3, b0, b1, b2, b3,
                                        k_smem, vt, k_ready, k_empty, vt_ready, vt_empty, n)),
            ], [4], [32])
        else:
            gl.warp_specialize([
                (_default, (n,)),
                (_producer_new, (v_desc, k_desc, vs0, vs1, vs2, vs3, b0, b1, b2, b3, k_smem,
                                 vt, vt1, vt2, vt3, k_ready, k_empty, vt_ready, vt_empty, n,
                                 VT, STRUCT == 4, STRUCT != 7)),
            ], [4], [32])


if __name__ == "__main__":
    structs = [int(a) for a in sys.argv[1:]] or [0, 5, 6, 1, 4, 7, 2, 3]
    for st in structs:
        c = compile_kernel(kernel, {"v_desc": V_DESC, "k_desc": K_DESC, "n": "i32"},
                           {"STRUCT": st}, name=f"k6_s{st}")
        summarize(f"k6 STRUCT={st}", c)
        print("   SASS:", sass_counts(c))
