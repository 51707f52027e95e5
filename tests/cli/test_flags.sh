#!/usr/bin/env bash
# Issue 32's cases 4, 6, 7 and 8, rerun as written: one vocabulary of flags (deprecated spellings
# still work and say so), help showing real defaults, presets by name, messages that name fields,
# flags and paths, JSON numbers that round-trip, and eval's windows.
# Usage: test_flags.sh path/to/boostlm
set -uo pipefail
boostlm=$1
source "$(dirname "$0")/lib.sh" flags
tiny_corpus "$boostlm" "$work"
data=$work/data
small=(-b 2 -t 16)

# 4: the plan example of docs/planning.md runs; its defaults (4 sequences per device, the model's
# max_seq_len) are printed; the help shows no fake default for them.
out=$("$boostlm" plan --model 7b --arch cola --hardware a100-80g --gpus 16 2>&1) ||
  fail "plan example (docs/planning.md): $out"
grep -q "global batch 64 x 2048 tokens" <<< "$out" || fail "plan defaults: $(head -1 <<< "$out")"
out=$("$boostlm" plan --help)
grep -qE -- "--global-batch INT:>=1 " <<< "$out" || fail "plan --help global batch: $out"
grep -qE -- "--global-batch[^ ]*=0" <<< "$out" && fail "plan --help shows --global-batch =0"

# Help everywhere: no flag renders a value ({false}), no required option a default, and no
# option checked to be at least 1 shows 0 as its default.
for command in prepare train eval init generate convert launch plan calibrate "bench layouts" \
               "bench ablations" "bench gemm" "bench step" "bench pipeline"; do
  out=$("$boostlm" $command --help 2>&1) || fail "$command --help: exit $?"
  grep -E '\{(false|true)\}|=[^ ]* REQUIRED|>=1=0|=\[\]' <<< "$out" |
    while read -r line; do echo "FAIL: $command --help: $line"; done | grep . && failures=$((failures + 1))
done

# 8: presets by name wherever a config is taken; init --vocab-size.
out=$("$boostlm" init -c tiny-cola --vocab-size 512 -o "$work/init-tiny" 2>&1) ||
  fail "init -c tiny-cola: $out"
grep -q '"vocab_size": 512' "$work/init-tiny/config.json" || fail "init --vocab-size not applied"
out=$("$boostlm" train -c tiny-cola --vocab-size 320 -d "$data" -o "$work/preset-run" -b 1 -t 16 \
      --steps 1 --eval-batches 1 2>&1) || fail "train -c tiny-cola: $out"
grep -q "boostlm train: cola .*configs/tiny-cola.json" <<< "$out" || fail "train -c tiny-cola: $out"
"$boostlm" plan -m tiny-cola --gpus 2 > /dev/null 2>&1 || fail "plan -m tiny-cola"
"$boostlm" plan -c 60m-cola --gpus 2 > /dev/null 2>&1 || fail "plan -c 60m-cola"
expect_error "unknown preset" "tiny-cola, tiny-dense" "$boostlm" init -c tiny-nope -o "$work/x"

# LaX (issue 48): --lax-gate and --lax-latent-act set the config's fields, for lax alone; a resume
# keeps the checkpoint's gate and refuses another.
out=$("$boostlm" train -c tiny-lax --vocab-size 320 -d "$data" -o "$work/lax-run" -b 1 -t 16 \
      --steps 1 --eval-batches 1 --lax-gate linear --lax-latent-act off 2>&1) ||
  fail "train -c tiny-lax --lax-gate linear: $out"
grep -q '"lax_gate": "linear"' "$work/lax-run/checkpoints/step_000001/config.json" &&
  grep -q '"lax_latent_act": false' "$work/lax-run/checkpoints/step_000001/config.json" ||
  fail "--lax-gate/--lax-latent-act not in the checkpoint's config"
expect_error "lax flags on cola" "are for arch lax; the model is cola" \
  "$boostlm" train -c tiny-cola --vocab-size 320 -d "$data" -o "$work/x" --lax-gate kron
expect_error "another gate on resume" "differ from the checkpoint" \
  "$boostlm" train -d "$data" -o "$work/lax-run" --resume "$work/lax-run" --steps 2 --lax-gate kron
expect_error "unknown gate" "--lax-gate: diagonal not in" \
  "$boostlm" train -c tiny-lax -d "$data" -o "$work/x" --lax-gate diagonal

# A run to evaluate, resume and export.
out=$("$boostlm" train -c "$work/cola.json" -d "$data" -o "$work/run" "${small[@]}" --steps 2 \
      --eval-batches 1 2>&1) || fail "train: $out"

