"""Which GPU kernels each implementation launches for a bench cell, with the launch shape the
profiler records (grid, block, registers per thread, shared memory) and the mean duration: how
the anchors (FA3, SDPA-cuDNN) tile a problem beside ours. cuDNN's kernel names carry its tile
(e.g. ..._128x128x128_...), so this is how we learn what it runs at the cells where it leads.

    [CELLS="d,causal,seqlen;..."] python3 scripts/anchor_kernels.py OUT_DIR [IMPL ...]

IMPL: bench implementation names (default: fusedattn-hopper fa3 sdpa-cudnn); fp8 ones
(fusedattn-hopper-fp8, fa3-fp8) take the bench's prepared inputs. Shapes are the bench grid's
(batch * seqlen = 16384, heads * head_dim = 2048). Writes OUT_DIR/kernels.json and prints a
markdown table. Needs a CUDA GPU (and FA3's wheel on PYTHONPATH for fa3).
"""
import json
import os
import sys
import tempfile

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from device_cells import cells  # noqa: E402
from fusedattn.bench import common as C  # noqa: E402
from fusedattn.bench.impls import discover  # noqa: E402

DEFAULT_CELLS = ((64, True, 1024), (128, True, 1024), (256, True, 1024), (64, False, 1024))
CALLS = 10


def kernel_events(fn) -> list[dict]:
    """Kernel events of CALLS calls of fn (after 3 untimed ones), grouped by name."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(CALLS):
            fn()
        torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        trace = json.load(open(f.name))
    by_name: dict[str, dict] = {}
    for ev in trace.get("traceEvents", []):
        if ev.get("cat") != "kernel":
            continue
        a = ev.get("args", {})
        k = by_name.setdefault(ev["name"], {
            "name": ev["name"], "grid": a.get("grid"), "block": a.get("block"),
            "regs": a.get("registers per thread"), "smem": a.get("shared memory"),
            "calls": 0, "total_us": 0.0})
        k["calls"] += 1
        k["total_us"] += float(ev.get("dur", 0.0))
    out = []
    for k in by_name.values():
        k["mean_us"] = round(k.pop("total_us") / max(1, k["calls"]), 1)
        k["per_call"] = round(k["calls"] / CALLS, 2)
        out.append(k)
    return sorted(out, key=lambda k: -k["mean_us"] * k["per_call"])


def main() -> None:
    out_dir = sys.argv[1]
    names = sys.argv[2:] or ["fusedattn-hopper", "fa3", "sdpa-cudnn"]
    os.makedirs(out_dir, exist_ok=True)
    impls, missing = discover(names, "cuda")
    for n, why in missing.items():
        print(f"{n}: unavailable: {why}")
    rows = []
    for d, causal, s in cells("CELLS", DEFAULT_CELLS):
        b, h = C.grid_shape(s, d)
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, generator=g)
                   for _ in range(3))
        for name, impl in impls.items():
            args = (q, k, v) if impl.layout == "bshd" else tuple(x.transpose(1, 2).contiguous() for x in (q, k, v))
            if impl.prepare is not None:
                args = impl.prepare(q, k, v, causal)
            try:
                evs = kernel_events(lambda: impl.fn(*args, causal, None))
            except Exception as e:  # noqa: BLE001 - reported, the other cells go on
                print(f"d{d} causal={int(causal)} s{s} {name}: {type(e).__name__}: {e}")
                continue
            rows.append({"d": d, "causal": causal, "seqlen": s, "batch": b, "heads": h,
                         "impl": name, "kernels": evs})
    json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
               "cudnn": torch.backends.cudnn.version(), "rows": rows},
              open(os.path.join(out_dir, "kernels.json"), "w"), indent=1)
    print("| cell | impl | kernel | grid | block | regs | smem B | per call | mean us |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        for kk in r["kernels"]:
            print(f"| d{r['d']} {'causal' if r['causal'] else 'non-causal'} {r['seqlen']} | "
                  f"{r['impl']} | {kk['name'][:90]} | {kk['grid']} | {kk['block']} | {kk['regs']} | "
                  f"{kk['smem']} | {kk['per_call']} | {kk['mean_us']} |")


if __name__ == "__main__":
    main()
