#!/usr/bin/env bash
# A session's first device call, for whichever card comes. Session 29 put 16 MB L2 sections into
# the three causal rows (runs 120-122) with no device time left to take the new rows through the
# GPU tests or the bench; session 30's machine starts were refused five times, so this one call
# does as much of both as fits in its deadline:
#   1. the candidates' GPU tests that the new rows touch (tests/test_gpu_hopper_candidates.py:
#      the L2 sections against one section bit for bit, new; early_fetch and bottom_tiles
#      against the rows; SESSION_K=l2_sections for the first alone);
#   2. scripts/device_adopt.sh without racecheck rows: the hopper GPU grid and the API tests,
#      memcheck on every hopper sanitizer case (the kernel code is unchanged: the pinned digests
#      hold, so run 116's racecheck and synccheck stand);
#   3. with SESSION_BENCH=1, the 16-bit forward bench (hdim 64 / 128 / 256 beside FA3 and
#      SDPA-cuDNN) in the time left (--time-budget; the shapes not reached are listed for
#      --resume): seqlen 1k first (the cells short of cuDNN in run 117), then 2k-16k; the bars
#      of each.
#     [SESSION_BENCH=1] bash scripts/device_session.sh OUT [DEADLINE_S (560)]
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
  tests/test_gpu_hopper_candidates.py -k "${SESSION_K:-l2_sections or early_fetch or bottom_tiles}"
left_s=$(left)
if [ "$left_s" -gt 200 ]; then
  GRID_CAP=${GRID_CAP:-220} bash scripts/device_adopt.sh "$out/adopt" "" "$left_s" > "$out/adopt.log" 2>&1
  summary+=("adopt: rc=$? $(grep -h "passed\|failed" "$out/adopt.log" | tail -1 | cut -c1-150)")
else
  summary+=("adopt: skipped (time)")
fi
bench() {  # bench NAME SEQLENS: the 16-bit forward bench in the time left, then its bars
  local t=$(( $(left) - 45 ))
  [ "${SESSION_BENCH:-0}" = 1 ] && [ "$t" -gt 30 ] || return 0
  step "$1" $((t + 40)) python3 -m fusedattn.bench --passes fwd --hdims 64,128,256 \
    --seqlens "$2" --backends hopper,fa3,sdpa-cudnn --time-budget "$t" --no-plots --out "$out/$1"
  [ -f "$out/$1/results.json" ] && python3 scripts/bench_bars.py "$out/$1/results.json" \
    > "$out/bars-$1.md" 2>&1
}
bench b1k 1024                 # the cells short of cuDNN in run 117 first
bench b2k-16k 2048,4096,8192,16384
echo "== summary =="
printf '%s\n' "${summary[@]}"
tail -3 "$out/candidates.log"
sed -n '/== summary ==/,$p' "$out/adopt.log" 2>/dev/null
cat "$out"/bars-*.md 2>/dev/null
tar -C "$(dirname "$out")" -czf "$out.tgz" "$(basename "$out")"
