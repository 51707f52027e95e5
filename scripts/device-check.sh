#!/usr/bin/env bash
# Validates the CUDA backend on a GPU machine that has no network and none of boostlm's Debian
# dependencies (issue 29), in two halves:
#
#   scripts/device-check.sh prepare [BUNDLE]
#       On a build machine (Debian 12 with /usr/local/cuda): builds boostlm and the CUDA tests with
#       the CUDA backend (sm_80 and sm_90) and copies them, with the libraries a GPU machine lacks
#       (oneDNN, Open MPI's, sentencepiece, libgomp; not glibc or libstdc++, not CUDA's), into
#       BUNDLE (default device-bundle/, git-ignored; it must stay under 60 MB to travel).
#   scripts/device-check.sh run [BUNDLE] [OUT]
#       On the GPU machine: finds CUDA's libraries (a toolkit's, or those inside PyTorch's wheels:
#       nvidia-cuda-runtime, nvidia-cublas, nvidia-nccl), runs the `cuda` tests (each kernel against
#       the CPU backend; the device collectives on 1 rank, and on 2 under mpirun where the machine
#       has one), compute-sanitizer's memcheck and racecheck over the device tests, and records what
#       `--device cuda` says; writes small tables to OUT (default device-check-out/) and prints
#       OUT/summary.md. Bounded to 8 minutes.
#
# With the `device` tool of these sessions: prepare here, then
#   run(command="scripts/device-check.sh run device-bundle $OUT", carry=["device-bundle"]).
# What this does not check yet, because the engine does not dispatch to the CUDA kernels: training
# steps, layouts and the benchmarks on the GPU (README, "The CUDA backend").
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
bundle=${2:-device-bundle}

prepare() {
  local build=${BUILD:-build}
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBOOSTLM_CUDA=ON > /dev/null || exit 1
  cmake --build "$build" -j "$(nproc)" --target boostlm boostlm_cuda_tests boostlm_comm_cuda_tests \
    || exit 1
  rm -rf "$bundle"
  mkdir -p "$bundle/bin" "$bundle/lib"
  cp "$build/boostlm" "$build/tests/kernels/cuda/boostlm_cuda_tests" \
    "$build/tests/comm/boostlm_comm_cuda_tests" "$bundle/bin/"
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
  local mb
  mb=$(du -sm "$bundle" | cut -f1)
  echo "device-check: bundle $bundle: ${mb} MB ($(ls "$bundle/lib" | wc -l) libraries), commit $(head -1 "$bundle/COMMIT")"
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

run() {
  local out=${3:-device-check-out}
  local deadline=$((SECONDS + 480))
  mkdir -p "$out"
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

  comm_tests "$out" "$summary"

  # 2. compute-sanitizer over the device tests: memcheck and racecheck, error counts.
  local sanitizer
  sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2> /dev/null)
  local tool
  for tool in memcheck racecheck; do
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

  # 3. What --device cuda says (refused with its reason until the engine dispatches to the GPU).
  "$bundle/bin/boostlm" bench step --device cuda > "$out/device_cuda.txt" 2>&1
  echo "| boostlm --device cuda (exit $?) | $(head -1 "$out/device_cuda.txt" | cut -c1-160) |" >> "$summary"
  echo >> "$summary"
  echo "Not run yet (the engine does not dispatch to the CUDA kernels): training steps, the layouts, bench step/PyTorch on the GPU." >> "$summary"
  cat "$summary"
}

case $mode in
  prepare) prepare ;;
  run) run "$@" ;;
  *)
    echo "usage: scripts/device-check.sh prepare [BUNDLE] | run [BUNDLE] [OUT]" >&2
    exit 2
    ;;
esac
