"""Split producer: a 1-warp loader (all TMA + expects + waits on k_empty / vs_empty) and a
TW-warp transposer (waits, 4 chunk transposes, fence, warpgroup barrier, signals), in one kernel
with a (idle) 4-warp default partition. Signals by mbarrier.arrive (SIG=1) or expect(bar, 0) (0).
VT: 1 = one V^T allocation [2,256,128]; 2 = two [2,128,128] (order 0,2,1,3); 4 = four [2,64,128]."""
import os
import sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, fence_async_shared
from harness import compile_kernel, summarize, sass_counts, skeleton, V_DESC, K_DESC
from k6_producer import _signal, vt_stages, NB, KB
from fusedattn.kernels.hopper_fp8_fwd import _transpose_v_ldsm


@gluon.jit
def _default(n):
    pass


@gluon.jit
def _loader(v_desc, k_desc, vs, k_smem, vs_ready, vs_empty, k_ready, k_empty, n):
    for j in range(n):
        s = j % 2
        ph = (j // 2) & 1
        mbarrier.wait(vs_empty.index(s), ph ^ 1)
        mbarrier.expect(vs_ready.index(s), 4 * NB)
        for c in gl.static_range(4):
            tma.async_copy_global_to_shared(v_desc, [j * 128, c * 64], vs_ready.index(s),
                                            vs.index(s * 4 + c))
        mbarrier.wait(k_empty.index(s), ph ^ 1)
        mbarrier.expect(k_ready.index(s), KB)
        tma.async_copy_global_to_shared(k_desc, [j * 128, 0], k_ready.index(s), k_smem.index(s))


@gluon.jit
def _transposer(vs, vt, vt1, vt2, vt3, vs_ready, vs_empty, vt_ready, vt_empty, n,
                VT: gl.constexpr, SIG: gl.constexpr):
    for j in range(n):
        s = j % 2
        ph = (j // 2) & 1
        mbarrier.wait(vs_ready.index(s), ph)
        mbarrier.wait(vt_empty.index(s), ph ^ 1)
        if VT == 1:
            for c in gl.static_range(4):
                _transpose_v_ldsm(vs.index(s * 4 + c), vt.index(s).slice(c * 64, 64, dim=0))
        elif VT == 2:
            _transpose_v_ldsm(vs.index(s * 4 + 0), vt.index(s).slice(0, 64, dim=0))
            _transpose_v_ldsm(vs.index(s * 4 + 2), vt1.index(s).slice(0, 64, dim=0))
            _transpose_v_ldsm(vs.index(s * 4 + 1), vt.index(s).slice(64, 64, dim=0))
            _transpose_v_ldsm(vs.index(s * 4 + 3), vt1.index(s).slice(64, 64, dim=0))
        else:
            _transpose_v_ldsm(vs.index(s * 4 + 0), vt.index(s))
            _transpose_v_ldsm(vs.index(s * 4 + 1), vt1.index(s))
            _transpose_v_ldsm(vs.index(s * 4 + 2), vt2.index(s))
            _transpose_v_ldsm(vs.index(s * 4 + 3), vt3.index(s))
        fence_async_shared()
        gl.thread_barrier()
        _signal(vt_ready.index(s), SIG)
        _signal(vs_empty.index(s), SIG)


@gluon.jit
def kernel(v_desc, k_desc, n, VT: gl.constexpr, SIG: gl.constexpr, TW: gl.constexpr):
    fp8: gl.constexpr = v_desc.dtype
    vt_layout: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=8,
                                                   rank=2)
    k_smem = gl.allocate_shared_memory(fp8, [2, 128, 128], k_desc.layout)
    vs = gl.allocate_shared_memory(fp8, [8, 128, 64], v_desc.layout)
    k_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    vt_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    vt_empty = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    vs_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    vs_empty = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=2)
        mbarrier.init(vt_ready.index(i), count=1)
        mbarrier.init(vt_empty.index(i), count=2)
        mbarrier.init(vs_ready.index(i), count=1)
        mbarrier.init(vs_empty.index(i), count=1)
    vt, vt1, vt2, vt3 = vt_stages(fp8, vt_layout, VT)
    gl.warp_specialize([
        (_default, (n,)),
        (_transposer, (vs, vt, vt1, vt2, vt3, vs_ready, vs_empty, vt_ready, vt_empty, n, VT, SIG)),
        (_loader, (v_desc, k_desc, vs, k_smem, vs_ready, vs_empty, k_ready, k_empty, n)),
    ], [TW, 1], [32, 32])


if __name__ == "__main__":
    for tw, vt, sig in ((4, 1, 1), (4, 1, 0), (4, 2, 0), (4, 4, 0), (2, 1, 1)):
        c = compile_kernel(kernel, {"v_desc": V_DESC, "k_desc": K_DESC, "n": "i32"},
                           {"VT": vt, "SIG": sig, "TW": tw}, name=f"k7_tw{tw}_vt{vt}_sig{sig}")
        print(f"== k7 transposer warps={tw} VT allocs={vt} signal={'arrive' if sig else 'expect0'}"
              f"  SASS {sass_counts(c)}")
        sk = skeleton(c.asm["ptx"])
        print("   " + ";".join(x.strip() for x in sk.splitlines()
                               if not x.strip().startswith(("INIT", "SETMAX", "BARRIER.SYNC 1",
                                                            "BAR.SYNC 0", "ST.SHARED", "LD.SHARED",
                                                            "RET"))))
