"""The command line of ``python -m fusedattn.bench`` (``make bench``)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from . import common as C

EPILOG = """\
examples:
  python -m fusedattn.bench                       the full grid (36 shapes), fwd and bwd, all backends
  python -m fusedattn.bench --quick               12 shapes: head_dim 64/128/256 x seqlen 2k/8k x causal
  python -m fusedattn.bench --hdims 128 --seqlens 4096,8192 --causal no --passes fwd
  python -m fusedattn.bench --backends triton,sdpa-flash,fa3
  python -m fusedattn.bench --accuracy --memory --no-speed
  python -m fusedattn.bench --hdims 64 --out part1 && \\
  python -m fusedattn.bench --hdims 128 --resume part1/results.json --out part2   (a grid in parts)
  python -m fusedattn.bench --compare OLD.json                run, then compare with an older run
  python -m fusedattn.bench --compare OLD.json NEW.json       compare two runs, run nothing
  python -m fusedattn.bench --report DIR/results.json         re-render table.md and the plots

Without a CUDA GPU it runs a small problem through fusedattn.attention on the CPU, checks it
against the float64 oracle and exits 0 if it matched, 1 if not. On a GPU it exits 1 if any
fusedattn result failed its check or raised an error. See benchmarks/README.md for the method.
"""


def _l2_bytes():
    """The current GPU's L2 size in bytes, as the driver reports it (None where torch does not)."""
    return getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "L2_cache_size",
                   None)


def _ints(text: str | None, what: str) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        vals = tuple(int(t) for t in text.replace(" ", "").split(",") if t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what} must be a comma-separated list of integers, got {text!r}")
    if not vals or any(v <= 0 for v in vals):
        raise argparse.ArgumentTypeError(f"{what} must be positive integers, got {text!r}")
    return vals


def _number(kind, low: float, strict: bool):
    """An argparse type: kind (int / float) at least low (above it when strict)."""
    def parse(text: str):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {'an integer' if kind is int else 'a number'}, "
                                             f"got {text!r}")
        if v != v or v in (float("inf"), float("-inf")) or (v <= low if strict else v < low):
            raise argparse.ArgumentTypeError(f"must be finite and {'>' if strict else '>='} {low:g}, "
                                             f"got {text}")
        return v
    return parse


