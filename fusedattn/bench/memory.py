"""--memory: peak GPU memory of the forward and of the backward over growing seqlen, next to the
bytes of the inputs and outputs, to show that nothing grows with seqlen_q * seqlen_k.

Method: inputs allocated first; then ``torch.cuda.reset_peak_memory_stats()``, one call,
``torch.cuda.max_memory_allocated()``, minus what was allocated before the call. The forward runs
under no_grad. The backward is measured from just after its forward (whose output and saved tensors
are then already allocated) through ``torch.autograd.grad``. FlexAttention's forward is measured
through its training graph (the one compiled for its backward).
"""

from __future__ import annotations

import math

import torch

from . import common as C
from .impls import Impl

MEMORY_SEQLENS = (1024, 2048, 4096, 8192, 16384, 32768, 65536)
MEMORY_SHAPE = {"batch": 1, "heads": 16, "head_dim": 128}
MIB = 2 ** 20


def _context_broke(device) -> bool:
    """Free the cached memory, then report (and log) whether the CUDA context is broken."""
    C.free_memory(device)
    if C.cuda_broken(device):
        C.log("[bench] FATAL: the CUDA context broke during --memory")
        return True
    return False


def _nbytes(*ts) -> int:
    return sum(t.numel() * t.element_size() for t in ts if t is not None)


def _peak_of(fn, device) -> tuple[int, object]:
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    result = fn()
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - before, result


def run_memory(impls: dict[str, Impl], device, seqlens=MEMORY_SEQLENS, causal: bool = False,
               shape: dict | None = None, progress: bool = True) -> list[dict]:
    device = torch.device(device)
    shape = shape or MEMORY_SHAPE
    b, h, d = shape["batch"], shape["heads"], shape["head_dim"]
    scale = d ** -0.5
    rows: list[dict] = []
    bar = C.progress_bar(len(seqlens), "memory") if progress else None
    for s in seqlens:
        if bar is not None:
            bar.update(1)
        C.free_memory(device)
        torch.manual_seed(s)
        try:
            q, k, v, dout = (C.normal_inputs((b, s, h, d), torch.bfloat16, device) for _ in range(4))
        except Exception as e:  # noqa: BLE001
            rows.append({"impl": "inputs", "seqlen": s, "error": C.error_text(e)})
            C.free_memory(device)
            continue
        in_bytes = _nbytes(q, k, v)
        out_bytes = _nbytes(q)                      # out is shaped like q
        lse_bytes = b * h * s * 4
        scores_bytes = b * h * s * s * 2            # one bf16 score matrix, for scale
        layouts: dict = {}
        for impl in impls.values():
            if impl.family != "bf16":
                continue
            if bar is not None:
                C.progress_note(bar, f"s{s} {impl.name}")
            why = impl.unavailable(q, k, v, causal)
            if why:
                rows.append({"impl": impl.name, "seqlen": s, "skipped": why})
                continue
            if impl.layout not in layouts:
                layouts[impl.layout] = ((q, k, v, dout) if impl.layout == "bshd" else
                                        tuple(t.transpose(1, 2).contiguous() for t in (q, k, v, dout)))
            qi, ki, vi, doi = layouts[impl.layout]
            base = {"impl": impl.name, "seqlen": s, "batch": b, "heads": h, "head_dim": d,
                    "causal": causal, "scores_bytes": scores_bytes}
            # forward
            row = dict(base, **{"pass": "fwd"}, io_bytes=in_bytes + out_bytes)
            try:
                if impl.fwd_with_grad and "bwd" in impl.passes:
                    leaves = tuple(t.detach().requires_grad_(True) for t in (qi, ki, vi))

                    def fwd():
                        with torch.enable_grad():
                            return impl.fn(*leaves, causal, scale)
                    row["note"] = "measured through the training graph"
                else:
                    def fwd():
                        with torch.no_grad():
                            return impl.fn(qi, ki, vi, causal, scale)
                fwd()  # compile / first-call allocations (workspaces, handles) out of the figure
                C.free_memory(device)
                peak, out = _peak_of(fwd, device)
                del out
                row["peak_bytes"] = peak
            except Exception as e:  # noqa: BLE001
                row["error"] = C.error_text(e)
            rows.append(row)
            if _context_broke(device):
                return rows
            if "bwd" not in impl.passes:
                continue
            if impl.group == "fusedattn":
                runs_on = impl.backward_backend(q, k, v, causal)
                if runs_on != impl.backend:
                    rows.append(dict(base, **{"pass": "bwd"}, skipped=f"its backward runs on '{runs_on}'"))
                    continue
            # backward
            row = dict(base, **{"pass": "bwd"}, io_bytes=in_bytes + 2 * out_bytes + lse_bytes + in_bytes)
            try:
                leaves = tuple(t.detach().requires_grad_(True) for t in (qi, ki, vi))
                with torch.enable_grad():  # a first round compiles / allocates workspaces
                    torch.autograd.grad(impl.fn(*leaves, causal, scale), leaves, doi)
                C.free_memory(device)
                with torch.enable_grad():
                    out = impl.fn(*leaves, causal, scale)
                peak, grads = _peak_of(lambda: torch.autograd.grad(out, leaves, doi), device)
                out = grads = None
                row["peak_bytes"] = peak
            except Exception as e:  # noqa: BLE001
                row["error"] = C.error_text(e)
            rows.append(row)
            if _context_broke(device):
                return rows
        for r in rows:
            if r.get("seqlen") == s and r.get("error"):
                C.log(f"[bench] memory {r['impl']} {r.get('pass', '')} s={s}: {C.short_error(r['error'])}")
        del q, k, v, dout, layouts
    if bar is not None:
        bar.close()
    return rows


def growth_exponents(rows: list[dict]) -> dict:
    """{(impl, pass): exponent k of peak ~ seqlen^k between the smallest and largest measured
    seqlen}. k near 1 is linear; near 2 means something of size seqlen^2 is allocated."""
    out = {}
    keys = sorted({(r["impl"], r.get("pass")) for r in rows if C.num(r.get("peak_bytes"))})
    for key in keys:
        pts = sorted((r["seqlen"], C.num(r["peak_bytes"])) for r in rows
                     if (r["impl"], r.get("pass")) == key and C.num(r.get("peak_bytes")))
        pts = [p for p in pts if p[1] and p[1] > 0]
        if len(pts) >= 2 and pts[-1][0] > pts[0][0]:
            out[key] = math.log(pts[-1][1] / pts[0][1]) / math.log(pts[-1][0] / pts[0][0])
    return out
