"""Shared pieces of the benchmark: the grid, FLOP counts, the float64 references, error measures,
the pass rule, timers, the environment record and JSON input/output.

Everything here runs on any device; nothing is timed or compared on zeros.
"""

from __future__ import annotations

import datetime
import gc
import hashlib
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

# --- the grid (FlashAttention-3 paper, section 4.1) -------------------------------------------

TOKENS = 16384          # batch * seqlen
HIDDEN = 2048           # heads * head_dim
HDIMS = (64, 128, 256)
SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
PASSES = ("fwd", "bwd")

# --quick: every head_dim, both masks, both passes, at the two seqlens where the anchors file has
# FlexAttention figures too. 12 shapes instead of 36.
QUICK_HDIMS = (64, 128, 256)
QUICK_SEQLENS = (2048, 8192)

# do_bench arguments, in milliseconds of GPU time (warm-up, then repeated runs).
# each implementation's own warm-up right before each of its timings (do_bench's warm-up): under
# the H200's power limit a kernel's clock depends on what ran in the last ~0.5 s, so each is timed
# after 300 ms of itself (device run 43, scripts/timing_protocols.py: round-to-round spread <= 7%,
# against <= 14% after a shared warm-up; 1000 ms gave <= 4% at three times the cost)
WARMUP_MS = 300
REP_MS = 100

# The pass rule against the float64 oracle: error <= FACTOR x (plain PyTorch's error) + FLOOR.
PASS_FACTOR = 2.0
PASS_FLOOR = 1e-3

SCHEMA = "fusedattn.bench/1"


