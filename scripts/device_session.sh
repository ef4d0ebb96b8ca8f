#!/usr/bin/env bash
# A session's first device call, in the order of what each step decides, for whichever card comes
# (sessions 23-25 lost much of their device budget to machines that did not start, so the one
# call that does start has to carry the most important work first). Each step has its own cap
# under one deadline; full logs under OUT, tarred to OUT.tgz; a short summary and the bars last.
#     bash scripts/device_session.sh OUT [DEADLINE_S (560)]
# Session 26's plan (issue #4's 1k cells against cuDNN):
#   1. the 16-bit rows' stamps at the 1k cells (hdim 128 / 64 / 256 causal, hdim 64 non-causal),
#      with the Q-release stamps new in session 26 (how long before a tile's end the last
#      warpgroup released Q, and how long until the SM's next tile had its Q), rounds beside FA3
#      and cuDNN (scripts/device_hopper_phases.sh with no candidate);
#   2. the 16-bit bench (hopper, fa3, sdpa-cudnn) with what is left (issue #5, the FP8 bar,
#      was resolved in session 26, so session 27 drops its bench from this call).
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
phases1k() {  # the rows' stamps and rounds at the 1k cells (no candidate)
  local c; c=$(cap 200)
  if [ "$c" -lt 100 ]; then summary+=("phases 1k: skipped (time)"); return 99; fi
  step ph1k "$c" env HP_CELLS="128,1,1024;64,1,1024;256,1,1024;64,0,1024" PRECOMPILE_CAP=60 \
    PHASES_CAP=150 bash scripts/device_hopper_phases.sh "$out/ph1k" "" $(( c - 5 ))
}

phases1k
bench b16 "$(left)" --hdims 64,128,256 --backends hopper,fa3,sdpa-cudnn
echo "== summary =="
printf '%s\n' "${summary[@]}"
grep -v '^ *$' "$out/ph1k.log" 2>/dev/null | tail -n 30
tar -C "$(dirname "$out")" -czf "$out.tgz" "$(basename "$out")"
cat "$out"/bars-*.md 2>/dev/null
