#!/usr/bin/env bash
# The Debian packages (registered in tests/CMakeLists.txt as
# Package.DebsInstallIntoAScratchRootAndBuildAConsumer): `cpack -G DEB` makes
# libsplitspec, python3-splitspec, splitspec, splitspec-server and
# splitspec-train (alone on LibTorch); each
# declares what it needs (the system's libraries through dpkg-shlibdeps, and
# each other); unpacked into a scratch root they hold what the components
# install under /usr, client/examples builds against that root with
# find_package(SplitSpec) and generates the CLI's ids, the Python module
# imports from it, and the packaged programs answer --version.
#
# usage: [CMAKE=cmake CPACK=cpack] deb_test.sh BUILD_DIR SOURCE_DIR GENERATOR CXX_COMPILER
set -euo pipefail

build=$1
source=$2
generator=$3
cxx=$4
cmake=${CMAKE:-cmake}
cpack=${CPACK:-cpack}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

echo "== cpack -G DEB"
(cd "$build" && "$cpack" -G DEB -B "$tmp/debs" >"$tmp/cpack.log" 2>&1) || { tail -40 "$tmp/cpack.log"; fail "cpack"; }
ls "$tmp"/debs/*.deb | sed 's|.*/|  |'
arch=$(dpkg --print-architecture)
for p in libsplitspec python3-splitspec splitspec splitspec-server splitspec-train; do
  deb=$(ls "$tmp"/debs/${p}_*_"$arch".deb 2>/dev/null | head -1)
  [ -n "$deb" ] || fail "no $p package for $arch"
  dpkg-deb -f "$deb" Package Version Depends | sed 's/^/  /'
  dpkg-deb -x "$deb" "$tmp/root"
done
deps() { dpkg-deb -f "$(ls "$tmp"/debs/$1_*.deb)" Depends; }
deps libsplitspec | grep -q 'libgrpc++1.51' || fail "libsplitspec does not depend on gRPC's runtime package"
deps python3-splitspec | grep -q 'libsplitspec (= ' || fail "python3-splitspec does not depend on libsplitspec"
deps splitspec-server | grep -q 'splitspec (= ' || fail "splitspec-server does not depend on splitspec"
for p in libsplitspec python3-splitspec splitspec splitspec-server; do
  ! deps "$p" | grep -q -i torch || fail "$p depends on LibTorch (only splitspec-train may)"
done
deps splitspec-train | grep -q -i torch || fail "splitspec-train should depend on LibTorch's runtime"

root=$tmp/root/usr
echo "== the packaged programs"
for p in splitspec splitspec-server splitspec-train; do
  "$root/bin/$p" --version | grep -q "^$p [0-9]" || fail "$p --version"
done
[ -f "$root/share/splitspec/configs/server.json" ] || fail "no configs in splitspec-server"

echo "== client/examples against the unpacked root"
"$cmake" -S "$source/client/examples" -B "$tmp/build" -G "$generator" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_PREFIX_PATH="$root" -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON \
  >"$tmp/configure.log" || { cat "$tmp/configure.log"; fail "configure"; }
grep -q "SplitSpec_DIR:PATH=$root/" "$tmp/build/CMakeCache.txt" || fail "find_package(SplitSpec) did not find the packaged one"
"$cmake" --build "$tmp/build" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; fail "build"; }
models=(--target "$source/models/demo-target" --draft "$source/models/demo-draft" --threads 1)
got=$("$tmp/build/splitspec-local-example" "${models[@]}" --prompt-ids 1,450,6673,310 --max-new-tokens 16 |
  sed -n 's/^ids: //p')
want=$("$build/bin/splitspec" generate --verifier local --drafter model "${models[@]}" --prompt-ids 1,450,6673,310 \
  --max-new-tokens 16 --json | python3 -c 'import json, sys; print(",".join(map(str, json.load(sys.stdin)["output_ids"])))')
echo "  example: $got"
echo "  cli:     $want"
[ -n "$got" ] && [ "$got" = "$want" ] || fail "the example built against the packages generates other ids"

echo "== the packaged Python module"
moddir=$(dirname "$(find "$root" -name 'splitspec.*.so' | head -1)")
[ -n "$moddir" ] || fail "python3-splitspec holds no module"
(cd "$tmp" && PYTHONPATH=$moddir /usr/bin/python3 -c 'import splitspec; print("  splitspec", splitspec.__version__)') ||
  fail "the packaged module does not import"
echo "PASS"
