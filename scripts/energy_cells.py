"""Energy per call under the power limit: where the SM clock of the rounds comes from.

Under the 700 W limit a kernel's clock settles where its power meets the limit, so at the limit
time per call = energy per call / 700 W, whatever the cycles. For each cell and implementation,
in rounds with the order rotated: OWN_WARM_S of its own load, then calls for MEASURE_S; NVML's
energy counter (nvmlDeviceGetTotalEnergyConsumption, mJ) and the wall clock around them, the SM
clock sampled between calls, and with it NVML's clock event reasons (why the clock is below its
maximum: the power cap, a hardware slowdown, thermal limits). Reports per call: time, energy, mean
power, median SM clock, and the cycles per call (time x clock); then each implementation over the
first (ours); and the share of samples in which each reason was set. Medians over the rounds.

    [EC_CELLS="d,causal,seqlen;..."] [EC_ROUNDS=3] python3 scripts/energy_cells.py OUT_DIR \\
        [IMPL ...]   (default: fusedattn-hopper sdpa-cudnn fa3; hopper:VARIANT a candidate)
"""
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from device_cells import cells  # noqa: E402
from fusedattn.bench.impls import discover  # noqa: E402
from fusedattn.bench.speed import CellInputs  # noqa: E402

CELLS = cells("EC_CELLS", ((64, False, 1024), (64, True, 1024), (128, False, 1024),
                           (128, True, 1024), (256, False, 1024), (256, True, 1024)))
ROUNDS = int(os.environ.get("EC_ROUNDS", "3"))
OWN_WARM_S = float(os.environ.get("EC_WARM_S", "0.6"))
MEASURE_S = float(os.environ.get("EC_MEASURE_S", "1.0"))
TOKENS, HIDDEN = 16384, 2048


def nvml():
    import pynvml
    pynvml.nvmlInit()
    return pynvml, pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())


# NVML's clock event (throttle) reasons: bit -> name
REASONS = {0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x20: "sw_thermal", 0x40: "hw_thermal",
           0x80: "hw_power_brake", 0x100: "display_clocks", 0x1: "idle"}


def reasons_fn(pn):
    return getattr(pn, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
        pn.nvmlDeviceGetCurrentClocksThrottleReasons


def measure(fn, args, pn, hdl):
    """Calls of fn for about MEASURE_S after OWN_WARM_S of them: (s/call, mJ/call, MHz median,
    {reason: share of the samples in which NVML reported it})."""
    t_end = time.perf_counter() + OWN_WARM_S
    while time.perf_counter() < t_end:
        for _ in range(20):
            fn(*args)
        torch.cuda.synchronize()
    clocks, reasons = [], []
    why = reasons_fn(pn)
    n = 0
    e0 = pn.nvmlDeviceGetTotalEnergyConsumption(hdl)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < MEASURE_S:
        for _ in range(20):
            fn(*args)
        n += 20
        clocks.append(pn.nvmlDeviceGetClockInfo(hdl, pn.NVML_CLOCK_SM))
        reasons.append(why(hdl))
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    e1 = pn.nvmlDeviceGetTotalEnergyConsumption(hdl)
    shares = {name: sum(bool(r & bit) for r in reasons) / len(reasons)
              for bit, name in REASONS.items()}
    return (t1 - t0) / n, (e1 - e0) / n, statistics.median(clocks), shares


def variant_impl(variant):
    """fusedattn-hopper's Impl with the kernel called on hopper_fwd.variant_config(variant) (the
    config built once per (head_dim, causal), outside the timed calls)."""
    from dataclasses import replace
    from functools import lru_cache

    from fusedattn.kernels import hopper_fwd
    base = discover(["fusedattn-hopper"], "cuda")[0]["fusedattn-hopper"]
    assert base.layout == "bshd"

    @lru_cache(maxsize=None)
    def config(d, causal):
        return hopper_fwd.variant_config(variant, d, causal)

    def fn(q, k, v, causal, scale):
        return hopper_fwd.forward(q, k, v, causal, scale, config=config(q.shape[-1], causal))[0]
    return replace(base, name=f"hopper:{variant}", fn=fn)


def main(argv):
    out = argv[0]
    names = argv[1:] or ["fusedattn-hopper", "sdpa-cudnn", "fa3"]
    os.makedirs(out, exist_ok=True)
    pn, hdl = nvml()
    impls, missing = discover([n for n in names if not n.startswith("hopper:")], "cuda")
    for n in names:  # hopper:VARIANT, a named candidate (hopper_fwd.VARIANTS) on the row's impl
        if n.startswith("hopper:"):
            impls[n] = variant_impl(n.split(":", 1)[1])
    for n, why in missing.items():
        print(f"{n}: unavailable ({why})")
    names = [n for n in names if n in impls]
    rows = []
    for d, causal, s in CELLS:
        inp = CellInputs(TOKENS // s, s, HIDDEN // d, d, "cuda")
        scale = d ** -0.5
        res = {n: [] for n in names}
        for r in range(ROUNDS):
            order = names[r % len(names):] + names[:r % len(names)]
            for n in order:
                args, _ = inp.args_for(impls[n], causal)
                fn = impls[n].fn
                res[n].append(measure(lambda q, k, v: fn(q, k, v, causal, scale), args, pn, hdl))
        flops = 4 * TOKENS * HIDDEN * s * (0.5 if causal else 1.0)
        line = [f"d{d} {'c' if causal else 'n'} s{s}:"]
        base = None
        for n in names:
            t = statistics.median(x[0] for x in res[n])
            e = statistics.median(x[1] for x in res[n])
            mhz = statistics.median(x[2] for x in res[n])
            rec = {"hdim": d, "causal": causal, "seqlen": s, "impl": n, "s_per_call": t,
                   "mj_per_call": e, "watts": e / 1e3 / t, "sm_mhz": mhz,
                   "mcycles_per_call": t * mhz, "tflops": flops / t / 1e12,
                   "clock_reasons": {k: statistics.mean(x[3][k] for x in res[n])
                                     for k in REASONS.values()},
                   "rounds": res[n]}
            rows.append(rec)
            base = base or rec
            line.append(f"{n} {rec['tflops']:.0f} TF/s {e:.1f} mJ ({e / base['mj_per_call']:.3f}x)"
                        f" {rec['watts']:.0f} W {mhz:.0f} MHz {t * mhz * 1e3:.0f} kcyc"
                        f" ({t * mhz / base['mcycles_per_call']:.3f}x)")
        print(" | ".join(line), flush=True)
        for rec in rows[-len(names):]:
            set_ = {k: v for k, v in rec["clock_reasons"].items() if v}
            print(f"    {rec['impl']}: clock reasons (share of samples) "
                  + (" ".join(f"{k} {v:.2f}" for k, v in set_.items()) or "none"), flush=True)
    with open(os.path.join(out, "energy.json"), "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
