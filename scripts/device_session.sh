#!/usr/bin/env bash
# A session's first device call, in the order of what each step decides, for whichever card comes
# (session 23 lost its whole device budget to machines that did not start, so the one call that
# does start has to carry the most important work first). Each step has its own cap under one
# deadline; full logs under OUT, tarred to OUT.tgz; a short summary and the bars last.
#     bash scripts/device_session.sh OUT [DEADLINE_S (540)]
# On an H200 (the card the issues' bars are counted on):
#   1. the FP8 bench beside FA3-FP8, hdim 128 / 256, end to end included (issue #5's bar; the
#      second independent H200 run that RESULTS.md asks for);
#   2. the GPU tests written since the last device session (tests/test_gpu_grid.py -k
#      negative_softmax_scale, tests/test_gpu_fp8.py -k expect_signal);
#   3. the 16-bit bench beside FA3 and SDPA-cuDNN with the time left (issue #4's bars; shapes
#      left over are listed for --resume).
# On any other card: 2., then scripts/device_fp8_diag.sh with the time left.
# FA3's wheel first, as for every side-by-side run (pip install --target /tmp/site .whl/*.whl and
# /tmp/site on PYTHONPATH).
set -u
out=${1:?usage: device_session.sh OUT [DEADLINE_S]}
deadline=$(( $(date +%s) + ${2:-540} ))
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
tests() {
  step gpu_tests 150 python3 -m pytest -q -p no:cacheprovider tests/test_gpu_grid.py \
    tests/test_gpu_fp8.py -k "negative_softmax_scale or expect_signal"
}

if grep -q H200 "$out/smi.txt"; then
  bench b8 210 --hdims 128,256 --backends hopper-fp8,hopper-e2e-fp8,fa3-fp8
  tests
  bench b16 "$(left)" --hdims 64,128,256 --backends hopper,fa3,sdpa-cudnn
else
  tests
  l=$(left)
  if [ "$l" -ge 120 ]; then
    step diag "$l" bash scripts/device_fp8_diag.sh "$out/diag" $(( l - 15 ))
  else
    summary+=("diag: skipped (time)")
  fi
fi
echo "== summary =="
printf '%s\n' "${summary[@]}"
tail -n 3 "$out/gpu_tests.log" 2>/dev/null
tail -n 25 "$out/diag.log" 2>/dev/null
tar -C "$(dirname "$out")" -czf "$out.tgz" "$(basename "$out")"
cat "$out"/bars-*.md 2>/dev/null
