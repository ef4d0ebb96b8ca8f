"""Tune the portable Triton kernels' tiles on one GPU (H100/H200), within a time budget.

    PYTHONUNBUFFERED=1 python3 scripts/triton_tune.py OUT_DIR [--budget 330]

For every (pass, head_dim, causal) cell, pass one of fwd / dkdv / dq, it takes the production tile
and the candidates of fusedattn/kernels/triton_configs.py (TUNE_CANDIDATES, all compiled spill-free
for sm_90a; --include-spilling adds KNOWN_SPILLING) and:

  1. checks each one against the float64 oracle on small slices (batch 1, ragged seqlens 1040/1104
     so that every tile has a masked tail, seqlen_q < and > seqlen_k when causal): error <= 2 x the
     plain-PyTorch bf16 error + floor, as tests/test_triton_kernels.py, outputs NaN-filled first.
     The checks run in --workers subprocesses at once (default: one per CPU core, at most 16), so
     that the Triton compiles run in parallel; they fill Triton's on-disk cache, and the timing
     process below finds every kernel compiled (the slices have the timing shapes'
     specialisation: seqlens and head counts divisible by 16, one query head per kv head);
  2. times those that passed at the paper-grid shapes (bf16, batch x seqlen = 16384,
     heads x head_dim = 2048; seqlen 2048 and 8192): median of triton.testing.do_bench, in one
     process, beside the production tile and PyTorch SDPA's flash and cuDNN backends. A dkdv or
     dq candidate is timed as the whole backward (preprocess + dK/dV + dQ) with the other kernel
     at its production tile; the best dkdv + best dq pair is then timed as well. Backward timings
     of the Triton kernels call triton_bwd.backward directly; SDPA's go through autograd.

FLOPs: forward 4·B·H·S²·D, halved when causal; backward 2.5 x the forward. The stage-1 checks get
at most 40% of the budget; the timings stop when the budget runs out (cells in priority order:
head_dim 128 at seqlen 8192 first) and the JSON is rewritten after every cell, so a stopped run
still leaves its results. Nothing here changes what ships: a tile that wins is moved into
triton_configs.py by hand, after the GPU grid (tests/test_triton_kernels.py) passes with it.

Outputs in OUT_DIR: triton_tune.json (checks, timings, per-cell winners), triton_tune.md (the
printed summary), checks.log (the check workers' stderr).

CPU-only modes (no GPU needed):
    python scripts/triton_tune.py OUT_DIR --compile-report   # sm_90a registers/spills/smem table
    python scripts/triton_tune.py OUT_DIR --dry-run          # the whole flow, interpreter, tiny
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import subprocess
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
if "--dry-run" in sys.argv:  # before any kernel module is imported
    os.environ["TRITON_INTERPRET"] = "1"

TOKENS = 16384        # batch x seqlen
WIDTH = 2048          # heads x head_dim
HEAD_DIMS = (128, 64, 256)
SEQLENS = (8192, 2048)
PASSES = ("fwd", "dkdv", "dq")
CHECK_FRACTION = 0.4  # of the budget, at most, for stage 1
# Correctness slices (seqlen_q, seqlen_k): multiples of 16 (the timing shapes' specialisation),
# of no tile size above 16 (every tile gets a ragged, masked tail).
SLICES = {False: [(1040, 1040), (1040, 1104)],
          True: [(1040, 1040), (1040, 1104), (1104, 1040)]}
DRY_SLICES = {False: [(48, 80)], True: [(48, 80), (80, 48)]}
FLOORS = {"out": 1e-3, "lse": 1e-4, "dq": 2e-3, "dk": 2e-3, "dv": 2e-3}


def slice_heads(head_dim: int, dry: bool = False) -> int:
    """Heads of a check slice: 16 (or 8 at head_dim 256, as the timing shape's 8 heads)."""
    if dry:
        return 2
    return min(16, WIDTH // head_dim)


def tile_key(tile) -> list:
    return [tile.block_m, tile.block_n, tile.num_warps, tile.num_stages, tile.block_n_masked]


def tile_from_key(key):
    from fusedattn.kernels.triton_configs import Tile
    return Tile(*key)


def cell_jobs(head_dims, passes, include_spilling):
    """[(pass, head_dim, causal, tile_key, is_default)]: every cell's production tile first (the
    candidates of the backward passes reuse the other kernel's production build), then the
    candidates, in head_dims order."""
    from fusedattn.kernels.triton_configs import tune_candidates
    jobs = []
    for d in head_dims:
        for causal in (False, True):
            for p in passes:
                for i, tile in enumerate(tune_candidates(p, d, causal, include_spilling)):
                    jobs.append((p, d, causal, tile_key(tile), i == 0))
    return sorted(jobs, key=lambda j: not j[4])  # stable: defaults first, order kept


# ------------------------------------------------------------------------------------------------
# stage 1: correctness on small slices (worker subprocesses)
# ------------------------------------------------------------------------------------------------
def plain_attention(q, k, v, causal, scale):
    """Plain PyTorch attention in the inputs' dtype (the tests' yardstick of rounding error)."""
    from fusedattn.reference import attention_plain
    return attention_plain(q, k, v, causal, scale)


def _finite(x):
    import torch
    return torch.where(torch.isfinite(x), x, torch.zeros_like(x))


def _max_err(x, ref):
    return (x.double() - ref.double()).abs().max().item() if x.numel() else 0.0


class SliceCache:
    """Inputs, oracle and plain-PyTorch results of the check slices, built once per worker."""

    def __init__(self, device, dry):
        self.device, self.dry, self.cache = device, dry, {}

    def get(self, head_dim, causal, seqlens, backward):
        key = (head_dim, causal, seqlens, backward)
        if key in self.cache:
            return self.cache[key]
        import torch
        from fusedattn.reference import attention_oracle
        sq, sk = seqlens
        h = slice_heads(head_dim, self.dry)
        g = torch.Generator(device=self.device).manual_seed(1234 + head_dim + sq + 7 * sk)
        q, k, v = (torch.randn(1, s, h, head_dim, device=self.device, dtype=torch.bfloat16,
                               generator=g) for s in (sq, sk, sk))
        scale = head_dim ** -0.5
        entry = {"q": q, "k": k, "v": v, "scale": scale}
        if not backward:
            entry["ref"] = attention_oracle(q, k, v, causal, scale)
            entry["plain"] = plain_attention(q, k, v, causal, scale)
        else:
            dout = torch.randn(q.shape, device=self.device, dtype=torch.bfloat16, generator=g)

            def grads(fn, dtype):
                leaves = [t.detach().to(dtype).requires_grad_() for t in (q, k, v)]
                o, _ = fn(*leaves, causal, scale)
                return torch.autograd.grad((o * dout.to(o.dtype)).sum(), leaves)

            ref_out, ref_lse = attention_oracle(q, k, v, causal, scale)
            entry.update(dout=dout, out=ref_out.to(torch.bfloat16), lse=ref_lse.float(),
                         ref=grads(attention_oracle, torch.float64),
                         plain=grads(plain_attention, torch.bfloat16))
        # Keep only this cell's slices: GPU memory stays low.
        self.cache = {k_: v_ for k_, v_ in self.cache.items() if k_[:2] == key[:2]}
        self.cache[key] = entry
        return entry


def check_job(job, slices: SliceCache) -> dict:
    """Run one candidate on every slice of its cell; returns {'ok', 'errors', ...}."""
    import torch
    from fusedattn.kernels import triton_bwd, triton_fwd
    from fusedattn.kernels.triton_configs import backward_config
    p, d, causal, key, _ = job
    tile = tile_from_key(key)
    worst = {}
    failures = []
    for seqlens in (DRY_SLICES if slices.dry else SLICES)[causal]:
        e = slices.get(d, causal, tuple(seqlens), p != "fwd")
        if p == "fwd":
            out, lse = triton_fwd.forward(e["q"], e["k"], e["v"], causal, e["scale"], config=tile)
            ref_out, ref_lse = e["ref"]
            plain_out, plain_lse = e["plain"]
            if not torch.equal(torch.isneginf(lse), torch.isneginf(ref_lse)):
                failures.append(f"{seqlens}: lse -inf rows differ")
            got = {"out": (out, plain_out, ref_out),
                   "lse": (_finite(lse), _finite(plain_lse), _finite(ref_lse))}
        else:
            default = backward_config(d, causal)
            cfg = dataclasses.replace(default, **{p: tile})
            grads = triton_bwd.backward(e["dout"], e["q"], e["k"], e["v"], e["out"], e["lse"],
                                        causal, e["scale"], config=cfg)
            got = {n: (g, pl, r) for n, g, pl, r in zip(("dq", "dk", "dv"), grads, e["plain"],
                                                        e["ref"])}
        for name, (g, plain, ref) in got.items():
            if torch.isnan(g).any():
                failures.append(f"{seqlens} {name}: NaN")
                continue
            err, base = _max_err(g, ref), _max_err(plain, ref)
            limit = 2.0 * base + FLOORS[name]
            worst[name] = max(worst.get(name, 0.0), err / limit)
            if err > limit:
                failures.append(f"{seqlens} {name}: error {err:.3e} > 2 x {base:.3e} + "
                                f"{FLOORS[name]:g}")
    return {"ok": not failures, "failures": failures,
            "worst_error_over_limit": {k: round(v, 4) for k, v in worst.items()}}


def worker_main(jobs_file: str, dry: bool) -> None:
    """Stage-1 worker: one JSON line on stdout per job."""
    import torch
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True  # unwritten outputs read NaN
    device = "cpu" if dry else "cuda"
    slices = SliceCache(device, dry)
    with open(jobs_file) as f:
        jobs = json.load(f)
    for job in jobs:
        t0 = time.time()
        try:
            res = check_job(job, slices)
        except Exception as exc:  # a candidate that fails to compile or launch fails its check
            res = {"ok": False, "failures": [f"{type(exc).__name__}: {str(exc)[-600:]}"]}
            traceback.print_exc()
        res["seconds"] = round(time.time() - t0, 2)
        print(json.dumps({"job": job, **res}), flush=True)


def run_checks(jobs, workers, deadline, out_dir, dry):
    """Stage 1: the jobs spread over ``workers`` subprocesses; returns {job_id: result}."""
    # Interleave so that every worker gets some of each cell and the priority cells go first.
    chunks = [jobs[i::workers] for i in range(workers)]
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")  # one core a worker: the compiles share the CPUs
    if dry:
        env["TRITON_INTERPRET"] = "1"
    else:
        env.pop("TRITON_INTERPRET", None)
    procs = []
    log = open(os.path.join(out_dir, "checks.log"), "w")
    for i, chunk in enumerate(chunks):
        if not chunk:
            continue
        jobs_file = os.path.join(out_dir, f".check_jobs_{i}.json")
        out_file = os.path.join(out_dir, f".check_out_{i}.jsonl")
        with open(jobs_file, "w") as f:
            json.dump(chunk, f)
        stdout = open(out_file, "w")
        proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), out_dir, "--worker",
                                 jobs_file] + (["--dry-run"] if dry else []),
                                cwd=ROOT, env=env, stdout=stdout, stderr=log)
        procs.append((proc, stdout, out_file, jobs_file))
    while any(p.poll() is None for p, *_ in procs) and time.time() < deadline:
        time.sleep(0.5)
    results = {}
    for proc, stdout, out_file, jobs_file in procs:
        if proc.poll() is None:  # out of time: its unfinished jobs count as unchecked
            proc.kill()
            proc.wait()
        stdout.close()
        with open(out_file) as f:
            for line in f:
                try:
                    r = json.loads(line)
                except json.JSONDecodeError:
                    continue
                results[job_id(r.pop("job"))] = r
        os.remove(out_file)
        os.remove(jobs_file)
    log.close()
    return results


