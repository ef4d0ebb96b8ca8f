"""What breaks v10's Q prefetch (q_prefetch, kernel TMA_STORE == 3) at hdim 64 causal (three
consumer warpgroups; hopper_log.md v10, device runs 15 and 17): one device call, about a minute.

    python3 scripts/qpf_diag2.py [--jobs 16] [--configs A,B,..] [--shapes s1,s2,s3] [--out DIR]
    python3 scripts/qpf_diag2.py --dry-run [--jobs 2]    # CPU only: build and compile, no launch
    python3 scripts/qpf_diag2.py --self-test             # CPU only: the error map on a fake

Every (configuration, shape) runs in its own process (an illegal memory access poisons the CUDA
context; a hang is killed): compile (forward(_warmup=True)), the float64 oracle
(fusedattn.reference.attention_oracle, per batch element), then a launch with outputs poisoned
with NaN, compared row by row (a row is wrong if one element is off by more than
0.03 + 0.03 |ref| or the row by more than 5% of its norm; the lse within 2e-2, -inf where the
oracle has it), the dynamic scheduler's tile counter read back (0 after a launch), and a second
poisoned launch compared bit for bit with the first. A case that makes no progress
for --run-timeout seconds after its launch is killed and recorded as HUNG.

Configurations (bf16, head_dim 64, causal unless stated; B..Z get past forward()'s refusal of
q_prefetch + causal + three consumers in this script's processes only:
hopper_fwd._REFUSE_QPF_CAUSAL_3WG = False there):
    A   the table row (64, causal): control, must pass
    B   A + q_prefetch (variant qpf): reproduces run 17 (expected FAIL)
    C   B with wg_bounds=False, skip_empty_wg=False (every warpgroup runs the tile's blocks)
    C2  B with skip_empty_wg=False (wg_bounds kept): separates the two
    D   B + diag_fence_init (fence.proxy.async after the mbarrier inits)
    E   B + diag_store_wait (each warpgroup waits for its O TMA store at the end of every tile;
        the loop's exit waited already)
    F   B + D + E
    G   B + diag_joint_exit (no consumer warpgroup leaves before all finished their last tile)
    (H   B + compile-time Q buffer / q_bar / q_empty indices: the only form with three consumers
        since device run 20, where it passed and B failed; B is that form now)
    Z   B + every diagnostic above
    N   the non-causal table row (q_prefetch since run 19), non-causal: control, must pass
Shapes: s1 2 x 1000, 4 / 2 heads (48 tiles: one per program); s2 1 x 1152, one head (6 tiles:
one per program, no empty warpgroup); s3 3 x 3000, 8 heads (384 tiles: about 3 per program, both
Q buffers rotate). A failing case prints where it is wrong: rows by warpgroup (row % 192 // 64)
and m-tile, the first wrong tiles, and what the wrong rows hold (NaN = unwritten, zeros, the
row's own Q = a store of the buffer before O was written there).
Results: one line per case as it ends, the wrong cases' maps, then one line per configuration;
with --out (default $OUT if set) also qpf_diag2.json there.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import replace

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

HEAD_DIM = 64
SHAPES = {"s1": (2, 1000, 4, 2), "s2": (1, 1152, 1, 1), "s3": (3, 3000, 8, 8)}
ORDER = ["A", "B", "C", "C2", "D", "E", "F", "G", "Z", "N"]
EXPECT = {"A": "PASS", "B": "PASS", "N": "PASS"}   # B: FAIL before the run-20 fix
ATOL, RTOL, ROW_RTOL, LSE_TOL = 0.03, 0.03, 0.05, 2e-2


def configs(H):
    """name -> (FwdConfig, causal, description)."""
    row = H.get_config(HEAD_DIM, True)   # the causal row (no prefetch: slower, device run 21)
    b = H.variant_config("qpf", HEAD_DIM, True)
    assert b.q_prefetch and b.num_consumers == 3 and b.wg_bounds and b.skip_empty_wg
    assert replace(b, q_prefetch=False, o_buffer=row.o_buffer, scheduler=row.scheduler) == row
    return {
        "A": (row, True, "table row (64, causal): control"),
        "B": (b, True, "row + q_prefetch (run 17's failure)"),
        "C": (replace(b, wg_bounds=False, skip_empty_wg=False), True,
              "B without wg_bounds / skip_empty_wg"),
        "C2": (replace(b, skip_empty_wg=False), True, "B without skip_empty_wg (wg_bounds kept)"),
        "D": (replace(b, diag_fence_init=True), True, "B + fence after the mbarrier inits"),
        "E": (replace(b, diag_store_wait=True), True, "B + O store waited at each tile's end"),
        "F": (replace(b, diag_fence_init=True, diag_store_wait=True), True, "B + D + E"),
        "G": (replace(b, diag_joint_exit=True), True, "B + warpgroups leave the loop together"),
        "Z": (replace(b, diag_fence_init=True, diag_store_wait=True, diag_joint_exit=True),
              True, "B + every diagnostic"),
        "N": (H.get_config(HEAD_DIM, False), False, "non-causal table row (q_prefetch): control"),
    }


def emit(tag, **kw):
    print(f"@@{tag} " + json.dumps(kw), flush=True)


# ------------------------------------------------------------------------------------------
# the comparison (also run on the CPU by --self-test)
# ------------------------------------------------------------------------------------------
def oracle(q, k, v, causal, scale):
    """float64 (out, lse), one batch element at a time (the score matrix of s3 in one piece is
    1.7 GB of float64 per copy)."""
    import torch
    from fusedattn.reference import attention_oracle
    outs, lses = [], []
    for i in range(q.shape[0]):
        o, l = attention_oracle(q[i:i + 1], k[i:i + 1], v[i:i + 1], causal, scale)
        outs.append(o)
        lses.append(l)
    return torch.cat(outs), torch.cat(lses)


def _ranges(rows, limit=6):
    out, start, prev = [], None, None
    for r in rows:
        if start is None:
            start = prev = r
        elif r == prev + 1:
            prev = r
        else:
            out.append(f"{start}-{prev}" if prev > start else f"{start}")
            start = prev = r
    if start is not None:
        out.append(f"{start}-{prev}" if prev > start else f"{start}")
    return out[:limit] + (["..."] if len(out) > limit else [])


def analyse(q, out, lse, ref_o, ref_l, block_m=192, m_wg=64):
    """Compare one launch's outputs with the oracle: a dict of figures and, when wrong, where."""
    import torch
    b, s, h, d = out.shape
    o = out.double()
    nan_el = torch.isnan(o)
    err = (o - ref_o).abs()
    bad_el = nan_el | (err > ATOL + RTOL * ref_o.abs())
    # a row is wrong if an element is, or if the row as a whole is off by ROW_RTOL of its norm
    # (late rows of a long causal sequence have elements below ATOL: zeros would pass the first)
    row_err = torch.where(nan_el, torch.zeros_like(err), err).norm(dim=-1)
    bad_rows = bad_el.any(-1) | (row_err > ROW_RTOL * ref_o.norm(dim=-1) + 1e-3)   # (b, s, h)
    nan_rows = nan_el.any(-1)
    fin = ~nan_el
    max_err = err[fin].max().item() if fin.any() else float("nan")
    o0 = torch.where(nan_el, torch.zeros_like(o), o)
    rel = ((o0 - ref_o).norm() / ref_o.norm().clamp_min(1e-30)).item()
    # lse (b, h, s): NaN = unwritten; -inf must match the oracle's; finite within LSE_TOL
    l = lse.double()
    inf_ref = torch.isinf(ref_l)
    lse_bad = torch.isnan(l) | (torch.isinf(l) != inf_ref)
    both = ~inf_ref & torch.isfinite(l)
    lse_bad |= both & ((l - ref_l).abs() > LSE_TOL)
    lse_err = (l - ref_l)[both].abs().max().item() if both.any() else 0.0
    rec = dict(max_err=max_err, rel=rel, lse_err=lse_err, bad_rows=int(bad_rows.sum()),
               nan_rows=int(nan_rows.sum()), lse_bad=int(lse_bad.sum()),
               lse_nan=int(torch.isnan(l).sum()), rows=b * s * h)
    rec["ok"] = rec["bad_rows"] == 0 and rec["lse_bad"] == 0 and rel < 1e-2
    if rec["ok"]:
        return rec
    # where: by warpgroup (row % block_m // m_wg) and m-tile; what the wrong rows hold
    n_wg = block_m // m_wg
    pos = torch.arange(s, device=out.device)
    wg_of = (pos % block_m) // m_wg
    mt_of = pos // block_m
    bad_s = bad_rows.permute(0, 2, 1)                           # (b, h, s)
    lse_s = lse_bad
    rec["bad_rows_by_wg"] = [int(bad_s[..., wg_of == w].sum()) for w in range(n_wg)]
    rec["lse_bad_by_wg"] = [int(lse_s[..., wg_of == w].sum()) for w in range(n_wg)]
    n_mt = -(-s // block_m)
    rec["bad_rows_by_mtile"] = {int(m): int(bad_s[..., mt_of == m].sum()) for m in range(n_mt)
                                if bad_s[..., mt_of == m].any()}
    any_bad = torch.nn.functional.pad((bad_s | lse_s).to(torch.uint8), (0, n_mt * block_m - s))
    tile_bad = any_bad.reshape(b, h, n_mt, block_m).amax(-1).bool()   # (b, h, m-tile)
    rec["bad_tiles"] = int(tile_bad.sum())
    rec["tiles"] = b * h * n_mt
    wrong = bad_rows & ~nan_rows                                # written but wrong
    if wrong.any():
        own_q = (out == q).all(-1) & wrong
        zero = (out == 0).all(-1) & wrong
        rec["wrong_rows_eq_own_q"] = int(own_q.sum())
        rec["wrong_rows_zero"] = int(zero.sum())
        rec["wrong_rows_written"] = int(wrong.sum())
    first = []
    for bi, hd, mi in torch.nonzero(tile_bad).tolist()[:6]:
        lo, end = mi * block_m, min(s, (mi + 1) * block_m)
        rows_o = torch.nonzero(bad_s[bi, hd, lo:end]).flatten().add(lo).tolist()
        rows_l = torch.nonzero(lse_s[bi, hd, lo:end]).flatten().add(lo).tolist()
        e = err[bi, lo:end, hd][fin[bi, lo:end, hd]]
        first.append(dict(b=bi, h=hd, m=mi, wgs=sorted({(r % block_m) // m_wg for r in rows_o}),
                          o_rows=_ranges(rows_o), lse_rows=_ranges(rows_l),
                          nan=int(nan_rows[bi, lo:end, hd].sum()),
                          max_err=e.max().item() if e.numel() else None))
    rec["first_bad_tiles"] = first
    return rec


def _counters(H):
    return [int(t[0].item()) for t in H._TILE_COUNTERS.values()]


# ------------------------------------------------------------------------------------------
# one case (its own process)
# ------------------------------------------------------------------------------------------
def _install_fake(H, torch, mode):
    """QPF_DIAG2_FAKE=CFG:MODE,... (CPU test of the driver): the float64 oracle stands in for
    the kernel; MODE fail (warpgroup 1's rows of m-tile 0 hold Q), hang, crash."""
    real = H.forward

    def fake(q, k, v, causal, scale, config=None, _out=None, _lse=None, _warmup=False):
        if _warmup:
            return None
        if mode == "hang":
            time.sleep(3600)
        if mode == "crash":
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        o, l = oracle(q, k, v, causal, scale)
        _out.copy_(o.to(q.dtype))
        _lse.copy_(l.float())
        if mode == "fail":
            _out[:, 64:128] = q[:, 64:128]
        return _out, _lse
    H.forward = fake
    H._num_sms = lambda device: 132
    torch.cuda.synchronize = lambda *a, **k: None
    return real


def _launch_and_check(H, torch, cfg, causal, q, k, v, ref, dev, tag):
    """Two launches with NaN-poisoned outputs: the first against the oracle, the second bit for
    bit against the first; the tile counter after each."""
    b, s, h, _ = q.shape
    n_tiles = b * h * -(-s // cfg.block_m)
    grid = min(n_tiles, H._num_sms(q.device)) if cfg.persistent else n_tiles
    rec = dict(shape=tag, tiles=n_tiles, grid=grid, tiles_per_program=round(n_tiles / grid, 2))
    m_wg = cfg.block_m // cfg.num_consumers
    outs = []
    for launch in (1, 2):
        out = torch.full_like(q, float("nan"))
        lse = torch.full((b, h, s), float("nan"), device=dev, dtype=torch.float32)
        emit("LAUNCH", n=launch, shape=tag)
        H.forward(q, k, v, causal, HEAD_DIM ** -0.5, config=cfg, _out=out, _lse=lse)
        torch.cuda.synchronize()  # an illegal memory access raises here
        rec[f"counter{launch}"] = max(_counters(H), default=0)
        emit("LAUNCHED", n=launch, shape=tag, counter=rec[f"counter{launch}"])
        outs.append((out, lse))
        if launch == 1:
            rec.update(analyse(q, out, lse, ref[0], ref[1], cfg.block_m, m_wg))
    (o1, l1), (o2, l2) = outs
    rec["repeat_equal"] = bool(torch.equal(o1.nan_to_num(7.0), o2.nan_to_num(7.0))
                               and torch.equal(l1.nan_to_num(7.0), l2.nan_to_num(7.0)))
    if not rec["repeat_equal"]:  # the second launch on its own, against the oracle
        r2 = analyse(q, o2, l2, ref[0], ref[1], cfg.block_m, m_wg)
        rec["launch2"] = {k: r2[k] for k in ("ok", "max_err", "bad_rows", "nan_rows", "lse_bad")}
    rec["pass"] = bool(rec["ok"] and rec["repeat_equal"] and rec["counter1"] == 0
                       and rec["counter2"] == 0)
    return rec


def run_case(name, shape):
    """One configuration on one shape, or on several in one process ("s1+s2": run 17's order,
    the second launched after the first in the same process)."""
    import torch
    from fusedattn.kernels import hopper_fwd as H
    H._REFUSE_QPF_CAUSAL_3WG = False  # this process only
    cfg, causal, _ = configs(H)[name]
    scale = HEAD_DIM ** -0.5
    dev = "cuda"
    fake = dict(x.split(":") for x in os.environ.get("QPF_DIAG2_FAKE", "").split(",") if x)
    if fake:
        dev = "cpu"
        _install_fake(H, torch, fake.get(name, "pass"))
    inputs = []
    for tag in shape.split("+"):
        b, s, h, hk = SHAPES[tag]
        torch.manual_seed(0)
        q = torch.randn(b, s, h, HEAD_DIM, device=dev, dtype=torch.bfloat16)
        k = torch.randn(b, s, hk, HEAD_DIM, device=dev, dtype=torch.bfloat16)
        v = torch.randn(b, s, hk, HEAD_DIM, device=dev, dtype=torch.bfloat16)
        t0 = time.time()
        kern = H.forward(q, k, v, causal, scale, config=cfg, _warmup=True)
        emit("COMPILED", shape=tag, s=round(time.time() - t0, 1),
             regs=getattr(kern, "n_regs", None), spills=getattr(kern, "n_spills", None))
        inputs.append((tag, q, k, v, oracle(q, k, v, causal, scale)))
    torch.cuda.synchronize()
    recs = [_launch_and_check(H, torch, cfg, causal, q, k, v, ref, dev, tag)
            for tag, q, k, v, ref in inputs]
    rec = dict(recs[-1])
    if len(recs) > 1:
        rec["earlier"] = [{k: r.get(k) for k in ("shape", "pass", "max_err", "bad_rows",
                                                  "nan_rows", "lse_bad", "counter1", "counter2",
                                                  "repeat_equal")} for r in recs[:-1]]
        rec["pass"] = all(r["pass"] for r in recs)
    emit("RESULT", **rec)
    return 0


# ------------------------------------------------------------------------------------------
# the driver
# ------------------------------------------------------------------------------------------
def _parse(text):
    tags = {}
    for ln in text.splitlines():
        if ln.startswith("@@"):
            tag, _, body = ln[2:].partition(" ")
            try:
                tags[tag] = json.loads(body)
            except ValueError:
                pass
    return tags


def _error_line(text):
    keys = ("illegal memory access", "CUDA error", "Error", "error", "Traceback")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for key in keys:
        hit = [ln for ln in lines if key in ln and not ln.startswith("@@")]
        if hit:
            return hit[-1][:300]
    return (lines[-1] if lines else "")[:300]


def run_all(cases, jobs, run_timeout, compile_timeout, log_dir, budget):
    """Run the cases, at most `jobs` processes at once, all within `budget` seconds (a case
    still running then is killed, one not started is left out); {(cfg, shape): record}."""
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("TRITON_INTERPRET", None)
    pending, running, results = list(cases), {}, {}
    t_start = time.time()
    while pending or running:
        if pending and time.time() - t_start > budget - 15:
            print(f"budget: {len(pending)} cases not started", flush=True)
            pending = []
        while pending and len(running) < jobs:
            c, s = pending.pop(0)
            path = os.path.join(log_dir, f"case_{c}_{s}.log")
            lf = open(path, "w")
            p = subprocess.Popen([sys.executable, "-u", os.path.abspath(__file__), "--case",
                                  f"{c}:{s}"], stdout=lf, stderr=subprocess.STDOUT, cwd=ROOT,
                                 env=env)
            running[(c, s)] = dict(p=p, lf=lf, path=path, t0=time.time(), t_launch=None,
                                   launches=0)
        time.sleep(0.2)
        for key, r in list(running.items()):
            p, now = r["p"], time.time()
            text = open(r["path"]).read()
            launches = text.count("@@LAUNCH ")
            if launches > r["launches"]:  # the run timeout counts from the latest launch
                r["t_launch"], r["launches"] = now, launches
            rc = p.poll()
            status = None
            if rc is None:
                if r["t_launch"] is not None and now - r["t_launch"] > run_timeout:
                    last = _parse(text).get("LAUNCH", {})
                    status = (f"HUNG (launch {last.get('n')} of {last.get('shape')}: no end "
                              f"{run_timeout:.0f}s after it; killed)")
                elif r["t_launch"] is None and now - r["t0"] > compile_timeout:
                    status = f"TIMEOUT before the launch ({compile_timeout:.0f}s; killed)"
                elif now - t_start > budget:
                    status = "TIMEOUT (the run's budget; killed)"
                if status:
                    p.kill()  # this case's own process (Popen handle)
                    p.wait()
                    text = open(r["path"]).read()
                else:
                    continue
            r["lf"].close()
            tags = _parse(text)
            rec = dict(tags.get("RESULT", {}))
            rec["compiled"] = tags.get("COMPILED")
            rec["wall_s"] = round(time.time() - r["t0"], 1)
            if status is None:
                if "RESULT" in tags:
                    status = "PASS" if rec.get("pass") else "FAIL"
                else:
                    stage = (f"launch {tags['LAUNCH']['n']} of {tags['LAUNCH']['shape']}"
                             if "LAUNCH" in tags else "before the launch")
                    status = f"CRASH rc={rc} at {stage}: {_error_line(text)}"
            rec["status"] = status
            if "LAUNCHED" in tags:
                rec["last_launched"] = tags["LAUNCHED"]
            results[key] = rec
            del running[key]
            print(f"[{time.time() - t_start:5.1f}s] {key[0]:>2} {key[1]}: {_short(rec)}",
                  flush=True)
    return results


def _short(rec):
    st = rec["status"]
    if st in ("PASS", "FAIL"):
        bits = [st, f"max_err {rec.get('max_err', float('nan')):.3g}",
                f"lse_err {rec.get('lse_err', float('nan')):.3g}"]
        if st == "FAIL":
            bits.append(f"bad rows {rec.get('bad_rows')} (NaN {rec.get('nan_rows')}) "
                        f"lse {rec.get('lse_bad')} of {rec.get('rows')}")
            bits.append(f"repeat {'same' if rec.get('repeat_equal') else 'DIFFERS'}")
            bits.append(f"counter {rec.get('counter1')}/{rec.get('counter2')}")
        bits.append(f"tiles/program {rec.get('tiles_per_program')}")
        for e in rec.get("earlier", []):
            bits.append(f"[before it in this process: {e['shape']} "
                        f"{'PASS' if e['pass'] else 'FAIL'} max_err {e['max_err']:.3g} "
                        f"counter {e['counter1']}/{e['counter2']}]")
        return ", ".join(bits)
    return st


def _detail(key, rec):
    if rec["status"] != "FAIL":
        return []
    lines = [f"  {key[0]} {key[1]}: rows wrong by warpgroup {rec.get('bad_rows_by_wg')} "
             f"(lse {rec.get('lse_bad_by_wg')}), by m-tile {rec.get('bad_rows_by_mtile')}, "
             f"tiles wrong {rec.get('bad_tiles')} of {rec.get('tiles')}"]
    if "wrong_rows_written" in rec:
        lines.append(f"    written-but-wrong rows {rec['wrong_rows_written']}: equal to their own "
                     f"Q {rec['wrong_rows_eq_own_q']}, all zero {rec['wrong_rows_zero']}")
    for t in rec.get("first_bad_tiles", []):
        lines.append(f"    b{t['b']} h{t['h']} m-tile {t['m']} wg {t['wgs']}: O rows "
                     f"{' '.join(t['o_rows'])}; lse rows {' '.join(t['lse_rows'])}; "
                     f"NaN {t['nan']}; max err {t['max_err']}")
    if "launch2" in rec:
        lines.append(f"    second launch: {rec['launch2']}")
    return lines


def summarize(results, names, shapes, descr):
    lines = []
    for n in names:
        extra = [s for (c, s) in results if c == n and s not in shapes]
        cells = [(s, results.get((n, s))) for s in list(shapes) + extra]
        sts = [r["status"] if r else "not run" for _, r in cells]
        if all(st == "PASS" for st in sts):
            verdict = "PASS"
        elif any(st.startswith(("HUNG", "TIMEOUT")) for st in sts):
            verdict = "HANG"
        elif any(st.startswith("CRASH") for st in sts):
            verdict = "CRASH"
        elif any(st == "FAIL" for st in sts):
            verdict = "FAIL"
        else:
            verdict = "?"
        parts = []
        for s, r in cells:
            if r is None:
                parts.append(f"{s} -")
            elif r["status"] in ("PASS", "FAIL"):
                parts.append(f"{s} {r['status']} {r.get('max_err', float('nan')):.2g}")
            else:
                parts.append(f"{s} {r['status'].split(' ')[0]}")
        exp = f" (expected {EXPECT[n]})" if n in EXPECT else ""
        lines.append(f"{n:>2} {verdict:5s}{exp:18s} {' | '.join(parts):60s} {descr[n]}")
    return lines


# ------------------------------------------------------------------------------------------
# CPU-only modes
# ------------------------------------------------------------------------------------------
def dry_compile(spec):
    """--dry-run worker: the launch path of one (configuration, shape) under a stand-in sm_90a
    driver (CPU tensors, nothing launched): forward(_warmup=True), then ptxas -v on its PTX."""
    name, shape = spec.split(":")
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import hopper_dev2
    hopper_dev2.install_mock_sm90_driver()
    import torch
    from fusedattn import inspect as fi
    from fusedattn.kernels import hopper_fwd as H
    H._REFUSE_QPF_CAUSAL_3WG = False
    cfg, causal, _ = configs(H)[name]
    b, s, h, hk = SHAPES[shape]
    q = torch.empty(b, s, h, HEAD_DIM, dtype=torch.bfloat16)
    k = torch.empty(b, s, hk, HEAD_DIM, dtype=torch.bfloat16)
    t0 = time.time()
    kern = H.forward(q, k, k, causal, HEAD_DIM ** -0.5, config=cfg, _warmup=True)
    ptx = kern.asm["ptx"]
    r = fi.ptxas_report(ptx)
    sc = fi.sass_counts(kern.asm["cubin"])
    regs = sorted({int(x) for x in re.findall(r"setmaxnreg\.\w+\.sync\.aligned\.u32\s+(\d+)",
                                              ptx)})
    emit("DRY", cfg=name, shape=shape, s=round(time.time() - t0, 1), ptxas_ok=r["ptxas_ok"],
         regs_at_entry=r.get("registers_at_entry"), setmaxnreg=regs, stack=r.get("stack"),
         spill_stores=r.get("spill_stores"), spill_loads=r.get("spill_loads"),
         shared=kern.metadata.shared, fence_proxy_async=ptx.count("fence.proxy.async"),
         wait_group_read=ptx.count("cp.async.bulk.wait_group.read"),
         mbarrier_init=ptx.count("mbarrier.init"), gmma_waited=sc["GMMA_WAITED"], gmma=sc["GMMA"],
         sass_sha1=fi.sass_digest(sc["sass"]), qpf_diag=H._qpf_diag_bits(cfg))
    return 0


def dry_run(names, shapes, jobs):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    from fusedattn.kernels import hopper_fwd as H
    H._REFUSE_QPF_CAUSAL_3WG = False
    cfgs = configs(H)
    for n in names:
        cfg, causal, d = cfgs[n]
        print(f"{n:>2} causal={int(causal)} q_prefetch={int(cfg.q_prefetch)} "
              f"wg_bounds={int(cfg.wg_bounds)} skip_empty={int(cfg.skip_empty_wg)} "
              f"QPF_DIAG={H._qpf_diag_bits(cfg)}: {d}", flush=True)
    specs = [f"{n}:{s}" for s in shapes for n in names]
    pending, running, recs, bad = list(specs), [], [], 0
    while pending or running:
        while pending and len(running) < jobs:
            sp = pending.pop(0)
            running.append((sp, subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "--dry-case", sp], cwd=ROOT, env=env,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)))
        sp, p = running.pop(0)
        text = p.communicate()[0]
        tags = _parse(text)
        if p.returncode or "DRY" not in tags:
            bad += 1
            print(f"{sp}: FAILED rc={p.returncode}: {text[-1500:]}", flush=True)
            continue
        r = tags["DRY"]
        recs.append(r)
        spill = r["stack"] or r["spill_stores"] or r["spill_loads"]
        bad += bool(spill) or not r["ptxas_ok"]
        print(f"{r['cfg']:>2} {r['shape']}: {r['s']:5.1f}s ptxas_ok={r['ptxas_ok']} regs at entry "
              f"{r['regs_at_entry']} setmaxnreg {r['setmaxnreg']} stack/spill "
              f"{r['stack']}/{r['spill_stores']}/{r['spill_loads']} smem {r['shared']} "
              f"fence.proxy.async {r['fence_proxy_async']} wait_group.read "
              f"{r['wait_group_read']} mbarrier.init {r['mbarrier_init']} "
              f"GMMA waited {r['gmma_waited']}/{r['gmma']} sass {r['sass_sha1'][:12]}",
              flush=True)
    print(f"dry run: {len(recs)}/{len(specs)} compiled, {bad} with spills or failures")
    return 1 if bad else 0


def self_test():
    """The comparison and the error map on the CPU: the float64 oracle as a fake kernel, wrong on
    purpose in known places."""
    import torch
    torch.manual_seed(0)
    b, s, h, hk = 1, 400, 2, 1
    q = torch.randn(b, s, h, HEAD_DIM, dtype=torch.bfloat16)
    k = torch.randn(b, s, hk, HEAD_DIM, dtype=torch.bfloat16)
    v = torch.randn(b, s, hk, HEAD_DIM, dtype=torch.bfloat16)
    ro, rl = oracle(q, k, v, True, HEAD_DIM ** -0.5)
    good = analyse(q, ro.to(torch.bfloat16), rl.float(), ro, rl)
    assert good["ok"], good
    out = ro.to(torch.bfloat16).clone()
    lse = rl.float().clone()
    out[0, 64:128, 1] = q[0, 64:128, 1]          # m-tile 0, warpgroup 1: O = its own Q
    out[0, 200:210, 0] = float("nan")            # m-tile 1, warpgroup 0: unwritten
    out[0, 330:340, 0] = 0                       # m-tile 1, warpgroup 2: zeros
    lse[0, 1, 390] += 0.5                        # m-tile 2, warpgroup 0: lse only
    r = analyse(q, out, lse, ro, rl)
    assert not r["ok"]
    assert r["bad_rows_by_wg"] == [10, 64, 10], r["bad_rows_by_wg"]
    assert r["bad_rows_by_mtile"] == {0: 64, 1: 20}, r["bad_rows_by_mtile"]
    assert r["lse_bad_by_wg"] == [1, 0, 0] and r["bad_tiles"] == 3 and r["tiles"] == 6, r
    assert r["wrong_rows_eq_own_q"] == 64 and r["wrong_rows_zero"] == 10, r
    assert r["nan_rows"] == 10, r
    rec = dict(r, status="FAIL", repeat_equal=True, counter1=0, counter2=0, tiles_per_program=1)
    print(_short(rec))
    print("\n".join(_detail(("X", "t"), rec)))
    print("self-test: ok")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", default=",".join(ORDER))
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--seq", default="B", help="configurations also run on s1 then s2 in one "
                    "process (run 17's order); '' for none")
    ap.add_argument("--jobs", type=int, default=min(16, os.cpu_count() or 4))
    ap.add_argument("--run-timeout", type=float, default=20.0,
                    help="seconds a case may take after its first launch before it counts as hung")
    ap.add_argument("--compile-timeout", type=float, default=100.0)
    ap.add_argument("--budget", type=float, default=150.0,
                    help="seconds for all cases: then running ones are killed")
    ap.add_argument("--out", default=os.environ.get("OUT"))
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("--case", help=argparse.SUPPRESS)
    ap.add_argument("--dry-case", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.case:
        return run_case(*a.case.split(":"))
    if a.dry_case:
        return dry_compile(a.dry_case)
    if a.self_test:
        return self_test()
    names = [n for n in a.configs.split(",") if n]
    shapes = [s for s in a.shapes.split(",") if s]
    unknown = [n for n in names if n not in ORDER] + [s for s in shapes if s not in SHAPES]
    if unknown:
        ap.error(f"unknown {unknown}")
    if a.dry_run:
        return dry_run(names, shapes, a.jobs)
    t0 = time.time()
    log_dir = os.path.join(a.out or os.path.join(ROOT, "out"), "qpf_diag2_logs")
    os.makedirs(log_dir, exist_ok=True)
    from fusedattn.kernels import hopper_fwd as H
    H._REFUSE_QPF_CAUSAL_3WG = False
    descr = {n: v[2] for n, v in configs(H).items()}
    # shapes major: the one-tile-per-program shapes (run 17's failures) first
    cases = [(n, s) for s in shapes for n in names]
    cases += [(n, "s1+s2") for n in a.seq.split(",") if n in names]
    print(f"qpf_diag2: {len(cases)} cases, {a.jobs} at once; logs in {log_dir}", flush=True)
    results = run_all(cases, a.jobs, a.run_timeout, a.compile_timeout, log_dir, a.budget)
    detail = [ln for key in cases if key in results for ln in _detail(key, results[key])]
    if detail:
        print("\n# where the failing cases are wrong")
        print("\n".join(detail))
    print(f"\n# summary (hdim {HEAD_DIM}, bf16; shapes "
          + ", ".join(f"{s} {'x'.join(map(str, SHAPES[s][:2]))} h{SHAPES[s][2]}/{SHAPES[s][3]}"
                      for s in shapes) + "; max error vs float64)")
    summary = summarize(results, names, shapes, descr)
    print("\n".join(summary))
    print(f"wall {time.time() - t0:.0f}s")
    if a.out:
        with open(os.path.join(a.out, "qpf_diag2.json"), "w") as f:
            json.dump(dict(summary=summary, results={f"{c}:{s}": r for (c, s), r in
                                                     results.items()}), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
