"""Issue #4 / #5 bars from a bench results.json (python -m fusedattn.bench --passes fwd):
per cell hopper / FA3 and hopper / SDPA-cuDNN (16-bit), fp8 kernel and end to end / FA3-FP8;
optionally the same ratios from a second (earlier) results.json beside them.

    python scripts/bench_bars.py RESULTS.json [EARLIER_RESULTS.json]
"""
import json
import sys


def load(path):
    t = {}
    for r in json.load(open(path))["speed"]:
        if r.get("pass") == "fwd" and r.get("tflops"):
            t[(r["hdim"], r["causal"], r["seqlen"], r["impl"])] = r["tflops"]
    return t


def main(argv):
    now = load(argv[0])
    old = load(argv[1]) if len(argv) > 1 else {}
    cells = sorted({k[:3] for k in now})
    fa3_ok = fa3_n = cud_ok = cud_n = fp8_ok = fp8_n = 0
    print("| hdim | causal | seqlen | hopper | FA3 | cuDNN | /FA3 | /cuDNN | fp8 | FA3 fp8 | fp8/FA3 | e2e/FA3 |"
          + (" was /FA3 | was /cuDNN | was fp8/FA3 |" if old else ""))
    print("|---" * (12 + (3 if old else 0)) + "|")
    for d, c, s in cells:
        g = lambda impl, t=now: t.get((d, c, s, impl))
        h, f, cu = g("fusedattn-hopper"), g("fa3"), g("sdpa-cudnn")
        p8, f8, e2e = g("fusedattn-hopper-fp8"), g("fa3-fp8"), g("fusedattn-hopper-e2e-fp8")
        rf = h / f if h and f else None
        rc = h / cu if h and cu else None
        r8 = p8 / f8 if p8 and f8 else None
        re = e2e / f8 if e2e and f8 else None
        if d in (128, 256) and s >= 2048 and rf:
            fa3_n += 1
            fa3_ok += rf >= 0.9
        if s >= 1024 and rc:
            cud_n += 1
            cud_ok += rc >= 1.0
        if d in (128, 256) and s >= 2048 and r8:
            fp8_n += 1
            fp8_ok += r8 >= 0.9
        fmt = lambda x, n=2: "-" if x is None else f"{x:.{n}f}"
        row = (f"| {d} | {'yes' if c else 'no'} | {s} | {fmt(h, 0)} | {fmt(f, 0)} | {fmt(cu, 0)} | "
               f"{fmt(rf)} | {fmt(rc)} | {fmt(p8, 0)} | {fmt(f8, 0)} | {fmt(r8)} | {fmt(re)} |")
        if old:
            go = lambda impl: old.get((d, c, s, impl))
            of = go("fusedattn-hopper") / go("fa3") if go("fusedattn-hopper") and go("fa3") else None
            oc = (go("fusedattn-hopper") / go("sdpa-cudnn")
                  if go("fusedattn-hopper") and go("sdpa-cudnn") else None)
            o8 = (go("fusedattn-hopper-fp8") / go("fa3-fp8")
                  if go("fusedattn-hopper-fp8") and go("fa3-fp8") else None)
            row += f" {fmt(of)} | {fmt(oc)} | {fmt(o8)} |"
        print(row)
    print(f"\n#4 bar 1 (hopper >= 0.9x FA3, hdim 128/256, seqlen >= 2k): {fa3_ok} of {fa3_n}")
    print(f"#4 bar 2 (hopper >= 1.0x cuDNN, seqlen >= 1k): {cud_ok} of {cud_n}")
    print(f"#5 bar (fp8 kernel >= 0.9x FA3-FP8, hdim 128/256, seqlen >= 2k): {fp8_ok} of {fp8_n}")


if __name__ == "__main__":
    main(sys.argv[1:])
