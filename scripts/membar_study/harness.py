"""Compile a Gluon kernel for sm_90a on the CPU and list the bar.sync / barrier.sync in its PTX
with the next 'interesting' instruction after each (what the barrier precedes)."""
import re, os
import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource
from triton.experimental.gluon import language as gl

FP8 = "fp8e4nv"
V_LAYOUT = gl.NVMMASharedLayout(swizzle_byte_width=64, element_bitwidth=8, rank=2)
K_LAYOUT = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=8, rank=2)
V_DESC = f"tensordesc<{FP8}[128, 64],{V_LAYOUT!r}>"
K_DESC = f"tensordesc<{FP8}[128, 128],{K_LAYOUT!r}>"
# where compile_kernel(..., name=...) writes the PTX / TTGIR (MEMBAR_OUT, default /tmp/membar_study)
OUT = os.environ.get("MEMBAR_OUT", "/tmp/membar_study")

INTERESTING = [
    ("cp.async.bulk.tensor", "TMA"), ("mbarrier.arrive.expect_tx", "EXPECT"),
    ("mbarrier.try_wait", "WAIT"), ("mbarrier.arrive", "ARRIVE"), ("mbarrier.init", "INIT"),
    ("ldmatrix", "LDSM"), ("stmatrix", "STSM"), ("st.shared", "ST.SHARED"),
    ("ld.shared", "LD.SHARED"), ("fence.proxy.async", "FENCE"), ("setmaxnreg", "SETMAXNREG"),
    ("inline-asm-marker", "ASM"), ("ret;", "RET"), ("bra", "BRA"), ("cp.async", "CPASYNC"),
]


def compile_kernel(fn, signature, constexprs=None, num_warps=4, name=None):
    constexprs = dict(constexprs or {})
    sig = dict(signature)
    for k in constexprs:
        sig[k] = "constexpr"
    src = GluonASTSource(fn, sig, constexprs=constexprs)
    c = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps})
    if name:
        os.makedirs(OUT, exist_ok=True)
        open(f"{OUT}/{name}.ptx", "w").write(c.asm["ptx"])
        open(f"{OUT}/{name}.ttgir", "w").write(c.asm["ttgir"])
    return c


def barriers(ptx):
    """[(barrier text, in_loop, next interesting op)] in program order."""
    lines = [l.strip() for l in ptx.splitlines()]
    out = []
    in_loop = False
    loc = ""
    for i, l in enumerate(lines):
        if l.startswith(".loc"):
            m = re.search(r"//\s*(\S+?:\d+)", l)
            if m:
                loc = m.group(1)
        if re.match(r"^\$L__BB\d+_\d+:", l) or l.startswith("// %bb."):
            in_loop = "Loop" in l
        if re.match(r"^(bar|barrier)\.(sync|arrive)\b", l) or re.match(r"^bar\.(sync|warp)", l):
            nxt = "?"
            for l2 in lines[i + 1:]:
                if l2.startswith("//") or l2.startswith(".loc"):
                    continue
                hit = [tag for key, tag in INTERESTING if key in l2]
                if hit:
                    nxt = hit[0]
                    break
                if re.match(r"^(bar|barrier)\.", l2):
                    nxt = "BAR"
                    break
            out.append((l.rstrip(";").replace("\t", " "), in_loop, nxt, loc))
    return out


def summarize(name, c):
    ptx = c.asm["ptx"]
    bs = barriers(ptx)
    # PTX op counts for context
    ops = {tag: sum(1 for l in ptx.splitlines() if key in l and not l.strip().startswith("//"))
           for key, tag in INTERESTING[:8]}
    named = [b for b in bs if re.search(r"bar\.sync\s+\d+,\s*\d+", b[0])]
    loop_named = [b for b in named if b[1]]
    print(f"== {name}: bar.sync total={len(bs)} named(N, count)={len(named)} "
          f"named-in-loop={len(loop_named)}  ops={ops}")
    for txt, loop, nxt, loc in bs:
        print(f"     {'L' if loop else ' '} {txt:28s} -> {nxt:10s} @ {loc}")
    return bs


NVDISASM = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "nvdisasm")


def sass(c):
    import subprocess, tempfile
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(c.asm["cubin"])
        path = f.name
    out = subprocess.run([NVDISASM, "-c", path], capture_output=True, text=True).stdout
    os.unlink(path)
    return out


def sass_counts(c):
    s = sass(c)
    keys = ["BAR.SYNC", "BAR.ARV", "WARPSYNC", "UTMALDG", "SYNCS.ARRIVE", "SYNCS.PHASECHK"]
    return {k: len(re.findall(re.escape(k), s)) for k in keys}


def skeleton(ptx, start_pat=None):
    """Compact program-order listing of the PTX: labels (with LLVM's loop comments), barriers and
    the shared-memory / mbarrier / TMA instructions (runs of one kind collapsed as xN)."""
    seq = []
    for l in ptx.splitlines():
        s = l.strip()
        if re.match(r"^\$L__BB\d+_\d+:", s) or s.startswith("// %bb."):
            lab = s.split("//")
            seq.append(("LABEL " + lab[0].strip() + ("  // " + lab[1].strip() if len(lab) > 1 else "")))
            continue
        if s.startswith("//") or s.startswith(".loc"):
            continue
        m = re.match(r"^(bar\.sync\s+\d+(,\s*\d+)?|barrier\.sync\s+\d+|bar\.warp\.sync\s+-?\d+)", s)
        if m:
            seq.append(re.sub(r"\s+", " ", m.group(1)).upper())
            continue
        for key, tag in INTERESTING:
            if key in s and tag not in ("BRA",):
                seq.append(tag)
                break
        else:
            if re.match(r"^(@%p\d+\s+)?bra(\.uni)?\s", s) and "waitLoop" not in s:
                seq.append("bra " + s.split()[-1].rstrip(";"))
    out = []
    for x in seq:
        if out and out[-1][0] == x and not x.startswith("LABEL") and not x.startswith("BAR"):
            out[-1][1] += 1
        else:
            out.append([x, 1])
    return "\n".join(f"   {x}" + (f" x{n}" if n > 1 else "") for x, n in out)
