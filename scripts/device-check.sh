#!/usr/bin/env bash
# Validates the CUDA backend on a GPU machine that has no network and none of boostlm's Debian
# dependencies (issue 29), in two halves:
#
#   scripts/device-check.sh prepare [BUNDLE]
#       On a build machine (Debian 12 with /usr/local/cuda): builds boostlm and the CUDA tests with
#       the CUDA backend (sm_80 and sm_90) and copies them, with the libraries a GPU machine lacks
#       (oneDNN, Open MPI's, sentencepiece, libgomp; not glibc or libstdc++, not CUDA's), into
#       BUNDLE (default device-bundle/, git-ignored), and packs it as BUNDLE.tar.xz, which must
#       stay under 60 MB to travel.
#   scripts/device-check.sh run [BUNDLE or BUNDLE.tar.xz] [OUT]
#       On the GPU machine: finds CUDA's libraries (a toolkit's, or those inside PyTorch's wheels:
#       nvidia-cuda-runtime, nvidia-cublas, nvidia-nccl), runs the `cuda` tests (each kernel against
#       the CPU backend; the device collectives on 1 rank, and on 2 under mpirun where the machine
#       has one), the engine on the GPU (a tiny CoLA model trained with `--device cuda` in fp32 and
#       bf16 beside `--device cpu`, eval and generation), then compute-sanitizer's memcheck and
#       racecheck over the device tests with the time left; writes small tables to OUT (default
#       device-check-out/) and prints OUT/summary.md. Bounded to 8 minutes.
#
# With the `device` tool of these sessions: prepare here, then
#   run(command="scripts/device-check.sh run device-bundle.tar.xz $OUT", carry=["device-bundle.tar.xz"]).
# It also runs the mma/ldmatrix ISA-table tests, prints the attention kernels' rate and times the
# 1B CoLA's step at sequence 4096 beside its prediction (issue 47).
# Not checked yet: the layouts on several GPUs (one GPU here), the other benchmarks on the GPU.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
mode=${1:-}
bundle=${2:-device-bundle}

prepare() {
  local build=${BUILD:-build}
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBOOSTLM_CUDA=ON > /dev/null || exit 1
  cmake --build "$build" -j "$(nproc)" --target boostlm boostlm_cuda_tests \
    boostlm_cuda_backend_tests boostlm_comm_cuda_tests boostlm_mma_tests || exit 1
  rm -rf "$bundle"
  mkdir -p "$bundle/bin" "$bundle/lib"
  cp "$build/boostlm" "$build/tests/kernels/cuda/boostlm_cuda_tests" \
    "$build/tests/kernels/cuda/boostlm_cuda_backend_tests" \
    "$build/tests/kernels/cuda/boostlm_mma_tests" \
    "$build/tests/comm/boostlm_comm_cuda_tests" "$bundle/bin/"
  # The step's predicted cost (bench step --device cuda on the emulated device), set beside the
  # measured one: on an H200 as the README's table (results/), and priced on each GPU file the
  # lent machine may be (hardware/h100-sxm.json, h200.json) where the emulated build is here.
  cp results/device-step-1b-4096.json "$bundle/" 2> /dev/null
  local emu=${BUILD_EMU:-build-emu} hw
  if [ -x "$emu/boostlm" ]; then
    for hw in h100-sxm h200; do
      "$emu/boostlm" bench step --device cuda --count-only --shape 1b --arch cola --precision bf16 \
        -b 1 -t 4096 --hardware "$hw" --json "$bundle/device-step-1b-4096-$hw.json" > /dev/null ||
        echo "device-check: no $hw prediction (bench step --count-only failed)" >&2
    done
  fi
  cp "$0" "$bundle/"
  # The libraries a GPU machine's image lacks: everything the binaries load but the C and C++
  # runtimes (a newer image has newer ones) and CUDA's (found there, in the toolkit or the wheels).
  ldd "$bundle"/bin/* | awk '$3 ~ /^\// {print $3}' | sort -u | while read -r lib; do
    case $(basename "$lib") in
      libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libstdc++.so*|libgcc_s.so*|ld-linux*) ;;
      libcuda*|libcublas*|libcudnn*|libnccl*|libnvrtc*|libnvJitLink*) ;;
      *) cp -L "$lib" "$bundle/lib/" ;;
    esac
  done
  git rev-parse HEAD > "$bundle/COMMIT"
  git status --porcelain | grep -q . && echo "(with uncommitted changes)" >> "$bundle/COMMIT"
  # It travels compressed (xz): the folder is over 100 MB (oneDNN, ICU's data, the kernels' cubins).
  tar -C "$(dirname "$bundle")" -cf - "$(basename "$bundle")" | xz -T0 -6 > "$bundle.tar.xz" || exit 1
  local mb
  mb=$(du -sm "$bundle.tar.xz" | cut -f1)
  echo "device-check: bundle $bundle.tar.xz: ${mb} MB compressed, $(du -sm "$bundle" | cut -f1) MB" \
    "($(ls "$bundle/lib" | wc -l) libraries), commit $(head -1 "$bundle/COMMIT")"
  if ((mb >= 60)); then echo "device-check: the bundle is over 60 MB" >&2; exit 1; fi
}

# The folders holding CUDA's runtime and cuBLASLt on this machine, for LD_LIBRARY_PATH.
cuda_library_path() {
  local dirs=() d
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/nvidia/lib64; do
    [ -d "$d" ] && dirs+=("$d")
  done
  # PyTorch's wheels carry them under site-packages/nvidia/*/lib.
  local py
  for py in python3 /opt/torch/.venv/bin/python3; do
    command -v "$py" > /dev/null || continue
    while read -r d; do [ -n "$d" ] && dirs+=("$d"); done < <("$py" - << 'PY' 2> /dev/null
import glob, os, site
roots = site.getsitepackages() + [site.getusersitepackages()]
for root in roots:
    for lib in sorted(glob.glob(os.path.join(root, "nvidia", "*", "lib"))):
        print(lib)
PY
)
  done
  local IFS=:
  echo "${dirs[*]}"
}

