"""Timing diagnostic of the FP8 kernel on the GPU: each table row beside the same row with the
producer's V transpose switched off (Fp8FwdConfig.diag_no_transpose: wrong results, timing only),
at the bench's shapes (batch x seqlen = 16384, heads x head_dim = 2048). If the row gains much
without the transpose, the producer's issue slots (shared with the consumers' SM sub-partitions)
are what holds the kernel back.

    python3 scripts/fp8_diag_time.py
"""
from dataclasses import replace

import torch
import triton

import fusedattn
from fusedattn.fp8_api import kv_block_for
from fusedattn.kernels import hopper_fp8_fwd as F

for d, causal, s in ((256, False, 2048), (256, False, 8192), (256, True, 8192),
                     (128, False, 8192), (128, True, 2048), (128, True, 8192)):
    b, h = 16384 // s, 2048 // d
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    kvb = kv_block_for(d, causal)
    qq = fusedattn.quantize_fp8(q, role="q", rotate=True)
    kq = fusedattn.quantize_fp8(k, role="k", rotate=True, block_size=kvb)
    vq = fusedattn.quantize_fp8(v, role="v", block_size=kvb)
    row = F.get_config(d, causal, kvb)
    flops = 4 * b * h * s * s * d / (2 if causal else 1)
    out = []
    for name, cfg in (("row", row), ("no_transpose", replace(row, diag_no_transpose=True, v_perm=False))):
        fn = lambda: F.forward(qq, kq, vq, causal, d ** -0.5, config=cfg, _diagnostic=True)  # noqa: E731
        ms = min(triton.testing.do_bench(fn, warmup=25, rep=100) for _ in range(2))
        out.append(f"{name} {flops / ms / 1e9:.0f}")
    print(f"d{d} causal={int(causal)} s{s}: " + " | ".join(out), flush=True)
