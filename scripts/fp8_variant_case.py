"""One FP8 forward of a table row or a named candidate (hopper_fp8_fwd.VARIANTS) on a small
shape, for compute-sanitizer (racecheck / memcheck / synccheck), checked against the float64
oracle of the quantised inputs (fusedattn.fp8_check.judge_fp8) so that a silent failure shows.

    compute-sanitizer --tool racecheck python scripts/fp8_variant_case.py HEAD_DIM CAUSAL [VARIANT]
(FP8_CASE_SHAPE=batch,seqlen_q,seqlen_k,heads,kv_heads picks the shape; default 2,300,700,4,2;
FP8_CASE_PROGRAMS=n caps a persistent loop's grid at n programs, so that each runs several tiles;
ignored for a configuration without one)
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import fusedattn  # noqa: E402
from fusedattn.fp8_check import judge_fp8  # noqa: E402
from fusedattn.kernels import hopper_fp8_fwd as F  # noqa: E402

d, causal = int(sys.argv[1]), bool(int(sys.argv[2]))
cfg = F.variant_config(sys.argv[3], d, causal) if len(sys.argv) > 3 else F.get_config(d, causal)
b, sq, sk, h, hk = (int(x) for x in os.environ.get("FP8_CASE_SHAPE", "2,300,700,4,2").split(","))
g = torch.Generator().manual_seed(5)
q, k, v = (torch.randn(sh, generator=g).to("cuda", torch.bfloat16)
           for sh in ((b, sq, h, d), (b, sk, hk, d), (b, sk, hk, d)))
qq = fusedattn.quantize_fp8(q, role="q", rotate=True, seed=3)
kq = fusedattn.quantize_fp8(k, role="k", rotate=True, seed=3, block_size=cfg.block_n)
vq = fusedattn.quantize_fp8(v, role="v", block_size=cfg.block_n)
out = torch.full((b, sq, h, d), float("nan"), device="cuda", dtype=torch.bfloat16)
lse = torch.full((b, h, sq), float("nan"), device="cuda", dtype=torch.float32)
progs = os.environ.get("FP8_CASE_PROGRAMS")
F.forward(qq, kq, vq, causal, d ** -0.5, config=cfg, _out=out, _lse=lse,
          _programs=int(progs) if progs and cfg.persistent else None)
torch.cuda.synchronize()
rec = judge_fp8(q, k, v, qq, kq, vq, out, lse, causal, d ** -0.5)
print("fp8_variant_case:", "ok" if rec["ok"] else f"FAILED {rec['failures']}", d, int(causal),
      sys.argv[3] if len(sys.argv) > 3 else "row")
sys.exit(0 if rec["ok"] else 1)
