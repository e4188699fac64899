#!/usr/bin/env bash
# A robot's build (registered in tests/CMakeLists.txt as
# Package.ClientOnlyBuildHasNoLibTorch): configure with -DSPLITSPEC_CLIENT_ONLY=ON
# while CMake is forbidden to find LibTorch, build the library, the CLI and
# the Python module, and check that
#   - neither the library, the CLI nor the module needs LibTorch (ldd), and no
#     server or trainer was built;
#   - the client-only CLI generates exactly what the full build's does.
# The build stays in SOURCE_DIR/build-client-only, so a second run is
# incremental, and beside build/ it compiles from that tree's ccache (the
# top CMakeLists.txt). CMAKE names another CMake, e.g. the oldest supported.
#
# usage: [CMAKE=cmake] client_only_test.sh BUILD_DIR SOURCE_DIR GENERATOR CXX_COMPILER
set -euo pipefail

build=$1
source=$2
generator=$3
cxx=$4
cmake=${CMAKE:-cmake}
out=$source/build-client-only
log=$build/client-only  # its logs, in the build tree
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

[ -x "$cmake" ] || command -v "$cmake" >/dev/null || fail "no CMake at $cmake (scripts/setup_test_material.sh unpacks the oldest supported)"
echo "== configure: client only, LibTorch forbidden ($("$cmake" --version | head -1))"
"$cmake" -S "$source" -B "$out" -G "$generator" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$cxx" \
  -DSPLITSPEC_CLIENT_ONLY=ON -DCMAKE_DISABLE_FIND_PACKAGE_Torch=ON >"$log.configure.log" 2>&1 ||
  { cat "$log.configure.log"; fail "configure"; }

echo "== build: libsplitspec, splitspec, the Python module"
targets=(splitspec_client_shared splitspec)
grep -q '^splitspec_python:' <("$cmake" --build "$out" --target help 2>/dev/null | sed 's/^\.\.\. //') &&
  targets+=(splitspec_python)
"$cmake" --build "$out" --target "${targets[@]}" >"$log.build.log" 2>&1 || { tail -50 "$log.build.log"; fail "build"; }

echo "== no LibTorch, no server, no trainer"
for f in "$out/lib/libsplitspec.so" "$out/bin/splitspec" "$out"/python/splitspec*.so; do
  [ -e "$f" ] || continue
  ldd "$f" >"$log.ldd" || fail "ldd $f"
  ! grep -E -i 'libtorch|libc10|libtorch_cpu' "$log.ldd" || fail "$f needs LibTorch"
  echo "  $f: $(wc -l <"$log.ldd") libraries, none of LibTorch"
done
[ ! -e "$out/bin/splitspec-server" ] || fail "a client-only build built the server"
[ ! -e "$out/bin/splitspec-train" ] || fail "a client-only build built the trainer"
! grep -E '^Torch_DIR:[A-Z]+=.' "$out/CMakeCache.txt" | grep -v NOTFOUND || fail "the client-only configure found LibTorch"

echo "== the client-only CLI generates what the full build's does"
args=(generate --target "$source/models/demo-target" --draft "$source/models/demo-draft"
  --prompt "Once upon a time" --max-new-tokens 24 --json --threads 1)
ids() { python3 -c 'import json, sys; print(json.load(sys.stdin)["output_ids"])'; }
want=$("$build/bin/splitspec" "${args[@]}" | ids)
got=$("$out/bin/splitspec" "${args[@]}" | ids)
echo "  full:        $want"
echo "  client-only: $got"
[ "$want" = "$got" ] || fail "the client-only build generates other tokens"
"$out/bin/splitspec" train lm --help >/dev/null 2>"$log.train.err" && fail "train ran without its program"
grep -q "splitspec-train" "$log.train.err" || fail "train without its program should say what is missing"
echo "PASS"
