#!/usr/bin/env bash
# A session's first device call, for whichever card comes. Session 30's plan (RESULTS.md, "State
# at the end of session 29"): session 29 put 16 MB L2 sections into the three causal rows (runs
# 120-122) with no device time left to take the new rows through the GPU tests. This call:
#   1. the candidates' GPU tests that the new rows touch (tests/test_gpu_hopper_candidates.py:
#      the L2 sections against one section bit for bit, new; early_fetch and bottom_tiles
#      against the rows);
#   2. scripts/device_adopt.sh without racecheck rows: the hopper GPU grid and the API tests,
#      memcheck on every hopper sanitizer case (the kernel code is unchanged: the pinned digests
#      hold, so run 116's racecheck and synccheck stand).
# The bench with the new rows is the second call (scripts/device_bars.sh, BARS_HDIMS16 only).
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
step candidates 150 python3 -m pytest -q -n 8 -p no:cacheprovider \
  tests/test_gpu_hopper_candidates.py -k "l2_sections or early_fetch or bottom_tiles"
left_s=$(left)
if [ "$left_s" -gt 200 ]; then
  bash scripts/device_adopt.sh "$out/adopt" "" "$left_s" > "$out/adopt.log" 2>&1
  summary+=("adopt: rc=$? $(grep -h "passed\|failed" "$out/adopt.log" | tail -1 | cut -c1-150)")
else
  summary+=("adopt: skipped (time)")
fi
echo "== summary =="
printf '%s\n' "${summary[@]}"
tail -3 "$out/candidates.log"
sed -n '/== summary ==/,$p' "$out/adopt.log" 2>/dev/null
tar -C "$(dirname "$out")" -czf "$out.tgz" "$(basename "$out")"
