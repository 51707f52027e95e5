#!/usr/bin/env bash
# Threads on shared cores (issue 37 §4, core/threads.h), beside 2 busy processes per core:
#  - generate and train take their team down to fewer threads (generate's summary and train's
#    metrics say so); with BOOSTLM_THREADS=fixed they keep the whole team;
#  - the losses of a run whose team changed under load are the same bits as those of a run on the
#    fixed whole team;
#  - BOOSTLM_THREADS=bogus is refused, naming the values.
# Not timed: the speeds are scripts/bench_shared_cores.sh's. Needs 2 cores (one thread has
# nothing to give up): skipped on one.
# Usage: test_shared_cores.sh path/to/boostlm
set -uo pipefail
boostlm=$1
cores=$(nproc)
if ((cores < 2)); then echo "SKIP: one core: one thread has nothing to give up"; exit 77; fi
source "$(dirname "$0")/lib.sh" shared_cores
unset OMP_NUM_THREADS OMP_WAIT_POLICY GOMP_SPINCOUNT BOOSTLM_THREADS
busy=()
stop_load() { ((${#busy[@]})) && kill "${busy[@]}" 2> /dev/null; wait "${busy[@]}" 2> /dev/null; busy=(); }
trap 'stop_load; rm -rf "$work"' EXIT
tiny_corpus "$boostlm" "$work"
"$boostlm" init -c "$work/cola.json" -o "$work/model" --tokenizer "$work/data/tokenizer.model" \
  > /dev/null || { echo "init failed"; exit 1; }

generate() {  # TOKENS: the summary line of that many greedy tokens
  timeout 300 "$boostlm" generate --checkpoint "$work/model" -p "Line 1 of" --max-new-tokens "$1" \
    --temperature 0 2>&1 > /dev/null | grep 'tokens/s'
}
train() {  # NAME: 40 steps into $work/NAME; prints train's first line
  timeout 300 "$boostlm" train -c "$work/cola.json" -d "$work/data" -o "$work/$1" -b 4 -t 32 \
    --steps 40 --eval-interval 0 --save-interval 0 2>&1 | grep 'per rank'
}
threads_of() { python3 -c "import json,sys; print(' '.join(str(json.loads(l)['threads']) for l in open(sys.argv[1])))" "$1"; }
losses_of() { python3 -c "import json,sys; print(' '.join(repr(json.loads(l)['loss']) for l in open(sys.argv[1])))" "$1"; }

fixed_line=$(BOOSTLM_THREADS=fixed train fixed_idle)
[[ $fixed_line == *"$cores threads per rank (BOOSTLM_THREADS=fixed)"* ]] ||
  fail "fixed: first line: $fixed_line"

# Where oneDNN's GEMMs depend on the thread count (no AVX-512), a model keeps its team: no shrink.
line=$(train probe)
if [[ $line == *"(fixed: oneDNN's GEMMs here keep their threads)"* ]]; then
  echo "SKIP: oneDNN's GEMMs keep the team on this CPU: $line"; exit 77
fi
for ((i = 0; i < 2 * cores; i++)); do (while :; do :; done) & busy+=($!); done
line=$(generate 1500)
[[ $line == *"KV cache, $cores threads, "*" while other work held the cores)"* ]] ||
  fail "generate under load kept its team: $line"
line=$(BOOSTLM_THREADS=fixed generate 200)  # (slow: the whole team waits)
[[ $line == *"KV cache, $cores threads)"* ]] || fail "generate, fixed, under load: $line"
line=$(train adaptive)
[[ $line == *"$cores threads per rank (fewer while other work holds the cores)"* ]] ||
  fail "train's first line: $line"
threads=$(threads_of "$work/adaptive/metrics.jsonl")
fewest=$(tr ' ' '\n' <<< "$threads" | sort -n | head -1)
((fewest < cores)) || fail "train under load kept its team in every step: $threads"
stop_load

[ "$(losses_of "$work/adaptive/metrics.jsonl")" = "$(losses_of "$work/fixed_idle/metrics.jsonl")" ] ||
  fail "losses with the team changing under load differ from the fixed team's"
[ "$(threads_of "$work/fixed_idle/metrics.jsonl" | tr ' ' '\n' | sort -u)" = "$cores" ] ||
  fail "fixed: the team changed"
BOOSTLM_THREADS=bogus expect_error "BOOSTLM_THREADS=bogus" \
  "BOOSTLM_THREADS=bogus: give adaptive (the default) or fixed" \
  "$boostlm" train -c "$work/cola.json" -d "$work/data" -o "$work/bogus" --steps 1
finish "shared cores: the team shrinks under load, is fixed on request, and the losses are the same"
