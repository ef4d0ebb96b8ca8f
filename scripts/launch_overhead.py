"""Where a timed call's time goes beyond its kernel (session 13, device run 65).

Run 64's stamps put the hdim 64 non-causal 1k row's busy span at ~0.295 ms (global timer, first
tile entry to last epilogue over all SMs) where the bench's timer (triton.testing.do_bench: L2
flushed before each call, CUDA events around it) reads ~0.358 ms. This separates, per
implementation and cell, in one process:
- event: do_bench's median (the bench's figure);
- kernel: the device duration of every kernel the call launches (torch.profiler / CUPTI),
  median over the profiled calls, and the kernels' names;
- back-to-back: events around 50 calls without an L2 flush, per call;
- host: the host's time to enqueue one call (perf_counter around 200 calls, no synchronise
  inside), per call.

    python3 scripts/launch_overhead.py [OUT_JSON] [CELLS ("d,causal,seqlen;...")]
"""
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
import triton.testing
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from fusedattn.kernels import hopper_fwd as H  # noqa: E402

CELLS = [tuple(int(x) for x in c.split(",")) for c in (sys.argv[2] if len(sys.argv) > 2 else
         "64,0,1024;64,1,1024;128,1,1024;256,1,1024;128,0,8192").split(";")]


def impls(q, k, v, causal, scale):
    import fusedattn
    fns = {"hopper": lambda: H.forward(q, k, v, causal, scale),
           "api": lambda: fusedattn.attention(q, k, v, causal=causal, softmax_scale=scale,
                                              backend="hopper")}
    try:
        from fusedattn.bench.impls import import_fa3
        fa3 = import_fa3().flash_attn_func
        fns["fa3"] = lambda: fa3(q, k, v, causal=causal, softmax_scale=scale)
    except Exception as e:  # noqa: BLE001
        print(f"FA3 not available: {e!r}"[:200])
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, scale=scale)
    fns["cudnn"] = cudnn
    return fns


def kernel_ms(fn, calls=20):
    from torch.profiler import ProfilerActivity, profile
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    per_name = {}
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            per_name.setdefault(ev.name, []).append(ev.device_time_total / 1e3)
    total = sum(statistics.median(t) * len(t) / calls for t in per_name.values())
    names = {n[:90]: (len(t) / calls, statistics.median(t)) for n, t in per_name.items()}
    return total, names


def back_to_back_ms(fn, calls=50):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(calls):
        fn()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / calls


def host_ms(fn, calls=200):
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) * 1e3 / calls


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else None
    recs = []
    for d, causal, s in CELLS:
        b, h = 16384 // s, 2048 // d
        torch.manual_seed(d + s)
        q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        fns = impls(q, k, v, bool(causal), d ** -0.5)
        flops = 4 * b * h * s * s * d / (2 if causal else 1)
        for n, fn in fns.items():
            ev = triton.testing.do_bench(fn, warmup=300, rep=200, return_mode="median")
            kt, names = kernel_ms(fn)
            bb = back_to_back_ms(fn)
            ho = host_ms(fn)
            rec = dict(d=d, causal=causal, seqlen=s, impl=n, event_ms=ev, kernel_ms=kt,
                       back_to_back_ms=bb, host_ms=ho, kernels=names)
            recs.append(rec)
            print(f"d{d} c{causal} s{s} {n:7s} event {ev:.4f} | kernel {kt:.4f} | b2b {bb:.4f} | "
                  f"host {ho:.4f} ms | TFLOP/s event {flops / ev / 1e9:.0f} kernel "
                  f"{flops / kt / 1e9:.0f} | " + "; ".join(
                      f"{nm[:50]} x{c:.1f} {t:.4f}" for nm, (c, t) in names.items()), flush=True)
        del q, k, v, fns
        torch.cuda.empty_cache()
    if out:
        with open(out, "w") as f:
            json.dump(recs, f, indent=1)


if __name__ == "__main__":
    main()
