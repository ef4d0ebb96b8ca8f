#!/usr/bin/env bash
# One device call for FP8 candidates (names of hopper_fp8_fwd.VARIANTS, comma-separated): checks
# first, then timing only if the checks passed. Every step has its own cap and the whole run a deadline; full
# logs under OUT, a short summary last.
#     [EXTRA_VARIANTS="a b"] [QUANT=1] bash scripts/device_fp8_variant.sh OUT VARIANT[,VARIANT...] "d,causal,seqlen;..." [DEADLINE_S (540)]
# (SAN_CAUSAL="1": the sanitizers on causal cases only; SAN_ONLY="a b": on these candidates only;
# EXTRA_VARIANTS: other candidates stamped and timed beside it, not checked here; QUANT=1: first
# the quantisers' GPU tests and scripts/quant_speed.py, ~60-90 s)
# 1. scripts/hopper_fp8_dev.py (every row's and the candidates' check cases, then its bench)
# 2. compute-sanitizer memcheck and racecheck (hazard addresses counted) on a small shape of the
#    candidate at each head_dim of the cells, causal and not (scripts/fp8_variant_case.py)
# 3. clock stamps per tile phase (scripts/fp8_tile_phases.py) for the row, the persistent loop
#    and the candidate, at the cells
# 4. rotated rounds beside the row and FA3-FP8 (scripts/fp8_interleaved.py) at the cells
set -u
out=${1:?usage: device_fp8_variant.sh OUT VARIANT[,VARIANT...] CELLS [DEADLINE_S]}
var=${2:?variant}
cells=${3:?cells}
deadline=$(( $(date +%s) + ${4:-540} ))
mkdir -p "$out"
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
source scripts/device_steps.sh
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.limit --format=csv > "$out/smi.txt" 2>&1
if [ "${QUANT:-0}" = 1 ]; then
  step quant_tests 120 python3 -m pytest -q -p no:cacheprovider tests/test_fp8.py \
    -k "gluon or kernel_matches or chunked or per_tensor or public_paths or tiny or nonfinite or division or grid_limit"
  step quant_speed 90 python3 scripts/quant_speed.py "$out/quant"
fi
dims=$(echo "$cells" | tr ';' '\n' | cut -d, -f1 | sort -u)
# the candidates' checks at the cells' head dims, no bench of its own (budget arithmetic of
# hopper_fp8_dev.py: with its bench, a budget under ~150 s checked nothing, run 98)
step dev "${DEV_CAP:-240}" env FP8_DEV_VARIANTS="$var" FP8_DEV_DIMS="$(echo $dims | tr ' ' ,)" \
  FP8_DEV_NO_BENCH=1 python3 scripts/hopper_fp8_dev.py "$out/dev" --budget $(( ${DEV_CAP:-240} - 30 ))
ok=1
for v1 in ${var//,/ }; do
  if ! grep -q "\"variant\": \"$v1\"" "$out/dev/check.jsonl" 2>/dev/null; then ok=0; fi
  if grep "\"variant\": \"$v1\"" "$out/dev/check.jsonl" 2>/dev/null | grep -q '"ok": false'; then ok=0; fi
done
summary+=("checks of $var: $([ $ok = 1 ] && echo passed || echo 'FAILED or missing: no timing')")
CS="compute-sanitizer --print-limit 0 --error-exitcode 9"
export FP8_CASE_PROGRAMS=${FP8_CASE_PROGRAMS:-3}   # a persistent candidate: several tiles per program
for v1 in ${SAN_ONLY:-${var//,/ }}; do
  vdims=$(python3 -c "from fusedattn.kernels import hopper_fp8_fwd as F; print(*F.VARIANTS['$v1'][1])")
  for d in $dims; do
    case " $vdims " in *" $d "*) ;; *) continue ;; esac
    for c in ${SAN_CAUSAL:-0 1}; do
      step "mem_${v1}_${d}_${c}" 60 $CS --tool memcheck python3 scripts/fp8_variant_case.py "$d" "$c" "$v1"
      step "race_${v1}_${d}_${c}" 90 $CS --tool racecheck --racecheck-report hazard \
        python3 scripts/fp8_variant_case.py "$d" "$c" "$v1"
      grep -o "__shared__ 0x[0-9a-f]*" "$out/race_${v1}_${d}_${c}.log" | sort | uniq -c | sort -rn \
        | head > "$out/race_${v1}_${d}_${c}-addresses.txt"
    done
  done
done
if [ $ok = 1 ]; then
  step phases 90 env FP8_CELLS="$cells" FP8_PHASES_PERSISTENT=1 FP8_PHASES_VARIANTS="$var${EXTRA_VARIANTS:+,${EXTRA_VARIANTS// /,}}" \
    python3 scripts/fp8_tile_phases.py "$out/phases"
  step rounds "${ROUNDS_CAP:-200}" env FP8_CELLS="$cells" python3 scripts/fp8_interleaved.py "$out/rounds" ${var//,/ } ${EXTRA_VARIANTS:-}
fi
echo "== summary =="
printf '%s\n' "${summary[@]}"
for f in "$out"/race_*-addresses.txt; do echo "$f:"; cat "$f"; done
[ -f "$out/quant_speed.log" ] && grep "^|" "$out/quant_speed.log"
[ -f "$out/dev/summary.md" ] && tail -40 "$out/dev/summary.md"
[ -f "$out/phases.log" ] && grep "^d\|^  block" "$out/phases.log"
[ -f "$out/rounds.log" ] && grep "^d" "$out/rounds.log"
# one tarball (the device returns a limited number of files)
tar -C "$(dirname "$out")" -czf "$out.tgz" "$(basename "$out")" && rm -rf "$out"
