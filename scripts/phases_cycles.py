"""Cycles against time for the candidates of scripts/hopper_tile_phases.py runs.

Under the H200's 700 W limit a kernel's clock depends on its power, so a candidate's timed ratio
mixes two things: the SM cycles it saves and the clock it runs at. This prints, per cell and
candidate (against the shipped row of the same run):
- cycles: the busy span of an SM (its last tile's epilogue stamp minus its first tile's entry
  stamp), averaged over the SMs, from the raw stamps in stamps.tar.xz beside phases.json. Without
  that archive it falls back to (median tile + median gap) x tiles, which misreads bimodal gaps
  (run 54: 1.157 against a span ratio of 1.085).
- clock: the median SM clock read after the candidate's timings;
- time: the timed ratio;
- clock / cycles: what the timed ratio would be from those two alone.

    python scripts/phases_cycles.py RUN_DIR/phases.json [...]
"""
import json
import os
import statistics
import sys
import tarfile


def _spans(path):
    """{(d, causal, seqlen, name): mean busy span per SM in cycles} from stamps.tar.xz."""
    arc = os.path.join(os.path.dirname(path), "stamps.tar.xz")
    out = {}
    if not os.path.exists(arc):
        return out
    with tarfile.open(arc) as tf:
        for m in tf.getmembers():
            base = os.path.basename(m.name)
            if not (base.startswith("stamps_") and base.endswith(".json")):
                continue
            d, c, s, name = base[len("stamps_"):-len(".json")].split("_", 3)
            rows = json.load(tf.extractfile(m))["stamps"]
            by_sm = {}
            for r in rows:   # r: 0 entry, 4 epilogue issued, 6 SM id (hopper_tile_phases.py)
                by_sm.setdefault(r[6], []).append(r)
            spans = [max(r[4] for r in v) - min(r[0] for r in v) for v in by_sm.values()]
            out[(int(d[1:]), c == "c1", int(s[1:]), name)] = statistics.mean(spans)
    return out


def _clock(rec, name):
    """The median SM clock read after name's timings, or None where none could be read."""
    vals = [v for v in rec.get("sm_clock_mhz", {}).get(name, []) if v]
    return statistics.median(vals) if vals else None


def main(paths):
    print("| run | cell | candidate | cycles | clock | time (x row) | clock / cycles |")
    print("|---|---|---|---|---|---|---|")
    for path in paths:
        run = os.path.basename(os.path.dirname(os.path.abspath(path)))
        spans = _spans(path)
        for rec in json.load(open(path)):
            ph = rec.get("phases", {})
            if "row" not in ph:
                continue
            key = (rec["d"], rec["causal"], rec["seqlen"])
            cell = f"d{rec['d']} {'causal' if rec['causal'] else 'non-causal'} {rec['seqlen']}"
            row_ms = statistics.median(rec["ms"]["row"])
            row_clk = _clock(rec, "row")
            for name, p in ph.items():
                if name == "row":
                    continue
                if key + ("row",) in spans and key + (name,) in spans:
                    cyc = spans[key + (name,)] / spans[key + ("row",)]
                else:
                    cyc = ((p["tile"] + p["gap"]) * p["tiles"]
                           / ((ph["row"]["tile"] + ph["row"]["gap"]) * ph["row"]["tiles"]))
                clk = _clock(rec, name) / row_clk if row_clk and _clock(rec, name) else None
                t = row_ms / statistics.median(rec["ms"][name])
                cl = f"{clk:.3f}" if clk else "-"
                pred = f"{clk / cyc:.3f}" if clk else "-"
                print(f"| {run} | {cell} | {name} | {cyc:.3f} | {cl} | {t:.3f} | {pred} |")


if __name__ == "__main__":
    main(sys.argv[1:])
