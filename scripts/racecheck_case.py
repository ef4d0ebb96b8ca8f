"""One hopper forward for compute-sanitizer racecheck: several tiles of the given row.

    compute-sanitizer --tool racecheck --racecheck-report hazard \\
        python scripts/racecheck_case.py HEAD_DIM CAUSAL(0/1) [VARIANT]
(RACECHECK_SHAPE=batch,seqlen,heads,kv_heads picks the shape.)
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from fusedattn.kernels import hopper_fwd as H  # noqa: E402

d, causal = int(sys.argv[1]), bool(int(sys.argv[2]))
cfg = H.variant_config(sys.argv[3], d, causal) if len(sys.argv) > 3 else H.get_config(d, causal)
# RACECHECK_SHAPE=batch,seqlen,heads,kv_heads (default 2,1000,4,2: fewer tiles than SMs, one per
# program; e.g. 8,2000,8,8 gives persistent programs several tiles, so buffers rotate)
b, s, h, hk = (int(x) for x in os.environ.get("RACECHECK_SHAPE", "2,1000,4,2").split(","))
torch.manual_seed(0)
q = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
k = torch.randn(b, s, hk, d, device="cuda", dtype=torch.bfloat16)
v = torch.randn(b, s, hk, d, device="cuda", dtype=torch.bfloat16)
out, lse = H.forward(q, k, v, causal, d ** -0.5, config=cfg)
torch.cuda.synchronize()
print("racecheck_case: ok", d, causal, cfg)
