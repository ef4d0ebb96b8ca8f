"""Which outputs the v10 Q-prefetch kernel (variant qpf) leaves unwritten at hdim 64 causal
(device run 15's smoke failure): poisoned outputs, one launch per shape, the unwritten
(batch, head, row ranges) and the max error of the written rows vs the table's row.

    python scripts/qpf_diag.py
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from fusedattn.kernels import hopper_fwd as H  # noqa: E402


def ranges(rows):
    out, start, prev = [], None, None
    for r in rows:
        if start is None:
            start = prev = r
        elif r == prev + 1:
            prev = r
        else:
            out.append((start, prev))
            start = prev = r
    if start is not None:
        out.append((start, prev))
    return out


torch.manual_seed(0)
for d, causal, variant, (b, s, h, hk) in [
        (64, True, "qpf", (2, 1000, 4, 2)), (64, True, "qpf", (1, 1152, 1, 1)),
        (64, True, "qpf", (1, 384, 1, 1)), (64, True, "qpf", (1, 192, 1, 1)),
        (64, True, "qpf", (1, 1152, 8, 8)), (64, False, "qpf", (2, 1000, 4, 2)),
        (128, True, "qpf", (2, 1000, 4, 2))]:
    cfg = H.variant_config(variant, d, causal)
    q = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, s, hk, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(b, s, hk, d, device="cuda", dtype=torch.bfloat16)
    ref, _ = H.forward(q, k, v, causal, d ** -0.5)
    out = torch.full_like(q, float("nan"))
    lse = torch.full((b, h, s), float("nan"), device="cuda")
    H.forward(q, k, v, causal, d ** -0.5, config=cfg, _out=out, _lse=lse)
    torch.cuda.synchronize()
    bad = torch.isnan(out).any(-1)            # (b, s, h)
    written = ~torch.isnan(out)
    err = (out[written].float() - ref[written].float()).abs().max().item() if written.any() else None
    print(f"d={d} causal={int(causal)} {variant} b={b} s={s} h={h}/{hk}: unwritten rows "
          f"{int(bad.sum())} of {b * s * h}, lse nan {int(torch.isnan(lse).sum())}, "
          f"max |written - row| {err}")
    for bi in range(b):
        for hi in range(h):
            rr = torch.nonzero(bad[bi, :, hi]).flatten().tolist()
            if rr:
                print(f"   b{bi} h{hi}: rows {ranges(rr)[:8]}")
