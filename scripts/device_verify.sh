#!/usr/bin/env bash
# One device call after a table change: the hopper GPU grid, the FP8 GPU tests, and
# compute-sanitizer (memcheck, racecheck with a hazard-address summary) on the FP8 sanitizer
# cases, then memcheck on the hopper cases if time is left. Every step has its own cap and the
# whole run a deadline; full logs under OUT, a short summary last.
#     [SKIP_HOPPER=1] bash scripts/device_verify.sh OUT [DEADLINE_S (default 540)]
set -u
out=${1:?usage: device_verify.sh OUT [DEADLINE_S]}
deadline=$(( $(date +%s) + ${2:-540} ))
mkdir -p "$out"
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
source scripts/device_steps.sh
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv > "$out/smi.txt" 2>&1
# SKIP_HOPPER=1: the FP8 steps only (after a change to the FP8 kernel alone)
[ -n "${SKIP_HOPPER:-}" ] || step grid-hopper 240 env FUSEDATTN_TEST_BACKENDS=hopper python3 -m pytest -q -n 12 -p no:cacheprovider \
  tests/test_gpu_grid.py tests/test_api.py
step gpu-fp8 90 python3 -m pytest -q -n 12 -p no:cacheprovider tests/test_gpu_fp8.py
python3 scripts/sanitize_cases.py fp8 > "$out/warm-fp8.log" 2>&1   # compile outside the sanitizer
CS="compute-sanitizer --print-limit 0 --error-exitcode 9"
step memcheck-fp8 90 $CS --tool memcheck python3 scripts/sanitize_cases.py fp8
step racecheck-fp8 120 $CS --tool racecheck --racecheck-report hazard python3 scripts/sanitize_cases.py fp8
grep -o "__shared__ 0x[0-9a-f]*" "$out/racecheck-fp8.log" | sort | uniq -c | sort -rn | head -20 \
  > "$out/racecheck-fp8-addresses.txt"
[ -n "${SKIP_HOPPER:-}" ] || step memcheck-hopper 120 $CS --tool memcheck python3 scripts/sanitize_cases.py hopper
echo "== summary =="
printf '%s\n' "${summary[@]}"
echo "racecheck fp8 hazard addresses (count, address):"; cat "$out/racecheck-fp8-addresses.txt"
