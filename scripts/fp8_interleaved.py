"""Order-fair timing of the FP8 kernel's rows, named candidates and FA3-FP8 on the GPU.

Device run 29 measured one kernel (the hdim 256 row, non-causal 8k) 10% slower when timed right
after another kernel than when timed first: a sequential do_bench of several implementations
favours whichever runs first (the GPU's clock falls under sustained load). Here every cell first
runs a sustained warm-up of all its implementations (WARM_S seconds), then ROUNDS rounds in which
each implementation is timed once (do_bench, median), the order rotated every round; reported:
each implementation's median over the rounds, and its ratio to the row; and the row timed
once alone after 2 s idle, before the warm-up (the first-measured figure). The SM clock and power
are sampled by nvidia-smi in the background (clocks.csv beside the output).

    [FP8_CELLS="d,causal,seqlen;..."] python3 scripts/fp8_interleaved.py OUT_DIR [VARIANT ...]

VARIANT "nofast" is the row launched through Triton's binder on every call (FAST_LAUNCH off):
the control for forward()'s fast launch (session 20), whose effect shows at short sequences.
"""
import json
import os
import statistics
import subprocess
import sys
import time

import torch
import triton

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from device_cells import cells  # noqa: E402
import fusedattn  # noqa: E402
from fusedattn.fp8_api import kv_block_for  # noqa: E402
from fusedattn.kernels import hopper_fp8_fwd as F  # noqa: E402

ROUNDS, WARM_S, REP_MS = 5, 1.0, 40
PSEUDO = ("nofast",)   # not a kernel variant: the row with FAST_LAUNCH off


def _no_fast(fn):
    F.FAST_LAUNCH = False
    try:
        return fn()
    finally:
        F.FAST_LAUNCH = True
CELLS = ((256, False, 2048), (256, False, 8192), (256, True, 8192), (128, False, 8192),
         (128, True, 2048), (128, True, 8192))
CELLS = cells("FP8_CELLS", CELLS)   # e.g. FP8_CELLS="128,0,2048;256,1,2048"


def main():
    out = sys.argv[1]
    variants = sys.argv[2:]
    os.makedirs(out, exist_ok=True)
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu",
                            "--format=csv", "-lms", "250"], stdout=open(os.path.join(out, "clocks.csv"), "w"),
                           stderr=subprocess.DEVNULL)
    try:
        from fusedattn.bench.impls import import_fa3
        fa3 = import_fa3().flash_attn_func
    except Exception as e:  # noqa: BLE001
        print(f"FA3 not available: {e!r}"[:200])
        fa3 = None
    rows = []
    try:
        for d, causal, s in CELLS:
            b, h = 16384 // s, 2048 // d
            torch.manual_seed(d + s)
            q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            scale = d ** -0.5
            kvb = kv_block_for(d, causal)
            qq = fusedattn.quantize_fp8(q, role="q", rotate=True)
            fns = {}
            for name in ["row"] + [n for n in variants if n in PSEUDO or d in F.VARIANTS[n][1]]:
                cfg = (F.get_config(d, causal, kvb) if name in ("row",) + PSEUDO
                       else F.variant_config(name, d, causal))
                kq = fusedattn.quantize_fp8(k, role="k", rotate=True, block_size=cfg.block_n)
                vq = fusedattn.quantize_fp8(v, role="v", block_size=cfg.block_n)
                fns[name] = (lambda cfg=cfg, kq=kq, vq=vq:
                             F.forward(qq, kq, vq, causal, scale, config=cfg))
                if name == "nofast":
                    fns[name] = lambda f=fns[name]: _no_fast(f)
            if fa3 is not None:
                q8, k8, v8 = (t.to(torch.float8_e4m3fn) for t in (q, k, v))
                fns["fa3_fp8"] = lambda: fa3(q8, k8, v8, causal=causal, softmax_scale=scale)
            names = list(fns)
            for n in names:                     # compile and load, then the row alone, cold
                fns[n]()
            torch.cuda.synchronize()
            time.sleep(2.0)
            cold = triton.testing.do_bench(fns["row"], warmup=5, rep=REP_MS, return_mode="median")
            t_end = time.time() + WARM_S
            while time.time() < t_end:          # every implementation under sustained load
                for n in names:
                    fns[n]()
            torch.cuda.synchronize()
            times = {n: [] for n in names}
            for r in range(ROUNDS):
                order = names[r % len(names):] + names[:r % len(names)]
                for n in order:
                    times[n].append(triton.testing.do_bench(fns[n], warmup=5, rep=REP_MS,
                                                            return_mode="median"))
            flops = 4 * b * h * s * s * d / (2 if causal else 1)
            med = {n: statistics.median(t) for n, t in times.items()}
            rec = dict(d=d, causal=causal, seqlen=s, batch=b, heads=h, ms=times, row_cold_ms=cold,
                       tflops={n: flops / m / 1e9 for n, m in med.items()})
            rows.append(rec)
            line = " | ".join(f"{n} {rec['tflops'][n]:.0f} ({med['row'] / med[n]:.3f}x row, "
                              f"spread {(max(t) - min(t)) / min(t):.3f})" for n, t in times.items())
            print(f"d{d} causal={int(causal)} s{s}: row cold (after 2 s idle, before the warm-up) "
                  f"{flops / cold / 1e9:.0f} | {line}", flush=True)
    finally:
        smi.terminate()
    with open(os.path.join(out, "interleaved.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
