#!/usr/bin/env bash
# A Hugging Face model directory whose only tokenizer is a tokenizer.json (GPT-2's, written by
# tools/tokenizers/setup.sh from tiktoken's ranks) works end to end: convert --from-hf carries it
# (and its identity) into the checkpoint, generate and eval --text use it, init --tokenizer takes
# one, another tokenizer is refused. Skipped (77) when the reference tokenizers are not installed.
# Usage: test_tokenizer_json.sh path/to/boostlm path/to/tools/tokenizers
set -uo pipefail
boostlm=$1
tools=$2
if [[ ! -s $tools/gpt2/tokenizer.json ]]; then
  echo "skipped: $tools/gpt2/tokenizer.json missing (run tools/tokenizers/setup.sh)"
  exit 77
fi
source "$(dirname "$0")/lib.sh" tokenizer_json
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
cat > "$work/model.json" << JSON
{"arch": "dense", "vocab_size": 50304, "d_model": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2,
 "d_ff": 48, "max_seq_len": 64}
JSON
# An HF directory: a boostlm checkpoint exported, with GPT-2's tokenizer.json as its tokenizer.
"$boostlm" init -c "$work/model.json" -o "$work/init" > /dev/null || fail "init"
"$boostlm" convert --to-hf "$work/init" --out "$work/hf" > /dev/null || fail "convert --to-hf"
cp "$tools/gpt2/tokenizer.json" "$work/hf/tokenizer.json"
[[ ! -e $work/hf/tokenizer.model ]] || fail "the HF directory has a tokenizer.model"

"$boostlm" convert --from-hf "$work/hf" --out "$work/ckpt" > /dev/null || fail "convert --from-hf"
cmp -s "$tools/gpt2/tokenizer.json" "$work/ckpt/tokenizer.json" ||
  fail "the checkpoint does not carry the tokenizer.json"
grep -q '"tokenizer.json"' "$work/ckpt/checksums.json" || fail "checksums.json lacks tokenizer.json"

out=$("$boostlm" generate --checkpoint "$work/ckpt" -p "Hello world, this is" --max-new-tokens 4 \
  --temperature 0 2> "$work/generate.err") || fail "generate: $(cat "$work/generate.err")"
[[ $out == "Hello world, this is"* ]] || fail "generate does not print the prompt first: $out"

printf 'The quick brown fox jumps over the lazy dog. Naïve café, 日本語 😀\n\nAnother document.\n' \
  > "$work/text.txt"
json=$("$boostlm" eval --checkpoint "$work/ckpt" --text "$work/text.txt" -b 1 -t 16 | tail -1) ||
  fail "eval --text"
grep -q '"loss"' <<< "$json" || fail "eval --text printed no loss: $json"

# init --tokenizer takes a tokenizer.json; the HF directory read directly also works.
"$boostlm" init -c "$work/model.json" -o "$work/init2" --tokenizer "$tools/gpt2/tokenizer.json" \
  > /dev/null || fail "init --tokenizer tokenizer.json"
cmp -s "$tools/gpt2/tokenizer.json" "$work/init2/tokenizer.json" || fail "init did not copy it"

# Another tokenizer.json (one merge fewer: other ids) is refused by the identity check.
python3 - "$tools/gpt2/tokenizer.json" "$work/other.json" << 'PY'
import json, sys
t = json.load(open(sys.argv[1]))
t["model"]["merges"] = t["model"]["merges"][:-1]
del t["model"]["vocab"][max(t["model"]["vocab"], key=t["model"]["vocab"].get)]
json.dump(t, open(sys.argv[2], "w"))
PY
expect_error "eval --text with another tokenizer" "another tokenizer" \
  "$boostlm" eval --checkpoint "$work/ckpt" --text "$work/text.txt" -b 1 -t 16 \
  --tokenizer "$work/other.json"
finish "tokenizer.json: convert --from-hf, generate, eval --text and init carry and use it"
