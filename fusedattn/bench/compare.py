"""--compare OLD.json [NEW.json]: what got faster or slower between two runs, cell by cell.

A cell is (pass, head_dim, causal, seqlen, implementation); its ratio is new TFLOP/s / old TFLOP/s.
Cells beyond the threshold (default 3%) are listed; a cell that passed its check before and fails it
now is flagged whatever its speed. Absolute figures move between machines and runs: compare runs of
the same GPU, and treat a few percent as noise (time the same version twice to see the spread).
"""

from __future__ import annotations

import math

from . import common as C
from .impls import label_of

DEFAULT_THRESHOLD = 0.03


def _key(e: dict) -> tuple:
    return (e.get("pass"), int(e["hdim"]), bool(e["causal"]), int(e["seqlen"]), e["impl"])


def _index(results: dict) -> dict:
    out = {}
    for e in results.get("speed", []):
        try:
            out[_key(e)] = e
        except (KeyError, TypeError, ValueError):
            continue
    return out


def _ok(e: dict | None) -> bool:
    return e is not None and "error" not in e and "skipped" not in e and C.num(e.get("tflops")) is not None


def _passed(e: dict) -> bool | None:
    chk = e.get("check")
    if not isinstance(chk, dict) or "error" in chk:
        return None
    return bool(chk.get("passed", True))


def compare(old: dict, new: dict, threshold: float = DEFAULT_THRESHOLD) -> dict:
    """{"cells": [...], "faster", "slower", "same", "only_old", "only_new", "newly_wrong",
    "by_impl": {impl: geometric-mean ratio}, "warnings": [...]}."""
    a, b = _index(old), _index(new)
    cells = []
    for k in sorted(set(a) & set(b), key=lambda k: (k[0] != "fwd", k[1], k[2], k[3], k[4])):
        ea, eb = a[k], b[k]
        row = {"pass": k[0], "hdim": k[1], "causal": k[2], "seqlen": k[3], "impl": k[4]}
        if _ok(ea) and _ok(eb):
            ta, tb = C.num(ea["tflops"]), C.num(eb["tflops"])
            row.update(old_tflops=ta, new_tflops=tb, ratio=tb / ta if ta else None)
        else:
            row.update(old=("ok" if _ok(ea) else ea.get("error") or ea.get("skipped") or "?"),
                       new=("ok" if _ok(eb) else eb.get("error") or eb.get("skipped") or "?"))
        pa, pb = _passed(ea), _passed(eb)
        if pa is True and pb is False:
            row["newly_wrong"] = True
        if pa is False and pb is True:
            row["newly_right"] = True
        cells.append(row)
    rated = [c for c in cells if c.get("ratio")]
    faster = [c for c in rated if c["ratio"] >= 1 + threshold]
    slower = [c for c in rated if c["ratio"] <= 1 - threshold]
    same = [c for c in rated if 1 - threshold < c["ratio"] < 1 + threshold]
    by_impl = {}
    for impl in sorted({c["impl"] for c in rated}):
        for p in ("fwd", "bwd"):
            rs = [c["ratio"] for c in rated if c["impl"] == impl and c["pass"] == p]
            if rs:
                by_impl[f"{impl} {p}"] = {"geomean": math.exp(sum(math.log(r) for r in rs) / len(rs)),
                                          "n": len(rs), "min": min(rs), "max": max(rs)}
    warnings = []
    ea, eb = old.get("env", {}), new.get("env", {})
    for field in ("gpu", "torch", "triton", "cudnn", "driver"):
        if ea.get(field) != eb.get(field):
            warnings.append(f"{field} differs: {ea.get(field)} -> {eb.get(field)}")
    ma, mb = old.get("method") or {}, new.get("method") or {}
    for field in ("timer", "warmup", "order"):   # the timing protocol (it moved ratios by up to 14%)
        if ma.get(field) != mb.get(field):
            warnings.append(f"the timing method differs ({field}): the runs are not directly "
                            f"comparable: {str(ma.get(field))[:90]} -> {str(mb.get(field))[:90]}")
    return {"cells": cells, "faster": faster, "slower": slower, "same": same,
            "only_old": sorted(set(a) - set(b), key=str), "only_new": sorted(set(b) - set(a), key=str),
            "newly_wrong": [c for c in cells if c.get("newly_wrong")], "by_impl": by_impl,
            "warnings": warnings, "threshold": threshold,
            "old_date": ea.get("date"), "new_date": eb.get("date")}


def _cell_name(c: dict) -> str:
    return (f"{c['pass']} d{c['hdim']} {'causal' if c['causal'] else 'full'} s{C.seqlen_label(c['seqlen'])} "
            f"{label_of(c['impl'])}")


def render(cmp: dict, old_name: str = "OLD", new_name: str = "NEW", all_cells: bool = False) -> str:
    """The comparison as markdown; ``all_cells`` adds every cell's ratio (compare.md has it)."""
    thr = cmp["threshold"]
    lines = [f"## Compare: {new_name} ({cmp.get('new_date')}) vs {old_name} ({cmp.get('old_date')}); "
             f"ratio = new / old TFLOP/s, threshold {thr:.0%}", ""]
    for w in cmp["warnings"]:
        lines.append(f"- warning: {w}")
    if cmp["warnings"]:
        lines.append("")
    n_rated = len(cmp["faster"]) + len(cmp["slower"]) + len(cmp["same"])
    lines.append(f"{n_rated} cells in both: {len(cmp['faster'])} faster, {len(cmp['slower'])} slower, "
                 f"{len(cmp['same'])} within {thr:.0%}; {len(cmp['only_old'])} only in {old_name}, "
                 f"{len(cmp['only_new'])} only in {new_name}.")
    if cmp["by_impl"]:
        lines += ["", "| impl, pass | geomean new/old | cells | min | max |", "|---|---|---|---|---|"]
        for k, v in cmp["by_impl"].items():
            lines.append(f"| {k} | {v['geomean']:.3f} | {v['n']} | {v['min']:.3f} | {v['max']:.3f} |")
    for title, group in (("Faster", cmp["faster"]), ("Slower", cmp["slower"])):
        if group:
            lines += ["", f"{title}:", "", "| cell | old TFLOP/s | new TFLOP/s | new/old |", "|---|---|---|---|"]
            for c in sorted(group, key=lambda c: -c["ratio"] if title == "Faster" else c["ratio"]):
                lines.append(f"| {_cell_name(c)} | {c['old_tflops']:.0f} | {c['new_tflops']:.0f} | {c['ratio']:.3f} |")
    if cmp["newly_wrong"]:
        lines += ["", "NOW WRONG (passed the oracle check before, fails it now):"]
        lines += [f"- {_cell_name(c)}" for c in cmp["newly_wrong"]]
    if all_cells and cmp["cells"]:
        lines += ["", "All cells:", "", "| cell | old TFLOP/s | new TFLOP/s | new/old |", "|---|---|---|---|"]
        for c in cmp["cells"]:
            if c.get("ratio"):
                lines.append(f"| {_cell_name(c)} | {c['old_tflops']:.0f} | {c['new_tflops']:.0f} | {c['ratio']:.3f} |")
            else:
                lines.append(f"| {_cell_name(c)} | {str(c.get('old'))[:40]} | {str(c.get('new'))[:40]} | - |")
    changed = [c for c in cmp["cells"] if "ratio" not in c and c.get("old") != c.get("new")]
    if changed:
        lines += ["", "Status changed:"]
        lines += [f"- {_cell_name(c)}: {str(c.get('old'))[:60]} -> {str(c.get('new'))[:60]}" for c in changed]
    return "\n".join(lines) + "\n"
