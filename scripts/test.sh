#!/usr/bin/env bash
# The full test suite from a fresh machine: install, build, run ctest.
#   ./scripts/test.sh          everything, as CI runs it
#   ./scripts/test.sh --quick  on a built tree: builds what changed and runs
#                              the unit and integration tiers (ctest -L)
set -euo pipefail
cd "$(dirname "$0")/.."
tiers=()
case "${1:-}" in
  "") ;;
  --quick) tiers=(-L '^(unit|integration)$') ;;
  *) echo "usage: $0 [--quick]" >&2; exit 2 ;;
esac
if [[ ${#tiers[@]} -gt 0 && -f build/build.ninja ]]; then
  # Installed and configured before: CMake reconfigures itself where a
  # CMakeLists changed, and only what changed is compiled.
  cmake --build build -j "${BUILD_JOBS:-2}"
else
  ./scripts/setup.sh
  ./scripts/build.sh
  # llama.cpp's tokenizer vectors, vocabularies and library: the reference of
  # the tokenizer and model-family tests.
  ./scripts/setup_test_material.sh
fi
cd build
ctest --output-on-failure -j "${TEST_JOBS:-2}" --timeout 600 "${tiers[@]}"
