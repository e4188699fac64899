#!/usr/bin/env bash
# The full test suite from a fresh machine: install, build, run ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
# llama.cpp's tokenizer vectors, vocabularies and library: the reference of the
# tokenizer and model-family tests.
./scripts/setup_test_material.sh
cd build
ctest --output-on-failure -j "${TEST_JOBS:-2}" --timeout 600
