#!/usr/bin/env bash
# The command line as a user meets it: a small end-to-end run, the errors a wrong flag or a corrupt
# file produce, and SIGTERM saving a checkpoint that resumes.
# Usage: test_cli.sh path/to/boostlm
set -uo pipefail
boostlm=$1
source "$(dirname "$0")/lib.sh" cli

# A small corpus: numbered paragraphs with some non-ASCII text.
for i in $(seq 1 400); do
  echo "Paragraph $i: the quick brown fox jumps over the lazy dog; naïve café $((i * 7)) — Ελληνικά."
  echo "It was the ${i}th day, and the fox said: \"look at the river\" before the evening came."
  echo
done > "$work/corpus.txt"

"$boostlm" prepare "$work/corpus.txt" -o "$work/data" --vocab-size 400 > "$work/prepare.log" ||
  fail "prepare: $(cat "$work/prepare.log")"
cat > "$work/model.json" <<'JSON'
{"arch": "cola", "vocab_size": 512, "d_model": 32, "n_layers": 2, "n_heads": 4, "d_ff": 64,
 "attn_rank": 8, "mlp_rank": 8, "max_seq_len": 64}
JSON
# train CONFIG DATA OUT [flags...]
train() { "$boostlm" train -c "$1" -d "$2" -o "$3" -b 2 -t 32 --eval-batches 2 "${@:4}"; }

out=$(train "$work/model.json" "$work/data" "$work/run" --steps 5 2>/dev/null) || fail "train: exit $?"
grep -q '"steps":5' <<< "$out" || fail "train summary: $out"
[[ $(wc -l < "$work/run/metrics.jsonl") -eq 5 ]] || fail "metrics.jsonl should have 5 lines"
grep -q '"tokens_per_s"' "$work/run/metrics.jsonl" || fail "metrics lack tokens_per_s"

out=$("$boostlm" eval --checkpoint "$work/run" --data "$work/data/val_000000.bin" -b 2 -t 32 --eval-batches 2)
tail -1 <<< "$out" | grep -q '"loss"' || fail "eval: last line is not JSON with loss: $out"

out=$("$boostlm" generate --checkpoint "$work/run" -p "The quick" --max-new-tokens 5 2>&1) ||
  fail "generate: $out"

# eval --text: raw text through the checkpoint's tokenizer, every token scored (all but the first,
# which nothing predicts); perplexity is exp(loss).
head -40 "$work/corpus.txt" > "$work/some.txt"
out=$("$boostlm" eval --checkpoint "$work/run" --text "$work/some.txt" -b 2 -t 32) ||
  fail "eval --text: $out"
python3 -c "import json,math,sys; j=json.loads(sys.argv[1]); assert j['evaluated_tokens'] == j['tokens'] - 1 > 128 and abs(math.exp(j['loss']) - j['perplexity']) < 1e-6 * j['perplexity'], j" \
  "$(tail -1 <<< "$out")" || fail "eval --text output: $out"
echo "The fox." > "$work/short.txt"
out=$("$boostlm" eval --checkpoint "$work/run" --text "$work/short.txt" -b 2 -t 32) ||
  fail "eval --text of a short text: $out"
expect_error "eval with both inputs" "excludes" "$boostlm" eval --checkpoint "$work/run" \
  --text "$work/some.txt" --data "$work/data/val_000000.bin"

# Wrong flags and bad input.
expect_error "unknown flag" "--bogus" train "$work/model.json" "$work/data" "$work/x" --bogus
expect_error "bad precision" "fp16" train "$work/model.json" "$work/data" "$work/x" --precision fp16
expect_error "missing data dir" "--data" train "$work/model.json" "$work/nope" "$work/x"
sed 's/"n_heads": 4/"n_heads": 4, "n_kv_heads": 3/' "$work/model.json" > "$work/bad.json"
expect_error "kv heads" "not divisible by n_kv_heads=3" train "$work/bad.json" "$work/data" "$work/x"
sed 's/"vocab_size": 512/"vocab_size": 350/' "$work/model.json" > "$work/small.json"
expect_error "tokenizer larger than model" "vocab_size is 350" train "$work/small.json" "$work/data" "$work/x"
cp -r "$work/data" "$work/cut"
truncate -s -10 "$work/cut/train_000000.bin"
expect_error "truncated shard" "train_000000.bin" train "$work/model.json" "$work/cut" "$work/x"
printf 'garbage' > "$work/cut/train_000000.bin"
expect_error "garbage shard" "train_000000.bin" train "$work/model.json" "$work/cut" "$work/x"
ckpt=$(cat "$work/run/checkpoints/latest")
cp -r "$work/run/checkpoints/$ckpt" "$work/corrupt"
printf '\x00\x01' | dd of="$work/corrupt/model.safetensors" bs=1 seek=200 conv=notrunc status=none
expect_error "corrupt checkpoint" "checksum mismatch" "$boostlm" eval --checkpoint "$work/corrupt" --data "$work/data/val_000000.bin" -b 2 -t 32

# SIGTERM mid-run saves a checkpoint and exits 130 (an interrupted run, whatever stopped it); the run
# then resumes to the end.
"$boostlm" train -c "$work/model.json" -d "$work/data" -o "$work/long" -b 2 -t 32 --steps 100000 > "$work/long.out" 2> "$work/long.err" &
pid=$!
for _ in $(seq 1 200); do
  [[ -s "$work/long/metrics.jsonl" ]] && break
  sleep 0.05
done
kill -TERM "$pid"
wait "$pid"; code=$?
[ "$code" -eq 130 ] || fail "SIGTERM: exit $code, not 130 ($(cat "$work/long.err"))"
grep -q '"interrupted":true' "$work/long.out" || fail "SIGTERM: summary says $(cat "$work/long.out")"
steps_done=$(wc -l < "$work/long/metrics.jsonl")
out=$("$boostlm" train -d "$work/data" -o "$work/long" --resume "$work/long" -b 2 -t 32 \
      --steps $((steps_done + 2)) 2>&1) || fail "resume after SIGTERM: $out"

finish "all CLI checks passed"
