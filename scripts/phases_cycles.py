"""Cycles against time for the candidates of scripts/hopper_tile_phases.py runs.

Under the H200's 700 W limit a kernel's clock depends on its power, so a candidate's timed ratio
mixes two things: the SM cycles it saves and the clock it runs at. This prints, per cell and
candidate (against the shipped row of the same run): the stamps' cycles per SM (median tile plus
the median gap to the next tile, times the number of tiles: candidates may tile differently),
the median SM clock read after its timings, the timed
ratio, and cycles x clock (what the timed ratio would be from those two alone).

    python scripts/phases_cycles.py RUN_DIR/phases.json [...]
"""
import json
import statistics
import sys


def main(paths):
    print("| run | cell | candidate | cycles | clock | time (x row) | from cycles and clock |")
    print("|---|---|---|---|---|---|---|")
    for path in paths:
        run = path.rstrip("/").split("/")[-2]
        for rec in json.load(open(path)):
            ph = rec.get("phases", {})
            if "row" not in ph:
                continue
            cell = f"d{rec['d']} {'causal' if rec['causal'] else 'non-causal'} {rec['seqlen']}"
            row_cyc = (ph["row"]["tile"] + ph["row"]["gap"]) * ph["row"]["tiles"]
            row_ms = statistics.median(rec["ms"]["row"])
            row_clk = statistics.median(rec["sm_clock_mhz"]["row"])
            for name, p in ph.items():
                if name == "row":
                    continue
                cyc = (p["tile"] + p["gap"]) * p["tiles"] / row_cyc
                clk = statistics.median(rec["sm_clock_mhz"][name]) / row_clk
                t = row_ms / statistics.median(rec["ms"][name])
                print(f"| {run} | {cell} | {name} | {cyc:.3f} | {clk:.3f} | {t:.3f} | "
                      f"{clk / cyc:.3f} |")


if __name__ == "__main__":
    main(sys.argv[1:])
