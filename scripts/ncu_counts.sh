#!/usr/bin/env bash
# Nsight Compute's byte and instruction counts of forward kernels, ours beside FA3 and cuDNN, on
# the device machine: where the energy per call goes (RESULTS.md, runs 118-119). One CSV for all
# cases (OUT/counts.csv) and a table on stdout; clocks left alone (--clock-control none); ncu
# flushes the caches before each profiled kernel, so the DRAM bytes start from a cold L2.
#     bash scripts/ncu_counts.sh OUT "IMPL D CAUSAL SEQLEN" ["IMPL D CAUSAL SEQLEN" ...]
# IMPL as scripts/ncu_target.py takes it (hopper, hopper:VARIANT, fa3, cudnn, ...). FA3's wheel
# on PYTHONPATH first for fa3.
set -u
out=$1; shift
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
metrics=dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,sm__cycles_elapsed.max,\
smsp__inst_executed.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,\
smsp__inst_executed_pipe_uniform.sum,sm__warps_active.avg.pct_of_peak_sustained_active
: > "$out/counts.csv"
for case in "$@"; do
  set -- $case
  timeout 90 ncu --profile-from-start off --clock-control none --metrics "$metrics" --csv \
      --print-units base python3 "$here/ncu_target.py" "$1" "$2" "$3" "$4" 2> /dev/null \
    | grep '^"' | sed "s/^/\"$1 $2 $3 $4\",/" >> "$out/counts.csv"
done
python3 - "$out/counts.csv" <<'EOF'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
data, order = {}, []
for r in rows:
    if r[1] == "ID":  # a header line (one per case)
        head = r
        continue
    rec = dict(zip(head, r))
    key = (r[0], rec["Kernel Name"][:48])
    if key not in data:
        data[key] = {}
        order.append(key)
    data[key][rec["Metric Name"]] = rec["Metric Value"]
names = ["dram__bytes_read.sum", "dram__bytes_write.sum", "lts__t_bytes.sum",
         "sm__cycles_elapsed.max", "smsp__inst_executed.sum",
         "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum", "smsp__inst_executed_pipe_uniform.sum"]
print("| case | kernel | DRAM read MB | DRAM write MB | L2 MB | cycles k | inst M | smem wf M | uniform inst M |")
print("|---|---|---|---|---|---|---|---|---|")
for key in order:
    m = data[key]
    def num(n):
        try:
            return float(m.get(n, "nan").replace(",", ""))
        except ValueError:
            return float("nan")
    if num("sm__cycles_elapsed.max") < 20000:  # fills and copies around the attention kernel
        continue
    vals = [num(n) for n in names]
    print(f"| {key[0]} | {key[1]} | {vals[0] / 1e6:.1f} | {vals[1] / 1e6:.1f} | {vals[2] / 1e6:.1f} "
          f"| {vals[3] / 1e3:.1f} | {vals[4] / 1e6:.2f} | {vals[5] / 1e6:.2f} | {vals[6] / 1e6:.2f} |")
EOF
