# Sourced by the device scripts (device_verify.sh, device_fp8_variant.sh) after they set `out` (the
# log folder) and `deadline` (epoch seconds): timed steps with their own caps under one deadline.
left() { echo $(( deadline - $(date +%s) )); }
cap() { local l; l=$(left); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
summary=()
step() {  # step NAME CAP_S CMD...: run with min(CAP, time left), record rc and seconds; returns rc
  local name=$1 c; c=$(cap "$2"); shift 2
  if [ "$c" -lt 20 ]; then summary+=("$name: skipped (time)"); return 99; fi
  local t0=$(date +%s)
  timeout "$c" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  summary+=("$name: rc=$rc in $(( $(date +%s) - t0 ))s (cap ${c}s) $(tail -1 "$out/$name.log" | cut -c1-150)")
  return $rc
}
