#!/usr/bin/env bash
# One device call for session 27's short-sequence row: run 111, at commit cf16f7a, where
# hopper_fwd.SHORT_CONFIGS made variant d64w2c (hdim 64 causal on 128-row tiles) the table's row
# up to seqlen 1024. Not adopted after run 111 and SHORT_CONFIGS removed; run now, step 1 checks
# the table as it is. In the order of what it decides:
#   1. scripts/device_adopt.sh: the hopper GPU grid and API tests with the table as it is now
#      (the grid's hdim 40 / 64 causal shapes up to 1024 run the new row), memcheck on every
#      hopper sanitizer case, racecheck and synccheck on the new row with several tiles per
#      program (8 x 1000 x 8 heads);
#   2. scripts/device_hopper_phases.sh: the row that serves longer sequences ("row") against
#      d64w2c at hdim 64 causal 512 / 1k / 2k (stamps, rotated rounds beside FA3 and cuDNN), for
#      the limit of the short row.
# Full logs under OUT, tarred to OUT.tgz; the summary last.
#     [HP_ROUNDS=7] bash scripts/device_short_row.sh OUT [DEADLINE_S (540)]
# (FA3's wheel first: pip install --target /tmp/site .whl/*.whl and /tmp/site on PYTHONPATH)
set -u
out=${1:?usage: device_short_row.sh OUT [DEADLINE_S]}
deadline=$(( $(date +%s) + ${2:-540} ))
mkdir -p "$out" && out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
source scripts/device_steps.sh
c=$(cap 330)
step adopt "$c" env ADOPT_SYNCCHECK=1 GRID_CAP=200 bash scripts/device_adopt.sh "$out/adopt" \
  "64,1,8,1000,8,8,d64w2c" $(( c - 5 ))
# racecheck's full log can run to ~100 MB: keep each one's head (the addresses' counts are kept)
if [ -f "$out/adopt.tgz" ]; then
  tar -C "$out" -xzf "$out/adopt.tgz" && rm -f "$out/adopt.tgz"
  for f in "$out"/adopt/racecheck-*.log; do
    [ -e "$f" ] && head -80 "$f" > "$f.head" && rm -f "$f"
  done
fi
c=$(cap 200)
step phases "$c" env HP_CELLS="64,1,512;64,1,1024;64,1,2048" HP_ROUNDS=${HP_ROUNDS:-7} \
  PRECOMPILE_CAP=60 PHASES_CAP=$(( c - 75 )) \
  bash scripts/device_hopper_phases.sh "$out/ph" "d64w2c" $(( c - 5 ))
echo "== summary =="
printf '%s\n' "${summary[@]}"
grep -h "passed\|failed\|ERROR SUMMARY\|hazard" "$out/adopt.log" | tail -12
tar -xzOf "$out/ph.tgz" ph/phases.log 2>/dev/null | grep "^d[0-9]\|^check\|differs"
tar -C "$(dirname "$out")" -czf "$out.tgz" "$(basename "$out")"
