#!/usr/bin/env bash
# A session's first device call, in the order of what each step decides, for whichever card comes
# (sessions 23-25 lost much of their device budget to machines that did not start, so the one
# call that does start has to carry the most important work first). Each step has its own cap
# under one deadline; full logs under OUT, tarred to OUT.tgz; a short summary and the bars last.
#     bash scripts/device_session.sh OUT [DEADLINE_S (560)]
# Session 25's candidates exp_poly (one score in k takes its exp2 on the FMA pipe) and row_tree
# (each row's max and sum as trees inside the thread), on any card:
#   0. the FP8 candidates' GPU tests (oracle and emulation, 1 and 2 programs);
#   1. FP8 at hdim 256 (ep4, rt, rtep4) and 128 (ep4h, rth, rtep4h) through
#      scripts/device_fp8_variant.sh: checks, sanitizers on causal cases of the two with both
#      switches, clock stamps (block 2's softmax section), rotated rounds beside the row;
#   2. 16-bit at hdim 64 (rtm: the row max's tree alone, spill-free; ep8; rtmep8) through
#      scripts/device_hopper_phases.sh: checks, stamps, rotated rounds beside the row, FA3 and
#      cuDNN at the cuDNN bar's weak cells;
# then on an H200 (the card the issues' bars are counted on) the FP8 bench beside FA3-FP8 with
# what is left (the 16-bit bench needs a call of its own: scripts/device_bars.sh).
# FA3's wheel first, as for every side-by-side run (pip install --target /tmp/site .whl/*.whl and
# /tmp/site on PYTHONPATH).
set -u
out=${1:?usage: device_session.sh OUT [DEADLINE_S]}
deadline=$(( $(date +%s) + ${2:-560} ))
mkdir -p "$out" && out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
source scripts/device_steps.sh
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.limit --format=csv > "$out/smi.txt" 2>&1
git log -1 --format='%H %cd' > "$out/commit.txt" 2>/dev/null

bench() {  # bench NAME CAP_S ARGS...: the forward bench under the cap (--time-budget 40 s less)
  local name=$1 c; c=$(cap "$2"); shift 2
  if [ "$c" -lt 80 ]; then summary+=("$name: skipped (time)"); return 99; fi
  step "$name" "$c" python3 -m fusedattn.bench --passes fwd --time-budget $(( c - 40 )) \
    --no-plots --out "$out/$name" "$@"
  if [ -f "$out/$name/results.json" ]; then
    python3 scripts/bench_bars.py "$out/$name/results.json" > "$out/bars-$name.md" 2>&1
  fi
}
variant() {  # FP8: exp_poly 4, row_tree and both, at hdim 256 (ep4, rt, rtep4) and on hdim 128's
  # 256-key rows (ep4h, rth, rtep4h); the sanitizers on the two with both switches (register
  # arithmetic only: no new memory access in either switch)
  local c; c=$(cap 300)
  if [ "$c" -lt 150 ]; then summary+=("ep fp8: skipped (time)"); return 99; fi
  step ep8 "$c" env DEV_CAP=130 ROUNDS_CAP=110 SAN_CAUSAL=1 SAN_ONLY="rtep4 rtep4h" \
    bash scripts/device_fp8_variant.sh "$out/ep8" ep4,rt,rtep4,ep4h,rth,rtep4h \
    "256,0,8192;256,1,2048;128,0,8192;128,1,2048" $(( c - 10 ))
}
variant16() {  # exp_poly at hdim 64 16-bit: the cuDNN bar's misses (1k) and a long cell
  local c; c=$(cap 220)
  if [ "$c" -lt 120 ]; then summary+=("ep 16-bit: skipped (time)"); return 99; fi
  step ep16 "$c" env HP_CELLS="64,0,1024;64,1,1024;64,0,8192" PRECOMPILE_CAP=90 \
    PHASES_CAP=110 bash scripts/device_hopper_phases.sh "$out/ep16" "rtm ep8 rtmep8" $(( c - 5 ))
}

step cand_tests 70 python3 -m pytest -q -n 12 -p no:cacheprovider tests/test_gpu_fp8.py \
  -k softmax_candidates
variant
variant16
if grep -q H200 "$out/smi.txt"; then
  bench b8 "$(left)" --hdims 128,256 --backends hopper-fp8,hopper-e2e-fp8,fa3-fp8
fi
echo "== summary =="
printf '%s\n' "${summary[@]}"
grep -v '^ *$' "$out/ep8.log" 2>/dev/null | grep -v '^| \(64\|128\) ' | tail -n 45
grep -v '^ *$' "$out/ep16.log" 2>/dev/null | tail -n 30
tar -C "$(dirname "$out")" -czf "$out.tgz" "$(basename "$out")"
cat "$out"/bars-*.md 2>/dev/null
