"""The speed sweep: the FlashAttention-3 paper's grid, every implementation timed side by side in
one process, every result checked against the float64 oracle on a slice of the same shape.

Per grid cell (head_dim, causal, seqlen): inputs are drawn once (random normal, bf16), then for each
implementation and pass: one call whose result is checked (it also compiles). Then the timing, in
rounds (SpeedConfig.rounds, default 5; it was 3 until device run 60, which gave ratios within
about +-4% from run to run): each round times every implementation once, the order rotated by one
each round, and each timing starts with the implementation's own warm-up (the
timer's, 300 ms by default); an implementation's figure is the median over its rounds. Under
these kernels the H200 runs at its 700 W power limit and its clock falls within ~0.5 s, so a
kernel's speed depends on what ran just before it: one after another, each after the checks'
idle time, the implementation timed first looked up to 14% faster (device runs 29-31); after a
shared warm-up with short timings, each implementation ran at its neighbour's clock, and ratios
between two kernels moved by up to 10% with the set of columns (runs 39, 42-43). With 300 ms of
its own load before each timing, the round-to-round spread of one implementation stayed within
7% (14% after a shared warm-up; run 43, scripts/timing_protocols.py). round_warmup_ms > 0 adds
a shared warm-up of the cell before the rounds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from . import common as C
from .impls import Impl


class FatalCudaError(RuntimeError):
    """The CUDA context is broken (a sticky error): nothing after this can run in the process."""


class FallbackDetected(RuntimeError):
    pass


@dataclass
class SpeedConfig:
    passes: tuple = C.PASSES
    hdims: tuple = C.HDIMS
    seqlens: tuple = C.SEQLENS
    causals: tuple = (False, True)
    tokens: int = C.TOKENS
    hidden: int = C.HIDDEN
    seed: int = 0
    check: bool = True
    time_budget_s: float | None = None
    ref_max_elems: int = 1 << 26
    rounds: int = 5                  # timing rounds per cell, the order rotated each round
    round_warmup_ms: float = 0.0     # a shared warm-up of the cell before the rounds (wall time)
    done_cells: set = field(default_factory=set)   # cells already measured (--resume)

    def cells(self) -> list[tuple[int, bool, int]]:
        return [(d, c, s) for d in self.hdims for c in self.causals for s in self.seqlens]


def cell_key(entry_or_cell) -> tuple:
    if isinstance(entry_or_cell, dict):
        e = entry_or_cell
        return (int(e["hdim"]), bool(e["causal"]), int(e["seqlen"]))
    d, c, s = entry_or_cell
    return (int(d), bool(c), int(s))


# --- inputs and references of one cell -------------------------------------------------------

class CellInputs:
    """q, k, v, dout drawn once, (batch, seqlen, heads, head_dim) bf16; other layouts and the fp8
    cast are made from them on first use (outside every timed region)."""

    def __init__(self, batch, seqlen, heads, head_dim, device, dtype=torch.bfloat16):
        shape = (batch, seqlen, heads, head_dim)
        self.q, self.k, self.v, self.dout = (C.normal_inputs(shape, dtype, device) for _ in range(4))
        self._cache: dict = {}

    def get(self, family: str, layout: str):
        key = (family, layout)
        if key not in self._cache:
            q, k, v, dout = self.q, self.k, self.v, self.dout
            if family == "fp8":
                q, k, v = (C.to_fp8(t) for t in (q, k, v))
            if layout == "bhsd":
                q, k, v, dout = (t.transpose(1, 2).contiguous() for t in (q, k, v, dout))
            self._cache[key] = (q, k, v, dout)
        return self._cache[key]

    def args_for(self, impl, causal: bool = False) -> tuple[tuple, torch.Tensor]:
        """(the inputs impl.fn takes, dout in its layout); an impl's prepare step runs once here
        per causal flag (FP8 key tiles, and so k and v's quantisation blocks, depend on it)."""
        if impl.prepare is None:
            q, k, v, dout = self.get(impl.family, impl.layout)
            return (q, k, v), dout
        key = ("prepared", impl.name, bool(causal))
        if key not in self._cache:
            self._cache[key] = tuple(impl.prepare(self.q, self.k, self.v, causal))
        dout = self.dout.transpose(1, 2).contiguous() if impl.layout == "bhsd" else self.dout
        return self._cache[key], dout


def to_bshd(x: torch.Tensor, layout: str) -> torch.Tensor:
    return x.transpose(1, 2) if layout == "bhsd" else x


class CellReference:
    """The float64 oracle on a slice (first and last batch entry, first and last head) of the cell's
    inputs, computed on the same device in blocks of query rows; plain PyTorch's error on that slice
    is the yardstick of the pass rule. Everything is computed on first use and kept."""

    def __init__(self, inp: CellInputs, causal: bool, scale: float, max_elems: int = 1 << 26):
        b, _, h, _ = inp.q.shape
        hk = inp.k.shape[2]
        self.bidx = sorted({0, b - 1})
        self.hidx = sorted({0, h - 1}) if h == hk else list(range(h))
        self.inp, self.causal, self.scale, self.max_elems = inp, causal, scale, max_elems
        self._c: dict = {}

    def slice(self, x: torch.Tensor) -> torch.Tensor:
        return x[self.bidx][:, :, self.hidx]

    def _sl(self):
        if "sl" not in self._c:
            self._c["sl"] = tuple(self.slice(t) for t in (self.inp.q, self.inp.k, self.inp.v, self.inp.dout))
        return self._c["sl"]

    def oracle(self):
        if "oracle" not in self._c:
            q, k, v, _ = self._sl()
            self._c["oracle"] = C.oracle_chunked(q, k, v, self.causal, self.scale, self.max_elems)
        return self._c["oracle"]

    def grads(self):
        if "grads" not in self._c:
            q, k, v, dout = self._sl()
            out64, lse64 = self.oracle()
            self._c["grads"] = C.oracle_grads_chunked(q, k, v, dout, out64, lse64, self.causal,
                                                      self.scale, self.max_elems)
        return self._c["grads"]

    def plain_fwd(self, family: str) -> dict:
        key = ("plain_fwd", family)
        if key not in self._c:
            q, k, v, _ = self._sl()
            out = C.plain_attention(*C.plain_inputs(q, k, v, family), self.causal, self.scale)
            self._c[key] = C.err_stats(out, self.oracle()[0])
        return self._c[key]

    def plain_bwd(self) -> list[dict]:
        if "plain_bwd" not in self._c:
            q, k, v, dout = self._sl()
            grads = C.plain_grads(q, k, v, dout, self.causal, self.scale)
            self._c["plain_bwd"] = [C.err_stats(g, r) for g, r in zip(grads, self.grads())]
        return self._c["plain_bwd"]


def judge_forward(out_bshd: torch.Tensor, ref: CellReference, family: str) -> dict:
    err = C.err_stats(ref.slice(out_bshd), ref.oracle()[0])
    plain = ref.plain_fwd(family)
    finite_all = bool(torch.isfinite(out_bshd).all().item())
    passed = C.passes_rule(err, plain) and finite_all
    return {"passed": passed, "max_abs": err["max_abs"], "rmse": err["rmse"], "rel": err["rel"],
            "plain_max_abs": plain["max_abs"], "plain_rel": plain["rel"],
            "limit": C.PASS_FACTOR * plain["max_abs"] + C.PASS_FLOOR, "finite_all": finite_all}


def judge_backward(grads_bshd, ref: CellReference) -> dict:
    refs = ref.grads()
    plains = ref.plain_bwd()
    res = {"passed": True}
    for name, g, r, p in zip(("dq", "dk", "dv"), grads_bshd, refs, plains):
        err = C.err_stats(ref.slice(g), r)
        finite_all = bool(torch.isfinite(g).all().item())
        ok = C.passes_rule(err, p) and finite_all
        res[name] = {"passed": ok, "max_abs": err["max_abs"], "rel": err["rel"],
                     "plain_max_abs": p["max_abs"], "plain_rel": p["rel"],
                     "limit": C.PASS_FACTOR * p["max_abs"] + C.PASS_FLOOR}
        res["passed"] = res["passed"] and ok
    res["max_abs"] = max(res[n]["max_abs"] for n in ("dq", "dk", "dv"))
    res["rel"] = max(res[n]["rel"] for n in ("dq", "dk", "dv"))
    return res


# --- one measurement -------------------------------------------------------------------------

def _leaves(q, k, v):
    return tuple(t.detach().requires_grad_(True) for t in (q, k, v))


def measure(entry: dict, impl: Impl, pass_: str, inp: CellInputs, ref: CellReference | None,
            causal: bool, scale: float, device, with_grad_fwd: bool, deferred: list) -> None:
    """Fill ``entry`` with the check of one (implementation, pass) and append (entry, the
    callable to time, its grad mode) to ``deferred`` for time_in_rounds; errors are recorded
    in the entry, never raised (except a broken CUDA context)."""
    args, dout = inp.args_for(impl, causal)
    grad_fwd = pass_ == "fwd" and impl.fwd_with_grad and with_grad_fwd
    if grad_fwd:
        entry["note"] = "forward timed through the training graph (the one compiled for backward)"
    # 1. the first call: compiles, and its result is checked
    t0 = time.perf_counter()
    result = out = grads = leaves = None
    failed = None
    try:
        with impl.guard() as fallback:
            if pass_ == "fwd":
                if grad_fwd:
                    with torch.enable_grad():
                        out = impl.fn(*_leaves(*args), causal, scale)
                else:
                    with torch.no_grad():
                        out = impl.fn(*args, causal, scale)
                result = out.detach()
            else:
                leaves = _leaves(*args)
                with torch.enable_grad():
                    out = impl.fn(*leaves, causal, scale)
                    grads = torch.autograd.grad(out, leaves, dout, retain_graph=True)
                result = (out, leaves, grads)
            C.synchronize(device)
        if fallback:
            raise FallbackDetected("ran the unfused eager path instead of a compiled kernel: "
                                   + " | ".join(dict.fromkeys(fallback)))
        entry["first_call_s"] = round(time.perf_counter() - t0, 3)
    except Exception as e:  # noqa: BLE001
        failed = C.error_text(e)
    out = grads = leaves = None
    if failed is not None:
        # outside the except block, so that the failed call's frames (and tensors) are released
        entry["error"], entry["error_stage"] = failed, "run"
        result = None
        _after_error(device)
        return
    # 2. the check against the oracle
    if ref is not None:
        failed = None
        try:
            if pass_ == "fwd":
                entry["check"] = judge_forward(to_bshd(result, impl.layout), ref, impl.family)
            else:
                entry["check"] = judge_backward([to_bshd(g, impl.layout) for g in result[2]], ref)
        except Exception as e:  # noqa: BLE001
            failed = C.error_text(e)
        if failed is not None:
            entry["check"] = {"error": failed}
            _after_error(device)
    # 3. what time_in_rounds times
    failed = None
    try:
        if pass_ == "fwd":
            result = None
            if grad_fwd:
                leaves = _leaves(*args)
                fn, grad = (lambda lv=leaves: impl.fn(*lv, causal, scale)), True
            else:
                fn, grad = (lambda a=args: impl.fn(*a, causal, scale)), False
        else:
            out, leaves, _ = result
            result = None
            # (the tensors bound now: the names are cleared below)
            fn = (lambda o=out, lv=leaves, d=dout: torch.autograd.grad(o, lv, d, retain_graph=True))
            grad = None
        deferred.append((entry, fn, grad))
    except Exception as e:  # noqa: BLE001
        failed = C.error_text(e)
    result = out = leaves = None
    if failed is not None:
        entry["error"], entry["error_stage"] = failed, "timing"
        _after_error(device)


def _grad_mode(grad):
    # the grad mode a timed callable runs in: True enable_grad, False no_grad, None as it is
    import contextlib
    if grad is None:
        return contextlib.nullcontext()
    return torch.enable_grad() if grad else torch.no_grad()


def time_in_rounds(deferred: list, timer, rounds: int, warmup_ms: float, device) -> None:
    """Time the cell's implementations order-fairly (see the module docstring): a shared warm-up
    of warmup_ms (each in turn; none when 0), then `rounds` rounds, each timing every
    implementation once (timer, which brings its own warm-up), the order rotated by one per
    round. Fills each entry with the median over its rounds of ms, ms_p20 and ms_p80 (the
    rounds' own figures in ms_rounds), reps summed, and tflops; sm_clock_mhz_rounds: the SM clock
    read right after each of its timings (None where it cannot be read: no CUDA device, no
    pynvml). Under the H200's power limit the clock moves by several percent between timings of
    the same kernel, and that explains most of a ratio's movement between runs (RESULTS.md,
    session 11). An implementation that raises is recorded as a timing error, left out of later
    rounds and dropped from ``deferred`` (its tensors released); a broken CUDA context raises
    FatalCudaError (run_cell marks the entries not timed)."""
    live = list(deferred)

    def run(item, fn):
        # fn(item) with the item's grad mode; an error is recorded and the item dropped, and the
        # clean-up runs outside the except block (so that the failed call's frames are released)
        failed = None
        try:
            with _grad_mode(item[2]):
                fn(item)
        except Exception as e:  # noqa: BLE001
            failed = C.error_text(e)
        if failed is None:
            return
        item[0]["error"], item[0]["error_stage"] = failed, "timing"
        live.remove(item)
        deferred.remove(item)
        item = None
        _after_error(device)

    t_end = time.perf_counter() + warmup_ms / 1e3
    while live and time.perf_counter() < t_end:
        for item in list(live):
            run(item, lambda it: it[1]())
    failed = None
    try:   # an asynchronous fault of a warm-up launch surfaces here
        C.synchronize(device)
    except Exception as e:  # noqa: BLE001
        failed = C.error_text(e)
    if failed is not None:
        _after_error(device)    # raises FatalCudaError when the context is broken
        for item in list(live):
            item[0]["error"], item[0]["error_stage"] = f"after the warm-up: {failed}", "timing"
        live.clear()
    stats: dict[int, list[dict]] = {id(item[0]): [] for item in live}
    for r in range(max(1, rounds)):
        if not live:
            break
        k = r % len(live)
        for item in live[k:] + live[:k]:   # (an item leaves `live` only by its own failure)
            run(item, lambda it: stats[id(it[0])].append(
                dict(timer(it[1]), sm_clock_mhz=sm_clock(device))))
    import statistics
    for entry, _, _ in live:
        got = stats[id(entry)]
        entry["ms"] = statistics.median(g["ms"] for g in got)
        entry["ms_p20"] = statistics.median(g["ms_p20"] for g in got)
        entry["ms_p80"] = statistics.median(g["ms_p80"] for g in got)
        entry["reps"] = sum(g["reps"] for g in got)
        entry["ms_rounds"] = [g["ms"] for g in got]
        entry["sm_clock_mhz_rounds"] = [g["sm_clock_mhz"] for g in got]
        entry["tflops"] = C.tflops(entry["flops"], entry["ms"])


def sm_clock(device="cuda"):
    """The SM clock of a CUDA device in MHz now (torch.cuda.clock_rate, through pynvml), or None
    for any other device or where it cannot be read."""
    if str(device).split(":")[0] != "cuda":
        return None
    try:
        import torch
        return torch.cuda.clock_rate(device)
    except Exception:  # noqa: BLE001
        return None


def _after_error(device) -> None:
    C.free_memory(device)
    broken = C.cuda_broken(device)
    if broken:
        raise FatalCudaError(broken)


# --- the sweep -------------------------------------------------------------------------------

def run_cell(cell, cfg: SpeedConfig, impls: dict[str, Impl], device, timer, progress=None) -> list[dict]:
    hdim, causal, seqlen = cell
    batch, heads = C.grid_shape(seqlen, hdim, cfg.tokens, cfg.hidden)
    scale = hdim ** -0.5
    base = {"hdim": hdim, "causal": causal, "seqlen": seqlen, "batch": batch, "heads": heads}
    entries: list[dict] = []
    torch.manual_seed(cfg.seed * 1_000_003 + hdim * 7919 + seqlen * 31 + int(causal))
    try:
        inp = CellInputs(batch, seqlen, heads, hdim, device)
    except Exception as e:  # noqa: BLE001
        text = C.error_text(e)
        for impl in impls.values():
            for p in cfg.passes:
                if p in impl.passes:
                    entries.append(dict(base, impl=impl.name, group=impl.group, family=impl.family,
                                        **{"pass": p}, error=f"inputs: {text}", error_stage="inputs"))
        try:
            _after_error(device)
        except FatalCudaError as fe:
            fe.entries = entries
            raise
        return entries
    ref = CellReference(inp, causal, scale, cfg.ref_max_elems) if cfg.check else None
    deferred: list = []
    for impl in impls.values():
        try:
            why = impl.unavailable(inp.q, inp.k, inp.v, causal) if impl.family == "bf16" else None
        except Exception as e:  # noqa: BLE001
            why = f"availability check failed: {C.error_text(e)}"
        for p in cfg.passes:
            if p not in impl.passes:
                continue
            if progress is not None:
                C.progress_note(progress, f"d{hdim} {'causal' if causal else 'full'} s{seqlen} {impl.name} {p}")
            entry = dict(base, impl=impl.name, group=impl.group, family=impl.family, **{"pass": p})
            entry["flops"] = C.attention_flops(batch, heads, seqlen, seqlen, hdim, causal, p)
            if why:
                entry["skipped"] = why
                entries.append(entry)
                continue
            if p == "bwd" and impl.group == "fusedattn":
                runs_on = impl.backward_backend(inp.q, inp.k, inp.v, causal)
                entry["bwd_backend"] = runs_on
                if runs_on != impl.backend:
                    entry["skipped"] = f"its backward runs on '{runs_on}' (timed in that column)"
                    entries.append(entry)
                    continue
            try:
                measure(entry, impl, p, inp, ref, causal, scale, device, "bwd" in cfg.passes,
                        deferred)
            except FatalCudaError as fe:
                entry["error"] = f"CUDA context broken: {fe}"
                entry["error_stage"] = "fatal"
                entries.append(entry)
                fe.entries = entries
                raise
            entries.append(entry)
            if "error" in entry:
                C.log(f"[bench] {impl.name} {p} d={hdim} causal={causal} s={seqlen}: {C.short_error(entry['error'])}")
            elif isinstance(entry.get("check"), dict) and "error" in entry["check"]:
                C.log(f"[bench] {impl.name} {p} d={hdim} causal={causal} s={seqlen}: check failed to run: "
                      f"{C.short_error(entry['check']['error'])}")
            elif isinstance(entry.get("check"), dict) and not entry["check"].get("passed", True):
                C.log(f"[bench] {impl.name} {p} d={hdim} causal={causal} s={seqlen}: MISMATCH vs the "
                      f"float64 oracle (max abs err {entry['check']['max_abs']:.3g})")
    timed = [item[0] for item in deferred]
    try:
        time_in_rounds(deferred, timer, cfg.rounds, cfg.round_warmup_ms, device)
    except FatalCudaError as fe:
        # every entry of the rounds without a figure (the one that broke the context too) is
        # fatal, so that --resume runs the shape again
        for entry in timed:
            if "ms" not in entry:
                entry["error"] = f"CUDA context broken: {fe}"
                entry["error_stage"] = "fatal"
        fe.entries = entries
        raise
    deferred.clear()
    for entry in entries:
        if "error" in entry and entry.get("error_stage") == "timing":
            C.log(f"[bench] {entry['impl']} {entry['pass']} d={hdim} causal={causal} s={seqlen}: "
                  f"{C.short_error(entry['error'])}")
    _flag_slow_flex(entries)
    del inp, ref
    C.free_memory(device)
    return entries


def _flag_slow_flex(entries: list[dict]) -> None:
    """FlexAttention far below SDPA in the same row is the signature of the unfused fallback."""
    for p in ("fwd", "bwd"):
        flex = [e for e in entries if e["impl"] == "flex" and e["pass"] == p and e.get("tflops")]
        sdpa = [e["tflops"] for e in entries
                if e["impl"] in ("sdpa-flash", "sdpa-cudnn") and e["pass"] == p and e.get("tflops")]
        if flex and sdpa and flex[0]["tflops"] < 0.3 * max(sdpa):
            flex[0]["suspect"] = (f"{flex[0]['tflops']:.0f} TFLOP/s is under 30% of SDPA's "
                                  f"{max(sdpa):.0f}: possibly the unfused fallback")
            C.log(f"[bench] flex {p} d={flex[0]['hdim']} s={flex[0]['seqlen']}: {flex[0]['suspect']}")


def run_sweep(cfg: SpeedConfig, impls: dict[str, Impl], device, timer, on_cell=None,
              show_progress: bool = True) -> dict:
    """Run every cell not in cfg.done_cells. on_cell(entries) is called after each cell (the CLI
    writes the JSON there). Returns {"entries", "skipped_cells", "stopped", "elapsed_s"}."""
    cells = [c for c in cfg.cells() if cell_key(c) not in cfg.done_cells]
    t_start = time.perf_counter()
    bar = C.progress_bar(len(cells), "speed") if show_progress else None
    all_entries: list[dict] = []
    skipped: list[tuple] = []
    stopped = None
    for i, cell in enumerate(cells):
        elapsed = time.perf_counter() - t_start
        if cfg.time_budget_s is not None and elapsed > cfg.time_budget_s:
            skipped = [cell_key(c) for c in cells[i:]]
            stopped = (f"time budget of {cfg.time_budget_s:.0f} s spent after {i} of {len(cells)} "
                       f"shapes; {len(skipped)} left for a resumed run")
            C.log(f"[bench] {stopped}")
            break
        t_cell = time.perf_counter()
        try:
            entries = run_cell(cell, cfg, impls, device, timer, bar)
        except (KeyboardInterrupt, SystemExit):
            raise
        except FatalCudaError as e:
            stopped = f"the CUDA context broke at shape {cell}: {e}; later shapes were not run"
            C.log(f"[bench] FATAL: {stopped}")
            partial = getattr(e, "entries", [])
            all_entries.extend(partial)
            if on_cell is not None and partial:
                on_cell(partial)
            skipped = [cell_key(c) for c in cells[i + 1:]]
            break
        except Exception as e:  # noqa: BLE001 - a bug of the bench: report it, go on with the next shape
            import traceback
            text = f"internal error of the bench at shape {cell}: {C.error_text(e)}"
            C.log(f"[bench] {text}\n{traceback.format_exc(limit=6)}")
            b, h = C.grid_shape(cell[2], cell[0], cfg.tokens, cfg.hidden)
            entries = [{"hdim": cell[0], "causal": cell[1], "seqlen": cell[2], "batch": b, "heads": h,
                        "impl": "bench", "group": "bench", "pass": p, "error": text, "error_stage": "fatal"}
                       for p in cfg.passes]
        for e in entries:
            e["cell_s"] = round(time.perf_counter() - t_cell, 2)
        all_entries.extend(entries)
        if on_cell is not None:
            on_cell(entries)
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return {"entries": all_entries, "skipped_cells": skipped, "stopped": stopped,
            "elapsed_s": round(time.perf_counter() - t_start, 1)}