def grid_shape(seqlen: int, head_dim: int, tokens: int = TOKENS, hidden: int = HIDDEN) -> tuple[int, int]:
    """(batch, heads) of a grid cell: batch * seqlen = tokens, heads * head_dim = hidden."""
    return max(1, tokens // seqlen), max(1, hidden // head_dim)


def visible_pairs(seqlen_q: int, seqlen_k: int, causal: bool) -> float:
    """(query, key) pairs that are computed. Causal with seqlen_q == seqlen_k counts S*S/2, the
    FlashAttention convention (the diagonal's extra S/2 is ignored); other causal shapes count the
    visible pairs of the bottom-right-aligned mask exactly."""
    if not causal:
        return float(seqlen_q * seqlen_k)
    if seqlen_q == seqlen_k:
        return seqlen_q * seqlen_k / 2.0
    off = seqlen_k - seqlen_q
    return float(sum(min(seqlen_k, max(0, i + off + 1)) for i in range(seqlen_q)))


def attention_flops(batch: int, heads: int, seqlen_q: int, seqlen_k: int, head_dim: int,
                    causal: bool, pass_: str = "fwd") -> float:
    """Forward: 4 * B * H * Sq * Sk * D (two matrix products), halved when causal; backward: 2.5x."""
    f = 4.0 * batch * heads * head_dim * visible_pairs(seqlen_q, seqlen_k, causal)
    return 2.5 * f if pass_ == "bwd" else f


def tflops(flops: float, ms: float) -> float:
    return flops / (ms * 1e-3) / 1e12


def seqlen_label(s: int) -> str:
    return f"{s // 1024}k" if s >= 1024 and s % 1024 == 0 else str(s)


# --- inputs ---------------------------------------------------------------------------------

def normal_inputs(shape, dtype, device, outliers: bool = False, generator=None) -> torch.Tensor:
    """N(0, 1); with ``outliers`` plus N(0, 100) (std 10) on a Bernoulli(0.001) subset of entries."""
    x = torch.randn(shape, dtype=torch.float32, device=device, generator=generator)
    if outliers:
        mask = torch.rand(shape, device=device, generator=generator) < 1e-3
        x = x + 10.0 * torch.randn(shape, dtype=torch.float32, device=device, generator=generator) * mask
    return x.to(dtype)


FP8 = getattr(torch, "float8_e4m3fn", None)


def to_fp8(x: torch.Tensor) -> torch.Tensor:
    """Cast to float8 e4m3 (no scaling: normal inputs sit well inside its +-448 range)."""
    if FP8 is None:
        raise RuntimeError("this torch has no float8_e4m3fn")
    return x.to(FP8)


# --- references -----------------------------------------------------------------------------

def causal_allowed(seqlen_q: int, seqlen_k: int, row_start: int, row_end: int, device) -> torch.Tensor:
    """Boolean (rows, seqlen_k): query row i (absolute) may see key j iff j <= i + (Sk - Sq)."""
    rows = torch.arange(row_start, row_end, device=device)[:, None] + (seqlen_k - seqlen_q)
    cols = torch.arange(seqlen_k, device=device)[None, :]
    return cols <= rows


def _chunk_rows(batch: int, heads: int, seqlen_k: int, max_elems: int) -> int:
    return max(1, max_elems // max(1, batch * heads * seqlen_k))


def oracle_chunked(q, k, v, causal: bool, scale: float, max_elems: int = 1 << 26):
    """fusedattn.reference.attention_oracle (float64), called on blocks of query rows so that at most
    ``max_elems`` scores exist at once. Returns (out float64 (b, sq, h, d), lse float64 (b, h, sq)).

    For a causal block of rows [r0, r1) the keys are cut to [0, r1 + Sk - Sq): the oracle's own
    bottom-right alignment on that block then equals the full problem's mask row for row.
    """
    from fusedattn.reference import attention_oracle

    b, sq, h, d = q.shape
    sk = k.shape[1]
    rows = _chunk_rows(b, h, sk, max_elems)
    outs, lses = [], []
    for r0 in range(0, sq, rows):
        r1 = min(sq, r0 + rows)
        if causal:
            kend = min(sk, r1 + (sk - sq))
            if kend <= 0:  # every row of the block sees no key
                outs.append(torch.zeros((b, r1 - r0, h, d), dtype=torch.float64, device=q.device))
                lses.append(torch.full((b, h, r1 - r0), float("-inf"), dtype=torch.float64, device=q.device))
                continue
            o, l = attention_oracle(q[:, r0:r1], k[:, :kend], v[:, :kend], causal=True, softmax_scale=scale)
        else:
            o, l = attention_oracle(q[:, r0:r1], k, v, causal=False, softmax_scale=scale)
        outs.append(o.to(torch.float64))
        lses.append(l.to(torch.float64))
    return torch.cat(outs, dim=1), torch.cat(lses, dim=2)


def oracle_grads_chunked(q, k, v, dout, out64, lse64, causal: bool, scale: float,
                         max_elems: int = 1 << 26):
    """Exact gradients in float64 from the oracle's output and logsumexp, over blocks of query rows.

    P = exp(S*scale - lse); dV = P^T dO; dP = dO V^T; dS = P (dP - rowsum(dO*O));
    dQ = dS K * scale; dK = dS^T Q * scale. dK and dV are summed over each GQA group.
    Returns (dq, dk, dv) float64 shaped like q, k, v.
    """
    f64 = torch.float64
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    g = h // hk
    q, k, v, dout, out64, lse64 = (t.to(f64) for t in (q, k, v, dout, out64, lse64))
    kk = k.repeat_interleave(g, dim=2) if g > 1 else k
    vv = v.repeat_interleave(g, dim=2) if g > 1 else v
    delta = (dout * out64).sum(-1).transpose(1, 2)                      # (b, h, sq)
    lse = torch.where(torch.isfinite(lse64), lse64, torch.full_like(lse64, float("inf")))
    dq = torch.zeros_like(q)
    dk = torch.zeros((b, sk, h, d), dtype=f64, device=q.device)
    dv = torch.zeros((b, sk, h, d), dtype=f64, device=q.device)
    rows = _chunk_rows(b, h, sk, max_elems)
    for r0 in range(0, sq, rows):
        r1 = min(sq, r0 + rows)
        qc, doc = q[:, r0:r1], dout[:, r0:r1]
        s = torch.einsum("bqhd,bkhd->bhqk", qc, kk) * scale
        if causal:
            s = s.masked_fill(~causal_allowed(sq, sk, r0, r1, q.device), float("-inf"))
        p = torch.exp(s - lse[:, :, r0:r1, None])
        dv += torch.einsum("bhqk,bqhd->bkhd", p, doc)
        dp = torch.einsum("bqhd,bkhd->bhqk", doc, vv)
        ds = p * (dp - delta[:, :, r0:r1, None])
        dq[:, r0:r1] = torch.einsum("bhqk,bkhd->bqhd", ds, kk) * scale
        dk += torch.einsum("bhqk,bqhd->bkhd", ds, qc) * scale
        del s, p, dp, ds
    if g > 1:
        dk = dk.view(b, sk, hk, g, d).sum(3)
        dv = dv.view(b, sk, hk, g, d).sum(3)
    return dq, dk, dv


def plain_attention(q, k, v, causal: bool, scale: float) -> torch.Tensor:
    """Attention as a user writes it in plain PyTorch, in the inputs' own dtype (the yardstick of
    honest rounding error): :func:`fusedattn.reference.attention_plain`'s output. Materialises the
    scores: for references on small slices only. (b, s, h, d) layout."""
    from fusedattn.reference import attention_plain
    return attention_plain(q, k, v, causal, scale)[0]


def plain_inputs(q, k, v, family: str):
    """The plain-PyTorch yardstick's inputs for a dtype family: the inputs themselves, or for
    'fp8' the inputs cast to e4m3 and back to bfloat16 (plain PyTorch has no fp8 attention)."""
    if family == "fp8":
        return tuple(to_fp8(t).to(torch.bfloat16) for t in (q, k, v))
    return q, k, v


def plain_grads(q, k, v, dout, causal: bool, scale: float):
    """Gradients of :func:`plain_attention` in the inputs' dtype, through autograd."""
    qg, kg, vg = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    with torch.enable_grad():
        out = plain_attention(qg, kg, vg, causal, scale)
        return torch.autograd.grad(out, (qg, kg, vg), dout)


# --- errors and the pass rule ---------------------------------------------------------------

def err_stats(got: torch.Tensor, ref: torch.Tensor) -> dict:
    """max abs error, RMSE and relative error ||got - ref|| / ||ref||, computed in float64."""
    g = got.detach().to(torch.float64)
    r = ref.detach().to(torch.float64)
    if g.shape != r.shape:
        raise ValueError(f"shape {tuple(g.shape)} differs from the reference's {tuple(r.shape)}")
    finite = bool(torch.isfinite(g).all().item())
    if not finite:
        return {"max_abs": float("inf"), "rmse": float("inf"), "rel": float("inf"), "finite": False}
    diff = g - r
    if diff.numel() == 0:
        return {"max_abs": 0.0, "rmse": 0.0, "rel": 0.0, "finite": True}
    rnorm = r.norm().item()
    dnorm = diff.norm().item()
    return {"max_abs": diff.abs().max().item(), "rmse": math.sqrt(diff.pow(2).mean().item()),
            "rel": dnorm / rnorm if rnorm > 0 else dnorm, "finite": True}


def lse_err(got: torch.Tensor, ref: torch.Tensor) -> float:
    """Max abs error of a logsumexp where the reference is finite (inf where it is not matched)."""
    g = got.detach().to(torch.float64)
    r = ref.detach().to(torch.float64)
    fin = torch.isfinite(r)
    if bool((torch.isfinite(g) != fin).any().item()):
        return float("inf")
    if not bool(fin.any().item()):
        return 0.0
    return (g[fin] - r[fin]).abs().max().item()


def passes_rule(err: dict, plain: dict, factor: float = PASS_FACTOR, floor: float = PASS_FLOOR) -> bool:
    """The pass rule: finite, and max abs error <= factor * plain PyTorch's max abs error + floor."""
    if not err.get("finite", False):
        return False
    return err["max_abs"] <= factor * plain["max_abs"] + floor


# --- timing ---------------------------------------------------------------------------------

def cuda_timer(warmup_ms: float = WARMUP_MS, rep_ms: float = REP_MS):
    """triton.testing.do_bench: CUDA events, warm-up, then median of the repeated runs. do_bench
    zeroes a 256 MB buffer before every timed run (outside the timed region), which flushes the L2
    cache, so the inputs are not rotated. Returns a callable fn -> stats dict."""
    import triton.testing

    def run(fn) -> dict:
        times = triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="all")
        times = sorted(float(t) for t in times)
        return {"ms": statistics.median(times), "ms_p20": _quantile(times, 0.2),
                "ms_p80": _quantile(times, 0.8), "reps": len(times)}
    return run


def cpu_timer(reps: int = 5, warmup: int = 1):
    """Host clock, median of ``reps`` runs after ``warmup`` runs (for the CPU path and tests)."""
    def run(fn) -> dict:
        for _ in range(warmup):
            fn()
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        times.sort()
        return {"ms": statistics.median(times), "ms_p20": _quantile(times, 0.2),
                "ms_p80": _quantile(times, 0.8), "reps": len(times)}
    return run


def _quantile(sorted_vals, q: float) -> float:
    if not sorted_vals:
        return float("nan")
    pos = q * (len(sorted_vals) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(sorted_vals) - 1)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (pos - lo)


def synchronize(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def is_oom(e: BaseException) -> bool:
    oom_type = getattr(torch.cuda, "OutOfMemoryError", None)
    if oom_type is not None and isinstance(e, oom_type):
        return True
    return isinstance(e, RuntimeError) and "out of memory" in str(e).lower()


def free_memory(device) -> None:
    gc.collect()
    if torch.device(device).type == "cuda":
        try:
            torch.cuda.empty_cache()
        except Exception:  # noqa: BLE001 - a broken context is reported by cuda_broken
            pass


def cuda_broken(device) -> str | None:
    """None if the CUDA context still works, else the error text (a sticky error such as an
    illegal memory access poisons every later call in the process)."""
    if torch.device(device).type != "cuda":
        return None
    try:
        torch.cuda.synchronize(device)
        x = torch.ones(4, device=device)
        if float((x + 1).sum().item()) != 8.0:
            return "a trivial kernel gave a wrong result"
        return None
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {e}"


def error_text(e: BaseException, limit: int = 2000) -> str:
    if is_oom(e):
        text = "OOM: " + str(e).splitlines()[0] if str(e) else "OOM"
    else:
        text = f"{type(e).__name__}: {e}"
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- environment ----------------------------------------------------------------------------

def _driver_version() -> str | None:
    try:
        import pynvml  # nvidia-ml-py

        pynvml.nvmlInit()
        v = pynvml.nvmlSystemGetDriverVersion()
        return v.decode() if isinstance(v, bytes) else str(v)
    except Exception:  # noqa: BLE001
        pass
    try:
        res = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        if res.returncode == 0 and res.stdout.strip():
            return res.stdout.strip().splitlines()[0]
    except Exception:  # noqa: BLE001
        pass
    return None


def _git_commit(root: Path | None = None) -> str | None:
    """The project's commit (+dirty), read with git where the project root is a checkout's
    top level; in an export made by `git archive` (no .git of its own, e.g. a copy inside another
    checkout), the commit that `git archive` wrote into fusedattn/_revision.txt (export-subst);
    None when neither says."""
    here = root or Path(__file__).resolve().parents[2]
    try:
        top = subprocess.run(["git", "-C", str(here), "rev-parse", "--show-toplevel"],
                             capture_output=True, text=True, timeout=10)
        if top.returncode == 0 and Path(top.stdout.strip()).resolve() == here.resolve():
            res = subprocess.run(["git", "-C", str(here), "rev-parse", "--short", "HEAD"],
                                 capture_output=True, text=True, timeout=10)
            if res.returncode == 0:
                commit = res.stdout.strip()
                dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain",
                                        "--untracked-files=no"],
                                       capture_output=True, text=True, timeout=10)
                return commit + ("+dirty" if dirty.stdout.strip() else "")
    except Exception:  # noqa: BLE001
        pass
    try:
        rev = (here / "fusedattn" / "_revision.txt").read_text().strip()
    except OSError:
        return None
    return None if not rev or rev.startswith("$Format") else f"{rev} (git archive)"


