#!/usr/bin/env bash
# Device run 46 (session 10): the o_half candidate at hdim 256 in one call. 1. stamps and rotated
# rounds beside the row (scripts/device_hopper_phases.sh); 2. the GPU test grid at head_dim 256
# (and the padded 192) with o_half put into this copy's table (the copy only: sed on the
# working tree the device received); 3. compute-sanitizer memcheck and racecheck on shapes with
# several tiles per program. Logs under OUT (tarred), a summary last.
#     bash scripts/device_o_half.sh OUT
set -u
out=${1:?usage: device_o_half.sh OUT}
mkdir -p "$out"
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
HP_CELLS="256,1,1024;256,1,2048;256,0,2048;256,1,8192" PRECOMPILE_CAP=60 PHASES_CAP=70 \
  bash scripts/device_hopper_phases.sh "$out/phases" o_half 130 > "$out/phases-summary.log" 2>&1
deadline=$(( $(date +%s) + 140 ))
source scripts/device_steps.sh
sed -i 's/(256, False): _base(256, persistent=True, tma_store=True,/(256, False): _base(256, persistent=True, tma_store=True, o_half=True,/; s/(256, True): _base(256, persistent=True, scheduler=1,/(256, True): _base(256, persistent=True, scheduler=1, o_half=True,/' fusedattn/kernels/hopper_fwd.py
python3 -c "from fusedattn.kernels import hopper_fwd as H; print('table o_half:', H.get_config(256, False).o_half, H.get_config(256, True).o_half)" > "$out/table.txt" 2>&1
cat > "$out/case.py" <<'PY'
import sys, torch, fusedattn
from fusedattn.reference import attention_oracle
torch.manual_seed(1)
for causal in (False, True):
    for b, s, h, hk in ((2, 1100, 8, 2), (1, 700, 40, 40)):   # 144 / 240 tiles on 132 programs
        q, k, v = (torch.randn(b, s, n, 256, device="cuda", dtype=torch.bfloat16) for n in (h, hk, hk))
        out, lse = fusedattn.attention(q, k, v, causal=causal, backend="hopper", return_lse=True)
        ro, rl = attention_oracle(q, k, v, causal, 256 ** -0.5)
        rel = ((out.double() - ro).norm() / ro.norm()).item()
        print("case", causal, b, s, h, hk, "rel", rel, "ok", rel < 1e-2, flush=True)
PY
step grid256 70 env FUSEDATTN_TEST_BACKENDS=hopper python3 -m pytest -q -n 12 -p no:cacheprovider tests/test_gpu_grid.py -k "256 or 192"
python3 "$out/case.py" > "$out/case-warm.log" 2>&1
CS="compute-sanitizer --print-limit 0 --error-exitcode 9"
step memcheck 30 $CS --tool memcheck python3 "$out/case.py"
step racecheck 40 $CS --tool racecheck --racecheck-report hazard python3 "$out/case.py"
grep -o "__shared__ 0x[0-9a-f]*" "$out/racecheck.log" | sort | uniq -c | sort -rn | head > "$out/race-addresses.txt"
echo "== summary =="
cat "$out/table.txt"
tail -12 "$out/phases-summary.log"
printf '%s\n' "${summary[@]}"
cat "$out/case-warm.log" | tail -4
cat "$out/race-addresses.txt"
tar -C "$(dirname "$out")" -czf "$out.tgz" "$(basename "$out")" && rm -rf "$out"
