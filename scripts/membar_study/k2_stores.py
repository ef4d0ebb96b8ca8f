"""Variant 3: the V transpose's 4 chunk stores into one V^T stage, in a 4-warp worker partition.
Each chunk: local load (ldmatrix.trans via the real kernel's _transpose_v_ldsm, or a plain
blocked load) from staging box c, store into V^T rows [c*64, c*64+64).
MODE:
  0  vt.index(s).slice(c*64, 64)._reinterpret(int32, [64, 32], l32).store(w)   (ours, ldmatrix)
  1  vt.index(s).slice(c*64, 64).store(x)            (plain slice, fp8 tensor, no reinterpret)
  2  vt.slice(c*64, 64).store(x) on a 2-D allocation without .index (single stage)
  3  four separate allocations vt_c (one per chunk), .index(s).store(x)
  4  as 0 but the four chunk tensors stored by ONE store (gl.join of the words; ldmatrix path)
  5  _reinterpret first, then slice:  vt.index(s)._reinterpret(int32,[256,32]).slice(c*64,64)
"""
import os
import sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, fence_async_shared
from harness import compile_kernel, summarize, V_DESC
from fusedattn.kernels.hopper_fp8_fwd import _transpose_v_ldsm

L32 = gl.constexpr(gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=32, rank=2))


@gluon.jit
def _default(n):
    pass


@gluon.jit
def _plain_chunk(src):
    # a plain (non-transposing) register round trip: enough to see membar's view of the store
    lay: gl.constexpr = gl.BlockedLayout([1, 16], [8, 4], [gl.num_warps(), 1], [1, 0])
    return src.load(lay)


@gluon.jit
def _worker(vs, vt, vt1, vt2, vt3, n, MODE: gl.constexpr):
    for j in range(n):
        s = j % 2
        if MODE == 0:
            for c in gl.static_range(4):
                _transpose_v_ldsm(vs.index(s * 4 + c), vt.index(s).slice(c * 64, 64, dim=0))
        elif MODE == 1:
            for c in gl.static_range(4):
                x = _plain_chunk(vs.index(s * 4 + c))
                vt.index(s).slice(c * 64, 64, dim=0).store(gl.permute(x, (1, 0)).reshape([64, 128]))
        elif MODE == 2:
            for c in gl.static_range(4):
                x = _plain_chunk(vs.index(s * 4 + c))
                vt.slice(c * 64, 64, dim=0).store(gl.permute(x, (1, 0)).reshape([64, 128]))
        elif MODE == 3:
            x = _plain_chunk(vs.index(s * 4 + 0))
            vt.index(s).store(gl.permute(x, (1, 0)).reshape([64, 128]))
            x = _plain_chunk(vs.index(s * 4 + 1))
            vt1.index(s).store(gl.permute(x, (1, 0)).reshape([64, 128]))
            x = _plain_chunk(vs.index(s * 4 + 2))
            vt2.index(s).store(gl.permute(x, (1, 0)).reshape([64, 128]))
            x = _plain_chunk(vs.index(s * 4 + 3))
            vt3.index(s).store(gl.permute(x, (1, 0)).reshape([64, 128]))
        elif MODE == 5:
            for c in gl.static_range(4):
                x = _plain_chunk(vs.index(s * 4 + c))
                y = gl.permute(x, (1, 0)).reshape([64, 128])
                vt.index(s)._reinterpret(gl.int32, [256, 32], L32).slice(c * 64, 64, dim=0).store(
                    y.to(gl.int32, bitcast=False) if False else gl.full([64, 32], 0, gl.int32, gl.BlockedLayout([1, 4], [8, 4], [gl.num_warps(), 1], [1, 0])))
        fence_async_shared()
        gl.thread_barrier()


@gluon.jit
def kernel(n, MODE: gl.constexpr):
    fp8: gl.constexpr = gl.float8e4nv
    vs_layout: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=64, element_bitwidth=8, rank=2)
    vt_layout: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=8, rank=2)
    vs = gl.allocate_shared_memory(fp8, [8, 128, 64], vs_layout)
    if MODE == 2:
        vt = gl.allocate_shared_memory(fp8, [256, 128], vt_layout)
        vt1 = vt
        vt2 = vt
        vt3 = vt
    elif MODE == 3:
        vt = gl.allocate_shared_memory(fp8, [2, 64, 128], vt_layout)
        vt1 = gl.allocate_shared_memory(fp8, [2, 64, 128], vt_layout)
        vt2 = gl.allocate_shared_memory(fp8, [2, 64, 128], vt_layout)
        vt3 = gl.allocate_shared_memory(fp8, [2, 64, 128], vt_layout)
    else:
        vt = gl.allocate_shared_memory(fp8, [2, 256, 128], vt_layout)
        vt1 = vt
        vt2 = vt
        vt3 = vt
    gl.warp_specialize([(_default, (n,)), (_worker, (vs, vt, vt1, vt2, vt3, n, MODE))], [4], [80])


if __name__ == "__main__":
    for mode in (0, 1, 2, 3, 5):
        c = compile_kernel(kernel, {"n": "i32"}, {"MODE": mode}, name=f"k2_m{mode}")
        summarize(f"k2 MODE={mode}", c)