# 6: the banner of a resume names the checkpoint's config instead of an empty name.
out=$("$boostlm" train -d "$data" -o "$work/run" --resume "$work/run" "${small[@]}" --steps 3 \
      --eval-batches 1 2>&1) || fail "resume: $out"
grep -q "boostlm train: cola (config of $work/run/checkpoints/step_000002)" <<< "$out" ||
  fail "resume banner: $(grep 'boostlm train:' <<< "$out")"

# 6: a config that does not match the checkpoint names the fields that differ, not both JSONs.
sed 's/"d_model": 32/"d_model": 64/' "$work/cola.json" > "$work/wide.json"
out=$("$boostlm" train -c "$work/wide.json" -d "$data" -o "$work/run2" --init-from "$work/run" \
      "${small[@]}" --steps 1 2>&1) && fail "a mismatched --config was accepted"
grep -qF "d_model 32 (checkpoint) vs 64 (--config $work/wide.json)" <<< "$out" ||
  fail "config mismatch message: $out"
grep -qF '{"arch"' <<< "$out" && fail "config mismatch prints a whole JSON: $out"

# 6: prepare names the flag as the command line spells it.
echo "one document only" > "$work/one.txt"
expect_error "one document" "--val-fraction 0" "$boostlm" prepare "$work/one.txt" -o "$work/one"

# 6: an output directory that cannot be made says what boostlm was doing, and which path.
touch "$work/file"
for what in "prepare:preparing the corpus into --out $work/file/out" \
            "train:creating the run directory --out $work/file/run" \
            "init:writing the checkpoint --out $work/file/ckpt" \
            "export:exporting $work/run to --out $work/file/hf"; do
  case ${what%%:*} in
    prepare) cmd=("$boostlm" prepare "$work/text.txt" -o "$work/file/out" --vocab-size 300) ;;
    train) cmd=("$boostlm" train -c "$work/cola.json" -d "$data" -o "$work/file/run" "${small[@]}" --steps 1) ;;
    init) cmd=("$boostlm" init -c "$work/cola.json" -o "$work/file/ckpt") ;;
    export) cmd=("$boostlm" convert --to-hf "$work/run" --out "$work/file/hf") ;;
  esac
  out=$("${cmd[@]}" 2>&1) && fail "${what%%:*} into a file's subdirectory succeeded"
  grep -qF "${what#*:}: Not a directory" <<< "$out" || fail "${what%%:*}: message: $out"
  grep -qF "filesystem error" <<< "$out" && fail "${what%%:*}: raw filesystem error: $out"
done

# 6: exported config.json writes floats at their declared precision.
"$boostlm" convert --to-hf "$work/run" --out "$work/hf" > /dev/null 2>&1 || fail "convert --to-hf"
grep -q '"rms_norm_eps": 1e-06,' "$work/hf/config.json" ||
  fail "rms_norm_eps: $(grep rms_norm_eps "$work/hf/config.json")"
ckpt=$work/run/checkpoints/$(cat "$work/run/checkpoints/latest")
grep -q '"rms_eps": 1e-06,' "$ckpt/config.json" || fail "rms_eps: $(grep rms_eps "$ckpt/config.json")"

# 7: more windows than the one val shard holds: a warning naming how many it holds, and those
# are scored.
val_tokens=$(python3 -c "import os,sys; print((os.path.getsize(sys.argv[1]) - 1024) // 2)" "$data/val_000000.bin")
held=$(((val_tokens - 1) / 32))
out=$("$boostlm" eval --checkpoint "$work/run" -d "$data" "${small[@]}" --eval-batches 100000 2>&1) ||
  fail "eval, too many windows: $out"
grep -qF "$data/val_000000.bin holds $val_tokens tokens: $held window(s) of 2x16+1, fewer than --eval-batches 100000" \
  <<< "$out" || fail "eval, too many windows: no warning: $out"
grep -q "\"batches\":$held," <<< "$out" || fail "eval, too many windows: JSON: $out"

# 7: several val shards (the same text and tokenizer, prepared in shards of 500 tokens) are read
# in order as one sequence of windows, none crossing a shard: --eval-batches past the first
# shard's windows goes on into the next, with no warning; the loss is the two shards' scored
# one at a time, weighted by their windows; the warning comes only when all the shards together
# hold fewer windows; and train's val loss is eval's on the same windows.
shards=$work/shards
"$boostlm" prepare "$work/text.txt" -o "$shards" --tokenizer "$data/tokenizer.model" \
  --val-fraction 0.1 --shard-tokens 500 > /dev/null 2>&1 || fail "prepare --shard-tokens 500"
