"""One device call for the hopper (Gluon, sm_90a) forward, v5 (benchmarks/hopper_log.md, v5):

    python3 scripts/hopper_dev2.py OUT_DIR [--budget 255] [--jobs c128,c256,c64,pad]

v5 (default jobs c128, c256, c64, pad): causal candidates at hdim 128/256/64, seqlen 1k/2k/4k/8k,
beside the shipped table ("default"), FA3 and cuDNN; then the padded head dims (PAD_HEAD_DIMS).
Before the jobs, a smoke stage launches every variant that has never run on a GPU on three small
cases in one process with a watchdog (a case that makes no progress for SMOKE_STALL_S seconds is
killed, recorded as hung, and the stage restarts without it and without the variants that share
all of its new mechanisms: dynamic scheduler, wg_bounds); the jobs skip every variant that failed,
hung or was not reached there. v4 jobs (ablation, d128, d256, d64) are still available via --jobs.

Jobs run one after the other, each in its own subprocess with a timeout (a deadlocked variant
costs its job, not the run; every record is written as soon as it exists, so a job killed half-way
keeps what it measured). The whole run stays inside --budget seconds (default 255): a job that no
longer fits is skipped and reported.

Every variant is checked before it is timed, in the timing process: outputs poisoned with NaN,
compared with a float64 reference (one tail/GQA case per variant, head dim and causal flag that
has not run on a GPU before, and a slice - first and last (batch, head) - of every timed shape);
a variant that fails is not timed. Timing: median of triton.testing.do_bench (warmup 10 ms,
rep 50 ms, L2 flushed before each run as in `make bench`), two rounds in opposite orders, the
lower median kept; FA3 (fa3-fwd wheel) and SDPA cuDNN timed in the same process, same inputs.
Shapes: batch x seqlen = 16384, heads x head_dim = 2048, bf16 (the anchors); FLOPs
4*B*H*S^2*D, halved when causal.

Jobs (v5):
  c128      hdim 128 causal: pdyn_tma_fma (persistent, FA3's dynamic longest-first scheduler
            over L2 sections, TMA store, FFMA softmax), pdyn_fma (no TMA store),
            pdyn_lpt_tma_fma (one section: longest-first over all heads, tells L2 from balance).
  c256      hdim 256 causal: wgb_fma (per-warpgroup causal bounds), pdyn_fma, pdyn_wgb_fma
            (TMA store + dynamic spills 4 B at 256 causal: not run).
  c64       hdim 64 causal: run 5's winners persistent_fma (2k) and d64_3wg_n128 (8k) at every
            seqlen, pdyn_fma, and the 3-warpgroup 192x128 tile with wg_bounds / dynamic
            persistent (+ TMA store) / both.
  pad       padded head dims 32/80/96/192, causal and not: the shipped rows (and the causal
            candidates the table may adopt) checked against float64 with NaN-poisoned outputs
            (tail/GQA 2x1000 h4/2, 2x2048 h8/2 with slices, causal sq 300 > sk 100); d=96 timed
            at 4k beside FA3 and cuDNN.
Jobs (v4):
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
VERIFIED = {"v3", "full", "no_overlap", "plain",  # checked on the GPU before (runs 1-4)
            # run 5 (hopper_log.md v4 results): checks passed at the head dims they ran
            "fma", "persistent_fma", "persistent_tma_fma", "d64_3wg", "d64_3wg_n128",
            "d64_3wg_persistent"}
# run 7 (hopper_log.md v5 results): smoke and checks passed
VERIFIED_RUN7 = {"pdyn_tma_fma", "pdyn_fma", "pdyn_lpt_tma_fma", "wgb_fma", "pdyn_wgb_fma",
                 "d64_3wg_n128_wgb", "d64_3wg_n128_pdyn", "d64_3wg_n128_pdyn_wgb"}
VERIFIED |= VERIFIED_RUN7
# run 11 (hopper_log.md v6 / v7 results): smoke and checks passed
VERIFIED |= {"pdyn_tmao_fma", "persistent_tmao_fma", "d64_3wg_n128_s3", "d64_3wg_n128_ptma",
             "d64_3wg_n128_ptma_s3"}
# run 13 (hopper_log.md v8 results): smoke and checks passed
VERIFIED |= {"split", "split_tma"}
# run 15 (hopper_log.md v9 / v10 results): smoke and checks passed (qpf failed at hdim 64 causal)
VERIFIED |= {"skip_empty", "keep_empty"}
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
CAUSAL_SEQLENS = (1024, 2048, 4096, 8192)
JOBS.update({
    "c128": (75, ["default", "pdyn_tma_fma", "pdyn_fma", "pdyn_lpt_tma_fma"],
             [(128, True, s) for s in CAUSAL_SEQLENS], []),
    "c256": (70, ["default", "wgb_fma", "pdyn_fma", "pdyn_wgb_fma"],
             [(256, True, s) for s in CAUSAL_SEQLENS], []),
    "c64": (90, ["default", "persistent_fma", "d64_3wg_n128", "d64_3wg_n128_wgb", "pdyn_fma",
                 "d64_3wg_n128_pdyn", "d64_3wg_n128_pdyn_wgb"],
            [(64, True, s) for s in CAUSAL_SEQLENS], []),
    "pad": (60, ["default"], [(96, False, 4096), (96, True, 4096)], []),
    # v6 (hopper_log.md v6): O in its own shared-memory tile, beside the shipped rows
    "o128c": (50, ["default", "pdyn_tmao_fma"], [(128, True, s) for s in CAUSAL_SEQLENS], []),
    "o128n": (40, ["default", "persistent_tmao_fma"],
              [(128, False, 1024), (128, False, 2048), (128, False, 8192)], []),
    # v7 (hopper_log.md v7): hdim 64 non-causal, where cuDNN leads at 1k-2k
    "n64": (60, ["default", "d64_3wg_n128_s3", "d64_3wg_n128_ptma", "d64_3wg_n128_ptma_s3",
                 "d64_3wg_n128_pdyn"],
            [(64, False, 1024), (64, False, 2048), (64, False, 8192)], []),
    # v8 (hopper_log.md v8): unmasked / masked K/V blocks in two loops, on top of each table row
    "s128": (60, ["default", "split"],
             [(128, True, 1024), (128, True, 2048), (128, True, 4096), (128, False, 1024),
              (128, False, 2048), (128, False, 8192)], []),
    "s256": (60, ["default", "split", "split_tma"],
             [(256, True, 2048), (256, True, 4096), (256, False, 2048), (256, False, 8192)], []),
    "s64": (50, ["default", "split"],
            [(64, True, 2048), (64, False, 1024), (64, False, 2048)], []),
    # v9 (hopper_log.md v9): empty warpgroups of hdim 64's last 192-row m-tile skip their work;
    # the dynamic scheduler's L2 section size on hdim 128 causal
    "e64": (50, ["default", "skip_empty"],
            [(64, False, 1024), (64, True, 1024), (64, False, 2048), (64, True, 2048)], []),
    "l128": (50, ["default", "l2_16", "l2_64"],
             [(128, True, 1024), (128, True, 2048), (128, True, 4096)], []),
    # v10 (hopper_log.md v10): the next tile's Q loaded during this tile (two Q buffers)
    "q128": (60, ["default", "qpf"],
             [(128, True, 1024), (128, True, 2048), (128, True, 4096), (128, True, 8192),
              (128, False, 1024), (128, False, 2048)], []),
    "q64": (50, ["default", "qpf", "skip_empty"],
            [(64, True, 1024), (64, True, 2048), (64, False, 1024), (64, False, 2048)], []),
    # session 6: v10 at hdim 64 non-causal over the bench's seqlens (run 15: +16% at 1k, flat
    # at 2k), to decide whether the (64, False) row takes it
    "q64n": (70, ["default", "qpf"], [(64, False, s) for s in (512, 1024, 2048, 4096, 8192, 16384)],
             []),
    # after the run-20 fix (compile-time Q buffer indices with three consumers): the hdim 64
    # non-causal row (q_prefetch) against its previous form, and qpf on the causal row
    "q64f": (80, ["default", "no_qpf"], [(64, False, s) for s in (512, 1024, 2048, 4096, 16384)],
             []),
    "q64c": (80, ["default", "qpf"], [(64, True, s) for s in (1024, 2048, 4096, 8192)], []),
})
DEFAULT_JOBS = ["c128", "c256", "c64", "pad"]
# pad job: padded head dims checked with the shipped rows, and (causal) with the candidate each
# native head dim's causal row may adopt
PAD_DIMS = (32, 80, 96, 192)
PAD_SHAPES = [(2, 1000, 4, 2), (2, 2048, 8, 2)]  # (batch, seqlen, heads, kv_heads)
PAD_CANDIDATES = {64: "d64_3wg_n128_pdyn", 128: "pdyn_tma_fma", 256: "pdyn_fma"}
PRECOMPILE_TIMEOUT = 50  # s; kernels not compiled by then are compiled by the jobs themselves
PRECOMPILE_PROCS = 12  # the device machine has 16 cores
SMOKE_STALL_S = 25  # s without a new smoke record: the running case is declared hung
SMOKE_START_S = 30  # s more for a new worker's first record (imports; a loaded CPU is slow)


def smoke_list(jobs):
    """(variant, d, causal) of every never-run variant the jobs launch (pad: its candidates at
    the padded dims), in job order."""
    out = []
    for j in jobs:
        _, variants, cells, _ = JOBS[j]
        for d, causal, _ in cells:
            for n in variants:
                if n != "default" and n not in VERIFIED and [n, d, causal] not in out:
                    out.append([n, d, causal])
        if j == "pad":
            for d in PAD_DIMS:
                n = PAD_CANDIDATES[_native(d)]
                if [n, d, True] not in out:
                    out.append([n, d, True])
    return out


def _native(d):
    return 64 if d <= 64 else 128 if d <= 128 else 256


def smoke_shapes(H, cfg, d, causal):
    """(label, batch, seqlen_q, seqlen_k, heads, kv_heads, config) of the smoke cases: the
    tail/GQA case; for the dynamic scheduler 3x3000 h4/2 (288 tiles > 132 SMs: the atomic
    counter hands out tiles) with L2 sections of 8 heads (two sections, the second short:
    l2_section_mb chosen so that 4 kv heads fit); causal sq 300 > sk 100 (rows with no key)."""
    shapes = [("2x1000 h4/2", 2, 1000, 1000, 4, 2, cfg)]
    if cfg.persistent and cfg.scheduler:
        kv_mb = 3000 * 2 * d * 2 / 2 ** 20
        mb = max(1, int(4 * kv_mb) + 1)
        shapes.append((f"3x3000 h4/2 l2={mb}MB", 3, 3000, 3000, 4, 2,
                       H.FwdConfig(**{**cfg.__dict__, "l2_section_mb": mb})))
    if causal:
        shapes.append(("1x300/100 h2/1", 1, 300, 100, 2, 1, cfg))
    return shapes


def _cell_shape(job, d, s):
    if job == "ablation":
        b, _, h, _ = ABLATION_SHAPE
        return b, h
    return max(1, 16384 // s), 2048 // d


def compile_specs(jobs):
    """Every (variant, d, causal, batch, seqlen, heads, kv_heads) the jobs will launch, so that
    parallel processes can compile them (forward(_warmup=True)) into triton's cache first."""
    from fusedattn.kernels import hopper_fwd as H
    specs = []  # (variant, d, causal, batch, seqlen_q, heads, kv_heads, seqlen_k, l2_section_mb)
    for j in jobs:
        _, variants, cells, diags = JOBS[j]
        for d, causal, s in cells + [c for c in diags if c not in cells]:
            b, h = _cell_shape(j, d, s)
            for n in (variants if (d, causal, s) in cells else ["default"]):
                specs.append((n, d, causal, b, s, h, h, s, None))
        if j == "pad":
            for d in PAD_DIMS:
                for causal in (False, True):
                    for b, s, h, hk in PAD_SHAPES:
                        specs.append(("default", d, causal, b, s, h, hk, s, None))
    for n, d, causal in smoke_list(jobs):
        for _, b, sq, sk, h, hk, cfg in smoke_shapes(H, _cfg(H, n, d, causal), d, causal):
            specs.append((n, d, causal, b, sq, h, hk, sk, cfg.l2_section_mb))

    # one per triton specialisation (an int argument is specialised as ==1, %16 == 0 or neither)
    def cls(x):
        return 1 if x == 1 else 16 if x % 16 == 0 else 0
    seen, out = set(), []
    for n, d, causal, b, s, h, hk, sk, mb in specs:
        cfg = _cfg(H, n, d, causal)
        l2 = 0
        if cfg.persistent and cfg.scheduler:
            l2 = H.l2_section_heads(b * h, sk, d, h // hk, 2,
                                    cfg.l2_section_mb if mb is None else mb)
        key = (n, d, causal, cls(s), cls(sk), cls(h), cls(h // hk), cls(-(-s // cfg.block_m)),
               cls(l2) if l2 else None)
        if key not in seen:
            seen.add(key)
            out.append((n, d, causal, b, s, h, hk, sk, mb))
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
    for spec in specs:
        n, d, causal, b, s, h, hk = spec[:7]
        sk = spec[7] if len(spec) > 7 else s
        mb = spec[8] if len(spec) > 8 else None
        t = time.time()
        try:
            cfg = _cfg(H, n, d, causal)
            if mb is not None:
                cfg = H.FwdConfig(**{**cfg.__dict__, "l2_section_mb": mb})
            q = torch.empty(b, s, h, d, device=dev, dtype=torch.bfloat16)
            k = torch.empty(b, sk, hk, d, device=dev, dtype=torch.bfloat16)
            kern = H.forward(q, k, k, causal, d ** -0.5, config=cfg, _warmup=True)
            regs, spills = getattr(kern, "n_regs", "?"), getattr(kern, "n_spills", "?")
            if dev == "cpu":  # no driver to load the cubin: ask ptxas (-v) for the figures
                from fusedattn import inspect as fi
                r = fi.ptxas_report(kern.asm["ptx"])
                regs, spills = r.get("registers_at_entry", "?"), r.get("spill_stores", "?")
            print(f"compiled {n} d={d} causal={causal} {b}x{s}/{sk} h{h}/{hk} in "
                  f"{time.time() - t:.1f}s regs={regs} spills={spills}", flush=True)
        except Exception as e:  # noqa: BLE001
            print(f"compile FAILED {n} d={d} causal={causal}: {e!r}"[:400], flush=True)
    return 0


# ------------------------------------------------------------------------------------------
# worker side
# ------------------------------------------------------------------------------------------
def _cfg(H, name, d, causal=False):
    """"default": the shipped table row for (d, causal); any other name: the v3 base row plus the
    variant's overrides (H.base_config), as in device run 5."""
    if name in EXTRA_VARIANTS:
        return H.base_config(d, **EXTRA_VARIANTS[name])
    return H.variant_config(name, d, causal)


def reference(q, k, v, causal, scale):
    """float64 attention: (out, lse); rows with no visible key: out 0, lse -inf (the package's
    oracle, fusedattn.reference.attention_oracle)."""
    from fusedattn.reference import attention_oracle
    return attention_oracle(q, k, v, causal, scale)


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
    if getattr(cfg, "scheduler", 0):
        # dynamic scheduler: the tile counter is back at 0, and a second launch (poisoned again)
        # gives the same bits (every tile computed once, whichever SM took it)
        counters = [int(t[0].item()) for t in H._TILE_COUNTERS.values()]
        out2 = torch.full_like(out, float("nan"))
        lse2 = torch.full_like(lse, float("nan"))
        H.forward(q, k, v, causal, scale, config=cfg, _out=out2, _lse=lse2)
        torch.cuda.synchronize()
        same = bool(torch.equal(out, out2)) and bool(torch.equal(lse.nan_to_num(),
                                                                  lse2.nan_to_num()))
        counters += [int(t[0].item()) for t in H._TILE_COUNTERS.values()]
        rec.update(counter_max=max(counters, default=0), repeat_equal=same)
        ok = ok and same and max(counters, default=0) == 0
        del out2, lse2
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
        self.out_dir = out_dir
        self.jf = open(os.path.join(out_dir, f"{job}.jsonl"), "a")
        props = torch.cuda.get_device_properties(0)
        import triton
        self.emit(kind="env", device=props.name, sms=props.multi_processor_count,
                  torch=torch.__version__, triton=triton.__version__)
        self.fa3 = None
        try:
            from fusedattn.bench.impls import import_fa3
            self.fa3 = import_fa3()
        except Exception as e:  # noqa: BLE001
            self.emit(kind="note", text=f"FA3 unavailable: {e!r}"[:300])
        self.checked = {}  # (variant, d, causal) -> ok
        # the smoke stage's verdicts (tail/GQA case and more, run before the jobs); when it ran,
        # a never-run variant it did not reach (out of time) is skipped, not risked in a job
        smoke = _records(out_dir, "smoke")
        self.smoke_ran = bool(smoke)
        for r in smoke:
            if r.get("kind") == "smoke":
                self.checked[(r["variant"], r["d"], r["causal"])] = bool(r["ok"])

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
        if key not in self.checked and name not in VERIFIED and name != "default" \
                and self.smoke_ran:
            self.checked[key] = False
            self.emit(kind="skip", variant=name, d=d, causal=causal,
                      reason="never run and not reached by the smoke stage")
            self._skipped = getattr(self, "_skipped", set()) | {key}
            return False
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
                if (name, d, causal) not in getattr(self, "_skipped", set()):
                    self._skipped = getattr(self, "_skipped", set()) | {(name, d, causal)}
                    self.emit(kind="skip", variant=name, d=d, causal=causal,
                              reason="failed or hung in the smoke stage / an earlier check")
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

    def run_case(self, name, d, causal, label, b, sq, sk, h, hk, cfg, **extra):
        """One NaN-poisoned launch of cfg on fresh inputs, checked against float64 (whole
        tensors); emits a check record and returns ok."""
        import torch
        from fusedattn.kernels import hopper_fwd as H
        try:
            g = torch.Generator(device=DEVICE).manual_seed(1234)
            q = torch.randn(b, sq, h, d, device=DEVICE, dtype=torch.bfloat16, generator=g)
            k = torch.randn(b, sk, hk, d, device=DEVICE, dtype=torch.bfloat16, generator=g)
            v = torch.randn(b, sk, hk, d, device=DEVICE, dtype=torch.bfloat16, generator=g)
            rec = run_checked(H, cfg, q, k, v, causal, d ** -0.5)
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            rec = dict(ok=False, error=repr(e)[:400])
        self.emit(kind="check", variant=name, d=d, causal=causal, shape=label, **extra, **rec)
        return rec["ok"]

    def smoke(self, items):
        """Every never-run (variant, d, causal): the smoke shapes, in order, stop at the first
        failure; a "smoke_start" record before each so that the driver can name a hang."""
        from fusedattn.kernels import hopper_fwd as H
        for n, d, causal in items:
            self.emit(kind="smoke_start", variant=n, d=d, causal=causal)
            ok = True
            try:
                cfg = _cfg(H, n, d, causal)
                for label, b, sq, sk, h, hk, c in smoke_shapes(H, cfg, d, causal):
                    ok = self.run_case(n, d, causal, label, b, sq, sk, h, hk, c)
                    if not ok:
                        break
            except Exception as e:  # noqa: BLE001
                traceback.print_exc()
                ok = False
                self.emit(kind="note", text=f"smoke {n} d={d}: {e!r}"[:300])
            self.emit(kind="smoke", variant=n, d=d, causal=causal, ok=ok)

    def pad_checks(self):
        """Padded head dims (PAD_HEAD_DIMS): the shipped rows, and for causal the candidate the
        native head dim's row may adopt, on PAD_SHAPES (+ causal sq 300 > sk 100)."""
        from fusedattn.kernels import hopper_fwd as H
        for d in PAD_DIMS:
            for causal in (False, True):
                names = ["default"] + ([PAD_CANDIDATES[_native(d)]] if causal else [])
                for n in names:
                    if self.checked.get((n, d, causal)) is False or (
                            n != "default" and (n, d, causal) not in self.checked
                            and self.smoke_ran):
                        self.emit(kind="skip", variant=n, d=d, causal=causal,
                                  reason="failed or hung in the smoke stage")
                        continue
                    cfg = _cfg(H, n, d, causal)
                    shapes = [(f"{b}x{s} h{h}/{hk}", b, s, s, h, hk) for b, s, h, hk in PAD_SHAPES]
                    if causal:
                        shapes.append(("1x300/100 h2/1", 1, 300, 100, 2, 1))
                    for label, b, sq, sk, h, hk in shapes:
                        self.run_case(n, d, causal, label, b, sq, sk, h, hk, cfg, pad=True)

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


def install_fake():
    """CPU stand-ins for the plumbing tests (tests/test_hopper_compile.py), from the environment
    variable HOPPER_DEV2_FAKE = "hang:NAME,fail:NAME,slowstart:SECONDS,...": the kernel is the
    float64 reference (variant NAME made wrong, or hanging forever; the worker asleep SECONDS
    before its first record), timers return constants, no GPU."""
    import types
    import torch
    import triton
    from fusedattn.kernels import hopper_fwd as H
    global DEVICE
    DEVICE = "cpu"
    spec = [x.split(":", 1) for x in os.environ["HOPPER_DEV2_FAKE"].split(",") if ":" in x]
    for what, secs in spec:
        if what == "slowstart":  # a slow start (imports on a loaded machine)
            time.sleep(float(secs))
    torch.cuda.synchronize = lambda *a, **k: None
    torch.cuda.get_device_properties = lambda i: types.SimpleNamespace(
        name="FAKE", multi_processor_count=132)
    triton.testing.do_bench = lambda fn, warmup=0, rep=0, return_mode="median": (fn(), 1.0)[1]
    triton.testing.do_bench_cudagraph = lambda fn, rep=0, return_mode="median": (fn(), 0.9)[1]

    def fake_forward(q, k, v, causal, scale, config=None, _out=None, _lse=None, _warmup=False):
        # the variant whose config this is (l2_section_mb compared last: the smoke stage
        # changes it); the table's row ("default") is not a variant here
        d = q.shape[-1]
        cand = [n for n in H.VARIANTS if n not in ("default", "v3") and config is not None
                and {**_cfg(H, n, d, causal).__dict__, "l2_section_mb": 0}
                == {**config.__dict__, "l2_section_mb": 0}]
        exact = [n for n in cand if _cfg(H, n, d, causal).l2_section_mb == config.l2_section_mb]
        name = (exact or cand or [None])[0]
        if config is not None and config == H.get_config(d, causal):
            name = None
        if ["hang", name] in spec:
            time.sleep(10 ** 6)
        ro, rl = reference(q, k, v, causal, scale)
        out = _out if _out is not None else torch.empty_like(q)
        lse = _lse if _lse is not None else torch.empty(q.shape[0], q.shape[2], q.shape[1])
        out.copy_(ro.to(q.dtype))
        lse.copy_(rl.float())
        if ["fail", name] in spec:
            out[0, -1] = float("nan")
        return out, lse
    H.forward = fake_forward
    # the repeat check wants a deterministic kernel: a CPU float64 matmul on more than one
    # thread is not bitwise repeatable (measured: 30 of 30 repeats differ on 2 threads), and
    # now and then the bf16 cast of the reference flips a bit
    torch.set_num_threads(1)
    # small cells: the reference runs on a CPU
    global smoke_shapes, _cell_shape
    for j, (to, vs, cells, _) in list(JOBS.items()):
        JOBS[j] = (to, vs, [(d, c, min(s, 256)) for d, c, s in cells], [])
    _cell_shape = lambda job, d, s: (1, 2)  # noqa: E731
    PAD_SHAPES[:] = [(1, 200, 4, 2)]
    real_shapes = smoke_shapes

    def small_shapes(H, cfg, d, causal):  # the float64 reference on a CPU: small cases
        return [(lab, 1, min(sq, 256), min(sk, 256), h, hk, c)
                for lab, b, sq, sk, h, hk, c in real_shapes(H, cfg, d, causal)]
    smoke_shapes = small_shapes


def worker(job, out_dir):
    if os.environ.get("HOPPER_DEV2_FAKE"):
        install_fake()
    if job.startswith("compile:"):
        return precompile([tuple(x) for x in json.loads(job[len("compile:"):])])
    if job.startswith("smoke:"):
        Worker("smoke", out_dir).smoke([tuple(x) for x in json.loads(job[len("smoke:"):])])
        return 0
    w = Worker(job, out_dir)
    timeout, variants, cells, diags = JOBS[job]
    if job == "pad":
        w.pad_checks()
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
    smoke = [r for r in _records(out_dir, "smoke") if r["kind"] == "smoke"] if "smoke" in jobs \
        else []
    if smoke:
        bad = [f"{r['variant']} d={r['d']} causal={int(r['causal'])}"
               + (" HUNG" if r.get("hung") else " (not run: same mechanism hung)"
                  if r.get("skipped") else "") for r in smoke if not r.get("ok")]
        rows.append(f"[smoke] {len(smoke) - len(bad)}/{len(smoke)} new (variant, hdim, causal) "
                    f"passed" + (f"; FAILED: {', '.join(bad)}" if bad else ""))
    if "pad" in jobs:
        pad = [r for r in _records(out_dir, "pad") if r["kind"] == "check" and r.get("pad")]
        for d in PAD_DIMS:
            for causal in (False, True):
                rs = [r for r in pad if r["d"] == d and r["causal"] == causal]
                if not rs:
                    continue
                per = {}
                for r in rs:
                    per.setdefault(r["variant"], []).append(bool(r["ok"]))
                rels = [r["rel"] for r in rs if isinstance(r.get("rel"), float)]
                rows.append(f"[pad] d={d} {'causal' if causal else 'full  '}: "
                            + ", ".join(f"{n} {sum(v)}/{len(v)}" for n, v in per.items())
                            + (f" (max rel {max(rels):.1e})" if rels else ""))
    for j in jobs:
        if j == "smoke":
            continue
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


def _new_features(name, d, causal):
    """The v5 mechanisms a variant uses: "dynamic" (scheduler 1), "wg_bounds"."""
    from fusedattn.kernels import hopper_fwd as H
    cfg = _cfg(H, name, d, causal)
    return ({"dynamic"} if cfg.persistent and cfg.scheduler else set()) | \
        ({"wg_bounds"} if cfg.wg_bounds else set())


def run_smoke(out_dir, jobs, deadline):
    """The smoke stage: one process runs smoke_list(jobs); a case that makes no progress (no new
    record) for SMOKE_STALL_S seconds (a new worker's first record: SMOKE_START_S more) is
    killed, recorded as hung (smoke record ok=False), and a new process takes the remaining
    variants. Returns a status line."""
    items = smoke_list(jobs)
    total = len(items)
    path = os.path.join(out_dir, "smoke.jsonl")
    hung_any, tries, t0 = [], 0, time.time()
    while items and time.time() < deadline - 10 and tries < 6:
        tries += 1
        last = os.path.getsize(path) if os.path.exists(path) else 0  # before the worker starts
        with open(os.path.join(out_dir, f"smoke{tries}.log"), "w") as lf:
            p = subprocess.Popen([sys.executable, "-u", os.path.abspath(__file__), out_dir,
                                  "--worker", "smoke:" + json.dumps(items)], stdout=lf,
                                 stderr=subprocess.STDOUT, cwd=ROOT)
            t_last, killed = time.time(), False
            allow = SMOKE_STALL_S + SMOKE_START_S  # until the worker's first record
            while p.poll() is None:
                time.sleep(0.25)
                size = os.path.getsize(path) if os.path.exists(path) else 0
                if size != last:
                    last, t_last, allow = size, time.time(), SMOKE_STALL_S
                elif time.time() - t_last > allow or time.time() > deadline:
                    p.kill()
                    p.wait()
                    killed = True
        recs = _records(out_dir, "smoke")
        done = {(r["variant"], r["d"], r["causal"]) for r in recs if r.get("kind") == "smoke"}
        if killed or p.returncode != 0:
            pending = [(r["variant"], r["d"], r["causal"]) for r in recs
                       if r.get("kind") == "smoke_start"
                       and (r["variant"], r["d"], r["causal"]) not in done]
            if pending:  # the case that was running when it stopped
                n, d, c = pending[-1]
                rec = dict(job="smoke", t=round(time.time(), 2), kind="smoke", variant=n, d=d,
                           causal=c, ok=False, hung=killed, rc=p.returncode)
                with open(path, "a") as f:
                    f.write(json.dumps(rec) + "\n")
                    # the variants left that have every new mechanism of this one (a hang in the
                    # dynamic scheduler's protocol would hang each of them: ~35 s apiece)
                    bad = _new_features(n, d, c)
                    for x in items:
                        if tuple(x) not in done and tuple(x) != (n, d, c) and bad \
                                and bad <= _new_features(*x):
                            f.write(json.dumps(dict(
                                job="smoke", t=round(time.time(), 2), kind="smoke",
                                variant=x[0], d=x[1], causal=x[2], ok=False, skipped=True,
                                reason=f"not run: shares {sorted(bad)} with {n} d={d}, which "
                                       f"{'hung' if killed else 'crashed'}")) + "\n")
                            done.add(tuple(x))
                done.add((n, d, c))
                why = "hung" if killed else f"rc={p.returncode}"
                hung_any.append(f"{n} d={d} causal={c} ({why})")
            elif not killed:
                break  # died before its first case: give up on the stage (the jobs check anyway)
        items = [x for x in items if tuple(x) not in done]
        if not killed and p.returncode == 0:
            break
    recs = _records(out_dir, "smoke")
    ok = sum(1 for r in recs if r.get("kind") == "smoke" and r.get("ok"))
    return (f"{ok}/{total} variants passed in {time.time() - t0:.0f}s"
            + (f"; stopped: {', '.join(hung_any)}" if hung_any else "")
            + (f"; {len(items)} not run" if items else ""))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?", default=os.environ.get("OUT", os.path.join(ROOT, "out",
                                                                                 "hopper_dev2")))
    ap.add_argument("--worker")
    ap.add_argument("--budget", type=float, default=255.0)
    ap.add_argument("--jobs", default=",".join(DEFAULT_JOBS))
    ap.add_argument("--no-precompile", action="store_true")
    ap.add_argument("--no-smoke", action="store_true")
    ap.add_argument("--smoke-until", type=float, default=120.0,
                    help="the smoke stage ends by this many seconds into the run")
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
    if not a.no_smoke and smoke_list(jobs):
        status["smoke"] = run_smoke(a.out, jobs, t0 + min(a.smoke_until, a.budget - 60))
        print(f"=== smoke: {status['smoke']}", flush=True)
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
    shown = (["smoke"] if "smoke" in status else []) + jobs
    summary = dict(status=status, wall_s=time.time() - t0,
                   records={j: _records(a.out, j) for j in shown})
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print("\n# summary (TFLOP/s; FA3, cuDNN and default timed in the same process)")
    try:
        print(summarize(a.out, shown, status))
    except Exception:  # noqa: BLE001 - the records are in summary.json either way
        traceback.print_exc()
    print(f"wall {time.time() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
