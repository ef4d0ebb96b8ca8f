"""Where a tile's time goes in the 16-bit hopper kernel, and candidates timed order-fairly.

Part 1, clock stamps (FwdConfig.diag_stamps; lse overwritten, so forward() runs it only with
_diagnostic=True; the persistent rows with two consumer warpgroups, and the hdim 64 rows' three
with the dynamic scheduler). Per tile, cycles of the tile's SM: consumer warpgroup 0's thread 0 at
0 entry, 1 Q arrived, 2 block 0's softmax done (overlapped rows only), 3 its last P V done,
4 epilogue issued; 6 SM id, 7 global timer; warpgroup 1's thread 0 at 5 (its last P V done).
With q_release_early, each warpgroup's thread 0 at 8 + WG when it released Q (session 26): the
report adds how long before warpgroup 0's epilogue was issued the last warpgroup released Q, and
how long after that warpgroup 0 of the SM's next tile saw its Q (an upper bound of the producer's
publish and the Q load; equal to it when warpgroup 0 waited for Q).
Reported per cell and configuration (medians over tiles): the gap between a tile's end (4) and the
same program's next tile entry (0), the Q wait (in the dynamic scheduler's rows, the causal ones,
the consumers wait for the next Q and its work item before the tile's entry stamp, so their Q
wait is in the gap), block 0 (its QK^T and softmax, nothing else in
flight), the steady loop per key block, warpgroup 1 minus warpgroup 0 at the loop's end, the
epilogue, and the fixed cost per tile in key blocks: (tile + gap - n_blocks x loop) / loop.

Part 2, rotated rounds (the bench's protocol since session 10): ROUNDS rounds, each timing every
implementation once after OWN_WARM_MS of its own load (do_bench's warm-up; median of rep 40 ms),
the order rotated each round; the median over rounds, and each as a ratio to the shipped row. FA3
(fa3-fwd wheel, if importable) and SDPA cuDNN beside them. The SM clock is read right after each
timing (torch.cuda.clock_rate, where pynvml is present): under the 700 W limit a kernel that keeps
the SM busier can run at a lower clock, so cycles saved need not all become time saved.
(Runs 42, 45 and 46 used the earlier protocol: a shared warm-up of 0.5 s and 5 ms of own warm-up.)

Every candidate is checked before it is timed: outputs NaN-poisoned, against the float64 oracle
on a tails + GQA case (causal and not), and against the row on the cell's own inputs.

    [HP_CELLS="d,causal,seqlen;..."] [HP_SHAPE="batch,heads"] [HP_STAMPS=0] \
        python3 scripts/hopper_tile_phases.py OUT_DIR [VARIANT ...]
    python3 scripts/hopper_tile_phases.py --precompile [VARIANT ...]   (every launch, in parallel)
    python3 scripts/hopper_tile_phases.py --check VARIANT              (its oracle checks only)
"""
import json
import os
import statistics
import sys
import time
from dataclasses import replace

import torch
import triton

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from device_cells import cells  # noqa: E402
from fusedattn.bench.speed import sm_clock  # noqa: E402
from fusedattn.kernels import hopper_fwd as H  # noqa: E402
from fusedattn.reference import attention_oracle  # noqa: E402

CELLS = ((128, False, 2048), (128, False, 8192), (128, True, 2048), (128, True, 8192),
         (256, False, 8192), (256, True, 8192))
CELLS = cells("HP_CELLS", CELLS)
ROUNDS = int(os.environ.get("HP_ROUNDS", "3"))
OWN_WARM_MS = float(os.environ.get("HP_OWN_WARM_MS", "300"))
REP_MS = 40
STAMPS = os.environ.get("HP_STAMPS", "1") == "1"


def stamps_ok(cfg):
    """Whether the kernel implements diag_stamps for cfg (the library's own rule)."""
    try:
        H._check_switch_support(replace(cfg, diag_stamps=True))
    except ValueError:
        return False
    return True


def cfg_of(name, d, causal):
    return H.get_config(d, causal) if name == "row" else H.variant_config(name, d, causal)


def applies(name, d, causal):
    """Whether a candidate is meant for this cell: its head dims (VARIANTS) and, within them,
    the switches the row of (d, causal) supports (e.g. early_fetch: the causal rows only)."""
    if name == "row":
        return True
    dims = H.VARIANTS[name][1]
    if dims is not None and d not in dims:
        return False
    try:
        H._check_switch_support(cfg_of(name, d, causal))
    except ValueError:
        return False
    return True


