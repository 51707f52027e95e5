#!/usr/bin/env bash
# The communication watchdog under mpirun: for each stuck exchange of boostlm_watchdog_probe (2 ranks,
# timeout 1 s), the whole job, the sleeping rank included, must end within LIMIT seconds with the
# watchdog's exit code and a message naming group, operation, bytes and step.
# Usage: test_watchdog.sh MPIEXEC PROBE [MPIEXEC FLAGS...]
set -u
mpiexec=$1 probe=$2
shift 2
limit=20
status=0

run_case() {  # mode, expected message
  local mode=$1 want=$2 log start elapsed code
  log=$(mktemp)
  start=$(date +%s.%N)
  timeout -k 5 "$limit" "$mpiexec" -n 2 "${flags[@]}" "$probe" "$mode" >"$log" 2>&1
  code=$?
  elapsed=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  local ok=1
  if [ "$code" -eq 124 ] || [ "$code" -eq 137 ]; then
    echo "FAIL $mode: the job did not end within ${limit}s"; ok=0
  elif [ "$code" -ne 75 ]; then
    echo "FAIL $mode: exit code $code, expected 75 (the watchdog's)"; ok=0
  fi
  grep -qF -- "$want" "$log" || { echo "FAIL $mode: output lacks: $want"; ok=0; }
  grep -q "passed the stuck exchange" "$log" && { echo "FAIL $mode: rank 0 got through"; ok=0; }
  if pgrep -f "$probe $mode" >/dev/null; then
    echo "FAIL $mode: a rank is left behind: $(pgrep -af "$probe $mode")"; ok=0
    for p in $(pgrep -f "$probe $mode"); do kill -9 "$p"; done
  fi
  if [ $ok -eq 1 ]; then
    echo "ok   $mode: the job ended in ${elapsed}s with exit code $code"
  else
    echo "---- output of $mode ----"; cat "$log"; echo "----"; status=1
  fi
  rm -f "$log"
}

flags=("$@")
prefix="boostlm: rank 0: communication watchdog:"
run_case recv "$prefix recv of 4096 bytes on group world has not completed within 1 s (training step 7)"
run_case wait "$prefix irecv of 4096 bytes on group world has not completed within 1 s (training step 7)"
run_case all_reduce "$prefix all_reduce of 1024 bytes on group world has not completed within 1 s"
exit $status
