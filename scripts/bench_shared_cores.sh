#!/usr/bin/env bash
# Threads on shared cores (issue 37 §4, core/threads.h): generate's tokens/s and a training step's
# time, on an idle machine and beside LOAD busy processes, for each threading policy, in one run:
#   adaptive  boostlm's default: the thread governor shrinks the OpenMP team while other work
#             holds cores (libgomp's own wait policy, all the cores at start)
#   fixed     BOOSTLM_THREADS=fixed: the whole team always (boostlm before the governor)
#   passive   fixed, with OMP_WAIT_POLICY=passive: a waiting thread sleeps at once
#   spinN     fixed, with GOMP_SPINCOUNT=N: a waiting thread spins N times, then sleeps
#   threadsN  fixed, with OMP_NUM_THREADS=N
# Usage: [POLICIES="adaptive fixed ..."] scripts/bench_shared_cores.sh [LOAD [ROUNDS]]
# (default: adaptive fixed passive threads1; 2 x cores busy loops; 3 rounds)
# PRECISION (default fp32) is train's --precision; in bf16 oneDNN's bf16 matmul keeps the whole
# team (kernels/cpu/gemm.cpp), so there only the other kernels adapt.
# MODEL (default configs/tiny-cola.json, the quickstart's) with a small vocabulary, freshly
# initialised: its speed, not its text, is measured. Each figure is the median of the rounds;
# run it alone (a build beside it is load it does not count).
set -euo pipefail
cd "$(dirname "$0")/.."
boostlm=${BOOSTLM:-./build/boostlm}
load=${1:-$((2 * $(nproc)))}
rounds=${2:-3}
work=$(mktemp -d /tmp/bench_shared_cores.XXXXXX)
busy=()
stop_load() { ((${#busy[@]})) && kill "${busy[@]}" 2> /dev/null; wait 2> /dev/null; busy=(); }
trap 'stop_load; rm -rf "$work"' EXIT

for i in $(seq 1 400); do
  printf 'Line %d of the text, with words such as river, mountain, %d and sky.\n\n' "$i" $((i * 13))
done > "$work/text.txt"
"$boostlm" prepare "$work/text.txt" -o "$work/data" --vocab-size 300 --val-fraction 0.1 > /dev/null
model=${MODEL:-configs/tiny-cola.json}
"$boostlm" init -c "$model" --vocab-size 320 -o "$work/model" \
  --tokenizer "$work/data/tokenizer.model" > /dev/null

# run POLICY COMMAND...: the command under the policy's environment.
run() {
  local policy=$1
  shift
  local keep=(env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u OMP_NUM_THREADS -u BOOSTLM_THREADS)
  case $policy in
    adaptive) "${keep[@]}" "$@" ;;
    fixed) "${keep[@]}" BOOSTLM_THREADS=fixed "$@" ;;
    passive) "${keep[@]}" BOOSTLM_THREADS=fixed OMP_WAIT_POLICY=passive "$@" ;;
    spin*) "${keep[@]}" BOOSTLM_THREADS=fixed GOMP_SPINCOUNT=${policy#spin} "$@" ;;
    threads*) "${keep[@]}" BOOSTLM_THREADS=fixed OMP_NUM_THREADS=${policy#threads} "$@" ;;
    *) echo "bench_shared_cores: unknown policy $policy" >&2; exit 2 ;;
  esac
}

tokens_per_s() {  # POLICY
  run "$1" timeout 300 "$boostlm" generate --checkpoint "$work/model" -p "Line 1 of" \
    --max-new-tokens 1000 --temperature 0 2>&1 > /dev/null |
    sed -n 's/.* \([0-9.]*\) tokens\/s.*/\1/p' | tail -1
}

step_ms() {  # POLICY: the median step time of 30 steps after 5
  rm -rf "$work/run"
  run "$1" timeout 600 "$boostlm" train -c "$model" -d "$work/data" -o "$work/run" \
    -b 4 -t 128 --steps 35 --eval-interval 0 --eval-batches 1 --save-interval 0 \
    --precision "${PRECISION:-fp32}" > /dev/null 2>&1
  python3 -c "
import json, statistics, sys
ms = [json.loads(l)['step_ms'] for l in open(sys.argv[1])][5:]
print(f'{statistics.median(ms):.2f}')" "$work/run/metrics.jsonl"
}

median() { python3 -c "import statistics, sys; print(f'{statistics.median(map(float, sys.argv[1:])):.2f}')" "$@"; }

printf '%-8s %-7s %14s %12s\n' policy machine "generate tok/s" "train ms/step"
for state in idle loaded; do
  if [ "$state" = loaded ]; then
    for ((i = 0; i < load; i++)); do (while :; do :; done) & busy+=($!); done
  fi
  for policy in ${POLICIES:-adaptive fixed passive threads1}; do
    g=() t=()
    for ((r = 0; r < rounds; r++)); do
      g+=("$(tokens_per_s "$policy")")
      t+=("$(step_ms "$policy")")
    done
    printf '%-8s %-7s %14s %12s\n' "$policy" "$state" "$(median "${g[@]}")" "$(median "${t[@]}")"
  done
  stop_load
done
echo "($(nproc) cores; loaded: $load busy processes; train in ${PRECISION:-fp32}; median of $rounds rounds)"
