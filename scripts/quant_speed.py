"""The FP8 quantisers side by side on the GPU: the portable Triton kernel (kernels/fp8_quant.py)
against the Gluon one (kernels/fp8_quant_gluon.py, what quantize_fp8 runs on sm_90).

    python scripts/quant_speed.py OUT_DIR [--tokens 16384] [--hdims 64,128,256]

For each head_dim (heads = 2048 / head_dim, batch * seqlen = tokens) and each of the three passes
attention_fp8 makes (q rotated in 128-row blocks, k rotated and v plain in the FP8 kernel's key
block for non-causal), it first checks that both kernels give the same codes and scales, bit for
bit, on the whole tensor and that both equal fp8._quantize_torch on the first (batch) row, then
times each kernel bare (a CUDA graph of 10 launches, replayed; GPU time only) and through
quantize_fp8 (wall clock of 20 calls back to back, then a synchronisation: host work included,
whichever of host and GPU is slower). Bandwidth counts 2 bytes read and 1 written per element;
the 64 MB inputs exceed the L2 (~50 MB), so the graph's replays read mostly from HBM. Writes
OUT_DIR/quant_speed.json and prints a table.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import fusedattn  # noqa: E402
from fusedattn.fp8 import _device_signs, _quantize_torch, hadamard_block_size  # noqa: E402
from fusedattn.fp8_api import kv_block_for  # noqa: E402
from fusedattn.kernels import fp8_quant, fp8_quant_gluon  # noqa: E402


def graph_ms(fn, reps: int = 10, replays: int = 20) -> float:
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / reps)
    return sorted(times)[len(times) // 2]


def wall_us(fn, calls: int = 20) -> float:
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--hdims", default="64,128,256")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rows, failures = [], 0
    for d in (int(x) for x in args.hdims.split(",")):
        heads, seqlen = 2048 // d, 2048
        batch = max(1, args.tokens // seqlen)
        torch.manual_seed(d)
        x = torch.randn(batch, seqlen, heads, d, device="cuda", dtype=torch.bfloat16)
        had = hadamard_block_size(d)
        sg = _device_signs(d, 0, x.device)
        kvb = kv_block_for(d, False)
        passes = [("q", 128, sg, dict(role="q", rotate=True)),
                  ("k", kvb, sg, dict(role="k", rotate=True, block_size=kvb)),
                  ("v", kvb, None, dict(role="v", block_size=kvb))]
        for name, blk, signs, api_kw in passes:
            t0 = time.time()
            tri = fp8_quant.quantize(x, blk, signs, had)
            glu = fp8_quant_gluon.quantize(x, blk, signs, had)
            ref = _quantize_torch(x[:1].cpu(), blk, None if signs is None else signs.cpu(), had)
            same = (torch.equal(tri[0].view(torch.uint8), glu[0].view(torch.uint8))
                    and torch.equal(tri[1], glu[1]))
            same_ref = (torch.equal(glu[0][:1].cpu().view(torch.uint8), ref[0].view(torch.uint8))
                        and torch.equal(glu[1][:1].cpu(), ref[1]))
            row = dict(d=d, tensor=name, block=blk, batch=batch, seqlen=seqlen, heads=heads,
                       same_as_triton=same, same_as_torch=same_ref)
            if not (same and same_ref):
                failures += 1
                rows.append(row)
                print(f"d={d} {name}: MISMATCH (triton {same}, torch {same_ref}); not timed",
                      flush=True)
                continue
            nbytes = x.numel() * 3
            kernels = [("triton", lambda: fp8_quant.quantize(x, blk, signs, had)),
                       ("gluon", lambda: fp8_quant_gluon.quantize(x, blk, signs, had))]
            if fp8_quant_gluon.launch_shape(blk, d)[0] < blk:
                # two passes at 8 warps: the one-pass form at 16 warps too (same results: checked)
                g16 = fp8_quant_gluon.quantize(x, blk, signs, had, max_warps=16)
                row["gluon16_same"] = (torch.equal(g16[0].view(torch.uint8), glu[0].view(torch.uint8))
                                       and torch.equal(g16[1], glu[1]))
                if row["gluon16_same"]:
                    kernels.append(("gluon16", lambda: fp8_quant_gluon.quantize(
                        x, blk, signs, had, max_warps=16)))
                else:
                    failures += 1
                    print(f"d={d} {name}: the 16-warp form DIFFERS from the 8-warp one", flush=True)
            for kname, fn in kernels:
                ms = graph_ms(fn)
                row[f"{kname}_us"] = ms * 1e3
                row[f"{kname}_tbs"] = nbytes / (ms * 1e-3) / 1e12
            row["api_us"] = wall_us(lambda: fusedattn.quantize_fp8(x, **api_kw))
            row["wall_s"] = time.time() - t0
            rows.append(row)
            print(json.dumps(row), flush=True)
    with open(os.path.join(args.out, "quant_speed.json"), "w") as f:
        json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__,
                       triton=__import__("triton").__version__, rows=rows), f, indent=1)
    print("\n| hdim | tensor | block | triton us (TB/s) | gluon us (TB/s) | gluon / triton time | "
          "quantize_fp8 us |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        if "gluon_us" not in r:
            print(f"| {r['d']} | {r['tensor']} | {r['block']} | mismatch | | | |")
            continue
        print(f"| {r['d']} | {r['tensor']} | {r['block']} | {r['triton_us']:.1f} "
              f"({r['triton_tbs']:.2f}) | {r['gluon_us']:.1f} ({r['gluon_tbs']:.2f}) | "
              f"{r['gluon_us'] / r['triton_us']:.2f} | {r['api_us']:.1f} |"
              + (f" gluon16 {r['gluon16_us']:.1f} ({r['gluon16_tbs']:.2f})" if "gluon16_us" in r else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
