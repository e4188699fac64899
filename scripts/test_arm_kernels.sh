#!/usr/bin/env bash
# The ARM (NEON dot-product) kernels, checked on this x86 machine: builds the
# LibTorch-free kernels and linear_check for AArch64 with Debian's cross
# compiler and runs it under QEMU's user-mode emulation with every ARMv8
# feature on. Each body must reproduce linear_reference() bit for bit, as on
# x86 (tests/linear_check.cpp). Part of the test suite (ctest).
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in aarch64-linux-gnu-g++ qemu-aarch64; do
  command -v "$tool" >/dev/null || { echo "test_arm_kernels: $tool missing; scripts/setup.sh installs it" >&2; exit 1; }
done
out="${1:-build/aarch64}"
cmake -S . -B "$out" -G Ninja -DSPLITSPEC_KERNELS_ONLY=ON -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE="$PWD/scripts/aarch64-toolchain.cmake" >/dev/null
cmake --build "$out" --target linear_check >/dev/null
qemu-aarch64 -cpu max -L /usr/aarch64-linux-gnu "$out/bin/linear_check"
