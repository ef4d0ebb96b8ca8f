"""Small shapes of every GPU backend configuration, for compute-sanitizer (memcheck, racecheck).

    compute-sanitizer --tool memcheck python scripts/sanitize_cases.py [BACKEND ...]

BACKEND: triton, hopper (16-bit forward and backward), fp8 (the hopper FP8 forward: the
quantiser and the attention kernel, every head dim, causal and not, GQA, ragged lengths, one
q block of 64 rows); default triton and hopper.
"""

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import fusedattn  # noqa: E402

torch.manual_seed(0)
cases = 0
for backend in sys.argv[1:] or ("triton", "hopper"):
    if backend == "fp8":
        for d in (64, 128, 256):
            for causal in (False, True):
                for sq, sk, h, hk in ((130, 200, 4, 2), (77, 300, 2, 1)):
                    q = torch.randn(1, sq, h, d, device="cuda", dtype=torch.bfloat16)
                    k = torch.randn(1, sk, hk, d, device="cuda", dtype=torch.bfloat16)
                    v = torch.randn(1, sk, hk, d, device="cuda", dtype=torch.bfloat16)
                    fusedattn.attention_fp8(q, k, v, causal=causal, backend="hopper")
                    cases += 1
            kq = fusedattn.quantize_fp8(k, role="k", rotate=False)
            vq = fusedattn.quantize_fp8(v, role="v")
            qq = fusedattn.quantize_fp8(q, role="q", rotate=False, block_size=64)
            fusedattn.attention_fp8(qq, kq, vq, causal=True, backend="hopper")
            cases += 1
            if d in (64, 128):   # the persistent causal rows with several tiles per program
                from fusedattn.kernels import hopper_fp8_fwd as F
                for sq, sk in ((300, 100), (500, 700)):
                    q = torch.randn(2, sq, 2, d, device="cuda", dtype=torch.bfloat16)
                    k = torch.randn(2, sk, 1, d, device="cuda", dtype=torch.bfloat16)
                    qq = fusedattn.quantize_fp8(q, role="q", rotate=True)
                    kq = fusedattn.quantize_fp8(k, role="k", rotate=True, block_size=256)
                    vq = fusedattn.quantize_fp8(k, role="v", block_size=256)
                    F.forward(qq, kq, vq, True, d ** -0.5, _programs=3)
                    cases += 1
        continue
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
print(f"sanitize_cases: ran {cases} cases")
