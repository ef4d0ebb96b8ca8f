#!/usr/bin/env bash
# Nsight Compute profiles of forward kernels, ours beside FA3 and cuDNN, on the device machine:
#   bash scripts/ncu_profile.sh OUTDIR "IMPL D CAUSAL SEQLEN" ["IMPL D CAUSAL SEQLEN" ...]
# Per case: OUTDIR/NAME.ncu-rep, the details page as CSV (speed of light, warp states, scheduler,
# memory), the raw metrics as CSV, and the per-SASS-instruction source page (stall samples).
# Clocks are left alone (--clock-control none), as the device notes ask. NCU_EXTRA_SECTIONS: more
# --section options (e.g. MemoryWorkloadAnalysis_Tables for shared-memory bank conflicts).
set -u
out=$1; shift
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
sections="--section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats \
 --section SchedulerStats --section Occupancy --section MemoryWorkloadAnalysis --section LaunchStats \
 --section SourceCounters --section InstructionStats ${NCU_EXTRA_SECTIONS:-}"
for case in "$@"; do
  set -- $case
  name="$(echo "$1" | tr ':' '_')_d$2_c$3_s$4"
  echo "=== $name"
  timeout 120 ncu --profile-from-start off --clock-control none $sections --import-source no \
      -f -o "$out/$name" python3 "$here/ncu_target.py" "$1" "$2" "$3" "$4" > "$out/$name.log" 2>&1
  echo "ncu rc=$?"; tail -3 "$out/$name.log"
  ncu -i "$out/$name.ncu-rep" --page details --csv > "$out/$name.details.csv" 2>&1
  ncu -i "$out/$name.ncu-rep" --page raw --csv > "$out/$name.raw.csv" 2>&1
  ncu -i "$out/$name.ncu-rep" --page source --csv --print-source sass > "$out/$name.sass.csv" 2>&1 \
    || ncu -i "$out/$name.ncu-rep" --page source --csv > "$out/$name.sass.csv" 2>&1
  wc -c "$out/$name".*.csv | head -4
done
