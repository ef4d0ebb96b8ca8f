#!/usr/bin/env bash
# One device call for the dynamic scheduler's L2 section size (session 29): run 120's Nsight
# counts had the causal rows reading 1.3-1.6x the inputs' bytes from DRAM at 1k. For candidates
# (hopper_fwd.VARIANTS, default "l2_16 l2_8"): their oracle checks and rotated rounds beside the
# row, FA3 and cuDNN (scripts/hopper_tile_phases.py, no stamps), Nsight's byte counts at the 1k
# cells, and energy per call (scripts/energy_cells.py); in that order of need, each step capped.
# FA3's wheel on PYTHONPATH first.
#     bash scripts/device_l2_sections.sh OUT ["VARIANTS"] [DEADLINE_S (540)]
set -u
out=${1:?usage: device_l2_sections.sh OUT [VARIANTS] [DEADLINE_S]}
vars=${2:-l2_16 l2_8}
deadline=$(( $(date +%s) + ${3:-540} ))
mkdir -p "$out" && out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
source scripts/device_steps.sh
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.limit --format=csv > "$out/smi.txt" 2>&1
cells1k="128,1,1024;256,1,1024;64,1,1024"
passed=()
for v in $vars; do
  step "check_$v" 90 env HP_CELLS="$cells1k" python3 scripts/hopper_tile_phases.py --check "$v"
  if [ $? = 0 ] && ! grep -q "(False" "$out/check_$v.log"; then passed+=("$v"); fi
done
summary+=("candidates that passed their checks: ${passed[*]:-none}")
cases=()
for c in "128 1" "256 1" "64 1"; do
  for v in ${passed[@]+"${passed[@]}"}; do cases+=("hopper:$v $c 1024"); done
  cases+=("hopper $c 1024")
done
step ncu 100 bash scripts/ncu_counts.sh "$out/ncu" "${cases[@]}"
step phases 240 env HP_STAMPS=0 HP_ROUNDS=5 \
  HP_CELLS="${L2_CELLS:-$cells1k;128,1,2048;256,1,2048;64,1,2048;128,1,4096}" \
  python3 scripts/hopper_tile_phases.py "$out/phases" ${passed[@]+"${passed[@]}"}
ec=(hopper:default)
for v in ${passed[@]+"${passed[@]}"}; do ec+=("hopper:$v"); done
step energy 120 env EC_CELLS="$cells1k" EC_ROUNDS=3 python3 scripts/energy_cells.py "$out/energy" \
  "${ec[@]}" sdpa-cudnn
echo "== summary =="
printf '%s\n' "${summary[@]}"
cat "$out/ncu.log"
grep "^d" "$out/energy.log"
grep "^d[0-9]" "$out/phases.log"
tar -C "$(dirname "$out")" -czf "$out.tgz" "$(basename "$out")"
