#!/usr/bin/env bash
# Cross-builds the client for 64-bit ARM (a Jetson-class robot) with Debian's
# g++-aarch64-linux-gnu: libsplitspec, its header and CMake package, the
# Python module for Debian's arm64 python3.11, the splitspec CLI and the
# LibTorch-free tests; then its arm64 .deb packages (libsplitspec,
# python3-splitspec, splitspec).
#
#   scripts/build_aarch64_client.sh [BUILD_DIR]   (default build/aarch64-client)
#
# The arm64 libraries come from scripts/aarch64_sysroot.sh, which this runs
# first; the packages land in BUILD_DIR/debs. Incremental on a second run.
# A unity build (16 sources a compile): a clean cross build, as the suite's
# Package.Aarch64ClientUnderQemu makes from a fresh clone, takes half the
# compiler time; two file-local helpers of the same name in one target then
# fail here, loudly, rather than anywhere else.
set -euo pipefail
cd "$(dirname "$0")/.."
out="$(realpath -m "${1:-build/aarch64-client}")"
sysroot="$(realpath -m build/aarch64-sysroot)"
for tool in aarch64-linux-gnu-g++ cmake ninja dpkg-deb; do
  command -v "$tool" >/dev/null || { echo "build_aarch64_client: $tool missing; scripts/setup.sh installs it" >&2; exit 1; }
done

scripts/aarch64_sysroot.sh "$sysroot"
cmake -S . -B "$out" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE="$PWD/scripts/aarch64-toolchain.cmake" -DSPLITSPEC_AARCH64_SYSROOT="$sysroot" \
  -DSPLITSPEC_CLIENT_ONLY=ON -DBUILD_TESTING=ON -DSPLITSPEC_TEST_MATERIAL_ROOT="$PWD/build" \
  -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=16 >"$out.configure.log" 2>&1 ||
  { cat "$out.configure.log"; exit 1; }
cmake --build "$out" >"$out.build.log" 2>&1 || { tail -50 "$out.build.log"; exit 1; }
rm -rf "$out/debs"
(cd "$out" && cpack -G DEB -B "$out/debs" >"$out.cpack.log" 2>&1) || { tail -40 "$out.cpack.log"; exit 1; }
rm -rf "$out/debs/_CPack_Packages"
echo "build_aarch64_client: $out (packages in $out/debs)"
