"""GPU development script for the hopper (Gluon, sm_90a) forward kernel. Run on an H100/H200:

    PYTHONUNBUFFERED=1 python3 scripts/hopper_dev.py [--out DIR] [--budget SECONDS]

Each variant (compile-time switches of the kernel) runs in its own subprocess with a timeout, so a
deadlocked kernel costs one variant, not the whole run. In each subprocess:
  1. correctness against a float64 reference on fresh random inputs, with the outputs poisoned
     (NaN) before the launch: tails, GQA/MQA, seqlen_q != seqlen_k, fully masked rows, strided
     (packed qkv) inputs, fp16;
  2. timing (median of triton.testing.do_bench) in TFLOP/s next to torch SDPA flash and cuDNN,
     measured in the same process. Shapes as the anchors: batch x seqlen = 16384 tokens,
     heads x head_dim = 2048, bf16; FLOPs 4*B*H*S^2*D, halved for causal.
Full logs and JSON lines go to --out (default $OUT or ./out/hopper_dev); a summary table is printed
last.
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

# name -> (config overrides, mode). "full": whole correctness grid and every timing shape;
# "quick": a reduced grid and head_dim 128 timings only.
VARIANTS = {
    "default": ({}, "full"),  # the tile table as shipped (overlap on, pingpong off)
    "pp_mid": ({"pingpong": True}, "mid"),
    "default_mid": ({}, "mid"),
    "plain": ({"overlap": False, "pingpong": False}, "quick"),
    "ovl": ({"pingpong": False}, "quick"),
    "pp": ({"overlap": False, "pingpong": True}, "quick"),
    "ovl+pp": ({"pingpong": True}, "quick"),
    "ovl+pp_s3": ({"pingpong": True, "num_stages": 3}, "quick"),
    "pp_s3": ({"overlap": False, "pingpong": True, "num_stages": 3}, "quick"),
}
# seconds each mode may take (compiles on the device included)
MODE_TIMEOUT = {"full": 170, "mid": 80, "quick": 45}
DEFAULT_RUN = "default,pp_mid"


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
    cfg = H.get_config(d, **cfg_over)
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


def correctness_grid(mode):
    import torch
    bf, fp = torch.bfloat16, torch.float16
    cases = []
    dims = (128,) if mode == "quick" else (64, 128, 256)
    for d in dims:
        for causal in (False, True):
            cases += [
                (2, 1000, 1000, 4, 2, d, causal, bf, False),  # tails, GQA
                (1, 1, 17, 2, 2, d, causal, bf, False),       # single query row
                (1, 255, 4097, 2, 1, d, causal, bf, False),   # sq < sk, MQA, long tail
                (2, 300, 100, 2, 2, d, causal, bf, False),    # sq > sk: fully masked rows if causal
                (1, 2048, 2048, 2, 2, d, causal, bf, False),  # exact multiples
            ]
            if mode == "mid":
                cases = cases[:-2]
        if mode == "full":
            cases += [(1, 777, 777, 3, 3, d, True, bf, True),   # packed qkv strides
                      (1, 513, 1025, 4, 2, d, True, fp, False)]  # fp16
    return cases


def bench_shapes(mode):
    if mode == "full":
        return [(d, c, s) for d in (64, 128, 256) for c in (False, True) for s in (1024, 4096, 8192, 16384)]
    if mode == "mid":
        return [(d, c, s) for d in (64, 128, 256) for c in (False, True) for s in (8192,)]
    return [(128, c, s) for c in (False, True) for s in (2048, 8192)]


def worker(name, out_dir):
    import torch
    import triton
    from fusedattn.kernels import hopper_fwd as H

    over, mode = VARIANTS[name]
    jpath = os.path.join(out_dir, f"{name.replace('+', '-')}.jsonl")
    jf = open(jpath, "a")

    def emit(rec):
        rec = dict(variant=name, **rec)
        jf.write(json.dumps(rec) + "\n")
        jf.flush()

    props = torch.cuda.get_device_properties(0)
    print(f"[{name}] {props.name} SMs={props.multi_processor_count} torch {torch.__version__} "
          f"triton {triton.__version__} overrides={over} mode={mode}")
    emit(dict(kind="env", device=props.name, sms=props.multi_processor_count,
              torch=torch.__version__, triton=triton.__version__, overrides=over))

    torch.manual_seed(int(time.time()) % 100000)
    n_ok = n_all = 0
    for case in correctness_grid(mode):
        b, sq, sk, h, hk, d, causal, dtype, packed = case
        try:
            rec = check_case(H, over, b, sq, sk, h, hk, d, causal, dtype, packed)
        except Exception as e:  # noqa: BLE001 - report and continue with the next case
            traceback.print_exc()
            rec = dict(kind="check", b=b, sq=sq, sk=sk, h=h, hk=hk, d=d, causal=causal,
                       error=repr(e)[:500], ok=False)
            print(f"  ERROR {case}: {e!r}"[:300])
        emit(rec)
        n_all += 1
        n_ok += bool(rec.get("ok"))
    print(f"[{name}] correctness {n_ok}/{n_all} passed")

    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F

    def tflops(ms, b, h, s, d, causal):
        f = 4 * b * h * s * s * d / (2 if causal else 1)
        return f / (ms * 1e-3) / 1e12

    for d, causal, s in bench_shapes(mode):
        h = 2048 // d
        b = max(1, 16384 // s)
        q = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
        scale = d ** -0.5
        cfg = H.get_config(d, **over)
        res = dict(kind="bench", d=d, causal=causal, seqlen=s, batch=b, heads=h)
        try:
            fn = lambda: H.forward(q, k, v, causal, scale, config=cfg)  # noqa: E731
            fn()
            torch.cuda.synchronize()
            ms1 = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
            ms2 = triton.testing.do_bench(fn, warmup=5, rep=100, return_mode="median")
            res["ours"] = tflops(min(ms1, ms2), b, h, s, d, causal)
            res["ours_spread"] = abs(ms1 - ms2) / min(ms1, ms2)
        except Exception as e:  # noqa: BLE001
            res["ours_error"] = repr(e)[:300]
            print(f"  bench error: {e!r}"[:300])
        qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        for label, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            if mode == "quick" and label == "flash":
                continue
            try:
                with sdpa_kernel([backend]):
                    g = lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)  # noqa: E731
                    g()
                    ms = triton.testing.do_bench(g, warmup=25, rep=100, return_mode="median")
                res[label] = tflops(ms, b, h, s, d, causal)
            except Exception as e:  # noqa: BLE001
                res[label + "_error"] = repr(e)[:200]
        emit(res)
        print(f"  bench d={d} causal={causal} s={s}: ours {res.get('ours', float('nan')):.0f} "
              f"(spread {res.get('ours_spread', float('nan')):.1%}) flash {res.get('flash', float('nan')):.0f} "
              f"cudnn {res.get('cudnn', float('nan')):.0f} TFLOP/s")
        del q, k, v
    jf.close()
    return 0


# ------------------------------------------------------------------------------------------
# driver
# ------------------------------------------------------------------------------------------
def summarize(out_dir, names):
    rows = []
    for name in names:
        path = os.path.join(out_dir, f"{name.replace('+', '-')}.jsonl")
        if not os.path.exists(path):
            rows.append(f"{name}: no output")
            continue
        recs = [json.loads(line) for line in open(path)]
        checks = [r for r in recs if r["kind"] == "check"]
        bad = [r for r in checks if not r.get("ok")]
        rows.append(f"{name}: correctness {len(checks) - len(bad)}/{len(checks)} passed"
                    + (f"; failing: {[(r['d'], r['causal'], r['sq'], r['sk']) for r in bad][:6]}" if bad else ""))
        for r in recs:
            if r["kind"] == "bench":
                rows.append(f"  {name:7s} d={r['d']:3d} causal={int(r['causal'])} s={r['seqlen']:5d}  "
                            f"ours {r.get('ours', float('nan')):6.1f}  flash {r.get('flash', float('nan')):6.1f}  "
                            f"cudnn {r.get('cudnn', float('nan')):6.1f}  ratio/cudnn "
                            f"{r.get('ours', float('nan')) / r.get('cudnn', float('nan')):.2f}")
    return "\n".join(rows)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker")
    ap.add_argument("--out", default=os.environ.get("OUT") or os.path.join(ROOT, "out", "hopper_dev"))
    ap.add_argument("--budget", type=float, default=280.0, help="seconds for all variants together")
    ap.add_argument("--variants", default=DEFAULT_RUN, help=f"comma-separated, from {list(VARIANTS)}")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.worker:
        return worker(a.worker, a.out)

    t0 = time.time()
    names = a.variants.split(",")
    status = {}
    for i, name in enumerate(names):
        left = a.budget - (time.time() - t0)
        # each variant gets its mode's timeout, but leaves the later ones their minimum (quick)
        reserve = sum(MODE_TIMEOUT["quick"] for _ in names[i + 1:])
        share = min(MODE_TIMEOUT[VARIANTS[name][1]], left - reserve)
        if share < 30:
            status[name] = "skipped (budget)"
            continue
        log_path = os.path.join(a.out, f"{name.replace('+', '-')}.log")
        print(f"=== variant {name} (timeout {share:.0f}s) ===", flush=True)
        with open(log_path, "w") as lf:
            try:
                p = subprocess.run([sys.executable, "-u", __file__, "--worker", name, "--out", a.out],
                                   stdout=lf, stderr=subprocess.STDOUT, cwd=ROOT, timeout=share)
                status[name] = f"rc={p.returncode}"
            except subprocess.TimeoutExpired:
                status[name] = "TIMEOUT (killed: hang or too slow)"
        with open(log_path) as lf:
            for line in lf:
                if not line.startswith(" ") or "FAIL" in line or "ERROR" in line or "bench" in line:
                    print(line, end="")
        print(f"=== {name}: {status[name]} after {time.time() - t0:.0f}s ===", flush=True)
    print("\n# summary (TFLOP/s)")
    print("status:", status)
    print(summarize(a.out, names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
