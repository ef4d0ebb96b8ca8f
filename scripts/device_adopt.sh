#!/usr/bin/env bash
# One device call after a change to the 16-bit hopper table: the hopper GPU test grid (and the
# API tests), compute-sanitizer memcheck on every hopper sanitizer case, then racecheck on
# shapes with several tiles per program for each changed row (scripts/racecheck_case.py), with a
# summary of the hazard addresses. Every step has its own cap under one deadline; full logs
# under OUT (tarred to OUT.tgz), a short summary last.
#     bash scripts/device_adopt.sh OUT "D,CAUSAL,B,S,H,HK ..." [DEADLINE_S (560)]
set -u
out=${1:?usage: device_adopt.sh OUT "D,CAUSAL,B,S,H,HK ..." [DEADLINE_S]}
rows=${2:-}
deadline=$(( $(date +%s) + ${3:-560} ))
mkdir -p "$out"
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
source scripts/device_steps.sh
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv > "$out/smi.txt" 2>&1
step grid-hopper "${GRID_CAP:-260}" env FUSEDATTN_TEST_BACKENDS=hopper python3 -m pytest -q -n 12 \
  -p no:cacheprovider tests/test_gpu_grid.py tests/test_api.py
CS="compute-sanitizer --print-limit 0 --error-exitcode 9"
python3 scripts/sanitize_cases.py hopper > "$out/warm-hopper.log" 2>&1   # compile outside it
step memcheck-hopper 120 $CS --tool memcheck python3 scripts/sanitize_cases.py hopper
for r in $rows; do
  IFS=, read -r d c b s h hk <<< "$r"
  RACECHECK_SHAPE=$b,$s,$h,$hk python3 scripts/racecheck_case.py "$d" "$c" > "$out/warm-race-$d-$c.log" 2>&1
  RACECHECK_SHAPE=$b,$s,$h,$hk step "racecheck-$d-$c" 90 $CS --tool racecheck \
    --racecheck-report hazard python3 scripts/racecheck_case.py "$d" "$c"
  grep -o "__shared__ 0x[0-9a-f]*" "$out/racecheck-$d-$c.log" | sort | uniq -c | sort -rn \
    | head -20 > "$out/racecheck-$d-$c-addresses.txt"
done
echo "== summary =="
printf '%s\n' "${summary[@]}"
grep -h "passed\|failed" "$out/grid-hopper.log" | tail -3
for f in "$out"/racecheck-*-addresses.txt; do echo "$f:"; cat "$f"; done
tar -C "$(dirname "$out")" -czf "$out.tgz" "$(basename "$out")" && rm -rf "$out"
