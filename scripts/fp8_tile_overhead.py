"""Per-tile fixed cost of the FP8 kernel and of FA3-FP8, measured directly on the GPU.

A fixed number of query tiles (one 128-row tile per (batch, head): seqlen_q = 128, WAVES full
waves of the SMs) against seqlen_k = 512 ... 16384, so that only the key blocks per tile change.
The time per wave is fitted as c + n * t (n = 256-key blocks per tile): c is what a tile costs
besides its key blocks (launch, prologue loads, first transpose, epilogue), in microseconds and
in key blocks (c / t). Implementations are timed in rotated rounds after a shared warm-up
(scripts/fp8_interleaved.py's protocol).

    python3 scripts/fp8_tile_overhead.py [HEAD_DIM ...]      (default 128 256)

Device run 33 showed this design does not measure what it means to: with seqlen_q = 128 no two
tiles share K / V, so the key blocks stream from HBM, and at short seqlen_k the time per wave is
launch / host time. Kept as a record; a valid form needs K / V shared by the tiles of a wave
(several query tiles per head) and launches captured in a CUDA graph.
"""
import os
import statistics
import sys

import torch
import triton

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import fusedattn  # noqa: E402
from fusedattn.kernels import hopper_fp8_fwd as F  # noqa: E402

WAVES, ROUNDS, REP_MS = 4, 3, 30
SEQLENS_K = (512, 1024, 2048, 4096, 8192, 16384)


def fit(ns, ts):
    """Least-squares line ts = c + t * ns: (c, t)."""
    mn, mt = statistics.mean(ns), statistics.mean(ts)
    t = sum((n - mn) * (y - mt) for n, y in zip(ns, ts)) / sum((n - mn) ** 2 for n in ns)
    return mt - t * mn, t


def main():
    dims = [int(x) for x in sys.argv[1:]] or [128, 256]
    from fusedattn.bench.impls import import_fa3
    fa3 = import_fa3().flash_attn_func
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for d in dims:
        h = 2048 // d
        b = WAVES * sms // h if (WAVES * sms) % h == 0 else WAVES * sms // h + 1
        per = {"ours": {}, "fa3_fp8": {}}
        for sk in SEQLENS_K:
            torch.manual_seed(sk)
            q = torch.randn(b, 128, h, d, device="cuda", dtype=torch.bfloat16)
            k, v = (torch.randn(b, sk, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
            cfg = F.get_config(d, False)
            qq = fusedattn.quantize_fp8(q, role="q", rotate=True)
            kq = fusedattn.quantize_fp8(k, role="k", rotate=True, block_size=cfg.block_n)
            vq = fusedattn.quantize_fp8(v, role="v", block_size=cfg.block_n)
            q8, k8, v8 = (t.to(torch.float8_e4m3fn) for t in (q, k, v))
            fns = {"ours": lambda: F.forward(qq, kq, vq, False, d ** -0.5, config=cfg),
                   "fa3_fp8": lambda: fa3(q8, k8, v8, causal=False, softmax_scale=d ** -0.5)}
            for _ in range(20):
                for fn in fns.values():
                    fn()
            torch.cuda.synchronize()
            times = {n: [] for n in fns}
            for r in range(ROUNDS):
                for n in (list(fns) if r % 2 == 0 else list(fns)[::-1]):
                    times[n].append(triton.testing.do_bench(fns[n], warmup=5, rep=REP_MS,
                                                            return_mode="median"))
            for n in fns:
                per[n][sk] = statistics.median(times[n]) * 1e3 / WAVES   # us per wave
            print(f"d{d} b{b} h{h} sk{sk}: " + " | ".join(
                f"{n} {per[n][sk]:.2f} us/wave" for n in fns), flush=True)
        for n, m in per.items():
            ns = [sk / 256 for sk in m]
            c, t = fit(ns, list(m.values()))
            print(f"d{d} {n}: per-tile fixed cost {c:.2f} us = {c / t:.2f} key blocks of 256 "
                  f"({t:.3f} us per block)", flush=True)


if __name__ == "__main__":
    main()
