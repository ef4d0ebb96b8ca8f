"""Variant 1/2: consecutive TMA copies of V (four 128x64 boxes) in a 4-warp worker partition.
MODE (constexpr):
  0  one allocation [2*4,128,64], .index(slot*4+c), one mbarrier alloc [2,1] .index(slot)   (ours)
  1  four separate data allocations [2,128,64] (.index(slot)), same mbarrier
  2  one data allocation, four mbarriers from ONE allocation [2*4,1] (.index(slot*4+c))
  3  one data allocation, four separately allocated mbarriers [2,1] each
  4  four data allocations + four separately allocated mbarriers
EXPECT (constexpr): 0 expect before the copies, 1 expect after the copies,
  2 expect before + gl.thread_barrier() between expect and copies, 3 no expect at all
"""
import sys
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, fence_async_shared
from harness import compile_kernel, summarize, V_DESC, V_LAYOUT

NB = gl.constexpr(128 * 64)


@gluon.jit
def _default(n):
    pass


@gluon.jit
def _one(desc, j, c, bar, dst):
    tma.async_copy_global_to_shared(desc, [j * 128, c * 64], bar, dst)


@gluon.jit
def _worker(v_desc, d0, d1, d2, d3, b0, b1, b2, b3, n, MODE: gl.constexpr, EXPECT: gl.constexpr):
    for j in range(n):
        slot = j % 2
        if MODE == 0 or MODE == 1:
            bar0 = b0.index(slot)
            bar1 = bar0
            bar2 = bar0
            bar3 = bar0
        elif MODE == 2:
            bar0 = b0.index(slot * 4 + 0)
            bar1 = b0.index(slot * 4 + 1)
            bar2 = b0.index(slot * 4 + 2)
            bar3 = b0.index(slot * 4 + 3)
        else:
            bar0 = b0.index(slot)
            bar1 = b1.index(slot)
            bar2 = b2.index(slot)
            bar3 = b3.index(slot)
        if MODE == 0 or MODE == 2 or MODE == 3:
            dst0 = d0.index(slot * 4 + 0)
            dst1 = d0.index(slot * 4 + 1)
            dst2 = d0.index(slot * 4 + 2)
            dst3 = d0.index(slot * 4 + 3)
        else:
            dst0 = d0.index(slot)
            dst1 = d1.index(slot)
            dst2 = d2.index(slot)
            dst3 = d3.index(slot)
        one_bar: gl.constexpr = MODE == 0 or MODE == 1
        if EXPECT == 0 or EXPECT == 2:
            if one_bar:
                mbarrier.expect(bar0, 4 * NB)
            else:
                mbarrier.expect(bar0, NB)
                mbarrier.expect(bar1, NB)
                mbarrier.expect(bar2, NB)
                mbarrier.expect(bar3, NB)
        if EXPECT == 2:
            gl.thread_barrier()
        tma.async_copy_global_to_shared(v_desc, [j * 128, 0], bar0, dst0)
        tma.async_copy_global_to_shared(v_desc, [j * 128, 64], bar1, dst1)
        tma.async_copy_global_to_shared(v_desc, [j * 128, 128], bar2, dst2)
        tma.async_copy_global_to_shared(v_desc, [j * 128, 192], bar3, dst3)
        if EXPECT == 1:
            if one_bar:
                mbarrier.expect(bar0, 4 * NB)
            else:
                mbarrier.expect(bar0, NB)
                mbarrier.expect(bar1, NB)
                mbarrier.expect(bar2, NB)
                mbarrier.expect(bar3, NB)
        gl.thread_barrier()   # stand-in for the per-block warpgroup barrier (clears membar state)


@gluon.jit
def kernel(v_desc, n, MODE: gl.constexpr, EXPECT: gl.constexpr, WARPS: gl.constexpr):
    fp8: gl.constexpr = v_desc.dtype
    if MODE == 1 or MODE == 4:
        d0 = gl.allocate_shared_memory(fp8, [2, 128, 64], v_desc.layout)
        d1 = gl.allocate_shared_memory(fp8, [2, 128, 64], v_desc.layout)
        d2 = gl.allocate_shared_memory(fp8, [2, 128, 64], v_desc.layout)
        d3 = gl.allocate_shared_memory(fp8, [2, 128, 64], v_desc.layout)
    else:
        d0 = gl.allocate_shared_memory(fp8, [8, 128, 64], v_desc.layout)
        d1 = d0
        d2 = d0
        d3 = d0
    if MODE == 2:
        b0 = gl.allocate_shared_memory(gl.int64, [8, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(8):
            mbarrier.init(b0.index(i), count=1)
        b1 = b0
        b2 = b0
        b3 = b0
    else:
        b0 = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        b1 = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        b2 = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        b3 = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(2):
            mbarrier.init(b0.index(i), count=1)
            mbarrier.init(b1.index(i), count=1)
            mbarrier.init(b2.index(i), count=1)
            mbarrier.init(b3.index(i), count=1)
    gl.warp_specialize([
        (_default, (n,)),
        (_worker, (v_desc, d0, d1, d2, d3, b0, b1, b2, b3, n, MODE, EXPECT)),
    ], [WARPS], [80])


if __name__ == "__main__":
    warps = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    for mode in range(5):
        for ex in (0, 1, 2, 3):
            c = compile_kernel(kernel, {"v_desc": V_DESC, "n": "i32"},
                               {"MODE": mode, "EXPECT": ex, "WARPS": warps},
                               name=f"k1_m{mode}_e{ex}_w{warps}")
            summarize(f"k1 MODE={mode} EXPECT={ex} worker_warps={warps}", c)
