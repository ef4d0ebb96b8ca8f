#!/usr/bin/env bash
# One device call for the candidates built on the CPU since the last GPU run (every step checks
# before it times; each has its own time cap; full logs under OUT, one tarball, a short summary):
#   bash scripts/device_candidates.sh OUT [HOPPER_JOBS] [FP8_BUDGET_S]
# HOPPER_JOBS: scripts/hopper_dev2.py jobs (default q128,q64,l128); FP8_BUDGET_S: the budget of
# scripts/hopper_fp8_dev.py (default 150; 0 skips it). Then scripts/fp8_outlier.py (seconds).
# About 6 minutes with the defaults (hopper 200 s cap, FP8 180 s cap, outlier 60 s cap).
set -u
out=${1:?usage: device_candidates.sh OUT [HOPPER_JOBS] [FP8_BUDGET_S]}
jobs=${2:-q128,q64,l128}
fp8_budget=${3:-150}
mkdir -p "$out"
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv > "$out/smi.txt" 2>&1
timeout 230 python3 scripts/hopper_dev2.py "$out/h" --jobs "$jobs" --budget 200 > "$out/hopper.log" 2>&1
echo "hopper_dev2 rc=$?"
if [ "$fp8_budget" != 0 ]; then
  timeout $((fp8_budget + 30)) python3 scripts/hopper_fp8_dev.py "$out/fp8" --budget "$fp8_budget" \
    > "$out/fp8.log" 2>&1
  echo "hopper_fp8_dev rc=$?"
fi
timeout 60 python3 scripts/fp8_outlier.py > "$out/fp8_outlier.log" 2>&1
echo "fp8_outlier rc=$?"
tar -C "$(dirname "$out")" -czf "$out.tgz" "$(basename "$out")"
echo "== summary =="
grep -A80 "^# summary" "$out/hopper.log" | head -60
[ -f "$out/fp8.log" ] && grep -A30 "^candidates" "$out/fp8.log" | head -20
cat "$out/fp8_outlier.log"
