#!/usr/bin/env bash
# A session's first device call, for whichever card comes (session 31's plan, RESULTS.md "State
# at the end of session 30"). Session 30 (runs 123-125) took the 16 MB L2 sections of the causal
# rows through their bitwise test, the hopper GPU grid and memcheck, and benched 1k-4k; this call:
#   1. the 16-bit forward bench at 8k and 16k (hdim 64 / 128 / 256 beside FA3 and SDPA-cuDNN),
#      the cells not yet benched with the new sections, and its bars;
#   2. hdim 64 non-causal's stamps and rotated rounds beside FA3 and cuDNN at 1024 (the
#      192-row tiling's last m-tile holds 64 rows: one busy warpgroup of three for all the key
#      blocks), 1152 and 1536 (multiples of 192: no ragged tile) (scripts/hopper_tile_phases.py,
#      with the tile time by m-tile);
#   3. energy per call at the six 1k cells (scripts/energy_cells.py), now with NVML's clock event
#      reasons: why hdim 64 non-causal 1k runs at a lower clock than cuDNN (run 118: 1500
#      against 1665 MHz at 669 W against 712) while needing fewer cycles per call;
#   4. the bench at 1k and 2k again in the time left.
# Each step is capped under one deadline; what did not fit is listed as skipped. With
# SESSION_ADOPT=1 the hopper GPU grid and memcheck (scripts/device_adopt.sh) run first.
#     [SESSION_ADOPT=1] bash scripts/device_session.sh OUT [DEADLINE_S (560)]
set -u
out=${1:?usage: device_session.sh OUT [DEADLINE_S]}
deadline=$(( $(date +%s) + ${2:-560} ))
mkdir -p "$out" && out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
source scripts/device_steps.sh
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.limit --format=csv > "$out/smi.txt" 2>&1
git log -1 --format='%H %cd' > "$out/commit.txt" 2>/dev/null
if [ "${SESSION_ADOPT:-0}" = 1 ]; then
  GRID_CAP=${GRID_CAP:-220} bash scripts/device_adopt.sh "$out/adopt" "" "$(left)" > "$out/adopt.log" 2>&1
  summary+=("adopt: rc=$? $(grep -h "passed\|failed" "$out/adopt.log" | tail -1 | cut -c1-150)")
fi
bench() {  # bench NAME SEQLENS [CAP_S]: the 16-bit forward bench in the time left, then its bars
  local t=$(( $(left) - 45 ))
  [ -n "${3:-}" ] && [ "$3" -lt "$t" ] && t=$3
  [ "$t" -gt 30 ] || { summary+=("$1: skipped (time)"); return 0; }
  step "$1" $((t + 40)) python3 -m fusedattn.bench --passes fwd --hdims 64,128,256 \
    --seqlens "$2" --backends hopper,fa3,sdpa-cudnn --time-budget "$t" --no-plots --out "$out/$1"
  [ -f "$out/$1/results.json" ] && python3 scripts/bench_bars.py "$out/$1/results.json" \
    > "$out/bars-$1.md" 2>&1
}
bench b8k-16k 8192,16384 200
step phases64 150 env HP_CELLS="64,0,1024;64,0,1152;64,0,1536" HP_ROUNDS=5 \
  python3 scripts/hopper_tile_phases.py "$out/phases64"
step energy 150 env EC_ROUNDS=3 python3 scripts/energy_cells.py "$out/energy"
bench b1k-2k 1024,2048
echo "== summary =="
printf '%s\n' "${summary[@]}"
sed -n '/== summary ==/,$p' "$out/adopt.log" 2>/dev/null
grep -v "^\[" "$out/phases64.log" 2>/dev/null | tail -20
grep -v "^\[" "$out/energy.log" 2>/dev/null | tail -30
cat "$out"/bars-*.md 2>/dev/null
tar -C "$(dirname "$out")" -czf "$out.tgz" "$(basename "$out")"
