#!/usr/bin/env bash
# A session's first device call, for whichever card comes. Session 29's plan (issue #4's 1k
# cells; RESULTS.md, "State at the end of session 28"): run 118 found that at hdim 128 / 256
# causal 1k our kernel needs fewer cycles per call than cuDNN but more energy, so under the power
# limit it runs at a lower clock. This call counts where the energy goes:
#   1. scripts/ncu_counts.sh: DRAM / L2 bytes, instructions and shared-memory wavefronts of ours,
#      cuDNN's and FA3's kernels at the 1k cells (causal, hdim 64 / 128 / 256; hdim 128
#      non-causal), one CSV and a table on stdout;
#   2. scripts/energy_cells.py at the same cells (mJ, W, MHz and cycles per call).
# FA3's wheel first (pip install --target /tmp/site .whl/*.whl and /tmp/site on PYTHONPATH).
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

cases=()
for c in "128 1" "256 1" "64 1" "128 0"; do
  for i in hopper cudnn fa3; do cases+=("$i $c 1024"); done
done
step ncu 240 bash scripts/ncu_counts.sh "$out/ncu" "${cases[@]}"
step energy 200 env EC_CELLS="128,1,1024;256,1,1024;64,1,1024;128,0,1024" EC_ROUNDS=3 \
  python3 scripts/energy_cells.py "$out/energy"
echo "== summary =="
printf '%s\n' "${summary[@]}"
cat "$out/ncu.log"
grep "^d" "$out/energy.log"
tar -C "$(dirname "$out")" -czf "$out.tgz" "$(basename "$out")"
