#!/usr/bin/env bash
# A session's device call, in the order of what each step decides, for whichever card comes.
# Each step has its own cap under one deadline; full logs under OUT, tarred to OUT.tgz; a short
# summary last. Session 28's second call (issue #4's hdim 64 causal 1k cell against cuDNN;
# RESULTS.md, session 28):
#   1. bottom_tiles (variant bt; never run on a GPU): its GPU test against the oracle and the row
#      (tests/test_gpu_hopper_candidates.py -k bottom_tiles), then memcheck, racecheck (hazard
#      report; the addresses' counts and the log's head kept) and synccheck on bt, hdim 64
#      causal, a ragged seqlen (1000: the first m-tile starts at row -152), several tiles per
#      program;
#   2. rotated rounds with stamps (scripts/device_hopper_phases.sh): bt and d64w2cdh at hdim 64
#      causal 512 / 1k / 2k / 4k, bt at hdim 128 causal 1k (the same tiles there: the switch's
#      cost); bt only if step 1 passed.
# FA3's wheel first, as for every side-by-side run (pip install --target /tmp/site .whl/*.whl and
# /tmp/site on PYTHONPATH); without it the rounds run without FA3.
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

step bt-test 150 python3 -m pytest -q -n 8 -p no:cacheprovider tests/test_gpu_hopper_candidates.py \
  -k bottom_tiles
bt_ok=$?
CS="compute-sanitizer --print-limit 0 --error-exitcode 9"
export RACECHECK_SHAPE=8,1000,8,8
step memcheck 60 $CS --tool memcheck python3 scripts/racecheck_case.py 64 1 bt
step racecheck 90 $CS --tool racecheck --racecheck-report hazard \
  python3 scripts/racecheck_case.py 64 1 bt
# the full racecheck log can run to ~100 MB: the addresses' counts, the source lines, the head
grep -o "__shared__ 0x[0-9a-f]*" "$out/racecheck.log" 2>/dev/null | sort | uniq -c | sort -rn \
  | head -40 > "$out/racecheck-addresses.txt"
grep -o "at attn_fwd_kernel+0x[0-9a-f]* in hopper_fwd.py:[0-9]*" "$out/racecheck.log" 2>/dev/null \
  | sed 's/+0x[0-9a-f]*//' | sort | uniq -c | sort -rn | head -20 > "$out/racecheck-lines.txt"
head -60 "$out/racecheck.log" > "$out/racecheck-head.log" 2>/dev/null; rm -f "$out/racecheck.log"
step synccheck 60 $CS --tool synccheck python3 scripts/racecheck_case.py 64 1 bt
if [ "$bt_ok" = 0 ]; then cands="bt d64w2cdh"; else cands="d64w2cdh"; fi
c=$(cap 330)
step phases "$c" env HP_CELLS="64,1,512;64,1,1024;64,1,2048;64,1,4096;128,1,1024" \
  HP_ROUNDS=${HP_ROUNDS:-5} PRECOMPILE_CAP=90 PHASES_CAP=$(( c - 100 )) \
  bash scripts/device_hopper_phases.sh "$out/ph" "$cands" $(( c - 5 ))
echo "== summary =="
printf '%s\n' "${summary[@]}"
grep -h "passed\|failed" "$out/bt-test.log" | tail -3
cat "$out/racecheck-addresses.txt" "$out/racecheck-lines.txt" 2>/dev/null | head -30
tar -xzOf "$out/ph.tgz" ph/phases.log 2>/dev/null | grep "^d[0-9]\|^check\|differs"
# (ph.tgz inside still holds the raw stamps: strip them before committing the results, as
# benchmarks/results/RAW_STAMPS.md says)
tar -C "$(dirname "$out")" -czf "$out.tgz" --exclude='stamps_*.json' "$(basename "$out")"
