"""FP8 head_dim 128 causal on the GPU: the 256-key row against the 128-key row, each through
hopper_fp8_fwd.forward and through fusedattn.attention_fp8 (the bench's path), at seqlen 512,
2048 and 8192 (the bench's shapes: batch x seqlen = 16384, 16 heads). TFLOP/s, the better of two
do_bench medians. Device run 27: 198 / 227 at 512 (the 128-key row faster), 508 / 491 at 2k,
781 / 678 at 8k; forward and the API within 2%.

    python3 scripts/fp8_causal_tiles.py
"""
import torch
import triton

import fusedattn
from fusedattn.kernels import hopper_fp8_fwd as F

for s in (512, 2048, 8192):
    b, h, d = 16384 // s, 16, 128
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    qq = fusedattn.quantize_fp8(q, role="q", rotate=True)
    row = []
    for kvb in (256, 128):   # k / v quantisation block = the key tile the kernel runs
        kq = fusedattn.quantize_fp8(k, role="k", rotate=True, block_size=kvb)
        vq = fusedattn.quantize_fp8(v, role="v", block_size=kvb)
        for name, fn in (("forward", lambda: F.forward(qq, kq, vq, True, d ** -0.5)),
                         ("api", lambda: fusedattn.attention_fp8(qq, kq, vq, causal=True))):
            ms = min(triton.testing.do_bench(fn, warmup=25, rep=100) for _ in range(2))
            row.append(f"kv{kvb} {name} {2 * b * h * s * s * d / ms / 1e9:.0f}")
    print("d128 causal", s, " | ".join(row), flush=True)
