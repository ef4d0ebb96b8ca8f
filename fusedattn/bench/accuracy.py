"""--accuracy: each implementation's error against the float64 oracle, per input dtype, next to the
error of plain PyTorch attention computed in the same dtype, on normal inputs and on inputs with
0.1% outliers (N(0, 1) + N(0, 100) * Bernoulli(0.001), i.e. outliers of standard deviation 10).

For bf16 / fp16 / fp32 the oracle runs on the inputs as rounded to that dtype (so only the
arithmetic is judged). For fp8 the oracle runs on the bf16 inputs before their cast to e4m3 (so the
cast's rounding is included), and the plain-PyTorch column is plain bf16 attention on the cast
inputs (PyTorch has no plain fp8 attention).
"""

from __future__ import annotations

import torch

from . import common as C
from .impls import Impl
from .speed import to_bshd

ACC_SHAPES = {
    "cuda": {"batch": 2, "seqlen": 2048, "heads": 8, "head_dim": 128},
    "cpu": {"batch": 1, "seqlen": 128, "heads": 2, "head_dim": 64},
}
ACC_DTYPES = ("float16", "bfloat16", "float32", "fp8")
_DT = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
INPUT_KINDS = ("normal", "outliers")


def _layout(ts, layout):
    return tuple(t.transpose(1, 2).contiguous() for t in ts) if layout == "bhsd" else tuple(ts)


def run_accuracy(impls: dict[str, Impl], device, causals=(False, True), shape: dict | None = None,
                 dtypes=ACC_DTYPES, seed: int = 0, progress: bool = True) -> list[dict]:
    device = torch.device(device)
    shape = shape or ACC_SHAPES["cuda" if device.type == "cuda" else "cpu"]
    b, s, h, d = shape["batch"], shape["seqlen"], shape["heads"], shape["head_dim"]
    scale = d ** -0.5
    rows: list[dict] = []
    jobs = [(kind, causal, dname) for kind in INPUT_KINDS for causal in causals for dname in dtypes]
    bar = C.progress_bar(len(jobs), "accuracy") if progress else None
    cache: dict = {}
    for kind, causal, dname in jobs:
        if bar is not None:
            bar.update(1)
            C.progress_note(bar, f"{kind} causal={causal} {dname}")
        if dname == "fp8" and C.FP8 is None:
            continue
        key = (kind, causal)
        if key not in cache:
            cache.clear()
            torch.manual_seed(seed * 7 + (1 if kind == "outliers" else 0) * 2 + int(causal))
            cache[key] = [C.normal_inputs((b, s, h, d), torch.float32, device, outliers=(kind == "outliers"))
                          for _ in range(4)]
        base = cache[key]
        common = {"inputs": kind, "causal": causal, "dtype": dname, "batch": b, "seqlen": s,
                  "heads": h, "head_dim": d}
        if dname == "fp8":
            q, k, v, dout = (t.to(torch.bfloat16) for t in base)
            feed = (q, k, v)          # each fp8 implementation's prepare step casts / quantises them
            family = "fp8"
            takers = [i for i in impls.values() if i.family == "fp8"]
        else:
            q, k, v, dout = (t.to(_DT[dname]) for t in base)
            feed = (q, k, v)
            family = dname
            takers = [i for i in impls.values() if i.family == "bf16" and not i.unavailable(*feed, causal)]
        if not takers:
            continue
        with_grads = dname != "fp8"
        try:
            out64, lse64 = C.oracle_chunked(q, k, v, causal, scale)
            grads64 = (C.oracle_grads_chunked(q, k, v, dout, out64, lse64, causal, scale)
                       if with_grads else None)
            plain_out = C.plain_attention(*C.plain_inputs(q, k, v, family), causal, scale)
            plain = C.err_stats(plain_out, out64)
            del plain_out
            plain_g = ([C.err_stats(g, r) for g, r in zip(C.plain_grads(q, k, v, dout, causal, scale), grads64)]
                       if with_grads else None)
        except Exception as e:  # noqa: BLE001
            text = C.error_text(e)
            C.log(f"[bench] accuracy reference failed ({kind}, causal={causal}, {dname}): {text}")
            rows.append(dict(common, impl="plain-pytorch", error=f"reference: {text}"))
            C.free_memory(device)
            continue
        prow = dict(common, impl="plain-pytorch", out_max_abs=plain["max_abs"], out_rmse=plain["rmse"],
                    out_rel=plain["rel"])
        if plain_g:
            for n, e in zip(("dq", "dk", "dv"), plain_g):
                prow[f"{n}_rel"] = e["rel"]
        rows.append(prow)
        for impl in takers:
            row = dict(common, impl=impl.name, group=impl.group)
            try:
                if impl.prepare is not None:
                    args = tuple(impl.prepare(*feed, causal))
                elif impl.family == "fp8":
                    args = _layout(tuple(C.to_fp8(t) for t in feed), impl.layout)
                else:
                    args = _layout(feed, impl.layout)
                do_bwd = with_grads and "bwd" in impl.passes
                if do_bwd:
                    leaves = tuple(t.detach().requires_grad_(True) for t in args)
                    with torch.enable_grad():
                        out = impl.fn(*leaves, causal, scale)
                        (dout_i,) = _layout((dout,), impl.layout)
                        grads = torch.autograd.grad(out, leaves, dout_i)
                else:
                    with torch.no_grad():
                        out = impl.fn(*args, causal, scale)
                    grads = None
                err = C.err_stats(to_bshd(out, impl.layout), out64)
                row.update(out_max_abs=err["max_abs"], out_rmse=err["rmse"], out_rel=err["rel"],
                           plain_out_max_abs=plain["max_abs"], plain_out_rmse=plain["rmse"],
                           plain_out_rel=plain["rel"],
                           ratio_rel=(err["rel"] / plain["rel"]) if plain["rel"] > 0 else None,
                           passed=C.passes_rule(err, plain))
                if grads is not None:
                    ok = True
                    for n, g, r, p in zip(("dq", "dk", "dv"), grads, grads64, plain_g):
                        e = C.err_stats(to_bshd(g, impl.layout), r)
                        row[f"{n}_rel"] = e["rel"]
                        row[f"{n}_max_abs"] = e["max_abs"]
                        row[f"plain_{n}_rel"] = p["rel"]
                        ok = ok and C.passes_rule(e, p)
                    row["grads_passed"] = ok
                    if impl.group == "fusedattn":
                        runs_on = impl.backward_backend(*feed, causal)
                        if runs_on and runs_on != impl.backend:
                            row["note"] = f"gradients computed by '{runs_on}'"
                if impl.group == "fusedattn" and impl.family == "bf16":
                    import fusedattn
                    with torch.no_grad():
                        _, lse = fusedattn.attention(*feed, causal=causal, softmax_scale=scale,
                                                     return_lse=True, backend=impl.backend)
                    row["lse_max_abs"] = C.lse_err(lse, lse64)
                del out, grads
            except Exception as e:  # noqa: BLE001
                row["error"] = C.error_text(e)
                C.log(f"[bench] accuracy {impl.name} ({kind}, causal={causal}, {dname}): {C.short_error(row['error'])}")
                C.free_memory(device)
                broken = C.cuda_broken(device)
                if broken:
                    rows.append(row)
                    C.log(f"[bench] FATAL: the CUDA context broke during --accuracy: {broken}")
                    if bar is not None:
                        bar.close()
                    return rows
            rows.append(row)
        C.free_memory(device)
    if bar is not None:
        bar.close()
    return rows
