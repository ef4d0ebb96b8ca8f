#!/usr/bin/env bash
# One command on a GPU machine: a one-shape bench (hdim 128, seqlen 8192, beside the anchors), the GPU test grid, and
# compute-sanitizer (memcheck, racecheck) on small shapes of every kernel configuration. Full logs go to the folder given (default
# ./out); a short summary is printed last.
#     bash scripts/gpu_check.sh OUT_DIR        (or: make gpu-check OUT_DIR=...)
set -uo pipefail
out=${1:-out}
mkdir -p "$out"
cd "$(dirname "$0")/.."
py="env ${PYTHON:-python3}"  # PYTHON may carry VAR=value words (make passes PYTHONPATH)
export PYTHONUNBUFFERED=1
nvidia-smi > "$out/nvidia-smi.txt" 2>&1

echo "== timing (fusedattn.bench, one shape) =="
$py -m fusedattn.bench --hdims 128 --seqlens 8192 --no-plots --out "$out/bench" > "$out/timing.log" 2>&1
timing_rc=$?

echo "== pytest (all tests, GPU included) =="
xdist=""
$py -c "import xdist" >/dev/null 2>&1 && xdist="-n ${PYTEST_WORKERS:-8}"  # kernel compiles are CPU-bound
$py -m pytest -q $xdist --maxfail=30 --no-header -rs -p no:cacheprovider ${PYTEST_ARGS:-tests} > "$out/pytest.log" 2>&1
pytest_rc=$?
tail -3 "$out/pytest.log"

san_summary=""
if command -v compute-sanitizer >/dev/null; then
  $py scripts/sanitize_cases.py ${SANITIZE_BACKENDS:-} > /dev/null 2>&1  # warm the Triton cache outside the sanitizer
  for tool in memcheck racecheck; do
    echo "== compute-sanitizer $tool =="
    timeout ${SANITIZER_TIMEOUT:-240} compute-sanitizer --tool $tool --target-processes all --error-exitcode 9 \
      $py scripts/sanitize_cases.py ${SANITIZE_BACKENDS:-} > "$out/sanitizer-$tool.log" 2>&1
    rc=$?
    tail -2 "$out/sanitizer-$tool.log"
    san_summary+="$tool rc=$rc; "
  done
else
  san_summary="compute-sanitizer not found"
fi

echo
echo "== summary =="
echo "pytest rc=$pytest_rc: $(tail -1 "$out/pytest.log")"
echo "sanitizer: $san_summary"
echo "bench rc=$timing_rc"; grep -A4 "^| hdim" "$out/bench/table.md" 2>/dev/null || tail -20 "$out/timing.log"
exit $pytest_rc
