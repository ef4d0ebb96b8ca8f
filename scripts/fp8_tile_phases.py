"""Where a tile's time goes in the FP8 kernel: SM clock stamps of each tile's phases
(Fp8FwdConfig.diag_stamps; lse overwritten, so forward() runs it only with _diagnostic=True).

Per tile (consumer warpgroup 0's thread 0, the producer's thread 0; cycles of the tile's SM):
  0 consumer entry, 1 Q arrived (after its wait), 2 key loop done, 3 epilogue stores issued,
  4 producer entry, 5 the first V^T published; 6 the SM id, 7 the global timer at entry (ns).
Reported per cell (medians over tiles, cycles): the gap between a tile's end (stamp 3) and the
next tile's entry on the same SM (launch and setup of the next program), the wait for Q, the loop
per key block, the epilogue, the producer's first V^T after entry; and the per-tile fixed cost in
key blocks: (gap + Q wait + epilogue) / (loop per block). Timed run first (do_bench), then one
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
        st = lse.view(b, h, s)[:, :, :].reshape(b, h, s // 128, 128)[..., :16].contiguous()
        st = st.view(torch.int64).reshape(-1, 8).cpu().tolist()    # one row of 8 per tile
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
        recs.append(rec)
        print(f"d{d} causal={int(causal)} s{s}{(' ' + pers) if isinstance(pers, str) else (' persistent' if pers else '')} ({n_tiles} tiles on {len(by_sm)} SMs, {bn}-key blocks): "
              f"gap {rec['gap']:.0f} (p90 {rec['gap_p90']:.0f}) | Q wait {rec['q_wait']:.0f} | "
              f"loop {rec['loop_per_block']:.0f}/block | epilogue {rec['epilogue']:.0f} | "
              f"producer first V^T {rec['first_vt']:.0f} | tile {rec['tile_total']:.0f} cycles | "
              f"fixed = {rec['fixed_in_blocks']:.2f} blocks", flush=True)
        with open(os.path.join(out_dir, f"stamps_d{d}_c{int(causal)}_s{s}_p{pers if isinstance(pers, str) else int(pers)}.json"), "w") as f:
            json.dump(dict(rec=rec, stamps=st, n_blocks=nblk), f)
    with open(os.path.join(out_dir, "phases.json"), "w") as f:
        json.dump(recs, f, indent=1)


if __name__ == "__main__":
    main()