# "P passed, F failed, S skipped" from a gtest output file (one line per test, ending in its time).
gtest_tally() {
  echo "$(grep -c '^\[       OK \] .* ms)$' "$1") passed, $(grep -c '^\[  FAILED  \] .* ms)$' "$1") failed, $(grep -c '^\[  SKIPPED \] .* ms)$' "$1") skipped"
}

# 1b. Device collectives (comm/cuda_transport.h): in one process NCCL on one rank, the watchdog's
# ncclCommAbort on a hung collective, and the staged copies; then two ranks sharing the GPU over the
# staged path (NCCL too where two GPUs are visible) under mpirun with the launcher's settings
# (cli/launch.cpp), where this machine has an mpirun (Open MPI is not in the bundle: its plugins and
# PMIx would not fit the 60 MB).
comm_tests() {
  local out=$1 summary=$2 bin=$bundle/bin/boostlm_comm_cuda_tests
  [ -x "$bin" ] || { echo "| comm cuda tests | not in the bundle |" >> "$summary"; return; }
  timeout 120 "$bin" --gtest_filter='CommCuda*' --gtest_color=no > "$out/comm_cuda_tests.txt" 2>&1
  echo "| comm cuda tests, 1 rank (exit $?) | $(gtest_tally "$out/comm_cuda_tests.txt") |" >> "$summary"
  local mpirun
  mpirun=$(command -v mpirun)
  if [ -z "$mpirun" ]; then
    echo "| comm cuda tests, 2 ranks | not run: no mpirun on this machine |" >> "$summary"
    return
  fi
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 120 "$mpirun" -n 2 \
    --oversubscribe --bind-to none --mca btl tcp,vader,self --mca orte_abort_on_non_zero_status 1 \
    -x LD_LIBRARY_PATH -x OMP_NUM_THREADS=1 "$bin" --gtest_filter='CommCuda*' --gtest_color=no \
    > "$out/comm_cuda_np2.txt" 2>&1
  echo "| comm cuda tests, 2 ranks (exit $?) | $(gtest_tally "$out/comm_cuda_np2.txt") (rank 0) |" >> "$summary"
}

