#!/usr/bin/env bash
# Installs node-llama-cpp (llama.cpp for Node.js), pinned, with its prebuilt linux-x64 CPU binary,
# from the npm registry into a folder of this project (default tools/llama_cpp/.deps; or
# $BOOSTLM_LLAMA_CPP_DEPS). Nothing else is fetched: the package's install script (which may
# download llama.cpp's sources from GitHub or build them) is not run, the GPU variants (optional
# dependencies) are not installed, and llama_eval.mjs loads the prebuilt binary with building
# disabled. Idempotent: an install of the pinned versions is kept.
#
# Needs Node.js >= 20 (node-llama-cpp's engines field) and npm. Exits 77 with the reason when
# they are missing, 1 when the install fails. Prints the deps folder on success.
set -euo pipefail
version=3.21.1
deps=${BOOSTLM_LLAMA_CPP_DEPS:-$(cd "$(dirname "$0")" && pwd)/.deps}

if ! command -v node > /dev/null || ! command -v npm > /dev/null; then
  echo "llama_cpp/install.sh: node and npm are needed (node-llama-cpp $version runs on Node.js)" >&2
  exit 77
fi
node_major=$(node -p 'process.versions.node.split(".")[0]')
if ((node_major < 20)); then
  echo "llama_cpp/install.sh: node-llama-cpp $version needs Node.js >= 20; this is $(node --version)" >&2
  exit 77
fi
installed() {
  local package=$1
  [[ -f $deps/node_modules/$package/package.json ]] &&
    [[ $(node -p "require('$deps/node_modules/$package/package.json').version") == "$version" ]]
}
if ! installed node-llama-cpp || ! installed @node-llama-cpp/linux-x64; then
  mkdir -p "$deps"
  NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm install --prefix "$deps" --no-audit --no-fund \
    --loglevel=error --omit=optional --ignore-scripts \
    "node-llama-cpp@$version" "@node-llama-cpp/linux-x64@$version" >&2
fi
installed node-llama-cpp && installed @node-llama-cpp/linux-x64 ||
  { echo "llama_cpp/install.sh: node-llama-cpp $version did not install into $deps" >&2; exit 1; }
echo "$deps"