def _seed(text: str) -> int:
    """--seed: an integer in [0, 2**32), so that every seed derived from it (speed.py multiplies it
    by 1_000_003 and adds the cell's numbers) is one torch.manual_seed takes."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}")
    if not 0 <= v < 2 ** 32:
        raise argparse.ArgumentTypeError(f"must be in [0, 2**32), got {text}")
    return v


_POS_INT = _number(int, 0, True)
_POS_FLOAT = _number(float, 0, True)
_NONNEG_FLOAT = _number(float, 0, False)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m fusedattn.bench",
        description=("fusedattn's benchmark: TFLOP/s of every fusedattn backend beside the anchors "
                     "(PyTorch SDPA flash and cuDNN, FlexAttention, FlashAttention-3) on the "
                     "FlashAttention-3 paper's grid, each result checked against a float64 oracle."),
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group("what to run")
    g.add_argument("--passes", default="fwd,bwd", help="fwd, bwd or fwd,bwd (default)")
    g.add_argument("--hdims", default=None, help="head dims, comma list (default 64,128,256)")
    g.add_argument("--seqlens", default=None,
                   help="sequence lengths, comma list (default 512,1024,...,16384); batch = 16384 // seqlen")
    g.add_argument("--causal", choices=("yes", "no", "both"), default="both")
    g.add_argument("--backends", default="fusedattn,anchors",
                   help=("comma list: fusedattn backends (hopper, triton, reference; NAME-fp8 for an "
                         "fp8 column), anchors (sdpa-flash, sdpa-cudnn, flex, fa3, fa3-fp8) or groups "
                         "fusedattn (all but reference), anchors, all. Default fusedattn,anchors"))
    g.add_argument("--quick", action="store_true",
                   help="head_dim 64,128,256 x seqlen 2048,8192 x causal no/yes (12 shapes) unless "
                        "--hdims/--seqlens say otherwise")
    g.add_argument("--accuracy", action="store_true", help="also the accuracy table (per backend and dtype)")
    g.add_argument("--memory", action="store_true", help="also the peak-memory table over growing seqlen")
    g.add_argument("--no-speed", action="store_true", help="skip the speed sweep (with --accuracy / --memory)")
    g.add_argument("--memory-seqlens", default=None, help="seqlens of --memory (default 1024..65536)")
    g.add_argument("--cpu", action="store_true", help="run the CPU check even if a GPU is present")
    g.add_argument("--list", action="store_true", help="list the implementations and whether they run; exit")
    # For tests: run the GPU code path (sweep, tables, plots) on another device with the host clock,
    # on a smaller grid.
    g.add_argument("--sweep-device", default=None, help=argparse.SUPPRESS)
    g.add_argument("--tokens", type=_POS_INT, default=C.TOKENS, help=argparse.SUPPRESS)
    g.add_argument("--hidden", type=_POS_INT, default=C.HIDDEN, help=argparse.SUPPRESS)
    t = p.add_argument_group("timing")
    t.add_argument("--warmup", type=_NONNEG_FLOAT, default=C.WARMUP_MS, help="each implementation's own warm-up right before each of its timings (do_bench's warm-up), ms (default 300)")
    t.add_argument("--rep", type=_POS_FLOAT, default=C.REP_MS, help="do_bench repetition time, ms (default 100)")
    t.add_argument("--time-budget", type=_POS_FLOAT, default=None, metavar="SECONDS",
                   help="start no new shape after this many seconds; the rest is listed for --resume")
    t.add_argument("--rounds", type=_POS_INT, default=5,
                   help="timing rounds per shape, the order of the implementations rotated each "
                        "round; each round's do_bench repeats for rep / rounds ms (default 5)")
    t.add_argument("--round-warmup", type=_NONNEG_FLOAT, default=0.0, metavar="MS",
                   help="a shared warm-up of the shape before its rounds, every implementation in "
                        "turn, ms of wall time (default 0: each has its own, --warmup)")
    t.add_argument("--seed", type=_seed, default=0, help="inputs' seed, 0 to 2**32 - 1 (default 0)")
    o = p.add_argument_group("output")
    o.add_argument("--out", default=None,
                   help="output folder (default benchmarks/results/<date>-<gpu>/ under the current directory)")
    o.add_argument("--compare", nargs="+", metavar="JSON",
                   help="OLD.json: compare this run with it; OLD.json NEW.json: compare the two, run nothing")
    o.add_argument("--compare-threshold", type=_NONNEG_FLOAT, default=0.03,
                   help="a ratio beyond 1 +- this is faster / slower (default 0.03)")
    o.add_argument("--resume", metavar="JSON",
                   help="keep the shapes already measured in this results.json and run the rest")
    o.add_argument("--report", metavar="JSON",
                   help="re-render table.md and the plots from a results.json, next to it or into "
                        "--out (the results.json itself is left as it is); run nothing")
    o.add_argument("--no-plots", action="store_true")
    return p


def _config(args, parser):
    try:
        passes = tuple(x.strip() for x in args.passes.split(",") if x.strip())
        if not passes or any(x not in C.PASSES for x in passes):
            raise argparse.ArgumentTypeError(f"--passes takes fwd, bwd or fwd,bwd; got {args.passes!r}")
        hdims = _ints(args.hdims, "--hdims")
        seqlens = _ints(args.seqlens, "--seqlens")
        mem_seqlens = _ints(args.memory_seqlens, "--memory-seqlens")
    except argparse.ArgumentTypeError as e:
        parser.error(str(e))
    if hdims and any(d % 8 or d > 256 for d in hdims):
        parser.error(f"--hdims: each head_dim must be a multiple of 8, at most 256; got {args.hdims}")
    if args.quick:
        hdims = hdims or C.QUICK_HDIMS
        seqlens = seqlens or C.QUICK_SEQLENS
    causals = {"yes": (True,), "no": (False,), "both": (False, True)}[args.causal]
    if args.compare and len(args.compare) > 2:
        parser.error("--compare takes OLD.json, or OLD.json NEW.json")
    from .speed import SpeedConfig
    return SpeedConfig(passes=passes, hdims=hdims or C.HDIMS, seqlens=seqlens or C.SEQLENS,
                       causals=causals, seed=args.seed, tokens=args.tokens, hidden=args.hidden,
                       time_budget_s=args.time_budget, rounds=args.rounds,
                       round_warmup_ms=args.round_warmup), mem_seqlens


def _results_file(path: str, flag: str, parser) -> dict:
    """A results.json given to --report / --compare / --resume, read and checked before any work:
    a clear error (exit 2) if it is missing, not JSON or not a bench result."""
    try:
        data = C.read_json(path)
    except FileNotFoundError:
        parser.error(f"{flag}: no such file: {path}")
    except IsADirectoryError:
        parser.error(f"{flag}: {path} is a folder; give its results.json")
    except (OSError, ValueError) as e:
        parser.error(f"{flag}: {path} is not a readable JSON file ({C.error_text(e)})")
    if not isinstance(data, dict) or data.get("schema") != C.SCHEMA:
        parser.error(f"{flag}: {path} is not a results.json of python -m fusedattn.bench (no "
                     f"\"schema\": \"{C.SCHEMA}\")")
    return data


def _check_out(path: str | None, parser) -> None:
    if path is not None and Path(path).exists() and not Path(path).is_dir():
        parser.error(f"--out: {path} exists and is not a folder")


# the options that only the GPU sweep uses (the CPU check ignores them; it says so)
_SWEEP_OPTIONS = ("passes", "hdims", "seqlens", "causal", "backends", "quick", "rounds",
                  "round_warmup", "warmup", "rep", "time_budget", "compare", "compare_threshold",
                  "resume", "no_plots", "memory_seqlens")


def _ignored_on_cpu(args, parser) -> list[str]:
    return ["--" + k.replace("_", "-") for k in _SWEEP_OPTIONS
            if getattr(args, k) != parser.get_default(k)]


def _out_text(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def _write_outputs(results: dict, out_dir: Path, plots: bool, with_json: bool = True) -> list[Path]:
    from . import report

    written = []
    if with_json:
        C.write_json(out_dir / "results.json", results)
        written.append(out_dir / "results.json")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "table.md").write_text(report.render(results))
    written.append(out_dir / "table.md")
    if plots:
        try:
            from . import plot
            for pass_ in ("fwd", "bwd"):
                pth = plot.plot_speed(results.get("speed", []), pass_, out_dir / f"speed-{pass_}.png",
                                      results.get("env"))
                if pth:
                    written.append(pth)
            if results.get("memory"):
                pth = plot.plot_memory(results["memory"], out_dir / "memory.png", results.get("env"))
                if pth:
                    written.append(pth)
        except Exception as e:  # noqa: BLE001
            C.log(f"[bench] plots failed: {C.error_text(e)}")
            results.setdefault("notes", []).append(f"plots failed: {C.error_text(e)}")
    return written


def _compare_text(old_path: str, old: dict, new: dict, new_name: str,
                  threshold: float) -> tuple[str, str]:
    """(the short comparison for the terminal, the full one with every cell for compare.md)"""
    from . import compare
    cmp = compare.compare(old, new, threshold)
    return (compare.render(cmp, old_name=old_path, new_name=new_name),
            compare.render(cmp, old_name=old_path, new_name=new_name, all_cells=True))


def _cpu_main(args, reason: str, ignored: list[str]) -> int:
    from .cpu import render_cpu, run_cpu_check

    try:
        import fusedattn  # noqa: F401
    except Exception as e:  # noqa: BLE001
        _out_text(f"No CUDA GPU found ({reason}), and fusedattn does not import: {C.error_text(e)}\n")
        return 2
    rows = run_cpu_check(seed=args.seed)
    text = render_cpu(rows, reason)
    ok = all(r.get("passed") for r in rows) and bool(rows)
    results = {"schema": C.SCHEMA, "env": C.environment("cpu"), "cpu_check": rows}
    extra = []
    if args.accuracy:
        from .accuracy import run_accuracy
        from .impls import discover, parse_selection
        sel = [n for n in parse_selection("all") if n.startswith("fusedattn-") and not n.endswith("-fp8")]
        impls, _ = discover(sel, "cpu")
        acc = run_accuracy(impls, "cpu", causals=(False, True), dtypes=("bfloat16", "float32"),
                           seed=args.seed, progress=False)
        results["accuracy"] = acc
        from .report import accuracy_table
        extra += ["", "Accuracy on the CPU (batch 1, seqlen 128, heads 2, head_dim 64):", ""]
        extra += accuracy_table(acc)
    if args.memory:
        extra += ["", "--memory needs a CUDA GPU: skipped."]
    if ignored:
        extra += ["", f"Ignored without a GPU (the speed sweep's options): {', '.join(ignored)}."]
    if args.out:
        out_dir = Path(args.out)
        C.write_json(out_dir / "results.json", results)
        extra += ["", f"written: {out_dir / 'results.json'}"]
    if extra:
        text = "\n".join(extra).lstrip("\n") + "\n\n" + text
    _out_text(text)
    return 0 if ok else 1


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    cfg, mem_seqlens = _config(args, parser)
    _check_out(args.out, parser)
    # every file the call reads is checked before any work (a sweep must not run for minutes and
    # then find its --compare file missing)
    report_in = _results_file(args.report, "--report", parser) if args.report else None
    compare_in = [_results_file(f, "--compare", parser) for f in args.compare or []]
    resume_in = _results_file(args.resume, "--resume", parser) if args.resume else None

    if args.report:
        src = Path(args.report)
        out_dir = Path(args.out) if args.out else src.parent
        # the folder stays self-contained (table.md and plots beside the results.json they show):
        # the input is left as it is, copied where the folder has no results.json, and a folder
        # holding another run's results.json is refused
        target = out_dir / "results.json"
        same = target.exists() and target.resolve() == src.resolve()
        copy = not same
        if copy and target.exists() and target.read_bytes() != src.read_bytes():
            parser.error(f"--report: {out_dir} holds another run's results.json; give --out a "
                         "folder of its own")
        from . import report
        text = report.render(report_in)
        written = _write_outputs(report_in, out_dir, not args.no_plots, with_json=False)
        if copy:
            import shutil
            shutil.copyfile(src, target)
            written.insert(0, target)
        _out_text(text)
        _out_text("written: " + ", ".join(str(w) for w in written) + "\n")
        return 0

    if args.compare and len(args.compare) == 2:
        old_p, new_p = args.compare
        text, full = _compare_text(old_p, compare_in[0], compare_in[1], new_p,
                                   args.compare_threshold)
        _out_text(text)
        if args.out:
            Path(args.out).mkdir(parents=True, exist_ok=True)
            (Path(args.out) / "compare.md").write_text(full)
            _out_text(f"written: {Path(args.out) / 'compare.md'} (with every cell's ratio)\n")
        return 0

    try:
        from .impls import parse_selection
        selection = parse_selection(args.backends)
    except ValueError as e:
        parser.error(f"--backends: {e}")

    if not selection:
        parser.error(f"--backends: nothing selected in {args.backends!r}")
    args.compare_in, args.resume_in = compare_in, resume_in
    if args.sweep_device:
        return _gpu_main(args, cfg, selection, mem_seqlens, torch.device(args.sweep_device))
    if args.cpu or not torch.cuda.is_available():
        reason = "--cpu was given" if args.cpu else "torch.cuda.is_available() is False"
        if args.list:
            _out_text(f"No CUDA GPU ({reason}): only the CPU check runs (fusedattn backend 'auto').\n")
            return 0
        return _cpu_main(args, reason, _ignored_on_cpu(args, parser))
    return _gpu_main(args, cfg, selection, mem_seqlens, torch.device("cuda"))


def _gpu_main(args, cfg, selection, mem_seqlens, device) -> int:
    from . import report
    from .impls import discover

    t0 = time.perf_counter()
    on_cuda = device.type == "cuda"
    timer = C.cuda_timer(args.warmup, args.rep / max(1, args.rounds)) if on_cuda else C.cpu_timer(reps=3)
    env = C.environment(device)
    impls, missing = discover(selection, device)
    lines = [f"[bench] {' | '.join(report.header_lines(env))}"]
    lines += [f"[bench] runs: {', '.join(impls) or 'nothing'}"]
    lines += [f"[bench] not available: {k}: {v}" for k, v in missing.items()]
    for name in impls:
        if impls[name].note:
            lines.append(f"[bench]   {name}: {impls[name].note}")
    for line in lines:
        C.log(line)
    if args.list:
        _out_text("\n".join(lines) + "\n")
        return 0

    out_dir = Path(args.out) if args.out else C.default_out_dir(env)
    results = {
        "schema": C.SCHEMA, "env": env, "method": (report.method_record(args.warmup, args.rep, rounds=args.rounds,
                                                          round_warmup_ms=args.round_warmup,
                                                          l2_bytes=_l2_bytes()) if on_cuda else
                   report.method_record(0, 0, "host clock, median of 3 runs (not a GPU run)",
                                        rounds=args.rounds, round_warmup_ms=args.round_warmup)),
        "config": {"argv": sys.argv[1:], "passes": cfg.passes, "hdims": cfg.hdims, "seqlens": cfg.seqlens,
                   "causal": cfg.causals, "tokens": cfg.tokens, "hidden": cfg.hidden, "dtype": "bfloat16",
                   "backends": selection, "warmup_ms": args.warmup, "rep_ms": args.rep, "seed": args.seed,
                   "quick": args.quick, "time_budget_s": args.time_budget},
        "implementations": {n: {"group": i.group, "family": i.family, "passes": i.passes,
                                "layout": i.layout, "note": i.note} for n, i in impls.items()},
        "unavailable": missing, "speed": [], "notes": [], "status": "running",
    }
    if args.resume:
        prev = args.resume_in
        broken = {(int(e["hdim"]), bool(e["causal"]), int(e["seqlen"])) for e in prev.get("speed", [])
                  if e.get("error_stage") == "fatal"}
        kept = [e for e in prev.get("speed", [])
                if (int(e["hdim"]), bool(e["causal"]), int(e["seqlen"])) not in broken]
        results["speed"] = kept
        cfg.done_cells = {(int(e["hdim"]), bool(e["causal"]), int(e["seqlen"])) for e in kept}
        results["previous_runs"] = prev.get("previous_runs", []) + [
            {"env": prev.get("env"), "config": prev.get("config"), "from": str(args.resume)}]
        for key in ("accuracy", "memory"):
            if key in prev:
                results[key] = prev[key]
        results["notes"].append(f"resumed from {args.resume}: {len(cfg.done_cells)} shapes kept from it")
    C.write_json(out_dir / "results.json", results)
    C.log(f"[bench] results -> {out_dir}/")

    import signal
    import traceback

    def _term(signum, frame):  # a `timeout` sends SIGTERM: stop, then write what we have
        raise KeyboardInterrupt(f"signal {signum}")
    try:
        old_handler = signal.signal(signal.SIGTERM, _term)
    except Exception:  # noqa: BLE001 - not in the main thread
        old_handler = None

    def over_budget(what: str) -> bool:
        if args.time_budget is not None and time.perf_counter() - t0 > args.time_budget:
            results["notes"].append(f"time budget of {args.time_budget:.0f} s spent: {what} not run")
            C.log(f"[bench] {results['notes'][-1]}")
            return True
        return False

    interrupted = None
    try:
        _phases(args, cfg, impls, device, timer, results, out_dir, mem_seqlens, on_cuda, over_budget)
    except KeyboardInterrupt as e:
        interrupted = f"interrupted ({e or 'Ctrl-C'}): the results measured so far are kept"
    except Exception:  # noqa: BLE001 - a bug here must not lose the measurements
        interrupted = "internal error of the bench: " + traceback.format_exc(limit=6)
    finally:
        if old_handler is not None:
            signal.signal(signal.SIGTERM, old_handler)
    if interrupted:
        results["notes"].append(interrupted)
        C.log(f"[bench] {interrupted}")
        if not args.no_speed:
            done = {(int(e["hdim"]), bool(e["causal"]), int(e["seqlen"])) for e in results["speed"]}
            left = [c for c in cfg.cells() if c not in done]
            if left:
                results["skipped_cells"] = left

    failures = _fusedattn_failures(results)
    stopped = [n for n in results["notes"]
               if "time budget" in n or "CUDA context broke" in n or n.startswith(("interrupted", "internal error"))]
    results["status"] = ("incomplete: " + "; ".join(x.splitlines()[0] for x in stopped)) if stopped else "complete"
    if failures:
        results["status"] += f"; {len(failures)} fusedattn result(s) wrong or failed"
    results["elapsed_s"] = round(time.perf_counter() - t0, 1)
    try:
        written = _write_outputs(results, out_dir, not args.no_plots)
    except Exception as e:  # noqa: BLE001
        C.write_json(out_dir / "results.json", results)
        written = [out_dir / "results.json"]
        C.log(f"[bench] writing table.md / plots failed: {C.error_text(e)}")
    compare_text = ""
    if args.compare:
        try:
            compare_text, full = _compare_text(args.compare[0], args.compare_in[0], results,
                                               str(out_dir / "results.json"), args.compare_threshold)
            (out_dir / "compare.md").write_text(full)
            written.append(out_dir / "compare.md")
        except Exception as e:  # noqa: BLE001
            compare_text = f"--compare failed: {C.error_text(e)}\n"
    C.write_json(out_dir / "results.json", results)
    if compare_text:
        _out_text(compare_text + "\n")
    try:
        _out_text(report.render(results))
    except Exception as e:  # noqa: BLE001
        _out_text(f"the report could not be rendered ({C.error_text(e)}); the figures are in "
                  f"{out_dir / 'results.json'}\n")
    if results.get("skipped_cells"):
        _out_text(f"\nTo finish: python -m fusedattn.bench {' '.join(_resume_args(args))} "
                  f"--resume {out_dir / 'results.json'} --out {out_dir}-rest\n")
    _out_text(f"\nwritten ({results['elapsed_s']:.0f} s): " + ", ".join(str(w) for w in written) + "\n")
    for f in failures[:5]:
        _out_text(f"FAILED: {f[:160]}\n")
    if len(failures) > 5:
        _out_text(f"FAILED: ... and {len(failures) - 5} more (table.md, results.json)\n")
    if interrupted and interrupted.startswith("interrupted"):
        return 130
    return 1 if failures or (interrupted and interrupted.startswith("internal error")) else 0


def _phases(args, cfg, impls, device, timer, results, out_dir, mem_seqlens, on_cuda, over_budget) -> None:
    if not args.no_speed:
        todo = [c for c in cfg.cells() if c not in cfg.done_cells]
        C.log(f"[bench] speed: {len(todo)} shapes x {len(impls)} implementations, passes "
              f"{','.join(cfg.passes)}; do_bench warmup {args.warmup} ms, rep {args.rep} ms")
        from .speed import run_sweep

        def on_cell(entries):
            results["speed"].extend(entries)
            C.write_json(out_dir / "results.json", results)

        sweep = run_sweep(cfg, impls, device, timer, on_cell=on_cell)
        results["speed_elapsed_s"] = sweep["elapsed_s"]
        if sweep["stopped"]:
            results["notes"].append(sweep["stopped"])
            results["skipped_cells"] = sweep["skipped_cells"]
    if args.accuracy and not over_budget("--accuracy"):
        from .accuracy import ACC_DTYPES, run_accuracy
        from .impls import discover as _discover
        acc_impls = dict(impls)
        if "fusedattn-reference" not in acc_impls:
            ref_impls, _ = _discover(["fusedattn-reference"], device)
            acc_impls.update(ref_impls)
        t_acc = time.perf_counter()
        results["accuracy"] = run_accuracy(acc_impls, device, causals=cfg.causals, seed=args.seed,
                                           dtypes=ACC_DTYPES if on_cuda else ("bfloat16", "float32"))
        results["accuracy_elapsed_s"] = round(time.perf_counter() - t_acc, 1)
        C.write_json(out_dir / "results.json", results)
    if args.memory and not on_cuda:
        results["notes"].append("--memory needs a CUDA GPU: skipped")
    elif args.memory and not over_budget("--memory"):
        from .memory import MEMORY_SEQLENS, run_memory
        t_mem = time.perf_counter()
        results["memory"] = run_memory(impls, device, seqlens=mem_seqlens or MEMORY_SEQLENS)
        results["memory_elapsed_s"] = round(time.perf_counter() - t_mem, 1)
        C.write_json(out_dir / "results.json", results)


def _resume_args(args) -> list[str]:
    out = []
    skip_next = False
    for a in sys.argv[1:]:
        if skip_next:
            skip_next = False
            continue
        if a in ("--resume", "--out", "--time-budget", "--compare"):
            skip_next = True
            continue
        if a.startswith(("--resume=", "--out=", "--time-budget=", "--compare=")):
            continue
        out.append(a)
    return out


def _fusedattn_failures(results: dict) -> list[str]:
    out = []
    for e in results.get("speed", []):
        if e.get("group") not in ("fusedattn", "bench") or "skipped" in e:
            continue
        where = f"{e['impl']} {e['pass']} d{e['hdim']} {'causal' if e['causal'] else 'full'} s{e['seqlen']}"
        if "error" in e:
            out.append(f"{where}: {str(e['error'])[:200]}")
        elif isinstance(e.get("check"), dict):
            chk = e["check"]
            if "error" in chk:
                out.append(f"{where}: check did not run: {str(chk['error'])[:200]}")
            elif not chk.get("passed", True):
                out.append(f"{where}: does not match the float64 oracle (max abs err "
                           f"{C.num(chk.get('max_abs'))}, limit {C.num(chk.get('limit'))})")
    for r in results.get("accuracy", []) or []:
        if r.get("group") != "fusedattn":
            continue
        where = f"accuracy {r['impl']} {r['dtype']} {r['inputs']} {'causal' if r['causal'] else 'full'}"
        if "error" in r:
            out.append(f"{where}: {str(r['error'])[:200]}")
        elif r.get("passed") is False or r.get("grads_passed") is False:
            out.append(f"{where}: error beyond 2x plain PyTorch's + 1e-3")
    return out
