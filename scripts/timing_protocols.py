"""How much the timing protocol moves the ratios between kernels on a power-capped GPU.

Under these kernels the H200 sits at its 700 W limit and lowers its clock within ~0.5 s, so a
kernel's figure depends on what ran just before it. Per cell, the same implementations are timed
under three protocols, each in ROUNDS rounds with the order rotated by one per round:
  shared    the bench's method since session 9: a shared warm-up (every implementation in turn
            for 0.5 s), then each timing do_bench(warmup 25 ms, rep 100 ms). With a rotation by
            one, an implementation follows the same neighbour in every round but the one it opens.
  self300   each timing is do_bench(warmup 300 ms, rep 100 ms): every implementation runs alone
            for 300 ms right before its own timed runs (its own power state, not its neighbour's)
  self1000  the same with 1000 ms
Reported: TFLOP/s (median over rounds) per implementation and protocol, the round-to-round spread,
and the ratios hopper / fa3, hopper / cudnn, hopper-fp8 / fa3-fp8.

    [TP_CELLS="d,causal,seqlen;..."] python3 scripts/timing_protocols.py OUT_DIR
"""
import json
import os
import statistics
import sys
import time

import torch
import triton

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from device_cells import cells  # noqa: E402
import fusedattn  # noqa: E402
from fusedattn.fp8_api import kv_block_for  # noqa: E402
from fusedattn.kernels import hopper_fp8_fwd as F8  # noqa: E402
from fusedattn.kernels import hopper_fwd as H  # noqa: E402

CELLS = ((128, False, 2048), (128, False, 4096), (128, True, 2048), (128, True, 8192),
         (256, False, 8192), (256, True, 8192))
CELLS = cells("TP_CELLS", CELLS)
ROUNDS = int(os.environ.get("TP_ROUNDS", "3"))
PROTOCOLS = {"shared": (500, 25), "self300": (0, 300), "self1000": (0, 1000)}
if os.environ.get("TP_PROTOCOLS"):
    PROTOCOLS = {k: v for k, v in PROTOCOLS.items() if k in os.environ["TP_PROTOCOLS"].split(",")}


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F
    try:
        from fusedattn.bench.impls import import_fa3
        fa3 = import_fa3().flash_attn_func
    except Exception as e:  # noqa: BLE001
        print(f"FA3 not available: {e!r}"[:200])
        fa3 = None
    recs = []
    for d, causal, s in CELLS:
        b, h = 16384 // s, 2048 // d
        torch.manual_seed(d + s)
        q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        scale = d ** -0.5
        qt, kt, vt = (x.transpose(1, 2).contiguous() for x in (q, k, v))
        kvb = kv_block_for(d, causal)
        qq = fusedattn.quantize_fp8(q, role="q", rotate=True)
        kq = fusedattn.quantize_fp8(k, role="k", rotate=True, block_size=kvb)
        vq = fusedattn.quantize_fp8(v, role="v", block_size=kvb)

        def cudnn():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, scale=scale)
        fns = {"hopper": lambda: H.forward(q, k, v, causal, scale),
               "cudnn": cudnn,
               "hopper-fp8": lambda: F8.forward(qq, kq, vq, causal, scale)}
        if fa3 is not None:
            q8, k8, v8 = (t.to(torch.float8_e4m3fn) for t in (q, k, v))
            fns["fa3"] = lambda: fa3(q, k, v, causal=causal, softmax_scale=scale)
            fns["fa3-fp8"] = lambda: fa3(q8, k8, v8, causal=causal, softmax_scale=scale)
        names = list(fns)
        for n in names:
            fns[n]()
        torch.cuda.synchronize()
        flops = 4 * b * h * s * s * d / (2 if causal else 1)
        rec = dict(d=d, causal=causal, seqlen=s, protocols={})
        for pname, (shared_ms, own_ms) in PROTOCOLS.items():
            t_end = time.time() + shared_ms / 1e3
            while time.time() < t_end:
                for n in names:
                    fns[n]()
            torch.cuda.synchronize()
            times = {n: [] for n in names}
            for r in range(ROUNDS):
                for n in names[r % len(names):] + names[:r % len(names)]:
                    times[n].append(triton.testing.do_bench(fns[n], warmup=own_ms, rep=100,
                                                            return_mode="median"))
            med = {n: statistics.median(t) for n, t in times.items()}
            tf = {n: flops / m / 1e9 for n, m in med.items()}
            ratios = {"hopper/fa3": med.get("fa3", float("nan")) / med["hopper"],
                      "hopper/cudnn": med["cudnn"] / med["hopper"],
                      "fp8/fa3-fp8": med.get("fa3-fp8", float("nan")) / med["hopper-fp8"]}
            rec["protocols"][pname] = dict(ms=times, tflops=tf, ratios=ratios)
            print(f"d{d} c{int(causal)} s{s} {pname:8s}: " + " | ".join(
                f"{n} {tf[n]:.0f} (spread {(max(t) - min(t)) / min(t):.3f})"
                for n, t in times.items()) + " || " + " ".join(
                f"{k} {v:.3f}" for k, v in ratios.items()), flush=True)
        recs.append(rec)
        del fns, q, k, v, qt, kt, vt, qq, kq, vq
        torch.cuda.empty_cache()
    with open(os.path.join(out, "protocols.json"), "w") as f:
        json.dump(recs, f, indent=1)


if __name__ == "__main__":
    main()
