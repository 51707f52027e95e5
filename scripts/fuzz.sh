#!/usr/bin/env bash
# Runs every libFuzzer target (tests/fuzz) for longer than CI does, one after another in a single
# process each, and prints per target: executions, seconds, crashes found and corpus size.
#   scripts/fuzz.sh [seconds-per-target] [target ...]     (default 300 s, every target)
# New inputs are kept in build-fuzz/fuzz-corpus/<target>/ (seeded from tests/fuzz/corpus/); a
# crash's input is written to build-fuzz/fuzz-artifacts/<target>/ -- fix the bug, then copy the
# input into tests/fuzz/corpus/<target>/ so CI replays it.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-300}
shift || true
targets=("$@")
((${#targets[@]})) || targets=(safetensors shard config trainer_state checksums hostfile cli_numbers
                                sentencepiece tokenizer_json json_record)
[[ $seconds =~ ^[0-9]+$ && $seconds -gt 0 ]] || { echo "fuzz.sh: seconds must be a positive whole number, got '$seconds'" >&2; exit 2; }

cxx=$(command -v clang++-14 || command -v clang++ || true)
[[ -n $cxx ]] || { echo "fuzz.sh: clang++ not found; run scripts/setup.sh" >&2; exit 1; }
cmake -S . -B build-fuzz -G Ninja -DBOOSTLM_FUZZ=ON -DCMAKE_CXX_COMPILER="$cxx" >/dev/null
cmake --build build-fuzz >/dev/null

printf '%-14s %12s %8s %8s %12s\n' target executions seconds crashes corpus
status=0
for t in "${targets[@]}"; do
  bin=build-fuzz/tests/fuzz/fuzz_$t
  [[ -x $bin ]] || { echo "fuzz.sh: no target '$t'" >&2; exit 2; }
  corpus=build-fuzz/fuzz-corpus/$t
  artifacts=build-fuzz/fuzz-artifacts/$t
  mkdir -p "$corpus" "$artifacts"
  log=build-fuzz/fuzz-$t.log
  start=$(date +%s)
  # -fork with -ignore_crashes keeps fuzzing past a crash, so one run reports every crash it finds.
  "$bin" -max_total_time="$seconds" -timeout=5 -rss_limit_mb=1024 -malloc_limit_mb=256 \
    -max_len=4096 -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
    -artifact_prefix="$artifacts/" "$corpus" "tests/fuzz/corpus/$t" >"$log" 2>&1 || status=1
  elapsed=$(($(date +%s) - start))
  # Fork mode's progress lines carry the running total: "#177796: cov: ... time: 5s".
  execs=$(grep -oE '^#[0-9]+' "$log" | tail -1 | tr -d '#' || true)
  crashes=$(find "$artifacts" -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | wc -l)
  size=$(find "$corpus" -type f | wc -l)
  printf '%-14s %12s %8s %8s %12s\n' "$t" "${execs:-?}" "$elapsed" "$crashes" "$size"
  ((crashes == 0)) || status=1
done
exit $status
