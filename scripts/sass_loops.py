"""Instructions per key block in the hot loops of a forward kernel's SASS, ours beside FA3's.

No GPU: ours is compiled for sm_90a on the CPU (fusedattn.inspect.report); FA3's kernel is taken
from its wheel's cubins (cuobjdump, which Triton ships) by a substring of its demangled name.

    python scripts/sass_loops.py ours D CAUSAL [VARIANT]
    python scripts/sass_loops.py fa3 WHEEL_OR_SO NAME_SUBSTRING [INDEX]

For each innermost loop that issues wgmma (HGMMA), one line per path through it: a loop whose
body holds one if / else (a conditional forward branch whose target follows an unconditional
forward branch inside the loop) has two paths, e.g. the masked and the unmasked key block. The
counts are static instructions per path, so per key block where one trip is one block
(RESULTS.md, session 29: the energy question at the 1k cells).
"""
import collections
import glob
import os
import re
import subprocess
import sys
import tempfile
import zipfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import fusedattn.inspect as fi  # noqa: E402

CLASSES = ["HGMMA", "MUFU", "FFMA", "FMUL", "FADD", "FMNMX", "FSEL", "F2FP", "ISETP", "SHFL",
           "SYNCS", "BAR"]


def opcode(text: str) -> str:
    return re.sub(r"^@!?U?P\w+\s+", "", text).split()[0]


def branch_target(text: str):
    op = opcode(text)
    if not op.startswith("BRA"):
        return None
    m = re.search(r"0x([0-9a-f]+)", text.split("BRA", 1)[1])
    return int(m.group(1), 16) if m else None


def hot_loops(ins: list) -> list:
    """(start, end) address pairs of the innermost loops (fusedattn.inspect.inner_loops) that
    contain HGMMA."""
    return [(s, e) for s, e in sorted(set(fi.inner_loops(ins)))
            if any(s <= a <= e and opcode(t).startswith("HGMMA") for a, t in ins)]


def paths(ins: list, start: int, end: int) -> list:
    """The loop's paths as lists of instructions: one, or two for an if / else inside it."""
    body = [(a, t) for a, t in ins if start <= a <= end]
    addr = {a: t for a, t in body}
    for a, t in body:
        x = branch_target(t)
        if x is None or not (a < x <= end) or not t.startswith("@"):
            continue
        prev = [b for b in addr if b < x]
        jump = max(prev) if prev else None
        y = branch_target(addr[jump]) if jump is not None else None
        if y is None or addr[jump].startswith("@") or not (x < y <= end + 16):
            continue
        arm1 = [(b, u) for b, u in body if a < b <= jump]
        arm2 = [(b, u) for b, u in body if x <= b < y]
        common = [(b, u) for b, u in body if not (a < b < y)]
        return [common + arm1, common + arm2]
    return [body]


def describe(label: str, sass: str) -> None:
    ins = fi.sass_instructions(sass)
    for s, e in hot_loops(ins):
        for i, p in enumerate(paths(ins, s, e)):
            c = collections.Counter(opcode(t).split(".")[0] for _, t in p)
            ex2 = sum("MUFU.EX2" in t for _, t in p)
            rest = len(p) - sum(c[k] for k in CLASSES)
            cols = " ".join(f"{k} {c[k]}" for k in CLASSES if k != "MUFU")
            print(f"{label} loop {s:#x}-{e:#x} path {i}: {len(p)} inst; EX2 {ex2} {cols} "
                  f"other {rest}")


def ours(d: int, causal: bool, variant: str | None) -> str:
    return fi.report(d, causal, variant=variant)["_sass"]


def fa3(path: str, name: str, index: int) -> str:
    tool = fi._tool("cuobjdump")
    with tempfile.TemporaryDirectory() as tmp:
        if path.endswith(".whl"):
            zipfile.ZipFile(path).extractall(tmp)
            path = glob.glob(os.path.join(tmp, "**", "*.so"), recursive=True)[0]
        subprocess.run([tool, "-xelf", "all", os.path.abspath(path)], cwd=tmp, check=True,
                       capture_output=True)
        parts = []
        for cub in sorted(glob.glob(os.path.join(tmp, "*sm_90*.cubin"))):
            sass = subprocess.run([tool, "-sass", cub], capture_output=True, text=True).stdout
            parts += re.split(r"\n\s*Function : ", sass)[1:]
    mangled = "\n".join(p.split("\n", 1)[0].strip() for p in parts)
    names = subprocess.run(["c++filt"], input=mangled, capture_output=True,
                           text=True).stdout.splitlines()   # one call, a name per line
    found = [p for p, n in zip(parts, names) if name in n]
    if len(found) <= index:
        raise SystemExit(f"{len(found)} kernels match {name!r}")
    return found[index]


if __name__ == "__main__":
    if sys.argv[1] == "ours":
        d, causal = int(sys.argv[2]), sys.argv[3] in ("1", "true", "True")
        describe(f"ours d{d} {'c' if causal else 'nc'}",
                 ours(d, causal, sys.argv[4] if len(sys.argv) > 4 else None))
    elif sys.argv[1] == "fa3":
        describe("fa3", fa3(sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 0))
    else:
        raise SystemExit(__doc__)