def job_id(job) -> str:
    p, d, causal, key, _ = job
    return f"{p}/d{d}/{'causal' if causal else 'full'}/{tile_from_key(key)}"


# ------------------------------------------------------------------------------------------------
# stage 2: timing (this process)
# ------------------------------------------------------------------------------------------------
def tflops(flops, ms):
    return flops / ms / 1e9


class Timer:
    """do_bench medians with a hard stop at the deadline (dry run: one wall-clock call)."""

    def __init__(self, deadline, dry):
        self.deadline, self.dry = deadline, dry

    def left(self):
        return self.deadline - time.time()

    def __call__(self, fn) -> dict:
        import torch
        if self.left() < 3.0:
            return {"skipped": "budget"}
        try:
            t0 = time.time()
            fn()  # compiles on a cache miss; timed apart so that a miss shows
            if not self.dry:
                torch.cuda.synchronize()
            first = time.time() - t0
            if self.dry:
                t0 = time.time()
                fn()
                ms = (time.time() - t0) * 1e3
            else:
                import triton.testing
                rep = 100 if self.left() > 60 else 40
                ms = triton.testing.do_bench(fn, warmup=25, rep=rep, return_mode="median")
            return {"ms": ms, "first_call_s": round(first, 3)}
        except Exception as exc:  # recorded, never hidden
            return {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}


