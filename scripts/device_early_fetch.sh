#!/usr/bin/env bash
# One device call for session 27's early_fetch candidate (variant ef: the causal rows' producer
# fetches the next tile's id at a tile's start) and the producer's new clock stamps, in the order
# of what it decides:
#   1. tests/test_gpu_hopper_candidates.py -k early_fetch: out and lse bitwise the row's at head
#      dims 64 / 128 / 256 (three launches per shape) and the oracle;
#   2. compute-sanitizer memcheck on efa at hdim 128 causal, several tiles per program;
#   3. scripts/device_hopper_phases.sh with EF_VARIANTS: checks, clock stamps (the rows' and the
#      candidates', with the producer's: when it issued a tile's last K/V load, had the next id,
#      found Q's buffer free) and rotated rounds beside the row, FA3 and cuDNN at the causal 1k
#      cells (hdim 128 / 64 / 256), hdim 64 non-causal 1k and hdim 128 causal 2k (the hdim 64
#      candidates d64w2* at the hdim 64 cells only).
# Full logs under OUT, tarred to OUT.tgz; the summary last.
#     [EF_VARIANTS="efq efa d64w2 d64w2c d64w2c2"] [EF_CELLS="d,causal,seqlen;..."] [HP_ROUNDS=5] bash scripts/device_early_fetch.sh OUT [DEADLINE_S (480)]
# (FA3's wheel first, as for every side-by-side run: pip install --target /tmp/site .whl/*.whl and
# /tmp/site on PYTHONPATH)
set -u
out=${1:?usage: device_early_fetch.sh OUT [DEADLINE_S]}
deadline=$(( $(date +%s) + ${2:-480} ))
mkdir -p "$out" && out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
source scripts/device_steps.sh
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.limit --format=csv > "$out/smi.txt" 2>&1
step bitwise 120 python3 -m pytest -q -n 8 -p no:cacheprovider tests/test_gpu_hopper_candidates.py \
  -k early_fetch
CS="compute-sanitizer --print-limit 0 --error-exitcode 9"
export RACECHECK_SHAPE=8,2000,8,8
step memcheck 60 $CS --tool memcheck python3 scripts/racecheck_case.py 128 1 efa
c=$(cap 420)   # the inner deadline inside this step's cap
step phases "$c" env HP_CELLS="${EF_CELLS:-128,1,1024;64,1,1024;256,1,1024;64,0,1024;128,1,2048}" \
  HP_ROUNDS=${HP_ROUNDS:-5} PRECOMPILE_CAP=120 PHASES_CAP=$(( c - 130 )) \
  bash scripts/device_hopper_phases.sh "$out/ph" "${EF_VARIANTS:-efq efa d64w2 d64w2c d64w2c2}" $(( c - 5 ))
echo "== summary =="
printf '%s\n' "${summary[@]}"
grep -h "passed\|failed" "$out/bitwise.log" | tail -3
tar -xzOf "$out/ph.tgz" ph/phases.log 2>/dev/null | grep "^d[0-9]\|^check\|differs"
tar -C "$(dirname "$out")" -czf "$out.tgz" "$(basename "$out")"
