"""Resource report of the hopper forward kernel, compiled for sm_90a on any machine (no GPU needed).

    python -m fusedattn.inspect                      # head_dim 128, non-causal, bf16, table config
    python -m fusedattn.inspect --head-dim 64 --causal --no-pingpong --stages 3
    python -m fusedattn.inspect --all                # every head dim x causal, one line each
    python -m fusedattn.inspect --dump DIR           # also write ttgir / ptx / sass there
    python -m fusedattn.inspect --variants           # every named variant (hopper_fwd.VARIANTS)
    python -m fusedattn.inspect --variant no_ws,persistent --causal
    python -m fusedattn.inspect --head-dim 96        # a padded head dim (runs at 128)
    python -m fusedattn.inspect --fp8 --head-dim 256 --causal   # the FP8 kernel (attention_fp8)
    python -m fusedattn.inspect --fp8 --all          # every row of the FP8 table

Reports: threads, register cap at entry and the setmaxnreg count of each role, shared memory,
stack / spills (ptxas -v), and the counts in PTX of wgmma.mma_async, setmaxnreg,
cp.async.bulk.tensor and mbarrier.try_wait (plus HGMMA in SASS).
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import re
import subprocess
import sys
import tempfile

SMEM_LIMIT = 227 * 1024  # per-block opt-in shared memory on sm_90

PTX_COUNTS = ("wgmma.mma_async", "setmaxnreg", "cp.async.bulk.tensor", "mbarrier.try_wait",
              "ld.local", "st.local")


def _tool(name: str) -> str:
    import triton
    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)


def ptxas_report(ptx: str) -> dict:
    """Run the ptxas bundled with triton (-v) on the PTX: registers, stack, spills."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.ptx")
        with open(path, "w") as f:
            f.write(ptx)
        res = subprocess.run([_tool("ptxas"), "-arch=sm_90a", "-v", path, "-o", os.devnull],
                             capture_output=True, text=True)
    text = res.stdout + res.stderr
    out = {"ptxas_ok": res.returncode == 0, "ptxas_text": text}
    m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", text)
    if m:
        out.update(stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
    m = re.search(r"Used (\d+) registers", text)
    if m:
        out["registers_at_entry"] = int(m.group(1))
    out["c7508_setmaxnreg_ignored"] = "C7508" in text
    # wgmma.mma_async serialised by ptxas (each one waited for before the next instruction):
    # the info codes that say so (C7513: a non-wgmma instruction defines a wgmma's input
    # registers inside a pipeline stage; C7512: not enough registers), [] when none
    out["wgmma_serialized"] = sorted(set(re.findall(
        r"\((C75\d\d)\)[^\n]*wgmma\.mma_async instructions are serialized", text)))
    out["c7513_wgmma_serialized"] = "C7513" in out["wgmma_serialized"]
    return out


def sass_counts(cubin: bytes) -> dict:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        res = subprocess.run([_tool("cuobjdump"), "--dump-sass", path], capture_output=True, text=True)
    sass = res.stdout
    return {"sass": sass, "HGMMA": sass.count("HGMMA"), **_gmma_waits(sass),
            "USETMAXREG": sass.count("USETMAXREG"),
            "LDL": len(re.findall(r"\bLDL\b", sass)), "STL": len(re.findall(r"\bSTL\b", sass)),
            "UTMASTG": sass.count("UTMASTG"), "BAR": len(re.findall(r"\bBAR\.", sass))}


def _gmma_waits(sass: str) -> dict:
    """GMMA: tensor-core instructions (HGMMA, QGMMA, ...); GMMA_WAITED: those followed by a
    ``WARPGROUP.DEPBAR`` (a wait for the warpgroup's products) before any other GMMA and within
    four instructions. An asynchronous pipeline waits once per group of products (a few per
    key block); a serialised one after nearly every product, whatever ptxas's report says."""
    ins = [ln.split(";")[0] for ln in sass.splitlines() if re.search(r"/\*[0-9a-f]{4,}\*/", ln)]
    ins = [re.sub(r"/\*[0-9a-f]{4,}\*/", "", ln).strip() for ln in ins]
    ins = [i for i in ins if i]
    total = waited = 0
    for a, i in enumerate(ins):
        if re.search(r"\b[A-Z]GMMA\.", i):
            total += 1
            for nxt in ins[a + 1:a + 5]:
                if "WARPGROUP.DEPBAR" in nxt:
                    waited += 1
                    break
                if re.search(r"\b[A-Z]GMMA\.", nxt):
                    break
    return {"GMMA": total, "GMMA_WAITED": waited}


def sass_instructions(sass: str) -> list[tuple[int, str]]:
    """(address, instruction text) of each SASS instruction in a cuobjdump listing."""
    return [(int(m.group(1), 16), m.group(2)) for m in
            re.finditer(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", sass)]


def _loops(ins) -> list:
    """(start, end) address ranges of the loops in sass_instructions' list: from a backward
    branch's target to the branch. The retry branches of the mbarrier waits, placed after the
    last EXIT, are left out (they span the code between a wait and the end without being loops)."""
    exits = [a for a, t in ins if re.search(r"\bEXIT\b", t)]
    last_exit = max(exits) if exits else None
    loops = []
    for a, t in ins:
        m = re.search(r"\bBRA\b.*?0x([0-9a-f]+)", t)
        if m and int(m.group(1), 16) < a and (last_exit is None or a < last_exit):
            loops.append((int(m.group(1), 16), a))
    return loops


def inner_loops(ins) -> list:
    """The innermost of _loops' ranges (those that hold no other loop): in a persistent kernel
    the key-block loops and the producer's ring loop, not the tile loop around them."""
    loops = _loops(ins)
    return [(lo, hi) for lo, hi in loops
            if not any((lo2, hi2) != (lo, hi) and lo <= lo2 and hi2 <= hi for lo2, hi2 in loops)]


def _local_in(ins, ranges) -> int:
    return sum(1 for a, t in ins if re.search(r"\b(?:LDL|STL)\b", t)
               and any(lo <= a <= hi for lo, hi in ranges))


def local_memory_in_loops(sass: str) -> int:
    """Local-memory accesses (LDL / STL: spill traffic) inside a loop of the kernel's code (see
    _loops). 0 means every spill costs once per tile, not once per key block."""
    ins = sass_instructions(sass)
    return _local_in(ins, _loops(ins))


def local_memory_in_inner_loops(sass: str) -> int:
    """Local-memory accesses inside an innermost loop (one that holds no other loop): in a
    persistent kernel the key-block loops and the producer's ring loop, not the tile loop around
    them. 0 means no spill is paid per key block, though some may be paid per tile."""
    ins = sass_instructions(sass)
    return _local_in(ins, inner_loops(ins))


def dependent_chain(sass: str, opcode: str = "FMNMX") -> int:
    """The longest run of `opcode` instructions inside an innermost loop in which each reads the
    previous one's result (a register written by the same opcode in that loop): the depth of a
    reduction as ptxas scheduled it (a row max folded in one chain: ~31; as a tree: ~5)."""
    ins = sass_instructions(sass)
    inner = inner_loops(ins)
    best = 0
    for lo, hi in inner:
        depth = {}
        for a, t in ins:
            if not lo <= a <= hi:
                continue
            m = re.match(rf"(?:@!?U?P\w+\s+)?{opcode}(?:\.\S+)?\s+(R\d+),\s*(.*)", t)
            regs_written = re.match(r"(?:@!?U?P\w+\s+)?\S+\s+(R\d+)", t)
            if m:
                srcs = re.findall(r"-?\|?(R\d+)", m.group(2))
                d = 1 + max((depth.get(r, 0) for r in srcs), default=0)
                depth[m.group(1)] = d
                best = max(best, d)
            elif regs_written:           # another instruction overwrote the register
                depth.pop(regs_written.group(1), None)
    return best


def sass_digest(sass: str) -> str:
    """sha1 of the SASS instruction text (addresses dropped): equal digests = the same code."""
    import hashlib
    lines = [re.sub(r"/\*[0-9a-f]{4,}\*/", "", ln).strip() for ln in sass.splitlines()
             if ln.strip().startswith("/*")]
    return hashlib.sha1("\n".join(lines).encode()).hexdigest()


def report(head_dim: int = 128, causal: bool = False, dtype: str = "bf16", variant: str | None = None,
           **overrides) -> dict:
    """Compile for sm_90a and collect the resource figures (a dict; see the module docstring).
    Without `variant`: the shipped table's row for (head_dim, causal) plus overrides; with it: that
    named variant (hopper_fwd.variant_config) plus overrides."""
    from fusedattn.kernels import hopper_fwd as H

    cfg = H.variant_config(variant or "default", head_dim, causal, **overrides)
    kernel = H.compile_sm90(head_dim, causal, dtype, cfg)
    rep = {"head_dim": head_dim, "causal": causal, "dtype": dtype, "config": dataclasses.asdict(cfg),
           "producer_regs": cfg.producer_regs, "consumer_regs": cfg.consumer_regs}
    rep.update(_compiled_report(kernel, PTX_COUNTS))
    return rep


def _compiled_report(kernel, ptx_counts) -> dict:
    """What both kernels' reports read from a compiled kernel: the target, threads, register cap
    and setmaxnreg counts, shared memory, counts in the PTX of ptx_counts' strings, ptxas -v's
    figures, the SASS counts and digest, and the kernel and its SASS (_kernel, _sass)."""
    ptx = kernel.asm["ptx"]
    regs = re.findall(r"setmaxnreg\.(inc|dec)\.sync\.aligned\.u32\s+(\d+)", ptx)
    maxnreg = re.search(r"\.maxnreg\s+(\d+)", ptx)
    reqntid = re.search(r"\.reqntid\s+(\d+)", ptx)
    rep = {
        "target_sm_90a": ".target sm_90a" in ptx,
        "threads": int(reqntid.group(1)) if reqntid else None,
        "maxnreg_at_entry": int(maxnreg.group(1)) if maxnreg else None,
        # The producer decrements to PRODUCER_REGS, consumer warpgroup 1 increments to
        # CONSUMER_REGS, the default partition (consumer warpgroup 0) settles at what is left.
        "setmaxnreg_values": sorted({int(v) for _, v in regs}),
        "setmaxnreg_dec": sorted({int(v) for k, v in regs if k == "dec"}),
        "setmaxnreg_inc": sorted({int(v) for k, v in regs if k == "inc"}),
        "shared_bytes": kernel.metadata.shared, "shared_limit": SMEM_LIMIT,
        "ptx_counts": {k: ptx.count(k) for k in ptx_counts},
        "_kernel": kernel,
    }
    rep.update({k: v for k, v in ptxas_report(ptx).items() if k != "ptxas_text"})
    sc = sass_counts(kernel.asm["cubin"])
    rep["sass_counts"] = {k: v for k, v in sc.items() if k != "sass"}
    rep["sass_sha1"] = sass_digest(sc["sass"])   # equal digests: the same code
    rep["_sass"] = sc["sass"]
    return rep


FP8_PTX_COUNTS = ("wgmma.mma_async", "cp.async.bulk.tensor", "mbarrier.try_wait", "stmatrix",
                  "fence.proxy.async", "cvt.rn.satfinite.e4m3x2.f32", "ld.local", "st.local",
                  "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16", "prmt.b32",
                  "mbarrier.arrive.expect_tx", "bar.sync")


def report_fp8(head_dim: int = 128, causal: bool = False, kv_block: int | None = None,
               variant: str | None = None, config=None) -> dict:
    """The FP8 kernel's (hopper_fp8_fwd) resource figures, compiled for sm_90a: the table's row
    for (head_dim, causal) and k / v quantised in kv_block-row blocks (default: the preferred
    key tile), or the named variant (hopper_fp8_fwd.VARIANTS), or the given config."""
    from fusedattn.kernels import hopper_fp8_fwd as F

    if config is not None:
        cfg = config
    elif variant:
        cfg = F.variant_config(variant, head_dim, causal)
    else:
        cfg = F.get_config(head_dim, causal, kv_block)
    kernel = F.compile_sm90(head_dim, causal, cfg)
    ptx = kernel.asm["ptx"]
    rep = {"head_dim": head_dim, "causal": causal, "variant": variant,
           "config": dataclasses.asdict(cfg),
           "wgmma_e4m3_shapes": sorted(set(re.findall(
               r"wgmma\.mma_async\.sync\.aligned\.(m64n\d+k32)\.f32\.e4m3\.e4m3", ptx))),
           "wgmma_other": len(re.findall(
               r"wgmma\.mma_async\.sync\.aligned\.\w+\.f32\.(?:bf16|f16)", ptx))}
    rep.update(_compiled_report(kernel, FP8_PTX_COUNTS))
    sass = rep["_sass"]
    rep["sass_counts"]["QGMMA_E4M3"] = len(re.findall(r"QGMMA\.\w+\.F32\.E4M3\.E4M3", sass))
    rep["local_in_loops"] = local_memory_in_loops(sass)
    rep["local_in_inner_loops"] = local_memory_in_inner_loops(sass)
    return rep


def format_report_fp8(r: dict) -> str:
    c = r["config"]
    on = [k for k, v in c.items() if v is True]
    return "\n".join([
        f"hopper fp8 fwd  head_dim={r['head_dim']} causal={r['causal']}  BLOCK_M={c['block_m']} "
        f"BLOCK_N={c['block_n']} stages={c['num_stages']} v_stages={c['v_stages']}"
        + (f"  [{r['variant']}]" if r.get("variant") else ""),
        "  switches on: " + (", ".join(on) or "none"),
        f"  target sm_90a: {r['target_sm_90a']}   threads: {r['threads']} (2 consumer "
        f"warpgroups + a producer warpgroup)",
        f"  registers: cap at entry {r['maxnreg_at_entry']} (ptxas used "
        f"{r.get('registers_at_entry')}); setmaxnreg dec {r['setmaxnreg_dec']} inc "
        f"{r['setmaxnreg_inc']} (producer {c['producer_regs']}, consumer wg1 "
        f"{c['consumer_regs']})",
        f"  shared memory: {r['shared_bytes']} B ({r['shared_bytes'] / 1024:.1f} KB of "
        f"{r['shared_limit'] // 1024} KB)",
        f"  stack {r.get('stack')} B, spill stores {r.get('spill_stores')} B, spill loads "
        f"{r.get('spill_loads')} B; local-memory instructions in loops {r['local_in_loops']}, "
        f"in key-block (innermost) loops {r['local_in_inner_loops']}; wgmma serialised by ptxas: "
        f"{', '.join(r.get('wgmma_serialized') or []) or 'no'}",
        f"  e4m3 wgmma shapes: {', '.join(r['wgmma_e4m3_shapes']) or 'none'} (16-bit wgmma: "
        f"{r['wgmma_other']})",
        "  PTX: " + ", ".join(f"{k} {v}" for k, v in r["ptx_counts"].items()),
        "  SASS: " + ", ".join(f"{k} {v}" for k, v in r["sass_counts"].items()),
    ])


def _main_fp8(a) -> int:
    """--fp8: the FP8 kernel's reports. Spills that stay outside the key-block loops (a persistent
    row's tile-level values, tests/test_hopper_fp8_compile.py KNOWN_SPILL) are reported; local
    memory inside a key-block loop, shared memory over the limit, a ptxas failure or wgmma
    serialised where it is not the known cost of pack_p without unpack_prmt fail (exit 1)."""
    from fusedattn.kernels import hopper_fp8_fwd as F
    if a.all and a.names != [None]:
        # a variant fixes its own key tile: each (head_dim, causal) once
        combos = sorted({(d, c, None) for d, c, _ in F.CONFIGS})
    elif a.all:
        combos = sorted(F.CONFIGS)
    else:
        combos = [(a.head_dim, a.causal, a.kv_block)]
    ok = True
    for name in a.names:
        for d, c, kvb in combos:
            d = _head_dim_for(a, name, F.VARIANTS, d)
            if d is None:
                continue
            r = report_fp8(d, c, kvb, variant=name)
            print(format_report_fp8(r))
            # P packed to e4m3 words and unpacked by the predicated form (pack_p without
            # unpack_prmt: the shipped hdim 64 rows) serialises the wgmma, a known cost
            # (test_unpack_prmt_keeps_wgmma_asynchronous); anywhere else it is a failure
            cfg = r["config"]
            known = cfg["pack_p"] and not cfg["unpack_prmt"] and r["wgmma_serialized"] == ["C7513"]
            if known:
                print("  (wgmma serialisation expected: pack_p without unpack_prmt)")
            failed = [what for what, bad in (
                (f"local memory in a key-block loop ({r['local_in_inner_loops']} instructions)",
                 r["local_in_inner_loops"]),
                ("shared memory over the limit", r["shared_bytes"] > SMEM_LIMIT),
                (f"wgmma serialised by ptxas ({', '.join(r['wgmma_serialized'] or [])})",
                 r["wgmma_serialized"] and not known),
                ("ptxas failed", not r["ptxas_ok"])) if bad]
            if failed:
                ok = False
                print("  !! " + "; ".join(failed))
            if a.dump:
                _dump(a.dump, f"hopper_fp8_fwd_{name + '_' if name else ''}d{d}_"
                              f"{'causal' if c else 'full'}_n{r['config']['block_n']}",
                      r["_kernel"], r["_sass"])
    return 0 if ok else 1


def _variant_names(a, ap, table: dict) -> list:
    """--variants: every name of table; --variant: the names given (each checked); else [None]."""
    if a.variants:
        return list(table)
    if not a.variant:
        return [None]
    names = [n.strip() for n in a.variant.split(",") if n.strip()]
    unknown = [n for n in names if n not in table]
    if unknown or not names:
        ap.error(f"--variant: unknown {', '.join(unknown) or repr(a.variant)}; the names are: "
                 f"{', '.join(table)}")
    return names


def _head_dim_for(a, name, table: dict, d: int) -> int | None:
    """The head dim to compile variant `name` at: d, or the variant's own first head dim when it
    is meant for others (said when --head-dim was given); None: skip it (--all)."""
    dims = table[name][1] if name else None
    if not dims or d in dims:
        return d
    if a.all:
        return None
    if a.head_dim_given:
        print(f"note: variant {name} is for head_dim {', '.join(map(str, dims))}; compiled at "
              f"{dims[0]}, not {d}")
    return dims[0]


def _dump(folder: str, stem: str, kernel, sass: str) -> None:
    """--dump: the kernel's TTGIR, PTX and SASS as folder/stem.{ttgir,ptx,sass}."""
    os.makedirs(folder, exist_ok=True)
    texts = {"ttgir": kernel.asm["ttgir"], "ptx": kernel.asm["ptx"], "sass": sass}
    for ext, text in texts.items():
        with open(os.path.join(folder, f"{stem}.{ext}"), "w") as f:
            f.write(text)


_SHOWN = {"block_m", "block_n", "num_stages", "overlap", "pingpong", "pingpong_mode",
          "warp_specialize", "persistent", "tma_store", "consumer_regs", "producer_regs",
          "maxnreg", "num_consumers"}


def _other_switches(c: dict) -> str:
    """The config's fields that differ from FwdConfig's defaults and the header line does not
    show (e.g. "scheduler=1, softmax_fma, o_half")."""
    from dataclasses import fields
    from .kernels.hopper_fwd import FwdConfig
    out = []
    for f in fields(FwdConfig):
        if f.name in _SHOWN or f.name not in c or c[f.name] == f.default:
            continue
        out.append(f.name if c[f.name] is True else f"{f.name}={c[f.name]}")
    return ", ".join(out)


def format_report(r: dict) -> str:
    c = r["config"]
    lines = [
        f"hopper fwd  head_dim={r['head_dim']} causal={r['causal']} dtype={r['dtype']}  "
        f"BLOCK_M={c['block_m']} BLOCK_N={c['block_n']} stages={c['num_stages']} "
        f"overlap={c['overlap']} pingpong={c['pingpong']} (mode {c.get('pingpong_mode', 0)}) "
        f"warp_specialize={c.get('warp_specialize', True)} persistent={c.get('persistent', False)} "
        f"tma_store={c.get('tma_store', False)}"
        + (f"  [{r['variant']}]" if r.get("variant") else ""),
        "  other switches: " + (_other_switches(c) or "none"),
        f"  target sm_90a: {r['target_sm_90a']}   threads: {r['threads']} "
        + (f"({c.get('num_consumers', 2)} consumer warpgroups + 1 producer warp in its own "
           f"warpgroup)"
           if c.get("warp_specialize", True) else
           "(one partition of 2 warpgroups, no producer, no setmaxnreg)"),
        f"  registers: cap at entry {r['maxnreg_at_entry']} (ptxas used {r.get('registers_at_entry')}); "
        f"setmaxnreg producer {r['producer_regs']}, consumer wg1 {r['consumer_regs']}, "
        f"all values in PTX {r['setmaxnreg_values']}",
        f"  shared memory: {r['shared_bytes']} B ({r['shared_bytes'] / 1024:.1f} KB of "
        f"{r['shared_limit'] // 1024} KB)",
        f"  stack {r.get('stack')} B, spill stores {r.get('spill_stores')} B, "
        f"spill loads {r.get('spill_loads')} B, setmaxnreg ignored (C7508): "
        f"{r['c7508_setmaxnreg_ignored']}, wgmma serialised by ptxas: "
        f"{', '.join(r.get('wgmma_serialized') or []) or 'no'}",
        "  PTX: " + ", ".join(f"{k} {v}" for k, v in r["ptx_counts"].items()),
        "  SASS: " + ", ".join(f"{k} {v}" for k, v in r["sass_counts"].items()),
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fusedattn.inspect", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--head-dim", type=int, default=None, help="default 128")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    ap.add_argument("--block-m", type=int)
    ap.add_argument("--block-n", type=int)
    ap.add_argument("--stages", type=int)
    ap.add_argument("--no-overlap", action="store_true")
    ap.add_argument("--no-pingpong", action="store_true")
    ap.add_argument("--consumer-regs", type=int)
    ap.add_argument("--no-ws", action="store_true", help="the non-specialised kernel")
    ap.add_argument("--persistent", action="store_true")
    ap.add_argument("--tma-store", action="store_true")
    ap.add_argument("--pingpong", action="store_true")
    ap.add_argument("--pingpong-mode", type=int, choices=[0, 1, 2])
    ap.add_argument("--variant", help="comma-separated names from hopper_fwd.VARIANTS")
    ap.add_argument("--variants", action="store_true",
                    help="every named variant (at --head-dim, or at its own head dim)")
    ap.add_argument("--all", action="store_true", help="every head dim x causal")
    ap.add_argument("--dump", metavar="DIR", help="write ttgir, ptx and sass here")
    ap.add_argument("--fp8", action="store_true",
                    help="the FP8 kernel (attention_fp8): its table rows (--all: every row), "
                         "--variant from hopper_fp8_fwd.VARIANTS; the 16-bit tuning flags do not "
                         "apply")
    ap.add_argument("--kv-block", type=int,
                    help="--fp8: k and v's quantisation block (128 or 256: picks the row's key "
                         "tile; default the preferred one)")
    a = ap.parse_args(argv)
    a.head_dim_given = a.head_dim is not None
    if a.head_dim is None:
        a.head_dim = 128
    if a.dump and os.path.exists(a.dump) and not os.path.isdir(a.dump):
        ap.error(f"--dump: {a.dump} exists and is not a folder")
    if a.fp8:
        from fusedattn.kernels import hopper_fp8_fwd as F
        if a.head_dim not in F.SUPPORTED_HEAD_DIMS:
            ap.error(f"--head-dim: the FP8 kernel has head_dim "
                     f"{', '.join(map(str, F.SUPPORTED_HEAD_DIMS))}, got {a.head_dim}")
        if a.kv_block is not None:
            if a.variant or a.variants or a.all:
                ap.error("--kv-block picks a table row's key tile: not with --variant, "
                         "--variants or --all")
            if a.kv_block <= 0 or F.kernel_block(a.head_dim, a.causal, a.kv_block) is None:
                tiles = sorted({bn for (d, c, bn) in F.CONFIGS
                                if d == a.head_dim and c == a.causal})
                ap.error(f"--kv-block: the FP8 rows at head_dim {a.head_dim} "
                         f"({'causal' if a.causal else 'non-causal'}) have key tiles "
                         f"{', '.join(map(str, tiles))}; give one of them (or a multiple), got "
                         f"{a.kv_block}")
        a.names = _variant_names(a, ap, F.VARIANTS)
        tuning = [f for f, v in (("--block-m", a.block_m), ("--block-n", a.block_n),
                                 ("--stages", a.stages), ("--consumer-regs", a.consumer_regs),
                                 ("--pingpong-mode", a.pingpong_mode)) if v is not None]
        tuning += [f for f, v in (("--no-overlap", a.no_overlap), ("--no-pingpong", a.no_pingpong),
                                  ("--no-ws", a.no_ws), ("--persistent", a.persistent),
                                  ("--tma-store", a.tma_store), ("--pingpong", a.pingpong),
                                  ("--dtype", a.dtype != "bf16")) if v]
        if tuning:
            ap.error(f"{', '.join(tuning)}: 16-bit kernel options, not with --fp8 (use --variant)")
        return _main_fp8(a)
    if a.kv_block is not None:
        ap.error("--kv-block needs --fp8")
    from fusedattn.kernels import hopper_fwd as H
    if a.head_dim not in H.SUPPORTED_HEAD_DIMS:
        dims = H.SUPPORTED_HEAD_DIMS
        ap.error(f"--head-dim: a multiple of 8 from {dims[0]} to {dims[-1]}, got {a.head_dim}"
                 if len(dims) > 3 else f"--head-dim: one of {', '.join(map(str, dims))}, "
                 f"got {a.head_dim}")
    names = _variant_names(a, ap, H.VARIANTS)
    if a.pingpong and a.no_pingpong:
        ap.error("--pingpong and --no-pingpong contradict each other: give one")
    ov = {}
    for key, val in (("block_m", a.block_m), ("block_n", a.block_n), ("num_stages", a.stages),
                     ("consumer_regs", a.consumer_regs)):
        if val is not None:
            ov[key] = val
    if a.no_overlap:
        ov["overlap"] = False
    if a.no_pingpong:
        ov["pingpong"] = False
    for flag, key, val in ((a.no_ws, "warp_specialize", False), (a.persistent, "persistent", True),
                           (a.tma_store, "tma_store", True), (a.pingpong, "pingpong", True)):
        if flag:
            ov[key] = val
    if a.pingpong_mode is not None:
        ov["pingpong_mode"] = a.pingpong_mode
    combos = ([(d, c) for d in (64, 128, 256) for c in (False, True)] if a.all
              else [(a.head_dim, a.causal)])
    jobs = []
    for name in names:
        for d, c in combos:
            d = _head_dim_for(a, name, H.VARIANTS, d)
            if d is not None:
                jobs.append((name, d, c, dict(ov)))
    for name, d, c, job_ov in jobs:
        # every job's configuration is checked before any compiles: a value the kernel cannot
        # take is a usage error, not a compiler traceback (or an abort inside LLVM)
        try:
            cfg = H.variant_config(name or "default", d, c, **job_ov)
            H._check_switch_support(cfg)
            H._v4_constexprs(cfg)
        except (ValueError, TypeError) as e:
            ap.error(f"{'variant ' + name + ', ' if name else ''}head_dim {d}"
                     f"{' causal' if c else ''}: {e}")
    ok = True
    for name, d, c, job_ov in jobs:
        r = report(d, c, a.dtype, variant=name, **job_ov)
        r["variant"] = name
        print(format_report(r))
        bad = (r.get("spill_stores", 1) or r.get("spill_loads", 1) or r["shared_bytes"] > SMEM_LIMIT
               or not r["ptxas_ok"])
        if bad:
            ok = False
            print("  !! spills, shared memory over the limit, or ptxas failed")
        if a.dump:
            _dump(a.dump, f"hopper_fwd_{name + '_' if name else ''}d{d}_"
                          f"{'causal' if c else 'full'}",
                  r["_kernel"], r["_sass"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
