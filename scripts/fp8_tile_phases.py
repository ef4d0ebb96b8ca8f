"""Where a tile's time goes in the FP8 kernel: SM clock stamps of each tile's phases
(Fp8FwdConfig.diag_stamps; lse overwritten, so forward() runs it only with _diagnostic=True).

Per tile (consumer warpgroup 0's thread 0, the producer's thread 0; cycles of the tile's SM):
  0 consumer entry, 1 Q arrived (after its wait), 2 key loop done, 3 epilogue stores issued,
  4 producer entry, 5 the first V^T published; 6 the SM id, 7 the global timer at entry (ns).
Key block F.STAMP_BLOCK (2) of each tile with more blocks than that: the producer's 8 before its
waits for V_j staged and V^T_{j-2} released, 9 after them (its transpose starts), 10 V^T_j
signalled, 11 K_{j+1} issued (before 8 in the row's order, after 10 with k_after_vt); consumer
warpgroup 0's 12 / 13 before / after its wait for K_j, 14 / 15 before / after its wait for V^T_j,
16 after its pingpong turn, 17 after P_j V_j.
Reported per cell (medians over tiles, cycles): the gap between a tile's end (stamp 3) and the
next tile's entry on the same SM (launch and setup of the next program), the wait for Q, the loop
per key block, the epilogue, the producer's first V^T after entry; and the per-tile fixed cost in
key blocks: (gap + Q wait + epilogue) / (loop per block). For the block: the producer's wait, its
transpose (9 -> 10), when K_{j+1} was issued against the transpose's start, the consumer's waits
for K_j and V^T_j, its turn and P V, and the slack: the consumer's V^T request minus the
producer's signal (14 - 10; negative: the consumer waited for the transpose). Timed run first (do_bench), then one
launch with the stamps; both at the bench's shapes (batch x seqlen = 16384, heads x head_dim =
2048), seqlens multiples of 128.

    [FP8_CELLS="d,causal,seqlen;..."] [FP8_PHASES_PERSISTENT=1] python3 scripts/fp8_tile_phases.py OUT_DIR
"""
import json
import os
import statistics
import sys
from dataclasses import replace

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from device_cells import cells  # noqa: E402
import fusedattn  # noqa: E402
from fusedattn.fp8_api import kv_block_for  # noqa: E402
from fusedattn.kernels import hopper_fp8_fwd as F  # noqa: E402

CELLS = ((256, False, 2048), (256, False, 8192), (128, False, 2048), (128, False, 8192),
         (128, True, 2048), (256, True, 2048))
CELLS = cells("FP8_CELLS", CELLS)   # e.g. FP8_CELLS="128,0,2048;256,1,2048"
# FP8_PHASES_PERSISTENT=1: each cell also with the persistent tile loop (the "gap" is then the
# time between one program's consecutive tiles)
MODES = (False, True) if os.environ.get("FP8_PHASES_PERSISTENT") else (False,)
# FP8_PHASES_VARIANTS="pq256,...": each cell also with these candidates of F.VARIANTS (stamped the
# same way; the mode is then the variant's name)
MODES += tuple(v for v in os.environ.get("FP8_PHASES_VARIANTS", "").split(",") if v)


