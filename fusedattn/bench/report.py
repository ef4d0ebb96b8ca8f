"""Text output: the method record, the speed tables (TFLOP/s and each fusedattn column's ratio to
the best anchor of its row), the accuracy and memory tables, and the error summary."""

from __future__ import annotations

import math
from collections import OrderedDict

from . import common as C
from .impls import impl_order, label_of

DASH = "-"


def method_record(warmup_ms, rep_ms, timer_name="triton.testing.do_bench", rounds: int = 1,
                  round_warmup_ms: float = 0.0, l2_bytes: int | None = None) -> dict:
    per_round = rep_ms / max(1, rounds)
    l2 = f" ({l2_bytes / 2**20:g} MB on this GPU)" if l2_bytes else ""
    return {
        "timer": (f"{timer_name}(warmup={warmup_ms} ms, rep={per_round:g} ms), CUDA events around "
                  "each run"),
        "statistic": ("median of the repeated runs (p20 and p80 kept as ms_p20 / ms_p80)"
                      + (f"; then the median over {rounds} rounds" if rounds > 1 else "")),
        "warmup": ((f"one checked call first (compiles); then, right before each timing, the "
                    f"implementation alone for about {warmup_ms:g} ms (do_bench's warm-up: as many "
                    "calls as its estimate, the L2 flush included, says fit in that time; the "
                    "GPU's clock under its power limit depends on the last ~0.5 s of load, so "
                    "each is timed at its own steady state, not its neighbour's)")
                   if warmup_ms else "one checked call first, then the timer's own warm-up runs"),
        "order": ("per shape, after every implementation's checked call: "
                  + (f"a shared warm-up of {round_warmup_ms:g} ms (each implementation in turn), "
                     "then " if round_warmup_ms else "")
                  + f"{rounds} round(s), each timing every implementation once, the order rotated "
                  "by one per round"),
        "l2": ("do_bench zeroes a 256 MB buffer before every timed run, outside the timed region: the "
               f"L2 cache{l2} is flushed, so inputs are not rotated"),
        "inputs": ("fresh random normal bf16 (never zeros), drawn once per shape and shared by all "
                   "implementations, each given a copy in its own layout (fusedattn, FA3: "
                   "(batch, seqlen, heads, head_dim); SDPA, FlexAttention: (batch, heads, seqlen, "
                   "head_dim)); fp8 columns get the same values cast to float8 e4m3"),
        "grid": (f"batch * seqlen = {C.TOKENS} tokens, heads * head_dim = {C.HIDDEN} "
                 "(FlashAttention-3 paper), seqlen_q = seqlen_k, MHA"),
        "flops": ("forward 4 * batch * heads * seqlen_q * seqlen_k * head_dim, halved when causal "
                  "(seqlen_q == seqlen_k); backward 2.5 x forward"),
        "backward_timing": ("torch.autograd.grad(out, (q, k, v), dout, retain_graph=True) on a graph "
                            "built once: the backward alone"),
        "check": ("each result is compared with the float64 oracle (fusedattn.reference."
                  "attention_oracle, on the GPU, in blocks of query rows) on a slice of the same "
                  "shape: first and last batch entry x first and last head; pass if finite everywhere "
                  f"and max abs error <= {C.PASS_FACTOR:g} x plain-PyTorch error (same dtype, same "
                  f"slice) + {C.PASS_FLOOR:g}; fp8: the oracle on the bf16 inputs, plain = bf16 "
                  "attention on the e4m3-cast inputs; a mismatch is shown as '(wrong)' and earns no ratio"),
        "ratio": ("xbest = fusedattn TFLOP/s / the best anchor of the same row and dtype family "
                  "(bf16 columns against bf16 anchors, fp8 against fp8), anchors that failed "
                  "their check excluded"),
    }


def _fmt_t(x) -> str:
    return f"{x:.0f}" if x is not None else DASH


def _fmt_e(x) -> str:
    x = C.num(x)
    if x is None:
        return DASH
    if math.isinf(x) or math.isnan(x):
        return str(x)
    return f"{x:.1e}"


def _check_failed(e: dict) -> bool:
    chk = e.get("check")
    return isinstance(chk, dict) and "error" not in chk and not chk.get("passed", True)


def cell_text(e: dict | None) -> str:
    if e is None:
        return DASH
    if "skipped" in e:
        return "n/a"
    if "error" in e:
        return "OOM" if str(e["error"]).startswith("OOM") else "error"
    t = C.num(e.get("tflops"))
    if t is None:
        return "?"
    s = f"{t:.0f}"
    chk = e.get("check")
    if isinstance(chk, dict) and "error" in chk:
        s += " (unchecked)"
    elif _check_failed(e):
        s += " (wrong)"
    if e.get("suspect"):
        s += " (slow?)"
    return s


