"""One device call for the hopper (Gluon, sm_90a) forward, v4 (benchmarks/hopper_log.md, v4):

    python3 scripts/hopper_dev2.py OUT_DIR [--budget 270] [--jobs ablation,d128,d256,d64]

Jobs run one after the other, each in its own subprocess with a timeout (a deadlocked variant
costs its job, not the run; every record is written as soon as it exists, so a job killed half-way
keeps what it measured). The whole run stays inside --budget seconds (default 270): a job that no
longer fits is skipped and reported.

Every variant is checked before it is timed, in the timing process: outputs poisoned with NaN,
compared with a float64 reference (one tail/GQA case per variant, head dim and causal flag that
has not run on a GPU before, and a slice - first and last (batch, head) - of every timed shape);
a variant that fails is not timed. Timing: median of triton.testing.do_bench (warmup 10 ms,
rep 50 ms, L2 flushed before each run as in `make bench`), two rounds in opposite orders, the
lower median kept; FA3 (fa3-fwd wheel) and SDPA cuDNN timed in the same process, same inputs.
Shapes: batch x seqlen = 16384, heads x head_dim = 2048, bf16 (the anchors); FLOPs
4*B*H*S^2*D, halved when causal.

Jobs:
  ablation  FA3 paper tab. 2 shape (batch 4, seqlen 8448, 16 heads, hdim 128, non-causal; causal
            as a second row): full design with pingpong (WS + overlap + pingpong, FA3's turn
            placement with named barriers, and our verified mbarrier turns), WS + overlap without
            pingpong (the shipped default), without WS (no_ws: overlap, no producer, no
            setmaxnreg), without overlap (WS + pingpong, and WS alone).
  d128      hdim 128 candidates: fma (FFMA softmax), persistent, persistent_fma,
            persistent_tma_fma at s = 8k, 1k/2k/8k causal, 2k.
  d256      hdim 256: the seqlen-512 collapse (do_bench with L2 flush as the bench did, CUDA-graph
            replay without flush, back-to-back queue, host time per call) and the fma /
            persistent_tma_fma candidates (persistent without the TMA store spills 8 B at 256
            causal, so it is not run).
  d64       hdim 64: fma, persistent_fma and three consumer warpgroups (BLOCK_M 192):
            d64_3wg (x64, overlap), d64_3wg_n128 (x128, no overlap), d64_3wg_persistent.
Before the jobs, every kernel they will launch is compiled in PRECOMPILE_PROCS parallel processes
(hopper_fwd.forward(_warmup=True) -> triton's on-disk cache; nothing is launched), so the jobs
mostly load kernels instead of compiling them one after the other.
Outputs in OUT_DIR: <job>.jsonl (every record), <job>.log, summary.json (all records + status),
and the table printed last.
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
DEVICE = "cuda"  # the CPU dry run of the worker (tests) sets "cpu"
sys.path.insert(0, ROOT)

# variants (hopper_fwd.VARIANTS names) that have run correctly on an H200 before (hopper_log.md)
VERIFIED = {"v3", "full", "no_overlap", "plain"}  # checked on the GPU before (runs 1-4)
EXTRA_VARIANTS = {"plain": {"overlap": False}}  # WS alone: no overlap, no pingpong (runs 1-2)

ABLATION_SHAPE = (4, 8448, 16, 128)
# riskiest last: no_ws ran once on a GPU (racecheck control, no hang); the pp modes 1/2 never
ABLATION = ["default", "full", "no_overlap", "plain", "no_ws", "full_pp_fa3", "full_pp_named"]

# job -> (timeout s, variants in run order (riskiest last), cells (hdim, causal, seqlen),
#         diagnostics cells)
JOBS = {
    "ablation": (90, ABLATION, [(128, False, 8448), (128, True, 8448)], []),
    "d128": (90, ["default", "fma", "persistent", "persistent_fma", "persistent_tma_fma"],
             [(128, False, 8192), (128, True, 1024), (128, True, 2048), (128, True, 8192),
              (128, False, 2048)], []),
    "d256": (80, ["default", "fma", "persistent_tma_fma"],  # persistent alone spills at 256 causal
             [(256, False, 512), (256, True, 512), (256, False, 8192), (256, True, 4096),
              (256, False, 2048)],
             [(256, False, 512), (256, True, 512), (256, False, 1024)]),
    "d64": (80, ["default", "fma", "persistent_fma", "d64_3wg", "d64_3wg_n128",
                 "d64_3wg_persistent"],
            [(64, False, 8192), (64, True, 2048), (64, True, 8192), (64, False, 2048)], []),
}
PRECOMPILE_TIMEOUT = 50  # s; kernels not compiled by then are compiled by the jobs themselves
PRECOMPILE_PROCS = 12  # the device machine has 16 cores


def _cell_shape(job, d, s):
    if job == "ablation":
        b, _, h, _ = ABLATION_SHAPE
        return b, h
    return max(1, 16384 // s), 2048 // d


def compile_specs(jobs):
    """Every (variant, d, causal, batch, seqlen, heads, kv_heads) the jobs will launch, so that
    parallel processes can compile them (forward(_warmup=True)) into triton's cache first."""
    specs = []
    for j in jobs:
        _, variants, cells, diags = JOBS[j]
        for d, causal, s in cells + [c for c in diags if c not in cells]:
            b, h = _cell_shape(j, d, s)
            for n in (variants if (d, causal, s) in cells else ["default"]):
                specs.append((n, d, causal, b, s, h, h))
                if n not in VERIFIED:
                    specs.append((n, d, causal, 2, 1000, 4, 2))
    # one per triton specialisation (an int argument is specialised as ==1, %16 == 0 or neither)
    from fusedattn.kernels import hopper_fwd as H

    def cls(x):
        return 1 if x == 1 else 16 if x % 16 == 0 else 0
    seen, out = set(), []
    for n, d, causal, b, s, h, hk in specs:
        bm = _cfg(H, n, d, causal).block_m
        key = (n, d, causal, cls(s), cls(h), cls(h // hk), cls(-(-s // bm)))
        if key not in seen:
            seen.add(key)
            out.append((n, d, causal, b, s, h, hk))
    return out


def install_mock_sm90_driver():
    """A stand-in triton driver that targets sm_90a without a GPU, so that the launch path
    (specialisation, descriptors, kernel.warmup) runs on CPU tensors; nothing is launched.
    For the CPU test of the precompile step (tests/test_hopper_compile.py)."""
    import torch
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.backends.driver import DriverBase

    class MockSm90Driver(DriverBase):
        @classmethod
        def is_active(cls):
            return True

        def map_python_to_cpp_type(self, ty):
            from triton.backends.nvidia.driver import ty_to_cpp
            return ty_to_cpp(ty)

        def get_current_target(self):
            return GPUTarget("cuda", 90, 32)

        def get_active_torch_device(self):
            return torch.device("cpu")

        def get_benchmarker(self):
            raise RuntimeError("mock driver: nothing runs")

        def get_current_device(self):
            return 0

        def get_current_stream(self, device=None):
            return 0

        def set_current_device(self, device):
            pass

        def get_device_interface(self):
            return torch.cuda

        def get_empty_cache_for_benchmark(self):
            raise RuntimeError("mock driver: nothing runs")

        def clear_cache(self, cache):
            pass

    triton.runtime.driver.set_active(MockSm90Driver())
    from fusedattn.kernels import hopper_fwd as H
    H._num_sms = lambda device: 132  # H200


def precompile(specs):
    import torch
    dev = "cuda"
    if os.environ.get("HOPPER_DEV2_MOCK_DRIVER"):  # CPU test of this path (tests/): no GPU
        dev = "cpu"
        install_mock_sm90_driver()
    from fusedattn.kernels import hopper_fwd as H
    for n, d, causal, b, s, h, hk in specs:
        t = time.time()
        try:
            q = torch.empty(b, s, h, d, device=dev, dtype=torch.bfloat16)
            k = torch.empty(b, s, hk, d, device=dev, dtype=torch.bfloat16)
            kern = H.forward(q, k, k, causal, d ** -0.5, config=_cfg(H, n, d, causal), _warmup=True)
            print(f"compiled {n} d={d} causal={causal} {b}x{s} h{h}/{hk} in {time.time() - t:.1f}s"
                  f" regs={getattr(kern, 'n_regs', '?')} spills={getattr(kern, 'n_spills', '?')}",
                  flush=True)
        except Exception as e:  # noqa: BLE001
            print(f"compile FAILED {n} d={d} causal={causal}: {e!r}"[:400], flush=True)
    return 0


# ------------------------------------------------------------------------------------------
# worker side
# ------------------------------------------------------------------------------------------
def _cfg(H, name, d, causal=False):
    """"default": the shipped table row for (d, causal); any other name: the v3 base row plus the
    variant's overrides (H.base_config), as in device run 5."""
    if name == "default":
        return H.get_config(d, causal)
    over = EXTRA_VARIANTS.get(name, H.VARIANTS[name][0] if name in H.VARIANTS else None)
    if over is None:
        raise KeyError(name)
    return H.base_config(d, **over)


def reference(q, k, v, causal, scale):
    """float64 attention: (out, lse); rows with no visible key: out 0, lse -inf."""
    import torch
    sq, sk = q.shape[1], k.shape[1]
    h, hk = q.shape[2], k.shape[2]
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
    p = torch.nan_to_num(torch.exp(s - lse[..., None]), nan=0.0)
    return torch.einsum("bhqk,bkhd->bqhd", p, vf), lse


def _compare(o, l, ro, rl, dtype):
    import torch
    of = o.double()
    rel = ((of - ro).norm() / ro.norm().clamp_min(1e-30)).item()
    inf_ref = torch.isinf(rl)
    inf_match = bool((torch.isinf(l) == inf_ref).all().item())
    fin = ~inf_ref
    lse_err = (l.double()[fin] - rl[fin]).abs().max().item() if fin.any() else 0.0
    tol = 1e-2 if dtype == torch.bfloat16 else 4e-3
    return rel, lse_err, inf_match, (rel < tol and lse_err < 2e-2 and inf_match)


def run_checked(H, cfg, q, k, v, causal, scale, slices=None):
    """Launch with NaN-poisoned outputs, compare with float64 (whole tensor, or the listed
    (batch, head) slices of a large one). Returns a record dict with ok."""
    import torch
    b, sq, h, d = q.shape
    out = torch.full((b, sq, h, d), float("nan"), device=q.device, dtype=q.dtype)
    lse = torch.full((b, h, sq), float("nan"), device=q.device, dtype=torch.float32)
    H.forward(q, k, v, causal, scale, config=cfg, _out=out, _lse=lse)
    torch.cuda.synchronize()
    unwritten = int(torch.isnan(out).sum().item()) + int(torch.isnan(lse).sum().item())
    rec = dict(unwritten=unwritten)
    ok = unwritten == 0
    worst = (0.0, 0.0, True)
    pairs = slices or [None]
    for sl in pairs:
        if sl is None:
            ro, rl = reference(q, k, v, causal, scale)
            o, l = out, lse
        else:
            bi, hi = sl
            hk = k.shape[2]
            kh = hi // (h // hk)
            ro, rl = reference(q[bi:bi + 1, :, hi:hi + 1], k[bi:bi + 1, :, kh:kh + 1],
                               v[bi:bi + 1, :, kh:kh + 1], causal, scale)
            o, l = out[bi:bi + 1, :, hi:hi + 1], lse[bi:bi + 1, hi:hi + 1]
        rel, lse_err, inf_match, good = _compare(o, l, ro, rl, q.dtype)
        worst = (max(worst[0], rel), max(worst[1], lse_err), worst[2] and inf_match)
        ok = ok and good
        del ro, rl
    rec.update(rel=worst[0], lse_err=worst[1], inf_match=worst[2], ok=ok)
    return rec


def _tflops(ms, b, h, s, d, causal):
    return 4 * b * h * s * s * d / (2 if causal else 1) / (ms * 1e-3) / 1e12


class Worker:
    def __init__(self, job, out_dir):
        import torch
        self.job = job
        self.jf = open(os.path.join(out_dir, f"{job}.jsonl"), "a")
        props = torch.cuda.get_device_properties(0)
        import triton
        self.emit(kind="env", device=props.name, sms=props.multi_processor_count,
                  torch=torch.__version__, triton=triton.__version__)
        self.fa3 = None
        try:
            import importlib
            sys.modules.setdefault("flash_attn_config", importlib.import_module("fa3_fwd_config"))
            self.fa3 = importlib.import_module("fa3_fwd_interface")
        except Exception as e:  # noqa: BLE001
            self.emit(kind="note", text=f"FA3 unavailable: {e!r}"[:300])
        self.checked = {}  # (variant, d, causal) -> ok

    def emit(self, **rec):
        self.jf.write(json.dumps(dict(job=self.job, t=round(time.time(), 2), **rec)) + "\n")
        self.jf.flush()
        short = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in rec.items()}
        print(json.dumps(short)[:400], flush=True)

    def fn_for(self, name, q, k, v, causal, scale):
        import torch
        import torch.nn.functional as F
        if name == "fa3":
            if self.fa3 is None:
                return None
            mod = self.fa3
            return lambda: mod.flash_attn_func(q, k, v, softmax_scale=scale, causal=causal)
        if name == "cudnn":
            from torch.nn.attention import SDPBackend, sdpa_kernel
            qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

            def g():
                with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                    return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, scale=scale)
            return g
        from fusedattn.kernels import hopper_fwd as H
        cfg = _cfg(H, name, q.shape[-1], causal)
        return lambda: H.forward(q, k, v, causal, scale, config=cfg)

    def check_variant(self, name, d, causal, q, k, v, scale):
        """Tail/GQA case (variants not run before) + slices of the timed shape; cached per
        (variant, d, causal) for the tail case."""
        import torch
        from fusedattn.kernels import hopper_fwd as H
        cfg = _cfg(H, name, d, causal)
        key = (name, d, causal)
        try:
            if key not in self.checked and name not in VERIFIED:
                g = torch.Generator(device=DEVICE).manual_seed(1234)
                qt = torch.randn(2, 1000, 4, d, device=DEVICE, dtype=torch.bfloat16, generator=g)
                kt = torch.randn(2, 1000, 2, d, device=DEVICE, dtype=torch.bfloat16, generator=g)
                vt = torch.randn(2, 1000, 2, d, device=DEVICE, dtype=torch.bfloat16, generator=g)
                rec = run_checked(H, cfg, qt, kt, vt, causal, d ** -0.5)
                self.emit(kind="check", variant=name, d=d, causal=causal, shape="2x1000 h4/2",
                          **rec)
                self.checked[key] = rec["ok"]
                if not rec["ok"]:
                    return False
            self.checked.setdefault(key, True)
            if not self.checked[key]:
                return False
            b, s, h, _ = q.shape
            rec = run_checked(H, cfg, q, k, v, causal, scale, slices=[(0, 0), (b - 1, h - 1)])
            self.emit(kind="check", variant=name, d=d, causal=causal, shape=f"{b}x{s} h{h}", **rec)
            return rec["ok"]
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            self.emit(kind="check", variant=name, d=d, causal=causal, ok=False, error=repr(e)[:400])
            self.checked[key] = False
            return False

    def time_cell(self, d, causal, s, variants, b=None, h=None, diag=False):
        """FA3 and cuDNN first, then each variant: check, then time (round 1, each record
        written at once so that a hang later keeps it); round 2 in the opposite order."""
        import torch
        import triton
        h = h or 2048 // d
        b = b or max(1, 16384 // s)
        torch.manual_seed(0)
        q, k, v = (torch.randn(b, s, h, d, device=DEVICE, dtype=torch.bfloat16) for _ in range(3))
        scale = d ** -0.5
        cell = dict(d=d, causal=causal, seqlen=s, batch=b, heads=h)
        fns = {}

        def timed(n, rnd):
            if fns.get(n) is None:
                return
            try:
                fns[n]()
                torch.cuda.synchronize()
                ms = triton.testing.do_bench(fns[n], warmup=10, rep=50, return_mode="median")
                self.emit(kind="time", impl=n, round=rnd, ms=ms,
                          tflops=_tflops(ms, b, h, s, d, causal), **cell)
            except Exception as e:  # noqa: BLE001
                self.emit(kind="error", impl=n, error=repr(e)[:300], **cell)
                fns[n] = None

        order = ["fa3", "cudnn"]
        for n in order:
            fns[n] = self.fn_for(n, q, k, v, causal, scale)
            timed(n, 0)
        for n in variants:
            if self.check_variant(n, d, causal, q, k, v, scale):
                fns[n] = self.fn_for(n, q, k, v, causal, scale)
                order.append(n)
                timed(n, 0)
        for n in order[::-1]:
            timed(n, 1)
        if diag:
            self.diagnose(d, causal, s, b, h, {n: fns[n] for n in ("default", "fa3", "cudnn")
                                               if fns.get(n)})
        del q, k, v, fns

    def diagnose(self, d, causal, s, b, h, fns):
        """Where the time goes at a short sequence: do_bench with L2 flush (as the bench),
        CUDA-graph replay (GPU time only, no flush, no host), host time per call."""
        import torch
        import triton
        out = {}
        for n, fn in fns.items():
            try:
                r = dict(flush_ms=triton.testing.do_bench(fn, warmup=10, rep=50,
                                                          return_mode="median"))
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(50):
                    fn()
                r["host_us"] = (time.perf_counter() - t0) / 50 * 1e6  # enqueue time per call
                torch.cuda.synchronize()
                r["queued_ms"] = (time.perf_counter() - t0) / 50 * 1e3  # back to back, no flush
                try:
                    r["graph_ms"] = triton.testing.do_bench_cudagraph(fn, rep=30,
                                                                      return_mode="median")
                except Exception as e:  # noqa: BLE001
                    r["graph_error"] = repr(e)[:200]
                r["tflops_graph"] = (_tflops(r["graph_ms"], b, h, s, d, causal)
                                     if "graph_ms" in r else None)
                out[n] = r
            except Exception as e:  # noqa: BLE001
                out[n] = dict(error=repr(e)[:200])
        self.emit(kind="diag", d=d, causal=causal, seqlen=s, batch=b, heads=h, impls=out)


def worker(job, out_dir):
    if job.startswith("compile:"):
        return precompile([tuple(x) for x in json.loads(job[len("compile:"):])])
    w = Worker(job, out_dir)
    timeout, variants, cells, diags = JOBS[job]
    for d, causal, s in cells:
        b, h = _cell_shape(job, d, s)
        w.time_cell(d, causal, s, variants, b=b, h=h, diag=(d, causal, s) in diags)
    for d, causal, s in diags:
        if (d, causal, s) not in cells:
            w.time_cell(d, causal, s, ["default"], diag=True)
    return 0


# ------------------------------------------------------------------------------------------
# driver
# ------------------------------------------------------------------------------------------
def _records(out_dir, job):
    p = os.path.join(out_dir, f"{job}.jsonl")
    if not os.path.exists(p):
        return []
    recs = []
    for line in open(p):
        try:
            recs.append(json.loads(line))
        except ValueError:
            pass
    return recs


def summarize(out_dir, jobs, status):
    rows = []
    rows.append("job       status")
    for j in jobs:
        rows.append(f"{j:9s} {status.get(j, '-')}")
    fails = [r for j in jobs for r in _records(out_dir, j)
             if r["kind"] == "check" and not r.get("ok")]
    for r in fails:
        rows.append(f"CHECK FAILED {r['job']} {r['variant']} d={r['d']} causal={r['causal']} "
                    f"{r.get('shape', '')} rel={r.get('rel')} lse={r.get('lse_err')} "
                    f"unwritten={r.get('unwritten')} {r.get('error', '')}"[:300])
    for j in jobs:
        if j == "ablation":
            rows.append("[ablation] FA3 paper tab. 2 (H100, non-causal): full 661, without WS 582, "
                        "without pingpong 570. Ours: default = WS + overlap, no pingpong; full* = "
                        "default + pingpong (full: verified mbarrier turns, _pp_fa3: FA3 placement, "
                        "_pp_named: FA3 placement + named barriers); no_overlap = WS + pingpong; "
                        "plain = WS only; no_ws = overlap, no WS (and no pingpong)")
        cells = {}
        for r in _records(out_dir, j):
            if r["kind"] == "time":
                key = (r["d"], r["causal"], r["seqlen"], r["batch"], r["heads"])
                cells.setdefault(key, {}).setdefault(r["impl"], []).append(r["tflops"])
        for (d, causal, s, b, h), t in cells.items():
            best = {n: max(v) for n, v in t.items()}
            fa3, cu, df = best.get("fa3"), best.get("cudnn"), best.get("default")
            rows.append(f"[{j}] d={d} {'causal' if causal else 'full  '} s={s:5d} b={b} h={h}: "
                        f"FA3 {fa3 or float('nan'):.0f}  cuDNN {cu or float('nan'):.0f}")
            for n, v in best.items():
                if n in ("fa3", "cudnn"):
                    continue
                spread = (max(t[n]) - min(t[n])) / min(t[n]) if len(t[n]) > 1 else float("nan")
                rows.append(f"    {n:22s} {v:6.1f}  x{v / fa3 if fa3 else float('nan'):.2f} FA3  "
                            f"x{v / cu if cu else float('nan'):.2f} cuDNN  "
                            f"x{v / df if df else float('nan'):.3f} default  "
                            f"({len(t[n])} runs, spread {spread:.1%})")
        for r in _records(out_dir, j):
            if r["kind"] == "diag":
                for n, x in r["impls"].items():
                    rows.append(f"  diag d={r['d']} causal={int(r['causal'])} s={r['seqlen']} "
                                f"{n:8s} "
                                + " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                           for k, v in x.items()))
    return "\n".join(rows)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?", default=os.environ.get("OUT", os.path.join(ROOT, "out",
                                                                                 "hopper_dev2")))
    ap.add_argument("--worker")
    ap.add_argument("--budget", type=float, default=270.0)
    ap.add_argument("--jobs", default=",".join(JOBS))
    ap.add_argument("--no-precompile", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.worker:
        return worker(a.worker, a.out)
    t0 = time.time()
    jobs = [j for j in a.jobs.split(",") if j]
    bad = [j for j in jobs if j not in JOBS]
    if bad:
        ap.error(f"unknown jobs {bad}; choose from {list(JOBS)}")
    status = {}
    if not a.no_precompile:
        # compile every kernel of the run in parallel processes (forward(_warmup=True): triton's
        # on-disk cache); a job then only loads them. Nothing is launched here.
        specs = compile_specs(jobs)
        chunks = [specs[i::PRECOMPILE_PROCS] for i in range(PRECOMPILE_PROCS)]
        logs = [open(os.path.join(a.out, f"precompile{i}.log"), "w") for i in range(len(chunks))]
        procs = [subprocess.Popen([sys.executable, "-u", os.path.abspath(__file__), a.out,
                                   "--worker", "compile:" + json.dumps(c)], stdout=lf,
                                  stderr=subprocess.STDOUT, cwd=ROOT)
                 for c, lf in zip(chunks, logs) if c]
        deadline = time.time() + PRECOMPILE_TIMEOUT
        for p in procs:
            try:
                p.wait(timeout=max(1.0, deadline - time.time()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for lf in logs:
            lf.close()
        text = "".join(open(os.path.join(a.out, f"precompile{i}.log")).read()
                       for i in range(len(chunks)))
        status["precompile"] = (f"{text.count('compiled ')}/{len(specs)} kernels compiled, "
                                f"{text.count('FAILED')} failed, in {time.time() - t0:.0f}s")
        print(f"=== precompile: {status['precompile']}", flush=True)
    for j in jobs:
        left = a.budget - (time.time() - t0)
        share = min(JOBS[j][0], left)
        if share < 20:
            status[j] = f"skipped ({left:.0f}s left)"
            print(f"=== {j}: {status[j]}", flush=True)
            continue
        print(f"=== {j} (timeout {share:.0f}s, {time.time() - t0:.0f}s elapsed) ===", flush=True)
        t1 = time.time()
        with open(os.path.join(a.out, f"{j}.log"), "w") as lf:
            try:
                p = subprocess.run([sys.executable, "-u", os.path.abspath(__file__), a.out,
                                    "--worker", j], stdout=lf, stderr=subprocess.STDOUT, cwd=ROOT,
                                   timeout=share)
                status[j] = f"rc={p.returncode} in {time.time() - t1:.0f}s"
            except subprocess.TimeoutExpired:
                status[j] = f"TIMEOUT after {share:.0f}s (hang or too slow; records so far kept)"
        print(f"=== {j}: {status[j]}", flush=True)
    summary = dict(status=status, wall_s=time.time() - t0,
                   records={j: _records(a.out, j) for j in jobs})
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print("\n# summary (TFLOP/s; FA3, cuDNN and default timed in the same process)")
    try:
        print(summarize(a.out, jobs, status))
    except Exception:  # noqa: BLE001 - the records are in summary.json either way
        traceback.print_exc()
    print(f"wall {time.time() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