def source_digest_of(files) -> str:
    """12 hex digits of sha1 over (path, bytes) pairs of the package's .py files, sorted by path
    (paths relative to the project root, as git names them)."""
    h = hashlib.sha1()
    for rel, data in sorted(files):
        h.update(rel.encode() + b"\0" + data + b"\0")
    return h.hexdigest()[:12]


def source_digest(root: Path | None = None) -> str:
    """The digest of the fusedattn/ .py files a run imported (source_digest_of). Unlike the
    commit, it holds where git's view is stale or the tree is dirty (the device's copies of a
    working tree): `python scripts/source_commit.py DIGEST` finds the commit whose files match."""
    here = root or Path(__file__).resolve().parents[2]
    return source_digest_of((p.relative_to(here).as_posix(), p.read_bytes())
                            for p in (here / "fusedattn").rglob("*.py")
                            if "__pycache__" not in p.parts)


def _package_version(name: str) -> str | None:
    try:
        from importlib import metadata
        return metadata.version(name)
    except Exception:  # noqa: BLE001
        return None


def environment(device) -> dict:
    """Who measured what: GPU, driver, torch, Triton, cuDNN, CUDA, Python, date (UTC)."""
    env = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": None,
        "triton": None,
        "fusedattn": None,
        "fusedattn_commit": _git_commit(),
        "fusedattn_source": source_digest(),
        "fa3_fwd": _package_version("fa3-fwd"),
        "device": str(device),
    }
    try:
        env["cudnn"] = torch.backends.cudnn.version()
    except Exception:  # noqa: BLE001
        pass
    try:
        import triton
        env["triton"] = triton.__version__
    except Exception as e:  # noqa: BLE001
        env["triton"] = f"not importable: {e}"
    try:
        import fusedattn
        env["fusedattn"] = getattr(fusedattn, "__version__", "?")
    except Exception as e:  # noqa: BLE001
        env["fusedattn"] = f"not importable: {e}"
    if torch.device(device).type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update({
            "gpu": props.name,
            "capability": f"{props.major}.{props.minor}",
            "sm_count": props.multi_processor_count,
            "gpu_memory_gib": round(props.total_memory / 2**30, 1),
            "l2_mib": round(getattr(props, "L2_cache_size", 0) / 2**20, 1) or None,
            "driver": _driver_version(),
        })
    else:
        env.update({"gpu": None, "driver": None, "cpu": platform.processor() or platform.machine(),
                    "cpu_threads": torch.get_num_threads()})
    return env


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-") or "unknown"