def _usable_anchor(e: dict) -> bool:
    return (e.get("group") == "anchor" and C.num(e.get("tflops")) is not None and "error" not in e
            and not _check_failed(e))


def best_anchor(row_entries: list[dict], family: str) -> dict | None:
    cands = [e for e in row_entries if _usable_anchor(e) and e.get("family", "bf16") == family]
    if not cands:
        return None
    return max(cands, key=lambda e: C.num(e["tflops"]))


def ratio_of(e: dict | None, row_entries: list[dict]) -> tuple[str, float | None]:
    if e is None or "skipped" in e or "error" in e or C.num(e.get("tflops")) is None:
        return DASH, None
    if _check_failed(e):
        return "wrong", None
    best = best_anchor(row_entries, e.get("family", "bf16"))
    if best is None:
        return DASH, None
    r = C.num(e["tflops"]) / C.num(best["tflops"])
    return f"{r:.2f}", r


def _rows_by_cell(entries, pass_):
    rows: "OrderedDict[tuple, list]" = OrderedDict()
    for e in entries:
        if e.get("pass") != pass_:
            continue
        key = (int(e["hdim"]), bool(e["causal"]), int(e["seqlen"]))
        rows.setdefault(key, []).append(e)
    return OrderedDict(sorted(rows.items(), key=lambda kv: kv[0]))


def _columns(entries, pass_):
    """Implementations with at least one non-skipped result in this pass, in column order."""
    present = {e["impl"] for e in entries if e.get("pass") == pass_ and "skipped" not in e}
    order = impl_order()
    cols = [n for n in order if n in present] + sorted(present - set(order))
    return cols


def speed_table(entries: list[dict], pass_: str) -> tuple[list[str], dict]:
    """Markdown lines of one pass's table, and {impl: [ratios]} for the summary."""
    rows = _rows_by_cell(entries, pass_)
    cols = _columns(entries, pass_)
    if not rows or not cols:
        return [], {}
    head = ["hdim", "causal", "seqlen", "batch x heads"]
    for c in cols:
        head.append(label_of(c))
        if c.startswith("fusedattn-"):
            head.append("xbest")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    ratios: dict = {c: [] for c in cols if c.startswith("fusedattn-")}
    for (d, causal, s), es in rows.items():
        by = {e["impl"]: e for e in es}
        any_e = es[0]
        cells = [str(d), "yes" if causal else "no", C.seqlen_label(s), f"{any_e['batch']} x {any_e['heads']}"]
        for c in cols:
            cells.append(cell_text(by.get(c)))
            if c.startswith("fusedattn-"):
                text, r = ratio_of(by.get(c), es)
                cells.append(text)
                if r is not None:
                    ratios[c].append(r)
        lines.append("| " + " | ".join(cells) + " |")
    return lines, ratios


def summary_lines(entries: list[dict], ratios_by_pass: dict) -> list[str]:
    lines = []
    for pass_, ratios in ratios_by_pass.items():
        for impl, rs in ratios.items():
            es = [e for e in entries if e.get("impl") == impl and e.get("pass") == pass_]
            wrong = sum(1 for e in es if _check_failed(e))
            errors = sum(1 for e in es if "error" in e)
            if rs:
                gm = math.exp(sum(math.log(r) for r in rs) / len(rs))
                txt = (f"{impl} {pass_}: x{gm:.2f} the best anchor (geometric mean over {len(rs)} "
                       f"shapes; min x{min(rs):.2f}, max x{max(rs):.2f})")
            elif not any("skipped" not in e for e in es):
                continue
            else:
                txt = f"{impl} {pass_}: no ratio (nothing measured against an anchor)"
            if wrong:
                txt += f"; {wrong} WRONG result(s)"
            if errors:
                txt += f"; {errors} error(s)"
            lines.append("- " + txt)
    return lines


def clock_lines(entries: list[dict]) -> list[str]:
    """The SM clock read after each timing (sm_clock_mhz_rounds), per implementation and pass:
    median and range over the run. Under a power limit the clock moves between timings, and an
    implementation's clock is part of its figure. Empty where no clock was read."""
    by = {}
    for e in entries:
        vals = [v for v in e.get("sm_clock_mhz_rounds") or [] if v]
        if vals:
            by.setdefault((e.get("impl"), e.get("pass")), []).extend(vals)
    lines = []
    for (impl, pass_), vals in by.items():
        vals.sort()
        lines.append(f"- {impl} {pass_}: median {vals[len(vals) // 2]} MHz "
                     f"(range {vals[0]}-{vals[-1]}, {len(vals)} timings)")
    return lines


