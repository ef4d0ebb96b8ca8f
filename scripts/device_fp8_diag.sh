#!/usr/bin/env bash
# One device call: the measurements that decide whether hdim 256's FP8 producer is worth
# restructuring (RESULTS.md, "State at the end of session 22"). In order, each with its own cap
# under one deadline; full logs under OUT, tarred to OUT.tgz; a short summary last.
#     bash scripts/device_fp8_diag.sh OUT [DEADLINE_S (560)]
# 1. the bitwise GPU test of the off-by-default candidates pvx / pvxc against the row
#    (tests/test_gpu_fp8.py -k expect_signal): they are timed later only if it passes
# 2. scripts/fp8_diag_time.py: each row beside itself without the V transpose (diag_no_transpose;
#    wrong results, timing only): what the producer's transpose costs today (run 28, before
#    v_perm: +12-14% without it)
# 3. Nsight Compute of the hdim 256 non-causal 8k row beside FA3-FP8 (scripts/ncu_profile.sh;
#    shared-memory throughput, bank conflicts, stall reasons), summarised by scripts/ncu_summary.py
# FA3's wheel first, as for every side-by-side run (pip install --target /tmp/site .whl/*.whl and
# /tmp/site on PYTHONPATH).
set -u
out=${1:?usage: device_fp8_diag.sh OUT [DEADLINE_S]}
deadline=$(( $(date +%s) + ${2:-560} ))
mkdir -p "$out" && out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
source scripts/device_steps.sh
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.limit --format=csv > "$out/smi.txt" 2>&1
step expect_signal 150 python3 -m pytest -q -p no:cacheprovider tests/test_gpu_fp8.py -k expect_signal
step diag_time 150 python3 scripts/fp8_diag_time.py
step ncu 240 env NCU_EXTRA_SECTIONS="--section MemoryWorkloadAnalysis_Tables" \
  bash scripts/ncu_profile.sh "$out/ncu" "hopper-fp8 256 0 8192" "fa3-fp8 256 0 8192"
for f in "$out"/ncu/*.sass.csv; do
  [ -s "$f" ] && python3 scripts/ncu_summary.py "$f" > "${f%.sass.csv}.summary.txt" 2>&1
done
# the figures the decision needs from the details pages (the attention kernels' sections)
python3 - "$out"/ncu/*.details.csv > "$out/ncu_key.txt" 2>&1 <<'PY'
import csv, sys
keep = ("Elapsed Cycles", "SM Frequency", "Duration", "Compute (SM) Throughput",
        "L1/TEX Cache Throughput", "L1/TEX Hit Rate", "Mem Pipes Busy", "Issue Slots Busy",
        "No Eligible", "Warp Cycles Per Issued Instruction", "Local Memory Spilling Requests")
for path in sys.argv[1:]:
    rows = list(csv.reader(open(path)))
    if not rows:
        continue
    print("==", path.rsplit("/", 1)[-1])
    for r in rows[1:]:
        d = dict(zip(rows[0], r))
        name = d.get("Kernel Name", "")
        if "attn" in name or "flash" in name.lower():
            m = d.get("Metric Name", "")
            if m in keep or "Bank" in m or "Shared" in d.get("Section Name", ""):
                print(f"  {d.get('Section Name', '')[:24]:24s} {m:40s} {d['Metric Value']} "
                      f"{d['Metric Unit']}")
PY
# from the raw pages: the tensor pipe's and the shared-memory pipe's active cycles, bank conflicts
python3 - "$out"/ncu/*.raw.csv >> "$out/ncu_key.txt" 2>&1 <<'PY'
import csv, sys
for path in sys.argv[1:]:
    rows = list(csv.reader(open(path)))
    if len(rows) < 3:
        continue
    print("== raw", path.rsplit("/", 1)[-1])
    for r in rows[2:]:
        d = dict(zip(rows[0], r))
        name = d.get("Kernel Name", "")
        if not ("attn" in name or "flash" in name.lower()):
            continue
        for m, v in d.items():
            if (m.endswith(".avg.pct_of_peak_sustained_elapsed")
                    and ("pipe_tensor" in m or "pipe_shared" in m)) \
                    or ("bank_conflicts" in m or "wavefronts_mem_shared" in m) and m.endswith(".sum"):
                print(f"  {m:90s} {v}")
PY
gzip -f "$out"/ncu/*.sass.csv "$out"/ncu/*.raw.csv 2>/dev/null
echo "== summary =="
printf '%s\n' "${summary[@]}"
grep "^d" "$out/diag_time.log" 2>/dev/null
cat "$out/ncu_key.txt"
tar -C "$(dirname "$out")" -czf "$out.tgz" "$(basename "$out")" && rm -rf "$out"
