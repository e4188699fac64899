#!/usr/bin/env bash
# The installed package as a robot project sees it (registered in
# tests/CMakeLists.txt as Package.ConsumerBuildsAgainstInstall):
#   0. `cmake --install` installs every program, each answering --version,
#      and configs/ under share/splitspec;
#   1. its client and python components, into an empty prefix, hold the library,
#      the sentencepiece module, <splitspec/client.h>, the CMake package files
#      (and the Python module) and nothing else: no static library, no
#      internal header;
#   2. client.h includes standard headers only, and the library exports only
#      the API's symbols;
#   3. client/examples/ is configured out of tree with find_package(SplitSpec)
#      against that prefix, built, and installed there the way a robot
#      project installs its program (so its tokenizer comes from the prefix);
#   4. splitspec-local-example (splitspec-example needs a server, so it is
#      only built) prints the ids `splitspec generate --json`
#      prints for the same requests, greedy and sampled from a text prompt;
#      A bad target is thrown as splitspec::Error, which the example catches
#      by the type client.h declares;
#   5. the installed Python module, when built, imports from the prefix and
#      gives the same ids.
#
# usage: [CMAKE=cmake] consumer_test.sh BUILD_DIR SOURCE_DIR GENERATOR CXX_COMPILER [PYTHON]
set -euo pipefail

build=$1
source=$2
generator=$3
cxx=$4
python=${5:-}
cmake=${CMAKE:-cmake}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

echo "== cmake --install, the programs and configs: every program runs from the prefix"
whole=$tmp/whole
"$cmake" --install "$build" --prefix "$whole" >"$tmp/install-all.log" || { cat "$tmp/install-all.log"; fail "install"; }
for p in splitspec splitspec-train splitspec-server; do
  [ -x "$whole/bin/$p" ] || fail "cmake --install installs no bin/$p"
done
# Every program in bin/ says its version (the helpers live in lib/).
for p in "$whole"/bin/*; do
  "$p" --version | grep -q "^$(basename "$p") [0-9]" || fail "$(basename "$p") --version"
done
[ -x "$whole/lib/splitspec-spm-serve" ] || fail "the tokenizer's helper is not installed beside the libraries"
[ -f "$whole/share/splitspec/configs/server.json" ] || fail "cmake --install installs no share/splitspec/configs/server.json"
# Text needs the sentencepiece module and its helper, found from the prefix.
[ "$("$whole/bin/splitspec" tokenize --target "$source/models/demo-target" --text "Once upon a time")" = \
  "$("$build/bin/splitspec" tokenize --target "$source/models/demo-target" --text "Once upon a time")" ] ||
  fail "the installed splitspec tokenizes otherwise than the build's"
"$whole/bin/splitspec-server" --config "$whole/share/splitspec/configs/server.json" \
  --target "$source/models/demo-target" --check-config >/dev/null || fail "the installed server refuses its own config"

echo "== cmake --install of the client package (components client and python) into $prefix"
for component in client python; do
  "$cmake" --install "$build" --prefix "$prefix" --component "$component" >>"$tmp/install.log" ||
    { cat "$tmp/install.log"; fail "install $component"; }
done

echo "== installed files"
(cd "$prefix" && find . -type f -o -type l | sed 's|^\./||' | sort) | tee "$tmp/files"
while read -r f; do
  case "$f" in
    include/splitspec/client.h) ;;
    lib*/libsplitspec.so | lib*/libsplitspec.so.*) ;;
    lib*/libsplitspec_sentencepiece.so) ;;
    lib*/cmake/SplitSpec/SplitSpecConfig.cmake | lib*/cmake/SplitSpec/SplitSpecConfigVersion.cmake) ;;
    lib*/cmake/SplitSpec/SplitSpecTargets.cmake | lib*/cmake/SplitSpec/SplitSpecTargets-*.cmake) ;;
    lib*/python3/dist-packages/splitspec.*.so) ;;
    *) fail "installed something not part of the package: $f" ;;
  esac
done <"$tmp/files"
[ "$(cd "$prefix/include" && find . -type f)" = "./splitspec/client.h" ] || fail "include/ must hold splitspec/client.h alone"
lib=$(find "$prefix" -name libsplitspec.so)

echo "== client.h includes standard headers only"
bad=$(grep -E '^\s*#\s*include' "$prefix/include/splitspec/client.h" | grep -v -E '^\s*#\s*include\s*<[a-z_]+>' || true)
[ -z "$bad" ] || fail "client.h includes non-standard headers: $bad"