def error_lines(entries: list[dict], extra: list[dict] = ()) -> list[str]:
    """Each distinct error once, with how many results it hit and where."""
    groups: "OrderedDict[tuple, list]" = OrderedDict()
    for e in list(entries) + list(extra):
        msg = None
        if "error" in e:
            msg = str(e["error"])
        elif isinstance(e.get("check"), dict) and "error" in e["check"]:
            msg = "check: " + str(e["check"]["error"])
        if msg is None:
            continue
        key = (e.get("impl", "?"), e.get("pass", ""), C.short_error(msg, 400))
        where = ",".join(str(x) for x in (f"d{e.get('hdim', e.get('head_dim', ''))}",
                                          "causal" if e.get("causal") else "full", f"s{e.get('seqlen', '')}",
                                          e.get("dtype", ""), e.get("inputs", "")) if x)
        groups.setdefault(key, []).append(where)
    lines = []
    for (impl, pass_, msg), where in groups.items():
        more = f" and {len(where) - 3} more" if len(where) > 3 else ""
        lines.append(f"- {impl} {pass_} ({len(where)}x: {'; '.join(where[:3])}{more}): {msg}")
    return lines


def skipped_lines(entries: list[dict]) -> list[str]:
    """Why cells show n/a: each distinct reason once, with how many results it covers."""
    groups: "OrderedDict[tuple, int]" = OrderedDict()
    for e in entries:
        if "skipped" in e:
            key = (e.get("impl", "?"), e.get("pass", ""), C.short_error(e["skipped"], 300))
            groups[key] = groups.get(key, 0) + 1
    return [f"- {impl} {pass_} ({n}x): {why}" for (impl, pass_, why), n in groups.items()]


