"""Pairwise rule table: op A on one index of an allocation, then op B on ANOTHER index of the
same allocation (or on a separately allocated buffer), in a 4-warp worker partition, inside a loop
that ends with gl.thread_barrier(). Counts the barriers membar inserts between A and B.
Ops on an mbarrier allocation: expect, copy (TMA, completes on it), wait, arrive.
Ops on a data allocation: copy (TMA destination), load (local load), store (local store)."""
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma
from harness import compile_kernel, barriers, V_DESC

OPS = {"expect": 0, "copy": 1, "wait": 2, "arrive": 3, "load": 4, "store": 5}


@gluon.jit
def _default(n):
    pass


@gluon.jit
def _op(OP: gl.constexpr, v_desc, j, bar, other_bar, data, other_data):
    lay: gl.constexpr = gl.BlockedLayout([1, 16], [8, 4], [gl.num_warps(), 1], [1, 0])
    if OP == 0:
        mbarrier.expect(bar, 128 * 64)
    elif OP == 1:
        tma.async_copy_global_to_shared(v_desc, [j * 128, 0], bar, data)
    elif OP == 2:
        mbarrier.wait(bar, j & 1)
    elif OP == 3:
        mbarrier.arrive(bar, count=1)
    elif OP == 4:
        x = data.load(lay)
        other_data.store(x)   # (to a third, unrelated buffer so the load is not dead)
    else:
        data.store(gl.full([128, 64], 0, gl.float8e4nv, lay))


@gluon.jit
def _worker(v_desc, bars, bars2, data, data2, sink, n, A: gl.constexpr, B: gl.constexpr,
            SEP: gl.constexpr):
    for j in range(n):
        _op(A, v_desc, j, bars.index(0), bars, data.index(0), sink)
        if SEP:
            _op(B, v_desc, j, bars2.index(1), bars, data2.index(1), sink)
        else:
            _op(B, v_desc, j, bars.index(1), bars, data.index(1), sink)
        gl.thread_barrier()


@gluon.jit
def kernel(v_desc, n, A: gl.constexpr, B: gl.constexpr, SEP: gl.constexpr):
    fp8: gl.constexpr = v_desc.dtype
    data = gl.allocate_shared_memory(fp8, [2, 128, 64], v_desc.layout)
    data2 = gl.allocate_shared_memory(fp8, [2, 128, 64], v_desc.layout)
    sink = gl.allocate_shared_memory(fp8, [128, 64], v_desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    bars2 = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2):
        mbarrier.init(bars.index(i), count=1)
        mbarrier.init(bars2.index(i), count=1)
    gl.warp_specialize([(_default, (n,)),
                        (_worker, (v_desc, bars, bars2, data, data2, sink, n, A, B, SEP))],
                       [4], [80])


if __name__ == "__main__":
    names = list(OPS)
    for sep in (0, 1):
        print(f"--- {'SEPARATE allocations' if sep else 'same allocation, other index'}: "
              "barriers inserted between A (row) and B (column)")
        print("A \\ B    " + " ".join(f"{b:>7s}" for b in names))
        for a in names:
            row = []
            for b in names:
                c = compile_kernel(kernel, {"v_desc": V_DESC, "n": "i32"},
                                   {"A": OPS[a], "B": OPS[b], "SEP": sep})
                named = [x for x in barriers(c.asm["ptx"]) if x[0].startswith("bar.sync  2")]
                row.append(len(named) - 1)   # minus the explicit end-of-iteration barrier
            print(f"{a:8s} " + " ".join(f"{r:7d}" for r in row))
