#!/usr/bin/env bash
# One device call for the 16-bit hopper kernel's candidates (names of hopper_fwd.VARIANTS):
# every launch compiled in parallel first, each candidate's oracle checks in its own process (a
# hang costs its own cap), then scripts/hopper_tile_phases.py on the candidates that passed:
# clock stamps per tile phase and rotated rounds beside the row, FA3 and cuDNN. Full logs under
# OUT (tarred to OUT.tgz), a short summary last.
#     [HP_CELLS="d,causal,seqlen;..."] bash scripts/device_hopper_phases.sh OUT "VARIANT ..." [DEADLINE_S (540)]
set -u
out=${1:?usage: device_hopper_phases.sh OUT "VARIANTS" [DEADLINE_S]}
vars=${2:-}
deadline=$(( $(date +%s) + ${3:-540} ))
mkdir -p "$out"
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
source scripts/device_steps.sh
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.limit --format=csv > "$out/smi.txt" 2>&1
step precompile "${PRECOMPILE_CAP:-240}" python3 scripts/hopper_tile_phases.py --precompile $vars
passed=()
for v in $vars; do
  step "check_$v" 60 python3 scripts/hopper_tile_phases.py --check "$v"
  if [ $? = 0 ] && ! grep -q "(False" "$out/check_$v.log"; then passed+=("$v"); fi
done
summary+=("candidates that passed their checks: ${passed[*]:-none}")
step phases "${PHASES_CAP:-400}" python3 scripts/hopper_tile_phases.py "$out/phases" \
  ${passed[@]+"${passed[@]}"}   # (no candidate: the rows alone)
echo "== summary =="
printf '%s\n' "${summary[@]}"
grep -h "FAILED" "$out/precompile.log" | head -5
grep -h "^check" "$out"/check_*.log 2>/dev/null
grep "^d[0-9]" "$out/phases.log"
tar -C "$(dirname "$out")" -czf "$out.tgz" "$(basename "$out")" && rm -rf "$out"
