#!/usr/bin/env bash
# A few training steps of `boostlm train` under `boostlm launch` give the same losses as one
# process, for every layout and for TP, DP, TP x DP, ZeRO-1 and pipelines (relative 1e-5 per step: the
# sharded runs only reorder fp32 sums), and the same final validation loss where the windows are
# the same (the same -b): every rank scores every validation window, here 20 that span the first
# val shards of 500 tokens. Usage: test_parallel_train.sh path/to/boostlm
set -uo pipefail
boostlm=$1
source "$(dirname "$0")/lib.sh" ptrain

# boostlm prepare on generated text gives a real tokenizer and shards; tiny dense and cola models.
# Shards of 500 tokens: 20 validation windows of 4x16+1 (7 a shard) span three val shards, of
# 2x16+1 (15 a shard) two.
tiny_corpus "$boostlm" "$work" --shard-tokens 500
common=(-d "$work/data" -t 16 --steps 4 --lr 1e-2 --warmup 1 --eval-interval 0 --eval-batches 20)

losses() { python3 -c "import json,sys; print(' '.join(repr(json.loads(l)['loss']) for l in open(sys.argv[1])))" "$1/metrics.jsonl"; }
compare() {  # compare NAME REFERENCE_RUN RUN [VAL_REFERENCE_RUN: one process, the run's -b]
  python3 - "$2/metrics.jsonl" "$3/metrics.jsonl" "$1" "${4:+$4/metrics.jsonl}" <<'PY' || fail "$1"
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1])]
lines = [json.loads(l) for l in open(sys.argv[2])]
b = [l["loss"] for l in lines]
assert len(a) == 4 and 1 <= len(b) <= 4, (len(a), len(b))
a = a[len(a) - len(b):]  # a resumed run logs only its last steps
bad = [(i, x, y) for i, (x, y) in enumerate(zip(a, b)) if abs(x - y) > 1e-5 * abs(x)]
if sys.argv[4]:  # the final validation loss, over the same windows
    x = json.loads(open(sys.argv[4]).readlines()[-1])["val_loss"]
    y = lines[-1]["val_loss"]
    if abs(x - y) > 1e-5 * abs(x):
        bad.append(("val_loss", x, y))
if bad:
    print(sys.argv[3], "differs:", bad)
    sys.exit(1)
PY
}

"$boostlm" train -c "$work/dense.json" -o "$work/dense1" -b 4 "${common[@]}" 2> /dev/null > /dev/null || fail "dense single"
"$boostlm" train -c "$work/cola.json" -o "$work/cola1" -b 4 "${common[@]}" 2> /dev/null > /dev/null || fail "cola single"
# The runs of -b 2 score validation windows of 2x16: their reference.
"$boostlm" train -c "$work/cola.json" -o "$work/cola1_b2" -b 2 --grad-accum 2 "${common[@]}" 2> /dev/null > /dev/null ||
  fail "cola single, -b 2"
compare cola1_b2 "$work/cola1" "$work/cola1_b2"

run() {  # run NAME RANKS CONFIG FLAGS...
  local name=$1 ranks=$2 config=$3; shift 3
  "$boostlm" launch -n "$ranks" -- train -c "$work/$config.json" -o "$work/$name" "${common[@]}" "$@" \
    > "$work/$name.log" 2>&1 || fail "$name: $(tail -3 "$work/$name.log")"
}
run dense_tp2 2 dense -b 4 --tp 2 --layout dense-tp && compare dense_tp2 "$work/dense1" "$work/dense_tp2" "$work/dense1"
run naive_tp2 2 cola -b 4 --tp 2 --layout naive-tp && compare naive_tp2 "$work/cola1" "$work/naive_tp2" "$work/cola1"
run btp_tp2 2 cola -b 4 --tp 2 --layout btp && compare btp_tp2 "$work/cola1" "$work/btp_tp2" "$work/cola1"
run btp_dp2 2 cola -b 2 --dp 2 && compare btp_dp2 "$work/cola1" "$work/btp_dp2" "$work/cola1_b2"
run btp_zero 2 cola -b 2 --dp 2 --zero 1 && compare btp_zero "$work/cola1" "$work/btp_zero" "$work/cola1_b2"
run btp_tp2dp2 4 cola -b 2 --tp 2 --dp 2 && compare btp_tp2dp2 "$work/cola1" "$work/btp_tp2dp2" "$work/cola1_b2"

# Pipeline: the step's 4 sequences as 2 micro-batches of 2 (1F1B over 2 stages), with TP and DP.
run btp_pp2 2 cola -b 2 --grad-accum 2 --pp 2 --save-interval 2 &&
  compare btp_pp2 "$work/cola1" "$work/btp_pp2" "$work/cola1_b2"
run btp_tp2pp2 4 cola -b 2 --grad-accum 2 --tp 2 --pp 2 && compare btp_tp2pp2 "$work/cola1" "$work/btp_tp2pp2" "$work/cola1_b2"
run dense_pp2dp2 4 dense -b 1 --grad-accum 2 --pp 2 --dp 2 --layout dense-tp &&
  compare dense_pp2dp2 "$work/dense1" "$work/dense_pp2dp2"
run btp_pp2zero 4 cola -b 1 --grad-accum 2 --pp 2 --dp 2 --zero 1 &&
  compare btp_pp2zero "$work/cola1" "$work/btp_pp2zero"
grep -q '"bubble_fraction"' "$work/btp_pp2/metrics.jsonl" || fail "btp_pp2: no pipeline metrics"
# A checkpoint written by 2 stages resumes in one process, and on 2 stages with TP 2.
"$boostlm" train --resume "$work/btp_pp2/checkpoints/step_000002" -o "$work/resume_pp1" \
  "${common[@]}" -b 2 --grad-accum 2 > /dev/null 2>&1 &&
  compare resume_pp1 "$work/cola1" "$work/resume_pp1" || fail "resume at pp 1"
"$boostlm" launch -n 4 -- train --resume "$work/btp_pp2/checkpoints/step_000002" \
  -o "$work/resume_tp2pp2" "${common[@]}" -b 2 --grad-accum 2 --tp 2 --pp 2 \
  > "$work/resume_tp2pp2.log" 2>&1 && compare resume_tp2pp2 "$work/cola1" "$work/resume_tp2pp2" ||
  fail "resume at tp 2 x pp 2: $(tail -3 "$work/resume_tp2pp2.log")"

finish "all parallel training runs match one process"