def default_out_dir(env: dict, root: Path | None = None) -> Path:
    """benchmarks/results/<date>-<gpu>/ under the current directory; -2, -3, ... when taken."""
    root = Path(root) if root is not None else Path.cwd() / "benchmarks" / "results"
    base = f"{env['date'][:10]}-{slug(env.get('gpu') or 'cpu')}"
    path = root / base
    n = 2
    while (path / "results.json").exists():
        path = root / f"{base}-{n}"
        n += 1
    return path


# --- JSON -----------------------------------------------------------------------------------

def _clean(x):
    """JSON without NaN/Infinity (written as strings) and with tuples as lists."""
    if isinstance(x, float):
        if math.isnan(x):
            return "nan"
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        return x
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, (torch.dtype, torch.device, Path)):
        return str(x)
    return x


def num(x) -> float | None:
    """A float back from JSON (strings 'inf' / 'nan' included); None if absent."""
    if x is None:
        return None
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def write_json(path: Path, data: dict) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(_clean(data), f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def read_json(path) -> dict:
    with open(path) as f:
        return json.load(f)


def progress_bar(total: int, desc: str):
    """A tqdm bar on stderr; when stderr is not a terminal (a log file, a remote run) it redraws at
    most every 30 s so that the log stays short. None if tqdm is missing."""
    try:
        from tqdm import tqdm
    except Exception:  # noqa: BLE001
        return None
    tty = hasattr(sys.stderr, "isatty") and sys.stderr.isatty()
    bar = tqdm(total=total, file=sys.stderr, desc=desc, dynamic_ncols=tty, mininterval=0.2 if tty else 30.0,
               ncols=None if tty else 100)
    bar.fusedattn_tty = tty
    return bar


def progress_note(bar, text: str) -> None:
    """Show what runs now beside the bar (redrawn at once only on a terminal)."""
    if bar is not None:
        bar.set_postfix_str(text, refresh=getattr(bar, "fusedattn_tty", False))


def short_error(msg, limit: int = 300) -> str:
    """One line of an error for tables and logs (the JSON keeps the whole text). For Dynamo's long
    messages the 'Developer debug context' line, which names the real exception, is kept too."""
    lines = [ln.strip() for ln in str(msg).splitlines() if ln.strip()]
    if not lines:
        return ""
    text = lines[0]
    ctx = [ln for ln in lines[1:] if ln.startswith("Developer debug context")]
    if ctx:
        text += " | " + ctx[0]
    return text if len(text) <= limit else text[: limit - 3] + "..."


def log(msg: str) -> None:
    """A line on stderr that does not break the progress bar."""
    try:
        from tqdm import tqdm
        tqdm.write(msg, file=sys.stderr)
    except Exception:  # noqa: BLE001
        print(msg, file=sys.stderr, flush=True)
