#!/usr/bin/env bash
# The device call for the ragged_split candidate (variant rs, hdim 64 non-causal; run 127 ran
# its first form, session 31):
#   1. its GPU test against the float64 oracle and the row (tests/test_gpu_hopper_candidates.py
#      -k ragged);
#   2. stamps and rotated rounds beside the row, FA3 and cuDNN at 1024 and 4096 (= 21 x 192 +
#      64: a ragged last tile), 2048 (= 10 x 192 + 128: two busy warpgroups, the row's path)
#      and 1152 (= 6 x 192): the controls, where the candidate's consumers run the row's code
#      (its producer loads those tiles block by block, in the row's order);
#   3. energy per call, clock and clock reasons of the row, rs and cuDNN at 1024 and 4096
#      (scripts/energy_cells.py: under the power cap, cycles saved become time only as far as
#      they save energy);
#   4. racecheck (capped at 200 s: run 127's stopped at 90) and synccheck on 8 x 1024 x 32
#      heads (about two ragged tiles per program, so the hand-over's barriers turn over),
#      through scripts/device_adopt.sh without the grid;
#   5. the rest of that test file's candidates, a control of the code they share.
# Each step is capped under one deadline.
#     bash scripts/device_ragged.sh OUT [DEADLINE_S (560)]
set -u
out=${1:?usage: device_ragged.sh OUT [DEADLINE_S]}
deadline=$(( $(date +%s) + ${2:-560} ))
mkdir -p "$out" && out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
source scripts/device_steps.sh
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.limit --format=csv > "$out/smi.txt" 2>&1
step test-rs 150 python3 -m pytest -q -p no:cacheprovider tests/test_gpu_hopper_candidates.py \
  -k ragged
step phases-rs 200 env HP_CELLS="64,0,1024;64,0,1152;64,0,2048;64,0,4096" HP_ROUNDS=5 \
  python3 scripts/hopper_tile_phases.py "$out/phases" rs
step energy-rs 90 env EC_CELLS="64,0,1024;64,0,4096" EC_ROUNDS=3 python3 scripts/energy_cells.py \
  "$out/energy" fusedattn-hopper hopper:rs sdpa-cudnn
ADOPT_GRID=0 ADOPT_SYNCCHECK=1 RACE_CAP=200 bash scripts/device_adopt.sh "$out/race" "64,0,8,1024,32,8,rs" \
  "$(left)" > "$out/race.log" 2>&1
summary+=("race: rc=$? $(grep -h "racecheck\|synccheck" "$out/race.log" | tail -2 | tr '\n' ' ' | cut -c1-200)")
step test-cand 120 python3 -m pytest -q -p no:cacheprovider -n 8 \
  tests/test_gpu_hopper_candidates.py -k "not ragged"
echo "== summary =="
printf '%s\n' "${summary[@]}"
sed -n '/== summary ==/,$p' "$out/race.log"
tail -3 "$out/test-rs.log"
grep -v "^\[" "$out/phases-rs.log" 2>/dev/null | tail -24
grep -v "^\[" "$out/energy-rs.log" 2>/dev/null | tail -12
tar -C "$(dirname "$out")" -czf "$out.tgz" "$(basename "$out")"