def _check_tensors(d, causal, batch=2, heads=4):
    """q, k, v of the check: tails (1000 queries, 1100 or 900 keys) and GQA (heads on heads/2).
    batch 2, 4 heads: fewer tiles than SMs; batch 8, 8 heads: several tiles per program (the
    integer arguments specialise alike, so both shapes share one compile)."""
    torch.manual_seed(7)
    sk = 1100 if not causal else 900
    return (torch.randn(batch, 1000, heads, d, device="cuda", dtype=torch.bfloat16),
            torch.randn(batch, sk, heads // 2, d, device="cuda", dtype=torch.bfloat16),
            torch.randn(batch, sk, heads // 2, d, device="cuda", dtype=torch.bfloat16))


def check(name, d, causal):
    """Both check shapes; (ok, worst rel, worst lse error)."""
    res = [_check_one(name, d, causal, *shape) for shape in ((2, 4), (8, 8))]
    return all(r[0] for r in res), max(r[1] for r in res), max(r[2] for r in res)


def _check_one(name, d, causal, batch, heads):
    """A tails + GQA case against float64 with NaN-poisoned outputs; (ok, rel, lse error)."""
    cfg = cfg_of(name, d, causal)
    q, k, v = _check_tensors(d, causal, batch, heads)
    out = torch.full_like(q, float("nan"))
    lse = torch.full((q.shape[0], q.shape[2], q.shape[1]), float("nan"), device="cuda")
    H.forward(q, k, v, causal, d ** -0.5, config=cfg, _out=out, _lse=lse)
    ro, rl = attention_oracle(q, k, v, causal, d ** -0.5)
    rel = ((out.double() - ro).norm() / ro.norm()).item()
    fin = ~torch.isinf(rl)
    lerr = (lse.double()[fin] - rl[fin]).abs().max().item()
    inf_ok = bool((torch.isinf(lse) == torch.isinf(rl)).all())
    return rel < 1e-2 and lerr < 2e-2 and inf_ok and not torch.isnan(out).any().item(), rel, lerr


def phases(cfg, q, k, v, causal, d):
    b, s, h, _ = q.shape
    scfg = replace(cfg, diag_stamps=True)
    for _ in range(20):   # warm, at the power-limited clock
        H.forward(q, k, v, causal, d ** -0.5, config=scfg, _diagnostic=True)
    # zeros: a slot no thread stamps reads 0 (the Q-release slots of a tile without a release)
    lse = torch.zeros((b, h, s), device=q.device, dtype=torch.float32)
    H.forward(q, k, v, causal, d ** -0.5, config=scfg, _diagnostic=True, _lse=lse)
    torch.cuda.synchronize()
    bm, bn = cfg.block_m, cfg.block_n
    n_m = -(-s // bm)   # m-tiles per (batch, head); each tile's stamps: its first 32 lse entries
    # (bottom_tiles, causal: tile m starts at s - (n_m - m) * bm, its stamps in its last 32)
    bottom = causal and cfg.bottom_tiles
    starts = [s - (n_m - m) * bm if bottom else m * bm for m in range(n_m)]
    rows = (torch.tensor([m0 + (bm - 32 if bottom else 0) for m0 in starts],
                         device=lse.device)[:, None]
            + torch.arange(32, device=lse.device)[None, :]).reshape(-1)
    st = lse.view(b * h, s)[:, rows].reshape(b * h, n_m, 32).contiguous()
    st = st.view(torch.int64).reshape(-1, 16).cpu().tolist()
    nblk = []
    for _ in range(b * h):
        for m in range(n_m):
            kv_end = min(starts[m] + bm, s) if causal else s
            nblk.append(-(-kv_end // bn))
    by_sm = {}
    for i, r in enumerate(st):
        by_sm.setdefault(r[6], []).append((r[0], i))
    gaps = []
    rel_to_end, rel_to_next_q = [], []   # q_release_early's stamps (slots 8 + WG, session 26)
    nc = cfg.num_consumers if cfg.num_consumers in (2, 3) else 2
    for lst in by_sm.values():
        lst.sort()
        for (_, a), (_, c) in zip(lst, lst[1:]):
            gaps.append(st[c][0] - st[a][4])
            if cfg.q_release_early:
                ra = st[a]
                rel = [ra[8 + w] for w in range(nc)]
                # every warpgroup stamped its release within this tile (0: a tile without one,
                # e.g. no key block for a warpgroup; the last warpgroup may release after
                # warpgroup 0's epilogue, so the bound is the next tile's Q)
                if all(ra[0] <= x <= st[c][1] for x in rel):
                    rel_to_end.append(ra[4] - max(rel))
                    rel_to_next_q.append(st[c][1] - max(rel))
    med = statistics.median
    overlap = cfg.overlap
    loop_pb = [(r[3] - (r[2] if overlap else r[1])) / (n - 1 if overlap else n)
               for r, n in zip(st, nblk) if n > 1]
    rec = dict(tiles=len(st), sms=len(by_sm), block_n=bn,
               gap=med(gaps) if gaps else 0.0, q_wait=med([r[1] - r[0] for r in st]),
               block0=med([r[2] - r[1] for r in st]) if overlap else None,
               loop_per_block=med(loop_pb), wg1_minus_wg0=med([r[5] - r[3] for r in st]),
               epilogue=med([r[4] - r[3] for r in st]), tile=med([r[4] - r[0] for r in st]),
               span_ms=(max(r[7] for r in st) - min(r[7] for r in st)) / 1e6)
    fixed = [(r[4] - r[0] - n * rec["loop_per_block"]) / rec["loop_per_block"]
             for r, n in zip(st, nblk)]
    rec["fixed_in_blocks"] = med(fixed) + rec["gap"] / rec["loop_per_block"]
    # warpgroup 0's tile time (entry to epilogue) by m-tile: a ragged m-tile (1024 rows on hdim
    # 64's 192-row tiles: the last 64 rows, one busy warpgroup of three) shows as its own median
    rec["tile_by_m"] = [med([st[i][4] - st[i][0] for i in range(m, len(st), n_m)])
                        for m in range(n_m)]
    # the last m-tile's warpgroups (session 31, ragged_split): from its entry, each
    # warpgroup's Q release (slots 8-10: the end of its QK^Ts; under ragged_split the end of
    # its share of the key blocks), warpgroup 0's and 1's last P V (3, 5) and the epilogue (4);
    # None where a warpgroup stamped no release (0)
    last = [st[i] for i in range(n_m - 1, len(st), n_m)]
    rec["last_m_tile"] = {
        name: (med([r[slot] - r[0] for r in last]) if all(r[slot] for r in last) else None)
        for name, slot in (("q_release_wg0", 8), ("q_release_wg1", 9), ("q_release_wg2", 10),
                           ("last_pv_wg0", 3), ("last_pv_wg1", 5), ("epilogue", 4))
        if slot < 8 + nc}  # (slots 8 + WG: only the warpgroups there are)
    # the last warpgroup's Q release: how long before warpgroup 0's epilogue was issued, and how
    # long until warpgroup 0 of the SM's next tile saw its Q (stamp 1, after its epilogue and
    # the wait for q_bar): an upper bound of the producer's publish and the Q load, equal to it
    # when warpgroup 0 waited for Q
    rec["q_release_to_end"] = med(rel_to_end) if rel_to_end else None
    rec["q_release_to_next_q"] = med(rel_to_next_q) if rel_to_next_q else None
    rec["producer"] = producer_phases(st, by_sm, cfg.q_release_early, nc)
    return rec, st


def producer_phases(st, by_sm, q_release_early, nc=2):
    """The dynamic scheduler's producer stamps (session 27; slots 12-14 of a tile: 13 the
    producer at the tile's top with its id known, 12 once Q's buffer was free and the Q load
    follows, 14 after the tile's last K/V load was issued), medians over consecutive tiles a, c
    of one SM (None where the producer does not stamp, e.g. the static scheduler):
    kv_end_before_epilogue  the tile's last K/V load issued, before warpgroup 0's epilogue of a;
    next_id                 from that to the producer's top of c (the atomic's round trip and
                            the work item's arithmetic; with early_fetch only the arithmetic);
    q_buffer_wait           from c's top until Q's buffer was free;
    free_after_release      that moment after the last warpgroup's release of a's Q (q_release
                            early rows; a lower bound of the release's visibility);
    q_seen_after_free       warpgroup 0's stamp 1 of c after the buffer was free (the Q load,
                            publish and warpgroup 0's own wait; an upper bound of the load);
    free_after_epilogue     the buffer free after warpgroup 0's epilogue of a (negative: before)."""
    keys = ("kv_end_before_epilogue", "next_id", "q_buffer_wait", "free_after_release",
            "q_seen_after_free", "free_after_epilogue")
    acc = {k: [] for k in keys}
    for lst in by_sm.values():
        lst = sorted(lst)
        for (_, a), (_, c) in zip(lst, lst[1:]):
            ra, rc = st[a], st[c]
            if not (ra[14] and rc[13] and rc[12]):
                continue
            acc["kv_end_before_epilogue"].append(ra[4] - ra[14])
            acc["next_id"].append(rc[13] - ra[14])
            acc["q_buffer_wait"].append(rc[12] - rc[13])
            acc["q_seen_after_free"].append(rc[1] - rc[12])
            acc["free_after_epilogue"].append(rc[12] - ra[4])
            rel = [ra[8 + w] for w in range(nc)]
            if q_release_early and all(ra[0] <= x <= rc[1] for x in rel):
                acc["free_after_release"].append(rc[12] - max(rel))
    if not acc["next_id"]:
        return None
    return {k: (statistics.median(v) if v else None) for k, v in acc.items()}


def _cell_shape(d, s):
    """(batch, heads) of a cell: the anchors' (batch x seqlen = 16384, heads x head_dim = 2048),
    or HP_SHAPE="batch,heads" for every cell (the FA3 paper's ablation: "4,16" at seqlen 8448)."""
    text = os.environ.get("HP_SHAPE")
    if text:
        b, h = (int(x) for x in text.split(","))
        return b, h
    return 16384 // s, 2048 // d


def _cell_tensors(d, s):
    b, h = _cell_shape(d, s)
    return [torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3)]


def _compile_one(spec):
    """Compile one launch's exact specialisation into triton's on-disk cache (no launch)."""
    name, d, causal, kind, s = spec
    t0 = time.time()
    try:
        cfg = cfg_of(name, d, causal)
        if kind == "check":
            q, k, v = _check_tensors(d, causal)
        else:
            q, k, v = _cell_tensors(d, s)
            if kind == "stamps":
                cfg = replace(cfg, diag_stamps=True)
        H.forward(q, k, v, causal, d ** -0.5, config=cfg, _warmup=True)
        return f"{spec}: compiled in {time.time() - t0:.0f} s"
    except Exception as e:  # noqa: BLE001
        return f"{spec}: FAILED {e!r}"[:300]


def precompile(variants, workers=14):
    """Every launch this run makes, compiled side by side in `workers` processes."""
    import concurrent.futures as cf
    import multiprocessing as mp
    specs = []
    for d, causal, s in CELLS:
        for n in ["row"] + variants:
            if not applies(n, d, causal):
                continue
            kinds = ["cell"] + (["check"] if n != "row" else [])
            cfg = cfg_of(n, d, causal)
            if STAMPS and stamps_ok(cfg):
                kinds.append("stamps")
            specs += [(n, d, causal, kind, s) for kind in kinds]
    # the check shape does not depend on the cell; a cell's launch may (integer arguments are
    # specialised by divisibility by 16: 8 m-tiles at seqlen 1024 against 16 at 2048)
    specs = list({(sp[:4] if sp[3] == "check" else sp): sp for sp in reversed(specs)}.values())
    with cf.ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as ex:
        for line in ex.map(_compile_one, specs):
            print("precompile", line, flush=True)


def main():
    if sys.argv[1] == "--precompile":
        precompile(sys.argv[2:])
        return
    if sys.argv[1] == "--check":   # --check NAME: the variant's checks (separate process: a hang
        name = sys.argv[2]         # costs its own timeout)
        for d, causal in sorted({(d, c) for d, c, _ in CELLS}):
            if applies(name, d, causal):
                print(f"check {name} {d} {int(causal)} {check(name, d, causal)}", flush=True)
        return
    out = sys.argv[1]
    variants = sys.argv[2:]
    os.makedirs(out, exist_ok=True)
    try:
        from fusedattn.bench.impls import import_fa3
        fa3 = import_fa3().flash_attn_func
    except Exception as e:  # noqa: BLE001
        print(f"FA3 not available: {e!r}"[:200])
        fa3 = None
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F

    checked = {}
    recs = []
    for d, causal, s in CELLS:
        names = ["row"]
        for n in variants:
            if not applies(n, d, causal):
                continue
            key = (n, d, causal)
            if key not in checked:
                try:
                    checked[key] = check(n, d, causal)
                except Exception as e:  # noqa: BLE001
                    checked[key] = (False, repr(e)[:200], None)
                print(f"check {n} d{d} causal={int(causal)}: {checked[key]}", flush=True)
            if checked[key][0]:
                names.append(n)
        torch.manual_seed(d + s)
        q, k, v = _cell_tensors(d, s)
        b, _, h, _ = q.shape
        scale = d ** -0.5
        fns = {n: (lambda cfg=cfg_of(n, d, causal): H.forward(q, k, v, causal, scale, config=cfg))
               for n in names}
        ref_o = fns["row"]()[0].float()
        for n in names[1:]:
            o = fns[n]()[0].float()
            rel = ((o - ref_o).norm() / ref_o.norm()).item()
            if rel > 5e-3:
                print(f"d{d} c{int(causal)} s{s} {n}: differs from the row (rel {rel:.2e}); "
                      f"not timed", flush=True)
                del fns[n]
        del ref_o
        if fa3 is not None:
            fns["fa3"] = lambda: fa3(q, k, v, causal=causal, softmax_scale=scale)
        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))

        def cudnn():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, scale=scale)
        fns["cudnn"] = cudnn
        rec = dict(d=d, causal=causal, seqlen=s, batch=b, heads=h)
        if STAMPS:
            rec["phases"] = {}
            for n in names:
                if n not in fns:
                    continue
                cfg = cfg_of(n, d, causal)
                if not stamps_ok(cfg):
                    continue
                try:
                    p, st = phases(cfg, q, k, v, causal, d)
                except Exception as e:  # noqa: BLE001
                    print(f"d{d} c{int(causal)} s{s} {n}: stamps failed {e!r}"[:300], flush=True)
                    continue
                rec["phases"][n] = p
                with open(os.path.join(out, f"stamps_d{d}_c{int(causal)}_s{s}_{n}.json"), "w") as f:
                    json.dump(dict(rec=p, stamps=st), f)
                bz = f"{p['block0']:.0f}" if p["block0"] is not None else "-"
                print(f"d{d} c{int(causal)} s{s} {n} ({p['tiles']} tiles, {p['sms']} SMs): "
                      f"gap {p['gap']:.0f} | Q wait {p['q_wait']:.0f} | block0 {bz} | "
                      f"loop {p['loop_per_block']:.0f}/block | wg1-wg0 {p['wg1_minus_wg0']:.0f} | "
                      f"epilogue {p['epilogue']:.0f} | tile {p['tile']:.0f} | "
                      f"fixed {p['fixed_in_blocks']:.2f} blocks"
                      + (f" | Q released {p['q_release_to_end']:.0f} before the epilogue, "
                         f"next Q seen {p['q_release_to_next_q']:.0f} after the release"
                         if p["q_release_to_end"] is not None else ""), flush=True)
                print(f"d{d} c{int(causal)} s{s} {n} tile by m-tile: "
                      + " / ".join(f"{t:.0f}" for t in p["tile_by_m"]), flush=True)
                print(f"d{d} c{int(causal)} s{s} {n} last m-tile from its entry: "
                      + " | ".join(f"{k} {'-' if v is None else f'{v:.0f}'}"
                                   for k, v in p["last_m_tile"].items()), flush=True)
                if p.get("producer"):
                    pp = p["producer"]
                    fr = pp["free_after_release"]
                    print(f"d{d} c{int(causal)} s{s} {n} producer: last K/V issued "
                          f"{pp['kv_end_before_epilogue']:.0f} before the epilogue | next id "
                          f"{pp['next_id']:.0f} after it | Q buffer wait "
                          f"{pp['q_buffer_wait']:.0f} | free {pp['free_after_epilogue']:.0f} "
                          f"after the epilogue"
                          + (f" ({fr:.0f} after the release)" if fr is not None else "")
                          + f" | Q seen {pp['q_seen_after_free']:.0f} after the free",
                          flush=True)
        order = list(fns)
        for n in order:
            fns[n]()
        torch.cuda.synchronize()
        times = {n: [] for n in order}
        clocks = {n: [] for n in order}
        for r in range(ROUNDS):
            for n in order[r % len(order):] + order[:r % len(order)]:
                times[n].append(triton.testing.do_bench(fns[n], warmup=OWN_WARM_MS, rep=REP_MS,
                                                        return_mode="median"))
                clocks[n].append(sm_clock())
        flops = 4 * b * h * s * s * d / (2 if causal else 1)
        med = {n: statistics.median(t) for n, t in times.items()}
        rec["ms"] = times
        rec["sm_clock_mhz"] = clocks
        rec["tflops"] = {n: flops / m / 1e9 for n, m in med.items()}
        recs.append(rec)
        print(f"d{d} c{int(causal)} s{s}: " + " | ".join(
            f"{n} {rec['tflops'][n]:.0f} ({med['row'] / med[n]:.3f}x row"
            + (f", {med['fa3'] / med[n]:.3f}x fa3" if "fa3" in med and n != "fa3" else "")
            + f", spread {(max(t) - min(t)) / min(t):.3f}"
            + (f", {statistics.median(clocks[n]):.0f} MHz" if None not in clocks[n] else "") + ")"
            for n, t in times.items()), flush=True)
        del fns, q, k, v, qt, kt, vt
        torch.cuda.empty_cache()
    with open(os.path.join(out, "phases.json"), "w") as f:
        json.dump(recs, f, indent=1)


if __name__ == "__main__":
    main()
