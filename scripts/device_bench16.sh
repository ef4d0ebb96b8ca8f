#!/usr/bin/env bash
# Issue #4's bars on the device: the 16-bit forward bench beside FA3 and SDPA-cuDNN at seqlen
# 1k-16k (the cells the bars count), repeated while the deadline allows a further full run, with
# scripts/bench_bars.py on each run's results. Each run is one `python -m fusedattn.bench` process,
# as `make bench` is. Logs and results under OUT, tarred to OUT.tgz; the bars of every run last.
#     bash scripts/device_bench16.sh OUT [DEADLINE_S (540)] [RUN_S (260): the cap of one run]
# (FA3's wheel first: pip install --target /tmp/site .whl/*.whl and /tmp/site on PYTHONPATH)
set -u
out=${1:?usage: device_bench16.sh OUT [DEADLINE_S] [RUN_S]}
deadline=$(( $(date +%s) + ${2:-540} ))
run_s=${3:-260}
mkdir -p "$out" && out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.limit --format=csv > "$out/smi.txt" 2>&1
git rev-parse HEAD > "$out/commit.txt" 2>/dev/null
i=1
while [ $(( deadline - $(date +%s) )) -ge "$run_s" ]; do
  timeout "$run_s" python3 -m fusedattn.bench --passes fwd --hdims 64,128,256 \
    --seqlens 1024,2048,4096,8192,16384 --backends hopper,fa3,sdpa-cudnn --no-plots \
    --out "$out/b16-$i" > "$out/bench16-$i.log" 2>&1
  echo "bench16-$i: rc=$? $(tail -n 1 "$out/bench16-$i.log" | cut -c1-150)"
  [ -f "$out/b16-$i/results.json" ] && python3 scripts/bench_bars.py "$out/b16-$i/results.json" \
    > "$out/bars-$i.md" 2>&1
  i=$((i + 1))
done
tar -C "$(dirname "$out")" -czf "$out.tgz" "$(basename "$out")"
for f in "$out"/bars-*.md; do [ -f "$f" ] && { echo "== $(basename "$f")"; cat "$f"; }; done