# The engine on the GPU (--device cuda): a tiny corpus prepared on the CPU, a CoLA model trained
# 4 steps with btp in fp32 and bf16 on each device (final losses side by side: the GPU's kernels sum
# in other orders, so close, not equal), eval and greedy generation from the fp32 checkpoints.
engine_check() {
  local out=$1 b=$bundle/bin/boostlm w=$1/engine i dev prec
  mkdir -p "$w"
  for i in $(seq 1 300); do
    echo "Line $i of the text, with words such as river, mountain, $((i * 13)) and sky."
    echo
  done > "$w/text.txt"
  echo "| engine check | cpu | cuda |"
  echo "|---|---|---|"
  if ! "$b" prepare "$w/text.txt" -o "$w/data" --vocab-size 300 --val-fraction 0.1 > "$w/prepare.txt" 2>&1; then
    echo "| prepare (on the CPU) | failed: $(tail -1 "$w/prepare.txt") | |"
    return
  fi
  cat > "$w/cola.json" << 'JSON'
{"arch": "cola", "vocab_size": 320, "d_model": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2,
 "d_ff": 96, "attn_rank": 16, "mlp_rank": 16, "max_seq_len": 64}
JSON
  loss() { grep -o '"train_loss":[^,}]*' "$1" 2> /dev/null | tail -1 | cut -d: -f2; }
  for prec in fp32 bf16; do
    for dev in cpu cuda; do
      timeout 90 "$b" train --device "$dev" -c "$w/cola.json" -d "$w/data" -t 32 -b 4 --steps 4 \
        --precision "$prec" --eval-interval 0 --eval-batches 1 -o "$w/run-$dev-$prec" \
        > "$w/train-$dev-$prec.out" 2> "$w/train-$dev-$prec.log" ||
        echo "train --device $dev --precision $prec: exit $?: $(tail -2 "$w/train-$dev-$prec.log")" >> "$out/notes.txt"
    done
    echo "| train 4 steps, $prec, final loss | $(loss "$w/train-cpu-$prec.out") | $(loss "$w/train-cuda-$prec.out") |"
  done
  for dev in cpu cuda; do
    timeout 60 "$b" eval --device "$dev" --checkpoint "$w/run-cpu-fp32" -d "$w/data" -b 2 -t 32 \
      --eval-batches 2 > "$w/eval-$dev.out" 2> "$w/eval-$dev.log"
    timeout 60 "$b" generate --device "$dev" --checkpoint "$w/run-cpu-fp32" --prompt "Line 3 of" \
      --max-new-tokens 12 > "$w/generate-$dev.out" 2> "$w/generate-$dev.log"
  done
  echo "| eval of the cpu fp32 checkpoint | $(grep -o '"loss":[^,}]*' "$w/eval-cpu.out") | $(grep -o '"loss":[^,}]*' "$w/eval-cuda.out" || tail -1 "$w/eval-cuda.log" | cut -c1-120) |"
  echo "| greedy generation, 12 tokens | $(tr '\n' ' ' < "$w/generate-cpu.out" | cut -c1-60) | $(tr '\n' ' ' < "$w/generate-cuda.out" | cut -c1-60) $(tail -1 "$w/generate-cuda.log" | cut -c1-100) |"
}

# Checkpoints on the GPU (issue 46): a CoLA model of 40M parameters trained 6 steps with --device
# cuda, saving every 2 steps, with --async-save on and off (each save's stall from metrics.jsonl:
# the copy of the shard to host memory, or the whole save), then resumed from step 4 to the end:
# the same final loss as the run straight through.
checkpoint_check() {
  local out=$1 b=$bundle/bin/boostlm w=$1/engine mode
  [ -d "$w/data" ] || return
  cat > "$w/mid.json" << 'JSON'
{"arch": "cola", "vocab_size": 320, "d_model": 1024, "n_layers": 8, "n_heads": 16, "n_kv_heads": 16,
 "d_ff": 2736, "attn_rank": 256, "mlp_rank": 256, "max_seq_len": 64}
JSON
  echo
  echo "| checkpoints on the GPU (40M-parameter CoLA, 6 steps, a save every 2) | result |"
  echo "|---|---|"
  for mode in on off; do
    timeout 150 "$b" train --device cuda -c "$w/mid.json" -d "$w/data" -t 32 -b 4 --steps 6 \
      --save-interval 2 --async-save $mode --eval-interval 0 --eval-batches 1 -o "$w/ckpt-$mode" \
      > "$w/ckpt-$mode.out" 2> "$w/ckpt-$mode.log" ||
      echo "train --async-save $mode: exit $?: $(tail -2 "$w/ckpt-$mode.log")" >> "$out/notes.txt"
    echo "| --async-save $mode: stall ms of the saves at steps 2, 4, 6; save ms (begin to commit) | $(python3 - "$w/ckpt-$mode/metrics.jsonl" << 'PY' 2>&1 | tail -1
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
stall = ["%.1f" % l["save"]["stall_ms"] for l in lines if "save" in l]
total = ["%.0f" % c["total_ms"] for l in lines for c in l.get("save_committed", [])]
print("stall " + ", ".join(stall) + "; save " + ", ".join(total))
PY
) |"
  done
  timeout 150 "$b" train --device cuda --resume "$w/ckpt-on/checkpoints/step_000004" \
    -d "$w/data" -o "$w/ckpt-resumed" > "$w/ckpt-resumed.out" 2> "$w/ckpt-resumed.log" ||
    echo "train --resume: exit $?: $(tail -2 "$w/ckpt-resumed.log")" >> "$out/notes.txt"
  local straight resumed
  straight=$(grep -o '"train_loss":[^,}]*' "$w/ckpt-on.out" | tail -1 | cut -d: -f2)
  resumed=$(grep -o '"train_loss":[^,}]*' "$w/ckpt-resumed.out" | tail -1 | cut -d: -f2)
  echo "| final loss straight through / resumed from step 4 | $straight / $resumed |"
}

