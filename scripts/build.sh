#!/usr/bin/env bash
# Configures and builds into build/ (binaries in build/bin/).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_TYPE="${BUILD_TYPE:-Release}"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" >/dev/null
# Two parallel jobs: LibTorch translation units take ~1.5 GB each to compile.
cmake --build build -j "${BUILD_JOBS:-2}"
