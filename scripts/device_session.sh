#!/usr/bin/env bash
# A session's first device call, in the order of what each step decides, for whichever card comes
# (session 23 lost its whole device budget to machines that did not start, so the one call that
# does start has to carry the most important work first). Each step has its own cap under one
# deadline; full logs under OUT, tarred to OUT.tgz; a short summary and the bars last.
#     bash scripts/device_session.sh OUT [DEADLINE_S (560)]
# Both branches start with the FP8 GPU tests (hdim 256's rows took pvxc in session 24 from
# run 97's checks; the whole FP8 grid has not run on it yet, and the bitwise test covers pkt
# and pkh).
# On an H200 (the card the issues' bars are counted on):
#   1. the FP8 bench beside FA3-FP8, hdim 128 / 256, end to end included (issue #5's bar; the
#      second independent H200 run that RESULTS.md asks for);
#   2. the candidates pkt and pkh (session 24) through scripts/device_fp8_variant.sh at hdim 256 (checks,
#      sanitizers on causal cases, clock stamps, rotated rounds);
#   3. the 16-bit bench beside FA3 and SDPA-cuDNN with the time left (issue #4's bars; shapes
#      left over are listed for --resume).
# On any other card: 2., then the FP8 bench with the time left.
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
tests() {
  # (hdim 128's pxc / pkt bitwise cases, session 25, belong to a later call's candidates)
  step gpu_fp8 120 python3 -m pytest -q -n 12 -p no:cacheprovider tests/test_gpu_fp8.py \
    -k "not (expect_signal and 128-)"
}
variant() {  # pkt and pkh at hdim 256, non-causal and causal, 2k and 8k
  local c; c=$(cap 250)
  if [ "$c" -lt 150 ]; then summary+=("pkt: skipped (time)"); return 99; fi
  step pkt "$c" env DEV_CAP=100 ROUNDS_CAP=90 SAN_CAUSAL=1 bash scripts/device_fp8_variant.sh \
    "$out/pkt" pkt,pkh "256,0,2048;256,0,8192;256,1,2048;256,1,8192" $(( c - 10 ))
}

tests
if grep -q H200 "$out/smi.txt"; then
  bench b8 210 --hdims 128,256 --backends hopper-fp8,hopper-e2e-fp8,fa3-fp8
  variant
  bench b16 "$(left)" --hdims 64,128,256 --backends hopper,fa3,sdpa-cudnn
else
  variant
  bench b8 "$(left)" --hdims 256,128 --backends hopper-fp8,hopper-e2e-fp8,fa3-fp8
fi
echo "== summary =="
printf '%s\n' "${summary[@]}"
tail -n 3 "$out/gpu_fp8.log" 2>/dev/null
grep -v '^ *$' "$out/pkt.log" 2>/dev/null | grep -v '^| \(64\|128\) ' | tail -n 45
tar -C "$(dirname "$out")" -czf "$out.tgz" "$(basename "$out")"
cat "$out"/bars-*.md 2>/dev/null
