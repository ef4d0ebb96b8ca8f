"""Time fusedattn's GPU backends beside PyTorch SDPA's flash and cuDNN backends, in one process.

The README's foundation figure: head_dim 128, seqlen 8192, 16 heads, batch 2, bf16, non-causal and
causal, forward and backward, TFLOP/s (median of triton.testing.do_bench, which times with CUDA
events and clears the L2 cache before each run). FLOPs: forward 4*B*H*S*S*D, halved when causal;
backward 2.5x forward.

    python scripts/foundation_timing.py [--out DIR]
"""

import argparse
import datetime
import json
import os
import sys

import torch
import triton
import triton.testing
from torch.nn.attention import SDPBackend, sdpa_kernel
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import fusedattn  # noqa: E402


def tflops(flops, ms):
    return flops / ms / 1e9


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--seqlen", type=int, default=8192)
    ap.add_argument("--head-dim", type=int, default=128)
    args = ap.parse_args()
    b, h, s, d = args.batch, args.heads, args.seqlen, args.head_dim
    dt = torch.bfloat16
    rows = []
    for causal in (False, True):
        q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=dt, requires_grad=True) for _ in range(3))
        dout = torch.randn_like(q)
        fwd_flops = 4 * b * h * s * s * d / (2 if causal else 1)
        impls = {}
        for name in fusedattn.available_backends(q, k, v, causal=causal):
            if name == "reference":
                continue
            impls[f"fusedattn-{name}"] = (lambda name=name: fusedattn.attention(q, k, v, causal=causal, backend=name))
        qt, kt, vt = (t.detach().transpose(1, 2).contiguous().requires_grad_() for t in (q, k, v))
        for label, be in (("sdpa-flash", SDPBackend.FLASH_ATTENTION), ("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION)):
            def run(be=be):
                with sdpa_kernel(be):
                    return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
            impls[label] = run
        for label, fn in impls.items():
            row = {"impl": label, "causal": causal, "batch": b, "heads": h, "seqlen": s, "head_dim": d}
            try:
                out = fn()
                row["fwd_ms"] = triton.testing.do_bench(fn, warmup=50, rep=300, return_mode="median")
                row["fwd_tflops"] = tflops(fwd_flops, row["fwd_ms"])
                go = dout if out.shape == dout.shape else dout.transpose(1, 2).contiguous()
                inputs = (q, k, v) if label.startswith("fusedattn") else (qt, kt, vt)
                out = fn()
                bwd = lambda: torch.autograd.grad(out, inputs, go, retain_graph=True)  # noqa: E731
                row["bwd_ms"] = triton.testing.do_bench(bwd, warmup=50, rep=300, return_mode="median")
                row["bwd_tflops"] = tflops(2.5 * fwd_flops, row["bwd_ms"])
            except Exception as e:  # recorded, never hidden
                row["error"] = f"{type(e).__name__}: {e}"
            rows.append(row)
            torch.cuda.synchronize()
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
            "cudnn": torch.backends.cudnn.version(), "cuda": torch.version.cuda}
    lines = [f"{meta['date']} {meta['gpu']} torch {meta['torch']} triton {meta['triton']} cuDNN {meta['cudnn']}",
             f"bf16, batch {b}, heads {h}, seqlen {s}, head_dim {d}; TFLOP/s (median, CUDA events)",
             "| impl | causal | fwd TFLOP/s | bwd TFLOP/s |", "|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['impl']} | {r['causal']} | error: {r['error'][:80]} | |")
        else:
            lines.append(f"| {r['impl']} | {r['causal']} | {r['fwd_tflops']:.0f} | {r['bwd_tflops']:.0f} |")
    text = "\n".join(lines)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "foundation_timing.json"), "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
        with open(os.path.join(args.out, "foundation_timing.md"), "w") as f:
            f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
