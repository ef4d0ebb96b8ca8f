#!/usr/bin/env bash
# One device call for the issues' speed bars (run it where the device is an H200: the bars are
# counted on the H200): the forward bench of the 16-bit kernel beside FA3 and SDPA-cuDNN (every
# head dim) and of the FP8 kernel beside FA3-FP8 (head dims 128 and 256, end to end included),
# each with --time-budget under its own cap (shapes left over are listed for --resume), then
# scripts/bench_bars.py on each results.json. Logs and results under OUT, tarred to OUT.tgz; the
# bars last.
#     [BARS_HDIMS16=64,128,256] bash scripts/device_bars.sh OUT [BUDGET16_S (320)] [BUDGET8_S (190)]
# (FA3's wheel first, as for every side-by-side run: pip install --target /tmp/site .whl/*.whl and
# /tmp/site on PYTHONPATH)
set -u
out=${1:?usage: device_bars.sh OUT [BUDGET16_S] [BUDGET8_S]}
mkdir -p "$out" && out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.limit --format=csv > "$out/smi.txt" 2>&1
b16=${2:-320}
b8=${3:-190}
# --time-budget stops starting shapes; the timeout (budget + 40 s) is the hard stop
timeout $((b16 + 40)) python3 -m fusedattn.bench --passes fwd --hdims "${BARS_HDIMS16:-64,128,256}" \
  --backends hopper,fa3,sdpa-cudnn --time-budget "$b16" --no-plots --out "$out/b16" \
  > "$out/bench16.log" 2>&1
echo "bench16: rc=$? $(tail -n 1 "$out/bench16.log" | cut -c1-150)"
timeout $((b8 + 40)) python3 -m fusedattn.bench --passes fwd --hdims 128,256 \
  --backends hopper-fp8,hopper-e2e-fp8,fa3-fp8 --time-budget "$b8" --no-plots --out "$out/b8" \
  > "$out/bench8.log" 2>&1
echo "bench8: rc=$? $(tail -n 1 "$out/bench8.log" | cut -c1-150)"
for b in b16 b8; do
  [ -f "$out/$b/results.json" ] && python3 scripts/bench_bars.py "$out/$b/results.json" \
    > "$out/bars-$b.md" 2>&1
done
tar -C "$(dirname "$out")" -czf "$out.tgz" "$(basename "$out")"
cat "$out"/bars-*.md 2>/dev/null
