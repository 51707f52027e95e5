#!/usr/bin/env bash
# Installs every build and runtime dependency of boostlm from Debian 12's packages.
# Idempotent: packages already present are skipped by apt.
#   scripts/setup.sh [--slurm]
# --slurm adds Debian's Slurm and munge, for scripts/slurm.sh and its tests (a machine that only
# trains does not need a scheduler's daemons; on a machine with systemd, installing them starts
# munge).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config python3
  ccache                           # scripts/test.sh: build-emu/ reuses build/'s host objects
  libdnnl-dev ocl-icd-opencl-dev   # oneDNN (its CMake config needs OpenCL headers)
  libopenmpi-dev openmpi-bin       # MPI (not MPICH: it collapses when ranks exceed cores)
  libsentencepiece-dev sentencepiece
  libpcre2-dev libicu-dev           # tokenizer.json: the pre-tokenizer regex (PCRE2), NFC (ICU)
  zlib1g-dev libzstd-dev           # prepare reads gzip- and zstd-compressed corpora
  libcli11-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3-torch libopenblas0-openmp  # the PyTorch oracle (tools/torch); OpenBLAS for its fp32 GEMMs
  gnuplot-nox                      # `boostlm plot` and scripts/results.sh draw with gnuplot
  protobuf-compiler python3-protobuf  # readers of the TensorBoard event files in the tests
  clang-14 libclang-rt-14-dev      # the fuzz targets (tests/fuzz): clang's libFuzzer and sanitizers
)

case ${1:-} in
  --slurm) packages+=(slurm-wlm munge) ;;  # slurmctld, slurmd and the client commands
  "") ;;
  *) echo "usage: setup.sh [--slurm]" >&2; exit 2 ;;
esac

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo_cmd=""
  [[ $(id -u) -ne 0 ]] && sudo_cmd="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
echo "setup: all dependencies installed"
