#!/usr/bin/env bash
# The full test suite from a fresh machine: install, build, run ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
cd build
ctest --output-on-failure -j "${TEST_JOBS:-2}" --timeout 600