def block_steps(st, nblk):
    """Medians of key block STAMP_BLOCK's steps (slots 8-17) over the tiles that have the block
    and whose stamps all lie within the tile (entry .. epilogue): cycles."""
    jb = int(F.STAMP_BLOCK.value)
    ok = []
    for r, n in zip(st, nblk):
        if n <= jb + 1:
            continue
        lo, hi = min(r[0], r[4]), r[3]
        if all(lo <= r[i] <= hi for i in range(8, 18)):
            ok.append(r)
    if not ok:
        return {}
    med = statistics.median
    return dict(
        blk_tiles=len(ok),
        blk_p_wait=med(r[9] - r[8] for r in ok),
        blk_transpose=med(r[10] - r[9] for r in ok),
        blk_k_issue=med(r[11] - r[9] for r in ok),
        blk_c_kwait=med(r[13] - r[12] for r in ok),
        blk_c_vtwait=med(r[15] - r[14] for r in ok),
        blk_c_vt_waited=sum(r[15] - r[14] > 200 for r in ok) / len(ok),
        blk_c_turn=med(r[16] - r[15] for r in ok),
        blk_c_pv=med(r[17] - r[16] for r in ok),
        blk_slack=med(r[14] - r[10] for r in ok))


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    recs = []
    for d, causal, s, pers in ((d, c, s, p) for d, c, s in CELLS for p in MODES
                               if not isinstance(p, str) or d in F.VARIANTS[p][1]):
        b, h = 16384 // s, 2048 // d
        torch.manual_seed(s + d)
        q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        kvb = kv_block_for(d, causal)
        qq = fusedattn.quantize_fp8(q, role="q", rotate=True)
        kq = fusedattn.quantize_fp8(k, role="k", rotate=True, block_size=kvb)
        vq = fusedattn.quantize_fp8(v, role="v", block_size=kvb)
        if isinstance(pers, str):
            cfg = replace(F.variant_config(pers, d, causal), diag_stamps=True)
            if cfg.block_n != kvb:
                kq = fusedattn.quantize_fp8(k, role="k", rotate=True, block_size=cfg.block_n)
                vq = fusedattn.quantize_fp8(v, role="v", block_size=cfg.block_n)
        else:
            row = F.get_config(d, causal, kvb)
            # o_tma is for one-tile programs; o_half, o_ring, early_q and sched_table for
            # persistent ones (the persistent rows' one-tile form drops them, and stores O by
            # o_tma where the row stores it through the V ring: run 81's and run 91's phases
            # steps failed on these)
            cfg = replace(row, diag_stamps=True, persistent=pers,
                          o_tma=(row.o_tma or row.o_ring) and not pers,
                          o_half=row.o_half and pers, o_ring=row.o_ring and pers,
                          early_q=row.early_q and pers, sched_table=row.sched_table and pers)
        for _ in range(30):   # warm, at the power-limited clock
            F.forward(qq, kq, vq, causal, d ** -0.5, config=cfg, _diagnostic=True)
        _, lse = F.forward(qq, kq, vq, causal, d ** -0.5, config=cfg, _diagnostic=True)
        torch.cuda.synchronize()
        rows = int(F.STAMP_ROWS.value)
        st = lse.view(b, h, s)[:, :, :].reshape(b, h, s // 128, 128)[..., :rows].contiguous()
        st = st.view(torch.int64).reshape(-1, rows // 2).cpu().tolist()   # one row per tile
        n_tiles = len(st)
        m_tiles = s // 128
        bn = cfg.block_n
        # n_blocks per tile (same order as the rows: (b, h, m))
        nblk = []
        for _ in range(b * h):
            for m in range(m_tiles):
                kv_end = min((m + 1) * 128, s) if causal else s
                nblk.append(-(-kv_end // bn))
        by_sm = {}
        for i, r in enumerate(st):
            by_sm.setdefault(r[6], []).append((r[0], i))
        gaps = []
        for sm, lst in by_sm.items():
            lst.sort()
            for (_, a), (t0, c) in zip(lst, lst[1:]):
                gaps.append(st[c][0] - st[a][3])
        qwait = [r[1] - r[0] for r in st]
        loop_pb = [(r[2] - r[1]) / n for r, n in zip(st, nblk) if n > 0]
        epi = [r[3] - r[2] for r in st]
        firstv = [r[5] - r[4] for r in st]
        total = [r[3] - r[0] for r in st]
        med = statistics.median
        rec = dict(d=d, causal=causal, seqlen=s, persistent=pers, tiles=n_tiles, sms=len(by_sm), block_n=bn,
                   gap=med(gaps) if gaps else None, gap_p90=sorted(gaps)[int(0.9 * len(gaps))] if gaps else None,
                   q_wait=med(qwait), loop_per_block=med(loop_pb), epilogue=med(epi),
                   first_vt=med(firstv), tile_total=med(total),
                   span_ms=(max(r[7] for r in st) - min(r[7] for r in st)) / 1e6)
        rec["fixed_in_blocks"] = ((rec["gap"] or 0) + rec["q_wait"] + rec["epilogue"]) / rec["loop_per_block"]
        rec.update(block_steps(st, nblk))
        recs.append(rec)
        print(f"d{d} causal={int(causal)} s{s}{(' ' + pers) if isinstance(pers, str) else (' persistent' if pers else '')} ({n_tiles} tiles on {len(by_sm)} SMs, {bn}-key blocks): "
              f"gap {rec['gap']:.0f} (p90 {rec['gap_p90']:.0f}) | Q wait {rec['q_wait']:.0f} | "
              f"loop {rec['loop_per_block']:.0f}/block | epilogue {rec['epilogue']:.0f} | "
              f"producer first V^T {rec['first_vt']:.0f} | tile {rec['tile_total']:.0f} cycles | "
              f"fixed = {rec['fixed_in_blocks']:.2f} blocks", flush=True)
        if rec.get("blk_tiles"):
            print(f"  block {int(F.STAMP_BLOCK.value)} ({rec['blk_tiles']} tiles): producer wait "
                  f"{rec['blk_p_wait']:.0f} | transpose {rec['blk_transpose']:.0f} | K_(j+1) "
                  f"issued at {rec['blk_k_issue']:+.0f} from the transpose's start | consumer K "
                  f"wait {rec['blk_c_kwait']:.0f}, V^T wait {rec['blk_c_vtwait']:.0f} (waited in "
                  f"{rec['blk_c_vt_waited']:.0%} of tiles), turn {rec['blk_c_turn']:.0f}, P V "
                  f"{rec['blk_c_pv']:.0f} | slack {rec['blk_slack']:+.0f} cycles", flush=True)
        with open(os.path.join(out_dir, f"stamps_d{d}_c{int(causal)}_s{s}_p{pers if isinstance(pers, str) else int(pers)}.json"), "w") as f:
            json.dump(dict(rec=rec, stamps=st, n_blocks=nblk), f)
    with open(os.path.join(out_dir, "phases.json"), "w") as f:
        json.dump(recs, f, indent=1)


if __name__ == "__main__":
    main()
