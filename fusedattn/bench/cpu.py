"""Without a GPU: a small problem through the public API on the CPU (backend "auto", which picks
the reference backend there), checked against the float64 oracle, timed with the host clock."""

from __future__ import annotations

import torch

from . import common as C

CPU_SHAPE = {"batch": 2, "seqlen": 256, "heads": 4, "kv_heads": 2, "head_dim": 64}


def run_cpu_check(shape: dict | None = None, dtype=torch.float32, reps: int = 5, seed: int = 0) -> list[dict]:
    """Forward and backward of fusedattn.attention(backend="auto") on the CPU, non-causal and
    causal, each judged against the float64 oracle with the benchmark's pass rule."""
    import fusedattn

    shape = shape or CPU_SHAPE
    b, s, h, hk, d = (shape[k] for k in ("batch", "seqlen", "heads", "kv_heads", "head_dim"))
    scale = d ** -0.5
    timer = C.cpu_timer(reps=reps, warmup=1)
    rows = []
    for causal in (False, True):
        torch.manual_seed(seed + int(causal))
        q = C.normal_inputs((b, s, h, d), dtype, "cpu")
        k = C.normal_inputs((b, s, hk, d), dtype, "cpu")
        v = C.normal_inputs((b, s, hk, d), dtype, "cpu")
        dout = C.normal_inputs((b, s, h, d), dtype, "cpu")
        row = {"causal": causal, "batch": b, "seqlen": s, "heads": h, "kv_heads": hk, "head_dim": d,
               "dtype": str(dtype).replace("torch.", "")}
        try:
            expl = fusedattn.explain(q, k, v, causal=causal)
            row["backend_fwd"], row["backend_bwd"] = expl.forward, expl.backward
            leaves = tuple(t.detach().clone().requires_grad_(True) for t in (q, k, v))
            out, lse = fusedattn.attention(*leaves, causal=causal, return_lse=True)
            grads = torch.autograd.grad(out, leaves, dout)
            out64, lse64 = C.oracle_chunked(q, k, v, causal, scale)
            g64 = C.oracle_grads_chunked(q, k, v, dout, out64, lse64, causal, scale)
            plain = C.err_stats(C.plain_attention(q, k, v, causal, scale), out64)
            plain_g = [C.err_stats(g, r) for g, r in zip(C.plain_grads(q, k, v, dout, causal, scale), g64)]
            err = C.err_stats(out, out64)
            gerr = [C.err_stats(g, r) for g, r in zip(grads, g64)]
            row["out_max_abs"] = err["max_abs"]
            row["out_limit"] = C.PASS_FACTOR * plain["max_abs"] + C.PASS_FLOOR
            row["grads_max_abs"] = max(e["max_abs"] for e in gerr)
            row["grads_limit"] = min(C.PASS_FACTOR * p["max_abs"] + C.PASS_FLOOR for p in plain_g)
            row["lse_max_abs"] = C.lse_err(lse, lse64)
            row["passed"] = (C.passes_rule(err, plain)
                             and all(C.passes_rule(e, p) for e, p in zip(gerr, plain_g))
                             and row["lse_max_abs"] <= C.PASS_FLOOR)
            with torch.no_grad():
                row.update({f"fwd_{key}": val for key, val in
                            timer(lambda: fusedattn.attention(q, k, v, causal=causal)).items()})

            def fwd_bwd():
                o = fusedattn.attention(*leaves, causal=causal)
                return torch.autograd.grad(o, leaves, dout)
            row.update({f"fwdbwd_{key}": val for key, val in timer(fwd_bwd).items()})
            row["fwd_gflops"] = C.attention_flops(b, h, s, s, d, causal, "fwd") / (row["fwd_ms"] * 1e-3) / 1e9
        except Exception as e:  # noqa: BLE001
            row["error"] = C.error_text(e)
            row["passed"] = False
        rows.append(row)
    return rows


def render_cpu(rows: list[dict], reason: str) -> str:
    lines = [f"No CUDA GPU found ({reason}): the speed sweep needs one, so this ran a small problem "
             "through fusedattn.attention on the CPU instead and checked it against the float64 oracle.",
             ""]
    if rows:
        r0 = rows[0]
        lines.append(f"batch {r0['batch']}, seqlen {r0['seqlen']}, heads {r0['heads']}, kv_heads "
                     f"{r0['kv_heads']}, head_dim {r0['head_dim']}, {r0['dtype']}; backend='auto'; host "
                     "clock, median of 5 runs")
        lines.append("")
    head = ["causal", "backend (fwd / bwd)", "fwd ms", "fwd GFLOP/s", "fwd+bwd ms", "out max err",
            "limit", "dq/dk/dv max err", "limit", "lse max err", "matches oracle"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if "error" in r:
            lines.append(f"| {'yes' if r['causal'] else 'no'} | {r.get('backend_fwd', '?')} | error: "
                         f"{C.short_error(r['error'], 200)} |" + " |" * (len(head) - 3))
            continue
        lines.append("| " + " | ".join([
            "yes" if r["causal"] else "no", f"{r['backend_fwd']} / {r['backend_bwd']}",
            f"{r['fwd_ms']:.2f}", f"{r['fwd_gflops']:.1f}", f"{r['fwdbwd_ms']:.2f}",
            f"{r['out_max_abs']:.1e}", f"{r['out_limit']:.1e}", f"{r['grads_max_abs']:.1e}",
            f"{r['grads_limit']:.1e}", f"{r['lse_max_abs']:.1e}", "yes" if r["passed"] else "NO"]) + " |")
    ok = bool(rows) and all(r.get("passed") for r in rows)
    lines += ["", "Result: " + ("every output and gradient matched the float64 oracle." if ok else
                                "MISMATCH or error: see the table (exit status 1).")]
    return "\n".join(lines) + "\n"
