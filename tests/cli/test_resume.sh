#!/usr/bin/env bash
# What a resume keeps and which tokens a checkpoint accepts, as a user types the commands: the
# README's `--resume DIR --steps M` continues a run started with unusual settings exactly as one
# uninterrupted run; a flag given again overrides its setting and is reported; a checkpoint refuses
# data of another tokenizer of the same vocabulary size (eval, --init-from, --resume) unless
# --allow-tokenizer-change. Usage: test_resume.sh path/to/boostlm
set -uo pipefail
boostlm=$1
source "$(dirname "$0")/lib.sh" resume

tiny_corpus "$boostlm" "$work"
losses() { python3 -c "import json,sys; print(' '.join(repr(json.loads(l)['loss']) for l in open(sys.argv[1])))" "$1/metrics.jsonl"; }
# lr_at RUN STEP: the learning rate the metrics record for a step.
lr_at() { python3 -c "import json,sys; print([json.loads(l)['lr'] for l in open(sys.argv[1]) if json.loads(l)['step'] == int(sys.argv[2])][0])" "$1/metrics.jsonl" "$2"; }
settings=(-c "$work/cola.json" -d "$work/data" --lr 3e-3 --warmup 2 --precision bf16 -b 4 -t 16
          --grad-accum 2 --weight-decay 0.05 --eval-interval 0 --eval-batches 1)

# The README's resume: a first part planned on the whole schedule, then `--resume DIR --steps M`
# with nothing repeated. Losses bit for bit those of one run.
"$boostlm" train "${settings[@]}" -o "$work/straight" --steps 6 > /dev/null 2>&1 || fail "straight run"
"$boostlm" train "${settings[@]}" -o "$work/parts" --steps 3 --schedule-steps 6 > /dev/null 2>&1 ||
  fail "first part"
out=$("$boostlm" train -d "$work/data" -o "$work/parts" --resume "$work/parts" --steps 6 2>&1) ||
  fail "resume: $out"
[[ $(losses "$work/straight") == "$(losses "$work/parts")" ]] ||
  fail "resumed losses $(losses "$work/parts") differ from one run's $(losses "$work/straight")"
grep -q "cola .*bf16" <<< "$out" || fail "the resumed run is not bf16: $out"
grep -qF "keeping the checkpoint's --lr 0.003" <<< "$out" || fail "the kept settings are not said: $out"

# A flag given again wins and is reported, one line per changed setting.
out=$("$boostlm" train -d "$work/data" -o "$work/parts" --resume "$work/parts" --steps 8 \
      --schedule-steps 8 --lr 1e-3 2>&1) || fail "resume with --lr: $out"
grep -qF "resume: --lr 0.003 -> 0.001 (given on the command line)" <<< "$out" ||
  fail "the --lr override is not reported: $out"
grep -qF "resume: --schedule-steps 6 -> 8 (given on the command line)" <<< "$out" ||
  fail "the --schedule-steps override is not reported: $out"
# Step 7 of a cosine from 1e-3 to the saved --min-lr 1e-4 over 8 steps, 2 of warm-up (3.25e-4;
# the saved --lr 3e-3 would give 8.25e-4).
python3 -c "import sys; lr = float(sys.argv[1]); assert abs(lr - 3.25e-4) < 1e-6, lr" \
  "$(lr_at "$work/parts" 7)" || fail "step 7 did not run at the given --lr: $(lr_at "$work/parts" 7)"
expect_error "another batch size on resume" "--batch-size 8 differs from the checkpoint's 4" \
  "$boostlm" train -d "$work/data" -o "$work/parts" --resume "$work/parts" --steps 10 -b 8

# The parallel sizes: kept when the job has the checkpoint's ranks, else the command line's, said.
if command -v mpirun > /dev/null; then
  "$boostlm" launch -n 2 -- train "${settings[@]}" -o "$work/tp2" --tp 2 --steps 2 \
    --schedule-steps 4 > /dev/null 2>&1 || fail "TP 2 run"
  out=$("$boostlm" launch -n 2 -- train -d "$work/data" -o "$work/tp2" --resume "$work/tp2" \
        --steps 3 2>&1) || fail "resume under launch -n 2: $out"
  grep -q "tp 2 x pp 1 x dp 1" <<< "$out" || fail "the resume on 2 ranks did not keep TP 2: $out"
  out=$("$boostlm" train -d "$work/data" -o "$work/tp2" --resume "$work/tp2" --steps 4 2>&1) ||
    fail "resume of a TP 2 run in one process: $out"
  grep -qF "resume: --tp 2 -> 1 (the default: this job has 1 rank(s), the checkpoint's run had 2" \
    <<< "$out" || fail "the resume in one process does not say it leaves TP 2: $out"
