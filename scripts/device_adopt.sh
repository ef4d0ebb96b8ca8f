#!/usr/bin/env bash
# One device call after a change to the 16-bit hopper table: the hopper GPU test grid (and the
# API tests), compute-sanitizer memcheck on every hopper sanitizer case, then racecheck on
# shapes with several tiles per program for each row given (scripts/racecheck_case.py; a
# seventh field names a variant, e.g. a candidate before it enters the table), with a summary
# of the hazard addresses. Every step, the warm-ups included, has its own cap under one
# deadline (RACE_CAP: each racecheck's, 90 s); full logs under OUT (tarred to OUT.tgz), a short
# summary last. ADOPT_GRID=0 skips the grid and memcheck (a candidate's racecheck only);
# ADOPT_SYNCCHECK=1 adds compute-sanitizer synccheck on each row after its racecheck.
#     bash scripts/device_adopt.sh OUT "D,CAUSAL,B,S,H,HK[,VARIANT] ..." [DEADLINE_S (560)]
set -u
out=${1:?usage: device_adopt.sh OUT "D,CAUSAL,B,S,H,HK[,VARIANT] ..." [DEADLINE_S]}
rows=${2:-}
deadline=$(( $(date +%s) + ${3:-560} ))
mkdir -p "$out" && out=$(cd "$out" && pwd)   # absolute: the script changes directory next
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
source scripts/device_steps.sh
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv > "$out/smi.txt" 2>&1
CS="compute-sanitizer --print-limit 0 --error-exitcode 9"
if [ "${ADOPT_GRID:-1}" != 0 ]; then
  step grid-hopper "${GRID_CAP:-260}" env FUSEDATTN_TEST_BACKENDS=hopper python3 -m pytest -q \
    -n 12 -p no:cacheprovider tests/test_gpu_grid.py tests/test_api.py
  step warm-hopper 120 python3 scripts/sanitize_cases.py hopper   # compile outside the sanitizer
  step memcheck-hopper 120 $CS --tool memcheck python3 scripts/sanitize_cases.py hopper
fi
for r in $rows; do
  IFS=, read -r d c b s h hk var <<< "$r"
  name=$d-$c${var:+-$var}
  export RACECHECK_SHAPE=$b,$s,$h,$hk
  step "warm-race-$name" 60 python3 scripts/racecheck_case.py "$d" "$c" ${var:+"$var"}
  step "racecheck-$name" "${RACE_CAP:-90}" $CS --tool racecheck --racecheck-report hazard \
    python3 scripts/racecheck_case.py "$d" "$c" ${var:+"$var"}
  grep -o "__shared__ 0x[0-9a-f]*" "$out/racecheck-$name.log" 2>/dev/null | sort | uniq -c \
    | sort -rn | head -20 > "$out/racecheck-$name-addresses.txt"
  if [ "${ADOPT_SYNCCHECK:-0}" = 1 ]; then
    step "synccheck-$name" 90 $CS --tool synccheck python3 scripts/racecheck_case.py "$d" "$c" \
      ${var:+"$var"}
  fi
done
echo "== summary =="
printf '%s\n' "${summary[@]}"
grep -h "passed\|failed" "$out/grid-hopper.log" 2>/dev/null | tail -3
for f in "$out"/racecheck-*-addresses.txt; do
  [ -e "$f" ] || continue
  echo "$f:"; cat "$f"
done
tar -C "$(dirname "$out")" -czf "$out.tgz" "$(basename "$out")" && rm -rf "$out"
