#!/usr/bin/env bash
# One device call for session 26's cross_tile candidates (hdim 128, variants xt and xt2, the
# latter with two Q buffers; xt_dyn is the non-causal control: the same dynamic form without the
# switch), in the order of what it decides:
#   1. tests/test_gpu_hopper_candidates.py: out and lse bitwise the row's (three launches per
#      shape; tails, GQA, tiles with no visible key, several tiles per program) and the oracle;
#   2. compute-sanitizer memcheck, racecheck (hazard report) and synccheck on XT_SAN (xt2), causal,
#      several tiles per program (the next tile's first QK^T runs under this tile's O store);
#   3. scripts/device_hopper_phases.sh with XT_VARIANTS ("xt2 xt xt_dyn"): checks, clock stamps
#      and rotated rounds
#      beside the row, FA3 and cuDNN at hdim 128 causal 1k / 2k and non-causal 1k.
# Full logs under OUT, tarred to OUT.tgz; the summary last.
#     [XT_SAN=xt2] [XT_VARIANTS="xt2 xt xt_dyn"] bash scripts/device_cross_tile.sh OUT [DEADLINE_S (420)]
# (FA3's wheel first, as for every side-by-side run: pip install --target /tmp/site .whl/*.whl and
# /tmp/site on PYTHONPATH)
set -u
out=${1:?usage: device_cross_tile.sh OUT [DEADLINE_S]}
deadline=$(( $(date +%s) + ${2:-420} ))
mkdir -p "$out" && out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
source scripts/device_steps.sh
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.limit --format=csv > "$out/smi.txt" 2>&1
step bitwise 120 python3 -m pytest -q -n 8 -p no:cacheprovider tests/test_gpu_hopper_candidates.py
CS="compute-sanitizer --print-limit 0 --error-exitcode 9"
export RACECHECK_SHAPE=8,2000,8,8
san=${XT_SAN:-xt2}
step memcheck 60 $CS --tool memcheck python3 scripts/racecheck_case.py 128 1 "$san"
step racecheck 90 $CS --tool racecheck --racecheck-report hazard \
  python3 scripts/racecheck_case.py 128 1 "$san"
grep -o "__shared__ 0x[0-9a-f]*" "$out/racecheck.log" 2>/dev/null | sort | uniq -c \
  > "$out/racecheck-addresses.txt"
step synccheck 60 $CS --tool synccheck python3 scripts/racecheck_case.py 128 1 "$san"
# the full racecheck log runs to ~100 MB: keep its head and the addresses' counts
head -60 "$out/racecheck.log" > "$out/racecheck-head.log"; rm -f "$out/racecheck.log"
c=$(cap 260)   # the inner deadline inside this step's cap
step phases "$c" env HP_CELLS="128,1,1024;128,1,2048;128,0,1024" PRECOMPILE_CAP=60 \
  PHASES_CAP=180 bash scripts/device_hopper_phases.sh "$out/ph" "${XT_VARIANTS:-xt2 xt xt_dyn}" \
  $(( c - 5 ))
echo "== summary =="
printf '%s\n' "${summary[@]}"
grep -h "passed\|failed" "$out/bitwise.log" | tail -3
cat "$out/racecheck-addresses.txt"
tar -xzOf "$out/ph.tgz" ph/phases.log 2>/dev/null | grep "^d[0-9]\|^check\|differs"
tar -C "$(dirname "$out")" -czf "$out.tgz" "$(basename "$out")"