else
  echo "skipped the parallel sizes' part: no mpirun"
fi

# Another corpus prepared with its own tokenizer of the same vocabulary size (300).
for i in $(seq 1 300); do
  echo "Verse $i: and the shepherd led $((i * 7)) sheep over the green hills toward the valley."
  echo
done > "$work/other.txt"
"$boostlm" prepare "$work/other.txt" -o "$work/other" --vocab-size 300 --val-fraction 0.1 \
  > /dev/null || fail "prepare other"
grep -q '"tokenizer_hash": "[0-9a-f]\{16\}"' "$work/other/meta.json" ||
  fail "meta.json records no tokenizer hash: $(cat "$work/other/meta.json")"
eval_other=(eval --checkpoint "$work/parts" --data "$work/other/val_000000.bin" -b 2 -t 16 --eval-batches 1)
expect_error "eval of another tokenizer's data" "but the data was prepared with $work/other/tokenizer.model (hash" \
  "$boostlm" "${eval_other[@]}"
out=$("$boostlm" "${eval_other[@]}" --allow-tokenizer-change 2>&1) ||
  fail "eval --allow-tokenizer-change: $out"
grep -q "warning: --allow-tokenizer-change" <<< "$out" || fail "eval: no warning: $out"
init_other=(train --init-from "$work/parts" -d "$work/other" -o "$work/tuned" --steps 1 -b 2 -t 16
            --eval-batches 1)
expect_error "--init-from on another tokenizer's data" "the model was trained on tokens of $work/parts/checkpoints/step_000008/tokenizer.model (hash" \
  "$boostlm" "${init_other[@]}"
out=$("$boostlm" "${init_other[@]}" --allow-tokenizer-change 2>&1) ||
  fail "--init-from --allow-tokenizer-change: $out"
grep -q "warning: --allow-tokenizer-change" <<< "$out" || fail "--init-from: no warning: $out"
cmp -s "$work/tuned/checkpoints/step_000001/tokenizer.model" "$work/other/tokenizer.model" ||
  fail "the new run's checkpoint does not carry its data's tokenizer"
resume_other=(train --resume "$work/parts" -d "$work/other" -o "$work/parts" --steps 10)
expect_error "--resume on another tokenizer's data" "another tokenizer" "$boostlm" "${resume_other[@]}"
# Let through, the resume still continues only its own data (another corpus has other windows).
expect_error "--resume --allow-tokenizer-change on another corpus" "the checkpoint read it when it held" \
  "$boostlm" "${resume_other[@]}" --allow-tokenizer-change

# The same tokenizer in another directory is accepted; data prepared before the hash was recorded
# (no tokenizer_hash, no tokenizer.model) is accepted without a word.
"$boostlm" prepare "$work/other.txt" -o "$work/same" --tokenizer "$work/data/tokenizer.model" \
  --val-fraction 0.1 > /dev/null || fail "prepare with the checkpoint's tokenizer"
"$boostlm" eval --checkpoint "$work/parts" --data "$work/same/val_000000.bin" -b 2 -t 16 --eval-batches 1 \
  > /dev/null 2>&1 || fail "eval of data with the checkpoint's tokenizer"
mkdir -p "$work/old" && cp "$work/other/val_000000.bin" "$work/old/val.bin"
out=$("$boostlm" eval --checkpoint "$work/parts" --data "$work/old/val.bin" -b 2 -t 16 --eval-batches 1 2>&1) ||
  fail "eval of data without a recorded tokenizer: $out"
grep -q "warning" <<< "$out" && fail "eval of data without a recorded tokenizer warns: $out"
# A tokenizer.model replaced after preparing no longer matches meta.json: refused.
cp "$work/data/tokenizer.model" "$work/other/tokenizer.model"
expect_error "replaced tokenizer.model" "is not the tokenizer the shards beside it were prepared with" \
  "$boostlm" "${eval_other[@]}"

finish "resume keeps the run; tokenizers are checked"
