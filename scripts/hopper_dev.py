"""GPU development script for the hopper (Gluon, sm_90a) forward kernel. Run on an H100/H200:

    PYTHONUNBUFFERED=1 python3 scripts/hopper_dev.py OUT_DIR [--budget SECONDS] [--jobs a,b,...]

One invocation verifies and times every switch added for issue #4 (JOBS, in priority order; the
driver skips what no longer fits --budget, default 330 s). Each job runs in its own subprocess
with a timeout, so a deadlocked variant costs one job, not the run. In each job:
  1. correctness against a float64 reference on fresh random inputs, with the outputs poisoned
     (NaN) before the launch: tails, GQA/MQA, seqlen_q != seqlen_k, fully masked rows, one K/V
     block, many tiles per program, strided (packed qkv) inputs, fp16, padded head dims;
  2. only if every case passed: timing (median of triton.testing.do_bench) in TFLOP/s of the
     variant, of the shipped default and of SDPA cuDNN, all in the same process. Shapes as the
     anchors: batch x seqlen = 16384 tokens, heads x head_dim = 2048, bf16; FLOPs 4*B*H*S^2*D,
     halved for causal.
The "ablation" job times the paper's ablation shape (batch 4, seqlen 8448, 16 heads, hdim 128)
for every ablation variant that passed (or was verified before), side by side in one process.
JSON lines and logs go to OUT_DIR (or --out, $OUT, ./out/hopper_dev); status.json has the job
status; a summary table is printed last.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

# Jobs of one invocation, in priority order (the driver skips what does not fit the budget).
# name -> (hopper_fwd.VARIANTS entry or None, correctness grid, timing shapes). Each job runs in
# its own subprocess with a timeout, so a deadlocked variant costs only itself. "ablation" times
# the paper's ablation shape for every variant in ABLATION that passed its correctness job (or was
# verified before), side by side with SDPA cuDNN/flash in one process.
ABLATION_SHAPE = (4, 8448, 16, 128)  # batch, seqlen, heads, head_dim (FA3 tab. 2), bf16
ABLATION = ["default", "full", "full_pp_fa3", "full_pp_named", "no_ws", "no_overlap",
            "no_overlap_pp_named", "persistent", "persistent_tma", "persistent_tma_pp_named"]
VERIFIED = {"default", "full", "no_overlap"}  # verified on the H200 (hopper_log.md runs 2-3)
JOBS = {
    # ablation variants first (work item 1 and 5)
    "no_ws": ("no_ws", "d128", "t128"),
    "full_pp_fa3": ("full_pp_fa3", "d128", "t128"),
    "full_pp_named": ("full_pp_named", "d128", "t128"),
    "no_overlap_pp_named": ("no_overlap_pp_named", "d128", "t128"),
    "ablation": (None, None, None),
    # persistent scheduler, TMA-store epilogue (items 2 and 4)
    "persistent": ("persistent", "dims", "tall"),
    "persistent_tma": ("persistent_tma", "dims", "tp"),
    "tma_store": ("tma_store", "dims", "t128"),
    "persistent_tma_pp_named": ("persistent_tma_pp_named", "d128", "t128"),
    # padded head dims (item 3), hdim 64 tiles (item 4)
    "padded": ("default", "padded", "tpad"),
    "d64_bn256": ("d64_bn256", "d64", "t64"),
    "d64_bn256_pp_named": ("d64_bn256_pp_named", "d64", "t64"),
    "no_ws_no_overlap": ("no_ws_no_overlap", "d128", "t128"),
    "no_overlap_pp_fa3": ("no_overlap_pp_fa3", "d128", "t128"),
}
DEFAULT_RUN = ",".join(JOBS)
# seconds a job may take (compiles on the device included; Triton compiles once per (config,
# integer specialisation), i.e. 2-3 times per head dim x causal)
JOB_TIMEOUT = {"d128": 45, "d64": 45, "dims": 75, "padded": 60, None: 150}


# ------------------------------------------------------------------------------------------
# worker
# ------------------------------------------------------------------------------------------
def reference(q, k, v, causal, scale):
    """float64 attention on the device: (out, lse), -inf lse and zero rows where nothing is visible."""
    import torch
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    qf, kf, vf = q.double(), k.double(), v.double()
    if hk != h:
        kf = kf.repeat_interleave(h // hk, dim=2)
        vf = vf.repeat_interleave(h // hk, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", qf, kf) * scale
    if causal:
        i = torch.arange(sq, device=q.device)[:, None]
        j = torch.arange(sk, device=q.device)[None, :]
        s = s.masked_fill(j > i + (sk - sq), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse[..., None])
    p = torch.nan_to_num(p, nan=0.0)
    out = torch.einsum("bhqk,bkhd->bqhd", p, vf)
    return out, lse


def check_case(H, cfg_over, b, sq, sk, h, hk, d, causal, dtype, packed=False, log=print):
    """One correctness case; d may be a padded head dim (e.g. 96 runs at 128)."""
    import torch
    dev = "cuda"
    if packed:  # q, k, v as strided views of one (b, s, 3, h, d) buffer (needs sq == sk, h == hk)
        qkv = torch.randn(b, sq, 3, h, d, device=dev, dtype=dtype)
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    else:
        q = torch.randn(b, sq, h, d, device=dev, dtype=dtype)
        k = torch.randn(b, sk, hk, d, device=dev, dtype=dtype)
        v = torch.randn(b, sk, hk, d, device=dev, dtype=dtype)
    scale = d ** -0.5
    out = torch.full((b, sq, h, d), float("nan"), device=dev, dtype=dtype)
    lse = torch.full((b, h, sq), float("nan"), device=dev, dtype=torch.float32)
    cfg = H.base_config(d, **cfg_over)
    o, l = H.forward(q, k, v, causal, scale, config=cfg, _out=out, _lse=lse)
    torch.cuda.synchronize()
    ro, rl = reference(q, k, v, causal, scale)
    unwritten = int(torch.isnan(o).sum().item()) + int(torch.isnan(l).sum().item())
    of = o.double()
    rel = ((of - ro).norm() / ro.norm().clamp_min(1e-30)).item()
    maxabs = (of - ro).abs().max().item()
    inf_ref = torch.isinf(rl)
    inf_match = bool((torch.isinf(l) == inf_ref).all().item())
    fin = ~inf_ref
    lse_err = (l.double()[fin] - rl[fin]).abs().max().item() if fin.any() else 0.0
    tol = 1e-2 if dtype == torch.bfloat16 else 4e-3
    ok = unwritten == 0 and rel < tol and lse_err < 2e-2 and inf_match
    rec = dict(kind="check", b=b, sq=sq, sk=sk, h=h, hk=hk, d=d, causal=causal,
               dtype=str(dtype).split(".")[-1], packed=packed, rel=rel, maxabs=maxabs,
               lse_err=lse_err, inf_match=inf_match, unwritten=unwritten, ok=ok)
    log(f"  {'PASS' if ok else 'FAIL'} b={b} sq={sq} sk={sk} h={h}/{hk} d={d} causal={causal} "
        f"{rec['dtype']}{' packed' if packed else ''}: rel={rel:.2e} maxabs={maxabs:.2e} "
        f"lse_err={lse_err:.2e} inf_match={inf_match} unwritten={unwritten}")
    return rec


def correctness_grid(kind):
    import torch
    bf, fp = torch.bfloat16, torch.float16

    # Triton compiles once per integer specialisation (==1, %16) of seqlen_q, seqlen_k, heads,
    # kv_group, num_m_tiles: the core cases share one (none is 1 or a multiple of 16), so a
    # (variant, head dim, causal) costs one compile for them.
    def core(d, causal, n=4):
        return [
            (2, 1000, 1000, 4, 2, d, causal, bf, False),  # tails, GQA
            (2, 300, 100, 4, 2, d, causal, bf, False),    # sq > sk: fully masked rows if causal
            (1, 255, 4097, 4, 1, d, causal, bf, False),   # sq < sk, MQA, long tail
            (1, 100, 17, 4, 2, d, causal, bf, False),     # one K/V block
        ][:n]
    cases = []
    if kind in ("d128", "d64"):
        d = 128 if kind == "d128" else 64
        for c in (False, True):
            cases += core(d, c) + [(1, 2048, 2048, 4, 2, d, c, bf, False)]  # exact multiples
    elif kind == "dims":  # every native head dim; many tiles per program (persistent)
        for d in (64, 128, 256):
            for c in (False, True):
                cases += core(d, c, 3)
        cases += [(4, 1900, 1900, 20, 5, 128, c, bf, False) for c in (False, True)]  # 1200 tiles
        cases += [(1, 1, 17, 2, 2, 128, True, bf, False),     # a single query row
                  (1, 777, 777, 3, 3, 128, True, bf, True),    # packed qkv strides
                  (1, 513, 1025, 4, 2, 128, True, fp, False)]  # fp16
    elif kind == "padded":
        for d in (96, 40, 200):
            for c in (False, True):
                cases += core(d, c, 3)
        cases += [(1, 129, 300, 4, 2, 8, True, bf, False), (1, 200, 200, 4, 1, 136, False, bf, False),
                  (1, 777, 777, 3, 3, 96, True, bf, True)]       # packed strides, padded
    return cases


def bench_shapes(kind):
    """(head_dim, causal, seqlen); batch x seqlen = 16384 tokens, heads x head_dim = 2048."""
    if kind == "tall":
        return [(d, c, s) for d in (64, 128, 256) for c in (False, True) for s in (1024, 8192)]
    if kind == "t128":
        return [(128, c, 8192) for c in (False, True)]
    if kind == "tp":
        return [(128, c, s) for c in (False, True) for s in (1024, 8192)]
    if kind == "t64":
        return [(64, c, s) for c in (False, True) for s in (8192, 16384)]
    if kind == "tpad":
        return [(96, c, 8192) for c in (False, True)]
    return []


def _tflops(ms, b, h, s, d, causal):
    return 4 * b * h * s * s * d / (2 if causal else 1) / (ms * 1e-3) / 1e12


def _open_log(out_dir, name):
    jf = open(os.path.join(out_dir, f"{name}.jsonl"), "a")

    def emit(rec):
        jf.write(json.dumps(dict(job=name, **rec)) + "\n")
        jf.flush()
    return emit


def _env(emit, tag):
    import torch
    import triton
    props = torch.cuda.get_device_properties(0)
    print(f"[{tag}] {props.name} SMs={props.multi_processor_count} torch {torch.__version__} "
          f"triton {triton.__version__}", flush=True)
    emit(dict(kind="env", device=props.name, sms=props.multi_processor_count,
              torch=torch.__version__, triton=triton.__version__))


def _sdpa(q, k, v, causal, label):
    import torch.nn.functional as F
    import triton
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backend = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[label]
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    with sdpa_kernel([backend]):
        g = lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)  # noqa: E731
        g()
        return triton.testing.do_bench(g, warmup=25, rep=100, return_mode="median")


def worker(name, out_dir):
    import torch
    import triton
    from fusedattn.kernels import hopper_fwd as H

    if name == "ablation":
        return ablation_worker(out_dir)
    variant, grid, shapes = JOBS[name]
    over = H.VARIANTS[variant][0]
    emit = _open_log(out_dir, name)
    _env(emit, name)
    emit(dict(kind="config", variant=variant, overrides=over))
    torch.manual_seed(int(time.time()) % 100000)
    n_ok = n_all = 0
    for case in correctness_grid(grid):
        b, sq, sk, h, hk, d, causal, dtype, packed = case
        try:
            rec = check_case(H, over, b, sq, sk, h, hk, d, causal, dtype, packed)
        except Exception as e:  # noqa: BLE001 - report and continue with the next case
            traceback.print_exc()
            rec = dict(kind="check", b=b, sq=sq, sk=sk, h=h, hk=hk, d=d, causal=causal,
                       error=repr(e)[:500], ok=False)
            print(f"  ERROR {case}: {e!r}"[:300], flush=True)
        emit(rec)
        n_all += 1
        n_ok += bool(rec.get("ok"))
    print(f"[{name}] correctness {n_ok}/{n_all} passed", flush=True)
    emit(dict(kind="correctness", passed=n_ok, total=n_all))
    if n_ok != n_all:
        return 1  # no timing of a wrong kernel

    for d, causal, s in bench_shapes(shapes):
        h = 2048 // d
        b = max(1, 16384 // s)
        q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        res = dict(kind="bench", d=d, causal=causal, seqlen=s, batch=b, heads=h)
        for label, cfg in (("ours", H.base_config(d, **over)), ("default", H.get_config(d, causal))):
            try:
                fn = lambda: H.forward(q, k, v, causal, d ** -0.5, config=cfg)  # noqa: E731
                fn()
                torch.cuda.synchronize()
                ms1 = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
                ms2 = triton.testing.do_bench(fn, warmup=5, rep=100, return_mode="median")
                res[label] = _tflops(min(ms1, ms2), b, h, s, d, causal)
                res[label + "_spread"] = abs(ms1 - ms2) / min(ms1, ms2)
            except Exception as e:  # noqa: BLE001
                res[label + "_error"] = repr(e)[:300]
                print(f"  bench error ({label}): {e!r}"[:300], flush=True)
        try:
            res["cudnn"] = _tflops(_sdpa(q, k, v, causal, "cudnn"), b, h, s, d, causal)
        except Exception as e:  # noqa: BLE001
            res["cudnn_error"] = repr(e)[:200]
        emit(res)
        print(f"  bench d={d} causal={causal} s={s}: {name} {res.get('ours', float('nan')):.0f} "
              f"default {res.get('default', float('nan')):.0f} cudnn {res.get('cudnn', float('nan')):.0f} "
              f"TFLOP/s", flush=True)
        del q, k, v
    return 0


def ablation_worker(out_dir):
    """The paper's ablation shape for every variant in ABLATION that may run (--ablation-ok),
    side by side in this one process: two rounds in opposite orders; SDPA cuDNN / flash at the
    start and at the end. Non-causal as the paper, causal as a second row."""
    import torch
    import triton
    from fusedattn.kernels import hopper_fwd as H

    emit = _open_log(out_dir, "ablation")
    _env(emit, "ablation")
    names = [n for n in os.environ.get("HOPPER_DEV_ABLATION", ",".join(ABLATION)).split(",") if n]
    b, s, h, d = ABLATION_SHAPE
    torch.manual_seed(0)
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    for causal in (False, True):
        times = {n: [] for n in names}
        ref = {}
        for label in ("cudnn", "flash"):
            try:
                ref[label] = [_sdpa(q, k, v, causal, label)]
            except Exception as e:  # noqa: BLE001
                ref[label] = []
                print(f"  sdpa {label}: {e!r}"[:200], flush=True)
        for rnd in range(2):
            for n in (names if rnd == 0 else names[::-1]):
                cfg = H.variant_config(n, d, causal)
                try:
                    fn = lambda: H.forward(q, k, v, causal, d ** -0.5, config=cfg)  # noqa: E731
                    fn()
                    torch.cuda.synchronize()
                    times[n].append(triton.testing.do_bench(fn, warmup=25, rep=100,
                                                            return_mode="median"))
                except Exception as e:  # noqa: BLE001
                    print(f"  {n}: {e!r}"[:300], flush=True)
                print(f"  ablation causal={causal} round {rnd} {n}: "
                      f"{_tflops(times[n][-1], b, h, s, d, causal) if times[n] else float('nan'):.0f}",
                      flush=True)
        for label in ("cudnn", "flash"):
            try:
                ref[label].append(_sdpa(q, k, v, causal, label))
            except Exception:  # noqa: BLE001
                pass
        for n, ts in list(times.items()) + [("sdpa_" + k2, v2) for k2, v2 in ref.items()]:
            if ts:
                emit(dict(kind="ablation", variant=n, causal=causal, batch=b, seqlen=s, heads=h, d=d,
                          tflops=_tflops(min(ts), b, h, s, d, causal),
                          spread=(max(ts) - min(ts)) / min(ts), ms=ts))
    return 0


# ------------------------------------------------------------------------------------------
# driver
# ------------------------------------------------------------------------------------------
def _records(out_dir, name):
    path = os.path.join(out_dir, f"{name}.jsonl")
    return [json.loads(line) for line in open(path)] if os.path.exists(path) else []


def summarize(out_dir, names, status):
    rows = ["job                       status        correctness  notes"]
    for name in names:
        recs = _records(out_dir, name)
        checks = [r for r in recs if r["kind"] == "check"]
        bad = [r for r in checks if not r.get("ok")]
        corr = f"{len(checks) - len(bad)}/{len(checks)}" if checks else "-"
        note = (f"failing: {[(r['d'], int(r['causal']), r['sq'], r['sk']) for r in bad][:4]}"
                if bad else "")
        rows.append(f"{name:25s} {status.get(name, '-'):13.13s} {corr:12s} {note}")
    rows.append("")
    rows.append("timings (TFLOP/s; 'default' and cuDNN measured in the same process)")
    rows.append("job                       d   causal seqlen   this  default  cudnn  this/cudnn this/default")
    for name in names:
        for r in _records(out_dir, name):
            if r["kind"] == "bench":
                o, dft, cu = (r.get(k, float("nan")) for k in ("ours", "default", "cudnn"))
                rows.append(f"{name:25s} {r['d']:3d}  {int(r['causal'])}      {r['seqlen']:5d}  "
                            f"{o:6.1f}  {dft:6.1f}  {cu:6.1f}  {o / cu:6.2f}     {o / dft:6.2f}")
    abl = [r for r in _records(out_dir, "ablation") if r["kind"] == "ablation"]
    if abl:
        b, s, h, d = ABLATION_SHAPE
        rows.append("")
        rows.append(f"ablation (batch {b}, seqlen {s}, {h} heads, hdim {d}, bf16; FA3 tab. 2: "
                    f"full 661, no WS 582, overlap only 570)")
        rows.append("variant                   non-causal  causal  spread")
        for n in dict.fromkeys(r["variant"] for r in abl):
            nc = [r for r in abl if r["variant"] == n and not r["causal"]]
            c = [r for r in abl if r["variant"] == n and r["causal"]]
            rows.append(f"{n:25s} {nc[0]['tflops'] if nc else float('nan'):8.1f}  "
                        f"{c[0]['tflops'] if c else float('nan'):8.1f}  "
                        f"{max([r['spread'] for r in nc + c] or [float('nan')]):.1%}")
    return "\n".join(rows)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker")
    ap.add_argument("out", nargs="?", help="folder for the logs (default $OUT or ./out/hopper_dev)")
    ap.add_argument("--out", dest="out_opt")
    ap.add_argument("--budget", type=float, default=330.0, help="seconds for all jobs together")
    ap.add_argument("--jobs", default=DEFAULT_RUN, help=f"comma-separated, from {list(JOBS)}")
    a = ap.parse_args()
    a.out = a.out_opt or a.out or os.environ.get("OUT") or os.path.join(ROOT, "out", "hopper_dev")
    os.makedirs(a.out, exist_ok=True)
    if a.worker:
        return worker(a.worker, a.out)

    t0 = time.time()
    names = [n for n in a.jobs.split(",") if n]
    status = {}
    for i, name in enumerate(names):
        left = a.budget - (time.time() - t0)
        kind = JOBS[name][1]
        share = min(JOB_TIMEOUT[kind], left)
        if share < 25:
            status[name] = "skipped (budget)"
            print(f"=== {name}: skipped, {left:.0f}s left of the budget ===", flush=True)
            continue
        env = dict(os.environ)
        if name == "ablation":  # only variants verified before or passed in this run
            ok = [n for n in ABLATION if n in VERIFIED or status.get(n) == "rc=0"]
            env["HOPPER_DEV_ABLATION"] = ",".join(ok)
            print(f"=== ablation over {ok} ===", flush=True)
        log_path = os.path.join(a.out, f"{name}.log")
        print(f"=== job {name} (timeout {share:.0f}s) ===", flush=True)
        with open(log_path, "w") as lf:
            try:
                p = subprocess.run([sys.executable, "-u", __file__, "--worker", name, "--out", a.out],
                                   stdout=lf, stderr=subprocess.STDOUT, cwd=ROOT, timeout=share,
                                   env=env)
                status[name] = f"rc={p.returncode}"
            except subprocess.TimeoutExpired:
                status[name] = "TIMEOUT"  # killed: a hang or too slow (see its .log)
        with open(log_path) as lf:
            for line in lf:
                if not line.startswith(" ") or "FAIL" in line or "ERROR" in line or "bench" in line:
                    print(line, end="")
        print(f"=== {name}: {status[name]} after {time.time() - t0:.0f}s ===", flush=True)
    with open(os.path.join(a.out, "status.json"), "w") as f:
        json.dump(dict(status=status, wall_s=time.time() - t0), f, indent=1)
    print("\n# summary")
    print(summarize(a.out, names, status))
    return 0


if __name__ == "__main__":
    sys.exit(main())
