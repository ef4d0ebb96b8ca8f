"""Variant 1b: all four 128x64 V boxes of a key block in ONE TMA copy, with a rank-3 descriptor
whose block is [4 (column chunk), 128 (keys), 64 (columns)] -- on the host a strided view of V,
e.g. v.view(B, S, H, D // 64, 64).permute(0, 3, 1, 2, 4) (strides chunk 64, key H*D, col 1); the
box lands in shared memory as 4 consecutive [128, 64] boxes with the 64-byte swizzle, exactly the
staging layout the transpose reads. One copy + one expect per block instead of 4 + 1.
STRUCT: 0 expect + one copy before the transpose (as ours, one copy); 1 restructured as k6
STRUCT 1 (expect of block j+2 at the end of block j, expect(vt_ready, 0) instead of arrive, one
V^T allocation); 2 = 1 with V^T as 4 allocations."""
import os
import sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, fence_async_shared
from harness import compile_kernel, skeleton, sass_counts, K_DESC, V_LAYOUT
from fusedattn.kernels.hopper_fp8_fwd import _transpose_v_ldsm
from k6_producer import _load_k, _signal, KB

V3_LAYOUT = gl.NVMMASharedLayout(swizzle_byte_width=64, element_bitwidth=8, rank=3)
V3_DESC = f"tensordesc<fp8e4nv[4, 128, 64],{V3_LAYOUT!r}>"
V2 = gl.constexpr(V_LAYOUT)


@gluon.jit
def _default(n):
    pass


@gluon.jit
def _chunk(vs, s, c):
    # box c of staging slot s as the [128, 64] 2-D view the transpose takes
    return vs.index(s)._reinterpret(gl.float8e4nv, [4 * 128, 64], V2).slice(c * 128, 128, dim=0)


@gluon.jit
def _producer(v_desc, k_desc, vs, k_smem, vt, vt1, vt2, vt3, vs_ready, k_ready, k_empty,
              vt_ready, vt_empty, n, STRUCT: gl.constexpr):
    mbarrier.expect(vs_ready.index(0), 4 * 128 * 64)
    mbarrier.expect(k_ready.index(0), KB)
    tma.async_copy_global_to_shared(v_desc, [0, 0, 0], vs_ready.index(0), vs.index(0))
    tma.async_copy_global_to_shared(k_desc, [0, 0], k_ready.index(0), k_smem.index(0))
    if STRUCT != 0:
        if n > 1:
            mbarrier.expect(vs_ready.index(1), 4 * 128 * 64)
        gl.thread_barrier()
    for j in range(n):
        jn = j + 1
        s = j % 2
        if jn < n:
            if STRUCT == 0:
                mbarrier.expect(vs_ready.index(jn % 2), 4 * 128 * 64)
            tma.async_copy_global_to_shared(v_desc, [0, jn * 128, 0], vs_ready.index(jn % 2),
                                            vs.index(jn % 2))
            _load_k(k_desc, k_smem, k_ready, k_empty, jn * 128, jn)
        mbarrier.wait(vs_ready.index(s), (j // 2) & 1)
        mbarrier.wait(vt_empty.index(s), ((j // 2) & 1) ^ 1)
        if STRUCT == 2:
            _transpose_v_ldsm(_chunk(vs, s, 0), vt.index(s))
            _transpose_v_ldsm(_chunk(vs, s, 1), vt1.index(s))
            _transpose_v_ldsm(_chunk(vs, s, 2), vt2.index(s))
            _transpose_v_ldsm(_chunk(vs, s, 3), vt3.index(s))
        else:
            for c in gl.static_range(4):
                _transpose_v_ldsm(_chunk(vs, s, c), vt.index(s).slice(c * 64, 64, dim=0))
        if STRUCT != 0:
            if j + 2 < n:
                mbarrier.expect(vs_ready.index(s), 4 * 128 * 64)
        fence_async_shared()
        gl.thread_barrier()
        _signal(vt_ready.index(s), STRUCT == 0)


@gluon.jit
def kernel(v_desc, k_desc, n, STRUCT: gl.constexpr):
    fp8: gl.constexpr = v_desc.dtype
    vt_layout: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=8,
                                                   rank=2)
    vs = gl.allocate_shared_memory(fp8, [2, 4, 128, 64], v_desc.layout)
    k_smem = gl.allocate_shared_memory(fp8, [2, 128, 128], k_desc.layout)
    vs_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    vt_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    vt_empty = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2):
        mbarrier.init(vs_ready.index(i), count=1)
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=2)
        mbarrier.init(vt_ready.index(i), count=1)
        mbarrier.init(vt_empty.index(i), count=2)
    if STRUCT == 2:
        vt = gl.allocate_shared_memory(fp8, [2, 64, 128], vt_layout)
        vt1 = gl.allocate_shared_memory(fp8, [2, 64, 128], vt_layout)
        vt2 = gl.allocate_shared_memory(fp8, [2, 64, 128], vt_layout)
        vt3 = gl.allocate_shared_memory(fp8, [2, 64, 128], vt_layout)
    else:
        vt = gl.allocate_shared_memory(fp8, [2, 256, 128], vt_layout)
        vt1 = vt
        vt2 = vt
        vt3 = vt
    gl.warp_specialize([
        (_default, (n,)),
        (_producer, (v_desc, k_desc, vs, k_smem, vt, vt1, vt2, vt3, vs_ready, k_ready, k_empty,
                     vt_ready, vt_empty, n, STRUCT)),
    ], [4], [32])


if __name__ == "__main__":
    for st in (0, 1, 2):
        c = compile_kernel(kernel, {"v_desc": V3_DESC, "k_desc": K_DESC, "n": "i32"},
                           {"STRUCT": st}, name=f"k10_s{st}")
        print(f"== k10 STRUCT={st} SASS {sass_counts(c)}")
        sk = skeleton(c.asm["ptx"])
        body = sk[sk.index("Parent Loop") - 40:] if "Parent Loop" in sk else sk
        print("   " + ";".join(x.strip() for x in sk.splitlines()
                               if not x.strip().startswith(("INIT", "SETMAX", "BARRIER.SYNC 1",
                                                            "BAR.SYNC 0", "ST.SHARED", "LD.SHARED",
                                                            "RET", "LABEL", "bra"))))
