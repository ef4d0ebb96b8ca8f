"""Small shapes of every GPU backend configuration, for compute-sanitizer (memcheck, racecheck).

    compute-sanitizer --tool memcheck python scripts/sanitize_cases.py [BACKEND ...]
"""

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import fusedattn  # noqa: E402

torch.manual_seed(0)
cases = 0
for backend in sys.argv[1:] or ("triton", "hopper"):
    for dtype in (torch.float16, torch.bfloat16):
        for d in (64, 96, 128, 256):
            for causal in (False, True):
                for sq, sk, h, hk in ((130, 200, 4, 2), (77, 33, 2, 1)):
                    q = torch.randn(1, sq, h, d, device="cuda", dtype=dtype, requires_grad=True)
                    k = torch.randn(1, sk, hk, d, device="cuda", dtype=dtype, requires_grad=True)
                    v = torch.randn(1, sk, hk, d, device="cuda", dtype=dtype, requires_grad=True)
                    if fusedattn.explain(q, k, v, causal=causal, backend=backend).forward is None:
                        continue
                    out = fusedattn.attention(q, k, v, causal=causal, backend=backend)
                    out.backward(torch.randn_like(out))
                    cases += 1
    # more tiles than SMs: persistent programs take several tiles, and the dynamic scheduler's
    # hand-over (atomic counter, work item in shared memory) runs; forward only
    for d in (64, 128, 256):
        for causal in (False, True):
            q = torch.randn(1, 400, 64, d, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(1, 400, 8, d, device="cuda", dtype=torch.bfloat16)
            if fusedattn.explain(q, k, k, causal=causal, backend=backend).forward is None:
                continue
            fusedattn.attention(q, k, k, causal=causal, backend=backend)
            cases += 1
torch.cuda.synchronize()
print(f"sanitize_cases: ran {cases} forward+backward cases")