echo "== libsplitspec.so exports the API alone"
nm -D --defined-only "$lib" | awk '{print $3}' | c++filt >"$tmp/exports"
api='^splitspec::(Client::|Generation::|Stats::|(parse_verifier|verifier_name|parse_mode|mode_name|with_mode)(\[abi:cxx11\])?\()'
grep -E "$api" "$tmp/exports" | sed 's/^/  /'
others=$(grep -v -E "$api" "$tmp/exports" | grep -v -E '^(_init|_fini|SPLITSPEC_[0-9.]+)$' || true)
[ -z "$others" ] || fail "libsplitspec.so exports more than the API: $(echo "$others" | head -5)"

echo "== client/examples out of tree against the prefix"
"$cmake" -S "$source/client/examples" -B "$tmp/build" -G "$generator" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_INSTALL_PREFIX="$prefix" \
  -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >"$tmp/configure.log" ||
  { cat "$tmp/configure.log"; fail "configure"; }
grep -q "SplitSpec_DIR:PATH=$prefix/" "$tmp/build/CMakeCache.txt" || fail "find_package(SplitSpec) did not find the prefix's"
"$cmake" --build "$tmp/build" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; fail "build"; }
# Compiled against the installed header alone: no include path into the
# source or build tree, none of LibTorch, gRPC or protobuf.
flags=$(grep -o -E '(-I|-isystem )[^ "]+' "$tmp/build/compile_commands.json" | sort -u)
echo "include flags: $flags"
! grep -q -E "$source|$build|torch|grpc|protobuf" <<<"$flags" || fail "consumer compiled with internal include paths"
# A robot project's install: bin/ beside the package's lib/.
mkdir -p "$prefix/bin"
cp "$tmp/build/splitspec-local-example" "$tmp/build/splitspec-example" "$prefix/bin/"
example=$prefix/bin/splitspec-local-example
# (ldd's output is kept first: grep -q would close the pipe under pipefail.)
libs=$(ldd "$example")
grep libsplitspec <<<"$libs"
grep -q "libsplitspec.so.* => $prefix/" <<<"$libs" || fail "the example does not load the installed libsplitspec.so"

ids_of() { sed -n 's/^ids: //p'; }
json_ids() {
  python3 -c 'import json, sys; print(",".join(map(str, json.load(sys.stdin)["output_ids"])))'
}
cli() {
  "$build/bin/splitspec" generate --verifier local --drafter model --target "$source/models/demo-target" \
    --draft "$source/models/demo-draft" --threads 1 --json "$@"
}
models=(--target "$source/models/demo-target" --draft "$source/models/demo-draft" --threads 1)

echo "== greedy, token ids"
got=$("$example" "${models[@]}" --prompt-ids 1,450,6673,310 --max-new-tokens 24 | ids_of)
want=$(cli --prompt-ids 1,450,6673,310 --max-new-tokens 24 | json_ids)
echo "example: $got"
echo "cli:     $want"
[ -n "$got" ] && [ "$got" = "$want" ] || fail "greedy ids differ"

echo "== sampled, text prompt (tokenized by the installed sentencepiece module)"
got=$("$example" "${models[@]}" --prompt "Turn left at the" --max-new-tokens 24 --temperature 0.8 --seed 7 | ids_of)
want=$(cli --prompt "Turn left at the" --max-new-tokens 24 --temperature 0.8 --seed 7 | json_ids)
echo "example: $got"
echo "cli:     $want"
[ -n "$got" ] && [ "$got" = "$want" ] || fail "sampled ids differ"

echo "== a bad target is a splitspec::Error the consumer catches by its type"
err=$("$example" --target "$tmp/no-such-target" --draft "$source/models/demo-draft" 2>&1 >/dev/null) && fail "a missing target succeeded"
echo "$err"
grep -q "^splitspec-local-example: error: .*no-such-target" <<<"$err" || fail "not caught as splitspec::Error: $err"

echo "== splitspec-example (it needs a server): its libraries resolve"
libs=$(ldd "$prefix/bin/splitspec-example")
! grep -q "not found" <<<"$libs" || fail "splitspec-example has unresolved libraries"

if [ -n "$python" ]; then
  echo "== the installed Python module"
  moddir=$(dirname "$(find "$prefix" -name "splitspec.*.so")")
  got=$(cd "$tmp" && PYTHONPATH=$moddir "$python" -c '
import sys, splitspec
assert splitspec.__file__.startswith(sys.argv[1]), splitspec.__file__
o = splitspec.ClientOptions(verifier="local", drafter="model", target_dir=sys.argv[2] + "/models/demo-target",
                            draft_dir=sys.argv[2] + "/models/demo-draft", threads=1)
r = splitspec.Client(o).generate_ids([1, 450, 6673, 310], splitspec.Request(max_new_tokens=24))
print(",".join(map(str, r.ids)))' "$prefix" "$source")
  want=$(cli --prompt-ids 1,450,6673,310 --max-new-tokens 24 | json_ids)
  echo "python:  $got"
  [ "$got" = "$want" ] || fail "the installed Python module's ids differ"
fi
echo "PASS"
