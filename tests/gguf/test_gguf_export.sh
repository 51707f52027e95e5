#!/usr/bin/env bash
# `convert --to-gguf` read back by an independent reader (gguf_reader.py: the GGUF v3 file parsed
# with Python's struct, the checkpoint's safetensors and tokenizer.model parsed on their own): every
# key and every tensor of dense (MHA, untied), svd (multiplied out) and a GQA model with tied
# embeddings, in f32, f16, bf16 and q8_0, equal to the checkpoint's (bytes exact, svd products
# within rounding); a flipped byte or a wrong key is caught; what cannot be exported is refused
# with its reason; eval --per-token's log-probabilities average to minus its loss.
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
"$boostlm" init -c tiny-dense --vocab-size 320 -o "$work/no_tokenizer" > /dev/null
expect_error "no tokenizer" "has no tokenizer.model, and a GGUF file must embed" \
  "$boostlm" convert --to-gguf "$work/no_tokenizer" --out "$work/x.gguf"
cp -r "$work/no_tokenizer" "$work/bpe" && echo '{}' > "$work/bpe/tokenizer.json"
expect_error "byte-level BPE" "GGUF export embeds SentencePiece tokenizers only for now" \
  "$boostlm" convert --to-gguf "$work/bpe" --out "$work/x.gguf"
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