run() {
  local out=${3:-device-check-out}
  local deadline=$((SECONDS + 480))
  mkdir -p "$out"
  if [[ -f $bundle && $bundle == *.tar.xz ]]; then  # what prepare wrote: unpacked beside OUT
    local into
    into=$(mktemp -d)
    tar -C "$into" -xJf "$bundle" || { echo "device-check: cannot unpack $bundle" >&2; exit 1; }
    bundle=$(ls -d "$into"/*/ | head -1)
    bundle=${bundle%/}
  fi
  [ -x "$bundle/bin/boostlm_cuda_tests" ] || { echo "device-check: no bundle at $bundle (run prepare first)" >&2; exit 1; }
  export LD_LIBRARY_PATH="$(realpath "$bundle/lib"):$(cuda_library_path)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-8}
  local summary=$out/summary.md
  {
    echo "# device-check $(date -u +%Y-%m-%dT%H:%MZ), commit $(head -1 "$bundle/COMMIT" 2> /dev/null)"
    echo
    echo "GPU: $(nvidia-smi -L 2> /dev/null | head -1 || echo 'nvidia-smi not found')"
    echo "driver: $(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2> /dev/null | head -1)"
    echo
  } > "$summary"
  local missing
  missing=$(ldd "$bundle"/bin/* 2> /dev/null | grep "not found" | awk '{print $1}' | sort -u | tr '\n' ' ')
  [ -z "$missing" ] || echo "missing libraries: $missing" >> "$summary"

  # 1. The cuda tests: every kernel against the CPU backend (they skip, saying why, without a GPU).
  timeout 240 "$bundle/bin/boostlm_cuda_tests" --gtest_output="xml:$out/cuda_tests.xml" \
    > "$out/cuda_tests.txt" 2>&1
  local code=$?
  local passed failed skipped
  # One line per test, ending in its time: "[       OK ] Suite.Name (12 ms)".
  passed=$(grep -c '^\[       OK \] .* ms)$' "$out/cuda_tests.txt")
  failed=$(grep -c '^\[  FAILED  \] .* ms)$' "$out/cuda_tests.txt")
  skipped=$(grep -c '^\[  SKIPPED \] .* ms)$' "$out/cuda_tests.txt")
  {
    echo "| check | result |"
    echo "|---|---|"
    echo "| cuda tests (exit $code) | $passed passed, $failed failed, $skipped skipped |"
  } >> "$summary"
  grep -m1 "no GPU" "$out/cuda_tests.txt" | sed 's/^/  skip reason: /' >> "$out/notes.txt"
  # The GPU's measured GEMM rates (CudaGemm.MeasuresTheGemmRate), what MFU is measured against.
  grep -E '^(fp32|bf16) GEMM 2048\^3: ' "$out/cuda_tests.txt" | sed 's/^/| /; s/: / | /; s/$/ |/' >> "$summary"
  # The backend as the engine starts it: MFU's GEMM rate and the GEMM counters in device time.
  timeout 120 "$bundle/bin/boostlm_cuda_backend_tests" > "$out/cuda_backend_tests.txt" 2>&1
  echo "| cuda backend tests (exit $?) | $(grep -m1 -E 'PASSED|FAILED' "$out/cuda_backend_tests.txt") |" >> "$summary"

  # The tensor-core instructions against the PTX ISA's fragment tables, on the hardware.
  timeout 60 "$bundle/bin/boostlm_mma_tests" > "$out/mma_tests.txt" 2>&1
  echo "| mma/ldmatrix ISA-table tests (exit $?) | $(grep -m1 -E 'PASSED|FAILED' "$out/mma_tests.txt") |" >> "$summary"
  # The attention kernels' rate (CudaAttention.MeasuresTheAttentionRate, part of the cuda tests).
  grep '^attention ' "$out/cuda_tests.txt" | sed 's/^/| /; s/: / | /; s/$/ |/' >> "$summary"

  comm_tests "$out" "$summary"
  speed_check "$out" >> "$summary"
  engine_check "$out" > "$out/engine.md"
  checkpoint_check "$out" >> "$out/engine.md"

  # 2. compute-sanitizer over the device tests: memcheck and racecheck, error counts.
  local sanitizer
  sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2> /dev/null)
  local tool
  # SANITIZERS="" skips them (a short check of the engine alone).
  for tool in ${SANITIZERS-memcheck racecheck}; do
    local left=$((deadline - SECONDS))
    if [ -z "$sanitizer" ]; then
      echo "| compute-sanitizer $tool | not found |" >> "$summary"
      continue
    fi
    ((left > 20)) || { echo "| compute-sanitizer $tool | no time left |" >> "$summary"; continue; }
    timeout $((left < 150 ? left : 150)) "$sanitizer" --tool "$tool" \
      "$bundle/bin/boostlm_cuda_tests" --gtest_filter='Cuda*' > "$out/$tool.txt" 2>&1
    echo "| compute-sanitizer $tool (exit $?) | $(grep -m1 'ERROR SUMMARY' "$out/$tool.txt" || tail -1 "$out/$tool.txt") |" >> "$summary"
  done

  echo >> "$summary"
  cat "$out/engine.md" >> "$summary"
  cat "$summary"
}

# The 1B CoLA's training step on the GPU at sequence 4096 (bf16, batch 1): measured step time and
# MFU beside what the emulated device's counters predicted (results/device-step-1b-4096.json), with
# CUDA graphs and without, and a 60m CoLA's, where launch gaps weigh most.
speed_check() {
  local out=$1 b=$bundle/bin/boostlm
  timeout 150 "$b" bench step --device cuda --shape 1b --arch cola --precision bf16 -b 1 -t 4096 \
    --steps 3 --warmup 1 > "$out/step_1b.txt" 2>&1
  echo "| 1b-cola bf16 step, seq 4096 (exit $?) | $(grep -m1 '^cola ' "$out/step_1b.txt") |"
  # The same step with every kernel launched from the host (issue 47: the graphs' gain measured).
  timeout 150 "$b" bench step --device cuda --shape 1b --arch cola --precision bf16 -b 1 -t 4096 \
    --steps 3 --warmup 1 --cuda-graph off > "$out/step_1b_nograph.txt" 2>&1
  echo "| the same, --cuda-graph off (exit $?) | $(grep -m1 '^cola ' "$out/step_1b_nograph.txt") |"
  # A small model, where launch gaps dominate: 60m CoLA at seq 1024, graphs on and off.
  local g
  for g in on off; do
    timeout 100 "$b" bench step --device cuda --shape 60m --arch cola --precision bf16 -b 4 -t 1024 \
      --steps 5 --warmup 2 --cuda-graph "$g" > "$out/step_60m_graph_$g.txt" 2>&1
    echo "| 60m-cola bf16 step, b 4 x 1024, --cuda-graph $g (exit $?) | $(grep -m1 '^cola ' "$out/step_60m_graph_$g.txt") |"
  done
  # The prediction for this GPU where prepare priced it (an H100 or an H200), else the H200's.
  local hw=h200 gpu
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2> /dev/null | head -1)
  case $gpu in *H100*) hw=h100-sxm ;; esac
  local file=$bundle/device-step-1b-4096-$hw.json
  [ -f "$file" ] || { hw=h200; file=$bundle/device-step-1b-4096.json; }
  if [ -f "$file" ]; then
    local predicted
    predicted=$(grep -o '"predicted_step_s": *[0-9.e-]*' "$file" | head -1 |
      awk '{printf "%.1f ms", $2 * 1000}')
    echo "| predicted for ${gpu:-this GPU} (emulated counters, $hw.json) | $predicted |"
  fi
}

case $mode in
  prepare) prepare ;;
  run) run "$@" ;;
  *)
    echo "usage: scripts/device-check.sh prepare [BUNDLE] | run [BUNDLE] [OUT]" >&2
    exit 2
    ;;
esac