# Per shard: its tokens and windows of 2x16+1 (floor((tokens - 1) / 32)).
read -r count w0 w1 total tokens holding last < <(python3 -c "
import glob, os, sys
paths = sorted(glob.glob(sys.argv[1] + '/val_*.bin'))
n = [(os.path.getsize(p) - 1024) // 2 for p in paths]
w = [(t - 1) // 32 for t in n]
print(len(n), w[0], w[1], sum(w), sum(n), sum(1 for x in w if x > 0), paths[-1])" "$shards")
((count >= 3 && w1 >= 2)) || fail "expected 3 or more val shards, the second with 2 windows: $count, $w1"
asked=$((w0 + 2))
out=$("$boostlm" eval --checkpoint "$work/run" -d "$shards" "${small[@]}" --eval-batches $asked 2>&1) ||
  fail "eval across two shards: $out"
grep -q "warning" <<< "$out" && fail "eval across two shards warns: $out"
first=$("$boostlm" eval --checkpoint "$work/run" -d "$shards/val_000000.bin" "${small[@]}" \
  --eval-batches "$w0" 2> /dev/null) || fail "eval of shard 0"
second=$("$boostlm" eval --checkpoint "$work/run" -d "$shards/val_000001.bin" "${small[@]}" \
  --eval-batches 2 2> /dev/null) || fail "eval of shard 1"
# The same fp32 window losses summed in double in another grouping: equal to a few roundings.
python3 -c "
import json, sys
j, a, b = (json.loads(x.splitlines()[-1]) for x in sys.argv[1:4])
w0, asked, d = int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
assert j['batches'] == asked and j['evaluated_tokens'] == asked * 32, j
assert j['shards'] == [d + '/val_000000.bin', d + '/val_000001.bin'] and j['data'] == d, j
assert a['batches'] == w0 and b['batches'] == 2, (a, b)
by_hand = (a['loss'] * w0 + b['loss'] * 2) / asked
assert abs(j['loss'] - by_hand) <= 1e-12 * abs(by_hand), (j['loss'], by_hand)
" "$out" "$first" "$second" "$w0" "$asked" "$shards" || fail "eval across two shards: $out"
out=$("$boostlm" eval --checkpoint "$work/run" -d "$shards" "${small[@]}" --eval-batches $((total + 5)) 2>&1) ||
  fail "eval, more windows than all the shards hold: $out"
grep -qF "the $count shards $shards/val_000000.bin ... $last hold $tokens tokens: $total window(s) of 2x16+1 (none crosses a shard), fewer than --eval-batches $((total + 5)); scoring those $total" \
  <<< "$out" || fail "eval, more windows than all the shards hold: no warning: $out"
python3 -c "
import json, sys
j = json.loads(sys.argv[1].splitlines()[-1])
assert j['batches'] == int(sys.argv[2]) and len(j['shards']) == int(sys.argv[3]), j
" "$out" "$total" "$holding" || fail "eval, more windows than all the shards hold: JSON: $out"
out=$("$boostlm" train -c "$work/cola.json" -d "$shards" -o "$work/shards-run" "${small[@]}" --steps 2 \
      --eval-batches $asked 2>&1) || fail "train on several val shards: $out"
grep -q "warning: .*eval-batches" <<< "$out" && fail "train across two val shards warns: $out"
out=$("$boostlm" eval --checkpoint "$work/shards-run" -d "$shards" "${small[@]}" --eval-batches $asked 2>&1) ||
  fail "eval of the run on several val shards: $out"
python3 -c "
import json, struct, sys
f32 = lambda x: struct.unpack('f', struct.pack('f', x))[0]
val = [json.loads(l)['val_loss'] for l in open(sys.argv[1]) if 'val_loss' in l]
loss = json.loads(sys.argv[2].splitlines()[-1])['loss']
assert len(val) == 1 and f32(val[0]) == f32(loss), (val, loss)
" "$work/shards-run/metrics.jsonl" "$out" || fail "train's val loss is not eval's on the same windows: $out"

# 7: eval --text scores every token (but the first) once: by default in sliding windows of -t
# advancing by half of it; --stride -t gives consecutive sequences of -t.
head -60 "$work/text.txt" > "$work/some.txt"
out=$("$boostlm" eval --checkpoint "$work/run" --text "$work/some.txt" -b 2 -t 16 2>&1) ||
  fail "eval --text: $out"
python3 -c "
import json, sys
j = json.loads(sys.argv[1].splitlines()[-1])
n = j['tokens'] - 1
assert j['evaluated_tokens'] == n and n > 2 * 16 * 3 and j['stride'] == 8, j
assert j['sequences'] == 1 + -(-(n - 16) // 8), j" "$out" || fail "eval --text: $out"
out=$("$boostlm" eval --checkpoint "$work/run" --text "$work/some.txt" -b 2 -t 16 --stride 16 2>&1) ||
  fail "eval --text --stride 16: $out"
python3 -c "
import json, sys
j = json.loads(sys.argv[1].splitlines()[-1])
assert j['evaluated_tokens'] == j['tokens'] - 1 and j['stride'] == 16, j
assert j['sequences'] == -(-(j['tokens'] - 1) // 16), j" "$out" || fail "eval --text --stride 16: $out"

# 8: eval -d takes the prepared directory (its val.bin) or a shard, with the same result.
loss_of() { "$boostlm" eval --checkpoint "$work/run" "$@" "${small[@]}" --eval-batches 2 2> /dev/null |
  python3 -c "import json,sys; print(json.loads(sys.stdin.read().splitlines()[-1])['loss'])"; }
by_dir=$(loss_of -d "$data") || fail "eval -d DIR"
by_shard=$(loss_of --data "$data/val_000000.bin") || fail "eval --data SHARD"
[[ -n "$by_dir" && "$by_dir" == "$by_shard" ]] || fail "eval -d DIR ($by_dir) != --data SHARD ($by_shard)"

# 8: the old spellings still work, with a one-line deprecation note.
deprecated() {  # deprecated OLD NEW command...
  local old=$1 new=$2; shift 2
  local out
  out=$("$@" 2>&1) || { fail "$old: exit $?: $out"; return; }
  grep -qxF "boostlm $2: warning: $old is deprecated, use $new" <<< "$out" ||
    fail "$old: no deprecation note: $out"
}
deprecated --batches --eval-batches "$boostlm" eval --checkpoint "$work/run" --data "$data/val_000000.bin" \
  "${small[@]}" --batches 2
deprecated -n --max-new-tokens "$boostlm" generate --checkpoint "$work/run" -p "Line" -n 3
deprecated --max-tokens --max-new-tokens "$boostlm" generate --checkpoint "$work/run" -p "Line" \
  --max-tokens 3
"$boostlm" init -c "$work/dense.json" -o "$work/dense" > /dev/null 2>&1 || fail "init dense"
deprecated --eval-data --data "$boostlm" convert --to svd --checkpoint "$work/dense" --attn-rank 4 \
  --mlp-rank 4 --eval-data "$data/val_000000.bin" "${small[@]}" --eval-batches 1 -o "$work/svd1"
deprecated --batches --eval-batches "$boostlm" convert --to svd --checkpoint "$work/dense" \
  --attn-rank 4 --mlp-rank 4 -d "$data" "${small[@]}" --batches 1 -o "$work/svd2"
out=$("$boostlm" generate --checkpoint "$work/run" -p "Line" --max-new-tokens 3 2>&1) ||
  fail "generate --max-new-tokens: $out"
grep -q "deprecated" <<< "$out" && fail "the new spelling warns: $out"
# The same defaults: convert's window is train's and eval's (8 x 256, 20 windows).
out=$("$boostlm" convert --help)
grep -qE -- "-b,--batch-size INT:>=1=8 " <<< "$out" && grep -qE -- "--eval-batches INT:>=1=20 " <<< "$out" ||
  fail "convert --help defaults: $out"

# Issue 37's messages: a share of 0 is refused where the flag is parsed, not after the work
# started; a --stride past -t is refused instead of silently clamped; no help prints a CLI11
# transformer's map ("{auto->0,...} OR {0,2,1}").
expect_error "--energy 0" "--energy: 0 is out of range: a number above 0 and at most 1" "$boostlm" convert --to svd \
  --checkpoint "$work/dense" --energy 0 -o "$work/e0"
expect_error "--top-p 0" "--top-p: 0 is out of range: a number above 0 and at most 1" "$boostlm" generate --checkpoint "$work/run" \
  -p "Line" --top-p 0
echo "Line 1 of the text, with words such as river, mountain." > "$work/eval.txt"
expect_error "--stride past -t" "--stride 40 is more than -t 16" "$boostlm" eval \
  --checkpoint "$work/run" --text "$work/eval.txt" -b 1 -t 16 --stride 40
for command in prepare train eval init generate convert launch plan calibrate "bench layouts" \
               "bench ablations" "bench gemm" "bench step" "bench pipeline" "bench tokenizer"; do
  out=$("$boostlm" $command --help 2>&1) || fail "$command --help: exit $?"
  grep -E -- '->|OR \{|ENUM' <<< "$out" && fail "$command --help shows a transformer's map"
done

finish "flag vocabulary, help, messages and eval windows checked"
