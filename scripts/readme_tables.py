"""The README's forward tables from a bench results.json (python -m fusedattn.bench --passes fwd).

    python scripts/readme_tables.py RESULTS.json fwd    # 16-bit: hopper, FA3, cuDNN, SDPA flash
    python scripts/readme_tables.py RESULTS.json fp8    # FP8 kernel / end to end vs FA3-FP8

Bold in the 16-bit table: at or above issue #4's per-cell bars (0.9x FA3, 1.0x cuDNN). In the FP8
table: kernel / FA3-FP8 at or above issue #5's bar (0.9x, from seqlen 2k at head_dim 128 / 256);
a dagger marks a figure whose rounds differ by more than 1.3x (slowest / fastest).
"""
import json
import sys


def main(path, which):
    t, wrong, erratic = {}, set(), set()
    for r in json.load(open(path))["speed"]:
        if r.get("pass") == "fwd" and r.get("tflops"):
            key = (r["hdim"], r["causal"], r["seqlen"])
            t[key + (r["impl"],)] = r["tflops"]
            rounds = [x for x in r.get("ms_rounds") or [] if x]
            if rounds and max(rounds) > 1.3 * min(rounds):
                erratic.add(key + (r["impl"],))
            if r.get("check") and not r["check"].get("passed", True):
                wrong.add(key + (r["impl"],))
    cells = sorted({k[:3] for k in t})
    sl = lambda s: f"{s // 1024}k" if s >= 1024 else str(s)
    if which == "fwd":
        print("| hdim | causal | seqlen | hopper | FA3 | SDPA cuDNN | SDPA flash | hopper / FA3 "
              "| hopper / cuDNN |")
        print("|---|---|---|---|---|---|---|---|---|")
        for c in cells:
            g = lambda impl: t.get(c + (impl,))
            h, f, cu, fl = g("fusedattn-hopper"), g("fa3"), g("sdpa-cudnn"), g("sdpa-flash")
            rf, rc = h / f, h / cu
            bf = f"**{rf:.2f}**" if rf >= 0.9 else f"{rf:.2f}"
            bc = f"**{rc:.2f}**" if rc >= 1.0 else f"{rc:.2f}"
            fls = "-" if fl is None else f"{fl:.0f}"   # SDPA flash: not in every run
            print(f"| {c[0]} | {'yes' if c[1] else 'no'} | {sl(c[2])} | {h:.0f} | {f:.0f} | "
                  f"{cu:.0f} | {fls} | {bf} | {bc} |")
    else:
        print("| hdim | causal | seqlen | fp8 kernel | fp8 end to end | FA3 fp8 | kernel / FA3 fp8 "
              "| end to end / FA3 fp8 |")
        print("|---|---|---|---|---|---|---|---|")
        for c in cells:
            g = lambda impl: t.get(c + (impl,))
            k, e, f = g("fusedattn-hopper-fp8"), g("fusedattn-hopper-e2e-fp8"), g("fa3-fp8")
            if not (k and e and f):
                continue
            mark = {impl: (" (flagged)" if c + (impl,) in wrong else "")
                    + ("†" if c + (impl,) in erratic else "")
                    for impl in ("fusedattn-hopper-fp8", "fusedattn-hopper-e2e-fp8", "fa3-fp8")}
            rk = f"{k / f:.2f}"
            if k / f >= 0.9 and c[0] in (128, 256) and c[2] >= 2048:
                rk = f"**{rk}**"
            print(f"| {c[0]} | {'yes' if c[1] else 'no'} | {sl(c[2])} | "
                  f"{k:.0f}{mark['fusedattn-hopper-fp8']} | {e:.0f}{mark['fusedattn-hopper-e2e-fp8']} "
                  f"| {f:.0f}{mark['fa3-fp8']} | {rk} | {e / f:.2f} |")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "fwd")