def time_cell(head_dim, causal, seqlen, passes, passed, timer, dry):
    """Time one (head_dim, causal, seqlen): every pass's passing tiles, SDPA flash and cuDNN."""
    import torch
    import torch.nn.functional as F
    from fusedattn.kernels import triton_bwd, triton_fwd
    from fusedattn.kernels.triton_configs import backward_config

    device = "cpu" if dry else "cuda"
    if dry:
        batch, heads = 1, 2
    else:
        batch, heads = TOKENS // seqlen, WIDTH // head_dim
    scale = head_dim ** -0.5
    q, k, v, dout = (torch.randn(batch, seqlen, heads, head_dim, device=device,
                                 dtype=torch.bfloat16) for _ in range(4))
    fwd_flops = 4 * batch * heads * seqlen * seqlen * head_dim / (2 if causal else 1)
    flops = {"fwd": fwd_flops, "bwd": 2.5 * fwd_flops}
    cell = {"head_dim": head_dim, "causal": causal, "seqlen": seqlen, "batch": batch,
            "heads": heads, "triton": {}, "sdpa": {}}

    def record(kind, label, res, pass_):
        if "ms" in res:
            res["tflops"] = round(tflops(flops["fwd" if pass_ == "fwd" else "bwd"], res["ms"]), 1)
            res["ms"] = round(res["ms"], 4)
        cell[kind].setdefault(pass_, {})[label] = res

    default_bwd = backward_config(head_dim, causal)
    out, lse = triton_fwd.forward(q, k, v, causal, scale)
    memo = {}  # the production backward is both the dkdv and the dq baseline: timed once

    def timed(key, fn):
        if key not in memo:
            memo[key] = timer(fn)
        return dict(memo[key])

    def bwd_with(cfg):
        return lambda: triton_bwd.backward(dout, q, k, v, out, lse, causal, scale, config=cfg)

    for p in passes:
        for tile in passed.get(p, []):
            if p == "fwd":
                res = timed(("fwd", tile), lambda t=tile: triton_fwd.forward(q, k, v, causal, scale,
                                                                             config=t))
            else:
                cfg = dataclasses.replace(default_bwd, **{p: tile})
                res = timed(cfg, bwd_with(cfg))
            record("triton", str(tile), res, p)
    # The best dK/dV with the best dQ, when both differ from production.
    if "dkdv" in passes and "dq" in passes:
        best = {p: best_of(cell["triton"].get(p, {})) for p in ("dkdv", "dq")}
        if all(best.values()):
            tiles = {p: next(t for t in passed[p] if str(t) == best[p][0]) for p in best}
            cfg = dataclasses.replace(default_bwd, **tiles)
            if cfg != default_bwd:
                record("triton", f"dkdv {tiles['dkdv']} + dq {tiles['dq']}",
                       timed(cfg, bwd_with(cfg)), "bwd_pair")
    # PyTorch SDPA in its own (batch, heads, seqlen, head_dim) layout.
    if not dry:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        qt, kt, vt = (t.transpose(1, 2).contiguous().requires_grad_() for t in (q, k, v))
        dot = dout.transpose(1, 2).contiguous()
        for label, backend in (("flash", SDPBackend.FLASH_ATTENTION),
                               ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            def fwd(backend=backend):
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
            if "fwd" in passes:
                record("sdpa", label, timer(fwd), "fwd")
            if "dkdv" in passes or "dq" in passes:
                try:
                    o = fwd()
                    res = timer(lambda o=o: torch.autograd.grad(o, (qt, kt, vt), dot,
                                                                retain_graph=True))
                except Exception as exc:
                    res = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
                record("sdpa", label, res, "bwd")
            torch.cuda.synchronize()
    del q, k, v, dout, out, lse
    if not dry:
        torch.cuda.empty_cache()
    return cell


def best_of(results: dict):
    """(label, result) of the fastest timed entry, or None."""
    timed = [(r["ms"], label, r) for label, r in results.items() if "ms" in r]
    if not timed:
        return None
    ms, label, r = min(timed)
    return label, r


def summarise_cell(cell, defaults) -> list[str]:
    lines = []
    tag = (f"d{cell['head_dim']} {'causal' if cell['causal'] else 'full  '} "
           f"S={cell['seqlen']:<5}")
    sdpa_pass = {"fwd": "fwd", "dkdv": "bwd", "dq": "bwd", "bwd_pair": "bwd"}
    for p, results in cell["triton"].items():
        dflt = results.get(str(defaults[p])) if p != "bwd_pair" else \
            cell["triton"].get("dkdv", {}).get(str(defaults["dkdv"]))
        best = best_of(results)
        sd = cell["sdpa"].get(sdpa_pass[p], {})
        ref = "  ".join(f"{n} {sd[n]['tflops']:.0f}" if "tflops" in sd.get(n, {}) else
                        f"{n} {next(iter(sd.get(n, {'-': ''})))}" for n in ("flash", "cudnn"))
        d_txt = f"{dflt['tflops']:.0f}" if dflt and "tflops" in dflt else "n/a"
        if best:
            gain = (f" ({(dflt['ms'] / best[1]['ms'] - 1) * 100:+.1f}%)"
                    if dflt and "ms" in dflt else "")
            b_txt = f"{best[0]} {best[1]['tflops']:.0f}{gain}"
        else:
            b_txt = "nothing timed"
        lines.append(f"{p:8} {tag}  default {d_txt:>4} | best {b_txt} | {ref}  TFLOP/s")
    return lines


def cell_defaults(head_dim, causal):
    from fusedattn.kernels.triton_configs import backward_config, forward_config
    b = backward_config(head_dim, causal)
    return {"fwd": forward_config(head_dim, causal), "dkdv": b.dkdv, "dq": b.dq}


def winners(cells, passes):
    """Per (pass, head_dim, causal): the tile with the best geometric-mean speed-up over the
    production tile across the timed seqlens (only tiles timed at every one of them)."""
    out = {}
    groups = {}
    for c in cells:
        groups.setdefault((c["head_dim"], c["causal"]), []).append(c)
    for (d, causal), cs in groups.items():
        defaults = cell_defaults(d, causal)
        for p in passes:
            ratios = {}
            for c in cs:
                res = c["triton"].get(p, {})
                base = res.get(str(defaults[p]), {}).get("ms")
                for label, r in res.items():
                    if base and "ms" in r:
                        ratios.setdefault(label, []).append(base / r["ms"])
            full = {lbl: r for lbl, r in ratios.items() if len(r) == len(cs)}
            if not full:
                continue
            gm = {lbl: math.exp(sum(map(math.log, r)) / len(r)) for lbl, r in full.items()}
            label = max(gm, key=gm.get)
            out[f"{p}/d{d}/{'causal' if causal else 'full'}"] = {
                "default": str(defaults[p]), "best": label, "speedup": round(gm[label], 4),
                "seqlens": [c["seqlen"] for c in cs]}
    return out


# ------------------------------------------------------------------------------------------------
# CPU: sm_90a compile reports of the candidates
# ------------------------------------------------------------------------------------------------
def compile_spec(p, head_dim, causal, tile, dtype_name="bfloat16"):
    import torch
    from fusedattn.kernels import triton_bwd, triton_fwd
    from fusedattn.kernels.triton_configs import backward_config
    dtype = getattr(torch, dtype_name)
    if p == "fwd":
        return triton_fwd.compile_specs(head_dim, dtype, causal, tile)[0]
    cfg = dataclasses.replace(backward_config(head_dim, causal), **{p: tile})
    return triton_bwd.compile_specs(head_dim, dtype, causal, cfg)[1 if p == "dkdv" else 2]


def compile_worker_main(jobs_file):
    from fusedattn.kernels.triton_common import ptxas_report
    with open(jobs_file) as f:
        jobs = json.load(f)
    for job in jobs:
        p, d, causal, key, _ = job
        try:
            spec = compile_spec(p, d, causal, tile_from_key(key))
            r = dataclasses.asdict(ptxas_report(p, spec.compile()))
        except Exception as exc:
            r = {"error": f"{type(exc).__name__}: {str(exc)[-400:]}"}
        print(json.dumps({"job": job, **r}), flush=True)


def compile_reports(jobs, workers=2, tmp_dir=None):
    """sm_90a ptxas reports of ``jobs`` (cell_jobs entries), compiled in ``workers`` processes
    without TRITON_INTERPRET. Returns {job_id: report dict}."""
    import tempfile
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    procs = []
    with tempfile.TemporaryDirectory(dir=tmp_dir) as tmp:
        for i in range(workers):
            chunk = jobs[i::workers]
            if not chunk:
                continue
            path = os.path.join(tmp, f"jobs_{i}.json")
            with open(path, "w") as f:
                json.dump(chunk, f)
            procs.append(subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), tmp, "--compile-worker", path],
                cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        reports = {}
        for proc in procs:
            out, err = proc.communicate()
            if proc.returncode != 0:
                raise RuntimeError(f"compile worker failed:\n{err[-4000:]}")
            for line in out.splitlines():
                r = json.loads(line)
                job = r.pop("job")
                reports[job_id(job)] = {"job": job, **r}
    return reports


