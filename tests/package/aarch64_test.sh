#!/usr/bin/env bash
# The robot's client on 64-bit ARM, under QEMU's user-mode emulation
# (registered in tests/CMakeLists.txt as Package.Aarch64ClientUnderQemu):
#   1. scripts/build_aarch64_client.sh cross-builds the client (library, CLI,
#      Python module, LibTorch-free tests) and its arm64 .deb packages;
#   2. the NEON kernels equal the reference bit for bit (linear_check), and
#      the tokenizer tests pass;
#   3. the arm64 CLI generates the ids this machine's build generates in the
#      local modes: chain, tree, a target streamed under a memory budget, and
#      K-quant weights, greedy and sampled;
#   4. the arm64 packages declare arm64 and their dependencies; unpacked into
#      a scratch root, client/examples cross-builds against them with
#      find_package(SplitSpec) and, run under QEMU, generates the CLI's ids
#      through the C++ API; the packaged Python module imports in Debian's
#      arm64 python3.11 and generates the same ids.
#
# usage: aarch64_test.sh HOST_BUILD_DIR SOURCE_DIR
set -euo pipefail

build=$1
source=$2
out=$build/aarch64-client
sysroot=$source/build/aarch64-sysroot
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
for tool in aarch64-linux-gnu-g++ qemu-aarch64; do
  command -v "$tool" >/dev/null || fail "$tool missing; scripts/setup.sh installs it"
done

echo "== cross-build (scripts/build_aarch64_client.sh)"
"$source/scripts/build_aarch64_client.sh" "$out"

libs=$sysroot/usr/lib/aarch64-linux-gnu:$sysroot/lib/aarch64-linux-gnu
# -cpu max: every ARMv8 feature, the dot-product instructions included.
arm() {
  local extra=$1
  shift
  qemu-aarch64 -cpu max -L /usr/aarch64-linux-gnu -E "LD_LIBRARY_PATH=$libs$extra" -E OMP_NUM_THREADS=1 "$@"
}

echo "== the kernels and the tokenizers, on arm64"
readelf -h "$out/bin/splitspec" | grep -q "Machine:.*AArch64" || fail "the cross-built CLI is not an AArch64 program"
arm "" "$out/bin/linear_check" | tail -3
arm "" "$out/bin/splitspec_tokenizer_tests" --gtest_brief=1 | tail -3
arm "" "$out/bin/splitspec" --version | grep -q "^splitspec [0-9]" || fail "splitspec --version on arm64"

ids() { python3 -c 'import json, sys; print(",".join(map(str, json.load(sys.stdin)["output_ids"])))'; }
models=(--target "$source/models/demo-target" --draft "$source/models/demo-draft" --threads 1)
compare() {
  local what=$1
  shift
  local args=(generate "${models[@]}" --prompt "Once upon a time" --max-new-tokens 20 --json "$@")
  local want got
  want=$("$build/bin/splitspec" "${args[@]}" | ids)
  got=$(arm "" "$out/bin/splitspec" "${args[@]}" | ids)
  echo "  $what: $got"
  [ -n "$got" ] && [ "$got" = "$want" ] || fail "$what: arm64 gives $got, this machine $want"
}
echo "== the arm64 CLI generates this machine's ids"
compare "local-sd" --mode local-sd
compare "local-tree" --mode local-tree
compare "local-sd, target streamed at 40%" --mode local-sd --memory-budget 40%
compare "local-ar, q4_k_m" --mode local-ar --dtype q4_k_m
compare "local-sd, sampled" --mode local-sd --temperature 0.8 --seed 7

echo "== the arm64 packages"
for p in libsplitspec python3-splitspec splitspec; do
  deb=$(ls "$out"/debs/${p}_*_arm64.deb 2>/dev/null | head -1)
  [ -n "$deb" ] || fail "no arm64 $p package"
  [ "$(dpkg-deb -f "$deb" Architecture)" = arm64 ] || fail "$p is not Architecture: arm64"
  dpkg-deb -f "$deb" Package Depends | sed 's/^/  /'
  dpkg-deb -x "$deb" "$tmp/root"
done
deps() { dpkg-deb -f "$(ls "$out"/debs/$1_*_arm64.deb)" Depends; }
deps libsplitspec | grep -q 'libgrpc++1.51' || fail "the arm64 libsplitspec does not depend on gRPC's runtime"
deps python3-splitspec | grep -q 'libsplitspec (= ' || fail "the arm64 python3-splitspec does not depend on libsplitspec"
root=$tmp/root/usr

echo "== client/examples cross-built against the unpacked arm64 packages"
cmake -S "$source/client/examples" -B "$tmp/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE="$source/scripts/aarch64-toolchain.cmake" -DSPLITSPEC_AARCH64_SYSROOT="$sysroot" \
  -DCMAKE_FIND_ROOT_PATH="$tmp/root" -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON \
  >"$tmp/configure.log" 2>&1 || { cat "$tmp/configure.log"; fail "configure"; }
grep -q "SplitSpec_DIR:PATH=$root/" "$tmp/build/CMakeCache.txt" || fail "find_package(SplitSpec) did not find the packaged one"
cmake --build "$tmp/build" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; fail "build"; }
want=$("$build/bin/splitspec" generate --verifier local --drafter model "${models[@]}" --prompt-ids 1,450,6673,310 \
  --max-new-tokens 16 --json | ids)
got=$(arm ":$root/lib" "$tmp/build/splitspec-local-example" "${models[@]}" --prompt-ids 1,450,6673,310 \
  --max-new-tokens 16 | sed -n 's/^ids: //p')
echo "  example: $got"
echo "  cli:     $want"
[ -n "$got" ] && [ "$got" = "$want" ] || fail "the arm64 example generates other ids through the C++ API"

echo "== the packaged arm64 Python module in Debian's arm64 python3.11"
moddir=$(dirname "$(find "$root" -name 'splitspec.cpython-311-aarch64-linux-gnu.so' | head -1)")
[ -n "$moddir" ] && [ "$moddir" != . ] || fail "python3-splitspec holds no arm64 module"
got=$(arm ":$root/lib" -E "PYTHONHOME=$sysroot/usr" -E "PYTHONPATH=$moddir" -E PYTHONDONTWRITEBYTECODE=1 \
  "$sysroot/usr/bin/python3.11" -c "
import platform, splitspec
assert platform.machine() == 'aarch64', platform.machine()
o = splitspec.ClientOptions(verifier='local', target_dir='$source/models/demo-target',
                            draft_dir='$source/models/demo-draft', threads=1)
r = splitspec.Client(o).generate('Once upon a time', splitspec.Request(max_new_tokens=20))
print(','.join(map(str, r.ids)))")
want=$("$build/bin/splitspec" generate "${models[@]}" --prompt "Once upon a time" --max-new-tokens 20 --json | ids)
echo "  python: $got"
[ "$got" = "$want" ] || fail "the arm64 Python module generates other ids ($want here)"
echo "PASS"