def accuracy_table(rows: list[dict]) -> list[str]:
    if not rows:
        return []
    head = ["impl", "dtype", "inputs", "causal", "out max abs", "out RMSE", "out rel",
            "plain max abs", "plain RMSE", "plain rel", "rel / plain", "pass",
            "dq / dk / dv rel", "plain dq / dk / dv rel", "lse max abs"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    plains = {(r["inputs"], r["causal"], r["dtype"]): r for r in rows if r["impl"] == "plain-pytorch"}
    for r in rows:
        if r["impl"] == "plain-pytorch":
            continue
        p = plains.get((r["inputs"], r["causal"], r["dtype"]), {})
        if "error" in r:
            cells = [r["impl"], r["dtype"], r["inputs"], "yes" if r["causal"] else "no",
                     "error: " + C.short_error(r["error"], 120)] + [""] * (len(head) - 5)
            lines.append("| " + " | ".join(cells) + " |")
            continue
        g = " / ".join(_fmt_e(r.get(f"{n}_rel")) for n in ("dq", "dk", "dv")) if "dq_rel" in r else DASH
        pg = " / ".join(_fmt_e(p.get(f"{n}_rel")) for n in ("dq", "dk", "dv")) if "dq_rel" in p else DASH
        ok = "yes" if r.get("passed") else "NO"
        if "grads_passed" in r:
            ok += "" if r["grads_passed"] else " (grads NO)"
        ratio = C.num(r.get("ratio_rel"))
        cells = [r["impl"] + (f" [{r['note']}]" if r.get("note") else ""), r["dtype"], r["inputs"],
                 "yes" if r["causal"] else "no", _fmt_e(r.get("out_max_abs")), _fmt_e(r.get("out_rmse")),
                 _fmt_e(r.get("out_rel")), _fmt_e(p.get("out_max_abs")), _fmt_e(p.get("out_rmse")),
                 _fmt_e(p.get("out_rel")), f"{ratio:.2f}" if ratio is not None else DASH, ok, g, pg,
                 _fmt_e(r.get("lse_max_abs"))]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def memory_table(rows: list[dict]) -> list[str]:
    from .memory import growth_exponents

    if not rows:
        return []
    head = ["impl", "pass", "seqlen", "peak MiB", "inputs+outputs MiB", "peak / in+out",
            "one seqlen^2 bf16 score matrix MiB"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    mib = 2 ** 20
    order = impl_order()
    for r in sorted(rows, key=lambda r: (order.index(r["impl"]) if r["impl"] in order else 99,
                                         0 if r.get("pass") == "fwd" else 1, r.get("seqlen", 0))):
        if "skipped" in r:
            continue
        if "error" in r:
            val = "OOM" if str(r["error"]).startswith("OOM") else "error"
            cells = [r["impl"], r.get("pass", ""), str(r.get("seqlen", "")), val, "", "", ""]
        else:
            peak = C.num(r.get("peak_bytes")) or 0.0
            io = C.num(r.get("io_bytes")) or 0.0
            cells = [r["impl"], r["pass"], str(r["seqlen"]), f"{peak / mib:.1f}", f"{io / mib:.1f}",
                     f"{peak / io:.2f}" if io else DASH, f"{(C.num(r.get('scores_bytes')) or 0) / mib:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    exps = growth_exponents(rows)
    if exps:
        lines.append("")
        for (impl, pass_), k in exps.items():
            verdict = ("at most linear in seqlen" if k < 1.3 else
                       ("GROWS LIKE seqlen^2" if k > 1.7 else "faster than linear"))
            lines.append(f"- {impl} {pass_}: peak ~ seqlen^{k:.2f} ({verdict})")
    return lines


def header_lines(env: dict) -> list[str]:
    gpu = env.get("gpu") or "no GPU"
    parts = [f"{env.get('date', '?')}", gpu]
    if env.get("sm_count"):
        parts.append(f"{env['sm_count']} SMs")
    if env.get("driver"):
        parts.append(f"driver {env['driver']}")
    soft = [f"torch {env.get('torch')}", f"CUDA {env.get('cuda')}", f"cuDNN {env.get('cudnn')}",
            f"Triton {env.get('triton')}", f"fusedattn {env.get('fusedattn')}"
            + (f" ({env['fusedattn_commit']})" if env.get("fusedattn_commit") else "")
            + (f" (source {env['fusedattn_source']})" if env.get("fusedattn_source") else "")]
    if env.get("fa3_fwd"):
        soft.append(f"fa3-fwd {env['fa3_fwd']}")
    return [", ".join(parts), ", ".join(soft)]


def render(results: dict) -> str:
    """The whole report (table.md): header, accuracy, memory, errors, then the speed tables last."""
    env = results.get("env", {})
    out = ["# fusedattn benchmark", ""]
    out += [f"{line}  " for line in header_lines(env)]
    m = results.get("method", {})
    if m:
        out += ["", f"Timing: {m.get('timer', '')}; {m.get('statistic', '')}. L2: {m.get('l2', '')}.",
                f"FLOPs: {m.get('flops', '')}. Check: {m.get('check', '')}."]
    unavailable = results.get("unavailable", {})
    if unavailable:
        out += ["", "Not run:"] + [f"- {k}: {v}" for k, v in unavailable.items()]
    notes = results.get("notes", [])
    if notes:
        out += ["", "Notes:"] + [f"- {n}" for n in notes]
    acc = results.get("accuracy")
    if acc:
        shape = next((r for r in acc if "seqlen" in r), {})
        out += ["", f"## Accuracy vs the float64 oracle (batch {shape.get('batch')}, seqlen "
                f"{shape.get('seqlen')}, heads {shape.get('heads')}, head_dim {shape.get('head_dim')})", ""]
        out += accuracy_table(acc)
    mem = results.get("memory")
    if mem:
        out += ["", "## Peak GPU memory (batch 1, heads 16, head_dim 128, bf16, non-causal); peak = "
                "what the call allocates above what existed before it", ""]
        out += memory_table(mem)
    entries = results.get("speed", [])
    errs = error_lines(entries, list(acc or []) + list(mem or []))
    if errs:
        out += ["", "## Errors (each distinct message once)", ""] + errs
    skips = skipped_lines(entries)
    if skips:
        out += ["", "n/a (not run, and why):"] + skips
    ratios_by_pass = {}
    for pass_, title in (("fwd", "Forward"), ("bwd", "Backward")):
        lines, ratios = speed_table(entries, pass_)
        if lines:
            out += ["", f"## {title}, TFLOP/s (median); xbest = fusedattn / best anchor of the row", ""]
            out += lines
            ratios_by_pass[pass_] = ratios
    if ratios_by_pass:
        summ = summary_lines(entries, ratios_by_pass)
        if summ:
            out += ["", "Summary:"] + summ
    clocks = clock_lines(entries)
    if clocks:
        out += ["", "SM clock read after each timing (under the power limit it moves between "
                "timings; part of each figure):"] + clocks
    status = results.get("status")
    if status:
        out += ["", f"Status: {status}"]
    return "\n".join(out) + "\n"
