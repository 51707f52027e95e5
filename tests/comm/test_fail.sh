#!/usr/bin/env bash
# A failure on one rank must end the whole job promptly: 4 ranks of boostlm_fail_probe, rank 2 fails
# while the others block in an all-reduce. Checks the job ends within LIMIT seconds (not killed by
# timeout), exits non-zero with the expected code, and rank 2's message is in the output. Prints how
# long the job took to end after rank 2 failed.
# Usage: test_fail.sh MPIEXEC PROBE [MPIEXEC FLAGS...]
set -u
mpiexec=$1 probe=$2
shift 2
limit=20
status=0

# mode, expected exit code, expected text
run_case() {
  local mode=$1 want_code=$2 want_text=$3 log start end elapsed code
  shift 3
  log=$(mktemp)
  start=$(date +%s.%N)
  timeout -k 5 "$limit" "$mpiexec" -n 4 "$@" "$probe" "$mode" >"$log" 2>&1
  code=$?
  end=$(date +%s.%N)
  elapsed=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f", b - a }')
  # From rank 2's failure to the end of the job (what must be prompt; the rest is start-up).
  failed_at=$(grep -o 'rank 2 fails at [0-9.]*' "$log" | awk '{ print $5 }')
  after_failure=$(awk -v a="${failed_at:-$start}" -v b="$end" 'BEGIN { printf "%.2f", b - a }')
  local ok=1
  if [ "$code" -eq 124 ] || [ "$code" -eq 137 ]; then
    echo "FAIL $mode: the job did not end within ${limit}s (killed by timeout)"; ok=0
  elif [ "$code" -ne "$want_code" ]; then
    echo "FAIL $mode: exit code $code, expected $want_code"; ok=0
  fi
  if ! grep -qF -- "$want_text" "$log"; then
    echo "FAIL $mode: output lacks: $want_text"; ok=0
  fi
  if grep -q "passed the all-reduce" "$log"; then
    echo "FAIL $mode: a rank passed the all-reduce without rank 2"; ok=0
  fi
  if [ $ok -eq 1 ]; then
    echo "ok   $mode: job ended ${after_failure}s after rank 2 failed (${elapsed}s in all), exit code $code"
  else
    echo "---- output of $mode ----"; cat "$log"; echo "----"
    status=1
  fi
  rm -f "$log"
}

flags=("$@")
run_case error 3 "boostlm: rank 2: fail_probe: rank 2 fails on purpose (error)" "${flags[@]}"
run_case assert 134 "boostlm: rank 2: assertion failed, aborting the job" "${flags[@]}"
run_case exit 5 "fail_probe: rank 2 exits with code 5 on purpose" "${flags[@]}"
exit $status
