#!/usr/bin/env bash
# A session's device call, in the order of what each step decides, for whichever card comes.
# Each step has its own cap under one deadline; full logs under OUT, tarred to OUT.tgz; a short
# summary last. Session 28's third call: bottom_tiles in the (64, True) row (runs 114-115):
#   1. scripts/device_adopt.sh: the hopper GPU grid and API tests with the table as it is now,
#      memcheck on every hopper sanitizer case, racecheck and synccheck on the new row with a
#      ragged seqlen and several tiles per program (8 x 1000 x 8 heads: the first m-tile starts
#      at row -152);
#   2. bottom_tiles' own GPU test (every causal row's variant bt against the oracle and its row).
# FA3's wheel is not needed here.
#     bash scripts/device_session.sh OUT [DEADLINE_S (560)]
set -u
out=${1:?usage: device_session.sh OUT [DEADLINE_S]}
deadline=$(( $(date +%s) + ${2:-560} ))
mkdir -p "$out" && out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
source scripts/device_steps.sh
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.limit --format=csv > "$out/smi.txt" 2>&1
git log -1 --format='%H %cd' > "$out/commit.txt" 2>/dev/null

c=$(cap 470)
step adopt "$c" env ADOPT_SYNCCHECK=1 GRID_CAP=230 bash scripts/device_adopt.sh "$out/adopt" \
  "64,1,8,1000,8,8" $(( c - 5 ))
# racecheck's full log can run to ~100 MB: keep each one's head (the addresses' counts are kept)
if [ -f "$out/adopt.tgz" ]; then
  tar -C "$out" -xzf "$out/adopt.tgz" && rm -f "$out/adopt.tgz"
  for f in "$out"/adopt/racecheck-*.log; do
    [ -e "$f" ] && head -80 "$f" > "$f.head" && rm -f "$f"
  done
fi
step bt-test 90 python3 -m pytest -q -n 8 -p no:cacheprovider tests/test_gpu_hopper_candidates.py \
  -k bottom_tiles
echo "== summary =="
printf '%s\n' "${summary[@]}"
grep -h "passed\|failed\|ERROR SUMMARY\|hazard" "$out/adopt.log" | tail -12
cat "$out"/adopt/racecheck-*-addresses.txt 2>/dev/null | awk '{print $3}' | sort | sed -n '1p;$p'
tar -C "$(dirname "$out")" -czf "$out.tgz" "$(basename "$out")"