def format_report(jid, r) -> str:
    if "error" in r:
        return f"{jid:40} ERROR {r['error'][:120]}"
    default = " (production)" if r["job"][4] else ""
    return (f"{jid:40} {r['registers']:3} regs  spill {r['spill_stores']}+{r['spill_loads']}  "
            f"smem {r['shared'] / 1024:5.1f} KiB  wgmma {'yes' if r['uses_wgmma'] else 'no '}"
            f"{default}")


# ------------------------------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--budget", type=float, default=330.0,
                    help="seconds for the whole run, compiles included (default 330)")
    ap.add_argument("--head-dims", default=",".join(map(str, HEAD_DIMS)))
    ap.add_argument("--seqlens", default=",".join(map(str, SEQLENS)))
    ap.add_argument("--passes", default=",".join(PASSES))
    ap.add_argument("--causal", choices=("both", "full", "causal"), default="both")
    ap.add_argument("--workers", type=int, default=min(16, os.cpu_count() or 1))
    ap.add_argument("--include-spilling", action="store_true",
                    help="also check and time KNOWN_SPILLING tiles")
    ap.add_argument("--compile-report", action="store_true",
                    help="CPU: compile every candidate for sm_90a and print registers/spills")
    ap.add_argument("--dry-run", action="store_true",
                    help="CPU: the whole flow on tiny shapes in Triton's interpreter")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--compile-worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker_main(args.worker, args.dry_run)
    if args.compile_worker:
        return compile_worker_main(args.compile_worker)

    t_start = time.time()
    deadline = t_start + args.budget
    os.makedirs(args.out_dir, exist_ok=True)
    head_dims = [int(x) for x in args.head_dims.split(",")]
    seqlens = [int(x) for x in args.seqlens.split(",")]
    passes = [p for p in args.passes.split(",") if p]
    assert set(passes) <= set(PASSES), passes
    causals = {"both": (False, True), "full": (False,), "causal": (True,)}[args.causal]
    jobs = [j for j in cell_jobs(head_dims, passes, args.include_spilling) if j[2] in causals]

    if args.compile_report:
        reports = compile_reports(jobs, workers=args.workers)
        lines = [format_report(jid, r) for jid, r in reports.items()]
        print("\n".join(sorted(lines)))
        with open(os.path.join(args.out_dir, "triton_tune_compile.json"), "w") as f:
            json.dump(reports, f, indent=1)
        return

    import torch
    import triton
    if args.dry_run:
        os.environ["TRITON_INTERPRET"] = "1"
    elif not torch.cuda.is_available():
        sys.exit("needs a CUDA GPU (or --dry-run / --compile-report on the CPU)")
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "argv": sys.argv[1:], "torch": torch.__version__, "triton": triton.__version__,
            "gpu": None if args.dry_run else torch.cuda.get_device_name(),
            "cudnn": torch.backends.cudnn.version(), "budget_s": args.budget,
            "shapes": "bf16, batch x seqlen = 16384, heads x head_dim = 2048",
            "flops": "fwd 4*B*H*S^2*D (/2 causal), bwd 2.5 x fwd"}
    result = {"meta": meta, "checks": {}, "cells": [], "winners": {}, "stopped": None}
    json_path = os.path.join(args.out_dir, "triton_tune.json")

    def save():
        result["elapsed_s"] = round(time.time() - t_start, 1)
        tmp = json_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(result, f, indent=1)
        os.replace(tmp, json_path)

    # Stage 1: correctness (and, as a side effect, every compile) in parallel workers.
    print(f"[tune] stage 1: {len(jobs)} tiles checked in {args.workers} workers", flush=True)
    check_deadline = min(deadline, t_start + CHECK_FRACTION * args.budget)
    checks = run_checks(jobs, args.workers, check_deadline, args.out_dir, args.dry_run)
    for j in jobs:
        jid = job_id(j)
        result["checks"][jid] = checks.get(jid, {"ok": False, "failures": ["not checked: budget"]})
    n_ok = sum(r["ok"] for r in result["checks"].values())
    print(f"[tune] stage 1 done in {time.time() - t_start:.0f} s: {n_ok}/{len(jobs)} passed",
          flush=True)
    for jid, r in result["checks"].items():
        if not r["ok"]:
            print(f"[tune]   FAILED {jid}: {'; '.join(r['failures'])[:300]}", flush=True)
    save()

    # Stage 2: timing, in priority order (head_dim 128 at the longest seqlen first).
    timer = Timer(deadline, args.dry_run)
    summary = []
    cells = [(d, s, c) for s in seqlens for d in head_dims for c in causals]
    for d, s, causal in cells:
        if timer.left() < 10:
            result["stopped"] = f"budget: stopped before d{d} S={s} causal={causal}"
            print(f"[tune] {result['stopped']}", flush=True)
            break
        # Production tiles, verified by the GPU grid, are timed unless their check failed.
        passed = {p: [tile_from_key(j[3]) for j in jobs
                      if j[:3] == (p, d, causal) and (result["checks"][job_id(j)]["ok"] or (
                          j[4] and job_id(j) not in checks))]
                  for p in passes}
        try:
            cell = time_cell(d, causal, s, passes, passed, timer, args.dry_run)
        except Exception as exc:  # one broken cell must not cost the others
            traceback.print_exc()
            result.setdefault("cell_errors", []).append(
                {"head_dim": d, "seqlen": s, "causal": causal,
                 "error": f"{type(exc).__name__}: {str(exc)[:500]}"})
            save()
            continue
        result["cells"].append(cell)
        lines = summarise_cell(cell, cell_defaults(d, causal))
        summary += lines
        print("\n".join(lines), flush=True)
        result["winners"] = winners(result["cells"], passes)
        save()
    else:
        result["stopped"] = None

    text = [f"# Triton tuning, {meta['date']}, {meta['gpu']}, torch {meta['torch']}, "
            f"triton {meta['triton']}",
            f"{meta['shapes']}; TFLOP/s (do_bench median); {meta['flops']}",
            f"checks: {n_ok}/{len(jobs)} tiles passed; elapsed {time.time() - t_start:.0f} s"
            f"{'; ' + result['stopped'] if result['stopped'] else ''}", "", *summary, "",
            "winners (geometric-mean speed-up over production across seqlens):"]
    for key, w in result["winners"].items():
        mark = "" if w["best"] == w["default"] else "   <- candidate for triton_configs.py"
        text.append(f"  {key:18} {w['default']:>14} -> {w['best']:<14} x{w['speedup']:.3f}{mark}")
    save()
    with open(os.path.join(args.out_dir, "triton_tune.md"), "w") as f:
        f.write("\n".join(text) + "\n")
    print("\n".join(text[-len(result['winners']) - 1:]), flush=True)


if __name__ == "__main__":
    main()
