#!/usr/bin/env bash
# The racecheck confirmation of benchmarks/hopper_log.md ("racecheck hazards of run 2026-12-02"):
# hazards of the Hopper kernel at full detail on one small causal GQA case, the no-warp-specialisation
# control, and synccheck over the sanitizer cases. Logs go to the folder given.
#     bash scripts/racecheck_confirm.sh OUT_DIR
set -uo pipefail
out=${1:-out}
mkdir -p "$out"
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
P="import torch,fusedattn.kernels.hopper_fwd as H;q=torch.randn(1,130,4,128,dtype=torch.bfloat16).cuda();k=torch.randn(1,200,2,128,dtype=torch.bfloat16).cuda();H.forward(q,k,k.clone(),True,0.088);torch.cuda.synchronize();print('ok')"
P2="${P%%H.forward*}H.forward(q,k,k.clone(),True,0.088,config=H.base_config(128,warp_specialize=False));torch.cuda.synchronize();print('ok')"
python3 -c "$P" && timeout 120 python3 -c "$P2"
python3 scripts/sanitize_cases.py hopper >/dev/null
CS="compute-sanitizer --print-limit 0"
$CS --tool racecheck --racecheck-report hazard --racecheck-detect-level info --kernel-name kns=attn_fwd_kernel \
    --log-file "$out/rc-hazard-d128c.log" python3 -c "$P"
timeout 240 $CS --tool racecheck --racecheck-report analysis --kernel-name kns=attn_fwd_nows_kernel \
    --log-file "$out/rc-nows.log" python3 -c "$P2"
$CS --tool synccheck --kernel-name kns=attn_fwd_kernel --log-file "$out/synccheck-hopper.log" \
    python3 scripts/sanitize_cases.py hopper
tail -n 3 "$out"/rc-*.log "$out"/synccheck-hopper.log
echo "hazard addresses (count, address):"
grep -o "__shared__ 0x[0-9a-f]*" "$out/rc-hazard-d128c.log" | sort | uniq -c
echo "threads writing / reading:"
grep -o -E "(Write|Read) Thread \([0-9]+, 0, 0\)" "$out/rc-hazard-d128c.log" | sort | uniq -c | sort -rn | head -20
