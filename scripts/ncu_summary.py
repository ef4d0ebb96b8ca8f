"""Summaries of the per-instruction source pages that scripts/ncu_profile.sh exports (NAME.sass.csv,
or .sass.csv.gz as kept under benchmarks/results/), on any machine:

    python3 scripts/ncu_summary.py A.sass.csv[.gz] [B.sass.csv[.gz] ...] [--top STALL]

Per file (the profiled kernel's section; helper kernels such as PyTorch's fill are skipped):
total warp-state samples, the stall reasons summed over the instructions that run more than
2000 times (the hot code; idle padding warps and prologues drop out), executed instructions by
opcode (also per score element when --elements N is given), and with --top STALL the twelve
instructions with most samples of that reason (e.g. stall_no_inst, stall_long_sb), with the two
instructions before each. Samples are comparable between files only after scaling by the
resident warps per scheduler (FA3's producer warpgroup exits three of its warps; ours does not).
"""
import argparse
import collections
import csv
import gzip
import re


def load(path):
    """(header, rows) of the profiled kernel's section of an ncu source-page CSV."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        rows = list(csv.reader(f))
    sections, cur = [], None
    for r in rows:
        if r and r[0] == "Kernel Name":
            cur = {"name": r[1], "hdr": None, "rows": []}
            sections.append(cur)
        elif r and r[0] == "Address" and cur is not None:
            cur["hdr"] = r
        elif cur is not None and cur["hdr"] is not None and r:
            cur["rows"].append(r)
    keep = [s for s in sections if not re.search(r"Fill|elementwise|distribution", s["name"])]
    sec = (keep or sections)[0]
    return sec["name"], sec["hdr"], sec["rows"]


def opcode(text):
    t = text.strip()
    if t.startswith("@"):
        t = t.split(None, 1)[1] if " " in t else t
    return t.split()[0].split(".")[0] if t else "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--top", help="a stall column, e.g. stall_no_inst")
    ap.add_argument("--elements", type=float, help="score elements of the launch (per-element rates)")
    ap.add_argument("--hot", type=int, default=2000, help="minimum executions of a hot instruction")
    a = ap.parse_args()
    for path in a.files:
        name, hdr, rows = load(path)
        si = hdr.index("Warp Stall Sampling (All Samples)")
        ei = hdr.index("Instructions Executed")
        stalls = [c for c in hdr if c.startswith("stall_") and "Not Issued" not in c]
        num = lambda r, i: int(r[i] or 0) if r[i].strip().lstrip("-").isdigit() else 0  # noqa: E731
        tot = collections.Counter()
        ops = collections.Counter()
        for r in rows:
            ops[opcode(r[1])] += num(r, ei)
            if num(r, ei) >= a.hot:
                for c in stalls:
                    tot[c] += num(r, hdr.index(c))
        executed = sum(ops.values())
        print(f"== {path}: {name[:70]}")
        print(f"   samples {sum(num(r, si) for r in rows)}, in hot code {sum(tot.values())}; "
              f"executed warp instructions {executed}")
        print("   hot stalls: " + " ".join(f"{c[6:]}={v}" for c, v in tot.most_common() if v))
        per = (lambda v: f" {v * 32 / a.elements:.2f}/elem") if a.elements else (lambda v: "")
        print("   opcodes: " + ", ".join(f"{o} {v / 1e6:.1f}M{per(v)}"
                                       for o, v in ops.most_common(16)))
        if a.top:
            ci = hdr.index(a.top)
            for i in sorted(range(len(rows)), key=lambda i: -num(rows[i], ci))[:12]:
                r = rows[i]
                ctx = " | ".join(rows[j][1].strip()[:40] for j in range(max(0, i - 2), i))
                print(f"   {i:5d} {num(r, ci):6d} exec {num(r, ei):9d}  {r[1].strip()[:60]}   <- {ctx}")


if __name__ == "__main__":
    main()
