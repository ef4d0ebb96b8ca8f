"""Whether an FP8 kernel result that differs from its emulation is one P rounding flip.

    python3 scripts/fp8_flip_check.py SEED [--head-dim 256] [--causal]

Runs the hopper FP8 kernel on the dev script's "one row" case (batch 1, one query row, 17 keys,
heads 2 / 1; bf16 N(0, 1) inputs from torch.Generator(SEED), as scripts/hopper_fp8_dev.py makes
them), the emulation (fusedattn.fp8_reference) on the same quantised tensors, and then the
emulation with each single P element that lies near an e4m3 rounding midpoint rounded the other
way. Hopper's e4m3 wgmma accumulates with fewer bits than float32 (the kernel uses the
accumulator as FA3 does), so the kernel's scores differ from the exact products by ~1e-4
relative; a P within that distance of a midpoint can round to the other neighbour, which moves
a one-row output by up to one e4m3 step (6-12%) times that key's weight. Prints the kernel's
relative L2 against the emulation before and after the best flip per head.
"""
import argparse
import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from fusedattn.fp8 import quantize_fp8  # noqa: E402
from fusedattn import fp8_reference as R  # noqa: E402


def neighbours(p):
    """The two e4m3 values around p (> 0, < 448)."""
    e = max(math.floor(math.log2(p)), -6)
    step = 2.0 ** (e - 3)
    lo = math.floor(p / step) * step
    return lo, lo + step


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("seed", type=int)
    ap.add_argument("--head-dim", type=int, default=256)
    ap.add_argument("--causal", action="store_true")
    a = ap.parse_args()
    d, b, sq, sk, h, hk = a.head_dim, 1, 1, 17, 2, 1
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator().manual_seed(a.seed)
    q, k, v = (torch.randn(s, generator=g).to(dev, torch.bfloat16)
               for s in ((b, sq, h, d), (b, sk, hk, d), (b, sk, hk, d)))
    qq = quantize_fp8(q, role="q", rotate=True, seed=11, block_size=128)
    kq = quantize_fp8(k, role="k", rotate=True, seed=11, block_size=128)
    vq = quantize_fp8(v, role="v", block_size=128)
    scale = d ** -0.5
    emu, _ = R.fp8_attention_forward(qq, kq, vq, a.causal, scale)
    if dev == "cuda":
        from fusedattn.kernels import hopper_fp8_fwd as F
        out, _ = F.forward(qq, kq, vq, a.causal, scale)
        torch.cuda.synchronize()
    else:
        out = emu
    f32 = torch.float32
    s = torch.einsum("bqhd,bkd->bhqk", qq.data.to(f32), kq.data[:, :, 0].to(f32))
    s = s * qq.row_scales().reshape(b, sq, h).permute(0, 2, 1)[..., None] * kq.scales[0, 0, 0] * scale
    p = torch.exp(s - s.amax(-1, keepdim=True)) * R.P_SCALE
    p8 = R._e4m3(p)
    v8 = vq.data[0, :, 0].to(f32) * vq.scales[0, 0, 0]
    for hh in range(h):
        o_k = out[0, 0, hh].to(f32).cpu()
        o_e = emu[0, 0, hh].to(f32).cpu()
        rel = lambda x: ((o_k - x).norm() / x.norm()).item()  # noqa: E731
        best = (rel(o_e), None)
        for i, val in enumerate(p[0, hh, 0].tolist()):
            lo, hi = neighbours(val)
            mid = (lo + hi) / 2
            if abs(val - mid) / mid > 3e-3:
                continue
            alt = p8[0, hh, 0].clone()
            alt[i] = hi if alt[i] == lo else lo
            o_alt = ((alt[:, None] * v8).sum(0) / p[0, hh, 0].sum()).cpu()
            o_alt = o_alt.to(torch.bfloat16).to(f32)
            best = min(best, (rel(o_alt), (i, round(val, 4), p8[0, hh, 0, i].item(), alt[i].item())))
        print(f"head {hh}: kernel vs emulation rel L2 {rel(o_e):.2e}; best single flip "
              f"{best[1]} -> rel L2 {best[0]:.2e}")


if __name__ == "__main__":
    main()
