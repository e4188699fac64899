#!/usr/bin/env bash
# `pip install ./client/python` as a robot developer runs it (registered in
# tests/CMakeLists.txt as Python.PipInstallIntoAFreshVenv): offline (no
# index), with Debian's setuptools, into a fresh venv of Debian's python3;
# then, from outside the source tree, `import splitspec` comes from the venv,
# ships its type stubs, and a greedy generation gives the CLI's ids.
# The CMake build is the client-only one the suite already made
# (Package.ClientOnlyBuildHasNoLibTorch), reused through
# SPLITSPEC_CMAKE_BUILD_DIR.
#
# usage: pip_install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail

build=$1
source=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp" "$source/client/python/build" "$source"/client/python/*.egg-info' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

echo "== a fresh venv of /usr/bin/python3, the README's pip commands as written (no index)"
/usr/bin/python3 -m venv "$tmp/venv"
# The README's commands, run as written in the source tree with the venv
# active: `wheel` from Debian's python3-wheel-whl (pip builds through a
# wheel), then the package, with -v so that the build's progress shows.
mapfile -t readme_pip < <(grep -E '^pip install ' "$source/README.md")
[ "${#readme_pip[@]}" -ge 2 ] || fail "the README's pip install commands are gone"
for cmd in "${readme_pip[@]}"; do
  echo "  $cmd"
  (cd "$source" && . "$tmp/venv/bin/activate" && SPLITSPEC_CMAKE_BUILD_DIR=$source/build-client-only eval "$cmd") \
    >>"$tmp/pip.log" 2>&1 || { tail -40 "$tmp/pip.log"; fail "$cmd"; }
done
# The build's progress is on the terminal, not hidden for minutes.
grep -q "Build files have been written" "$tmp/pip.log" || { tail -40 "$tmp/pip.log"; fail "pip showed no build progress"; }

echo "== import from the venv, stubs beside the module"
cd "$tmp"
where=$("$tmp/venv/bin/python" -c 'import splitspec; print(splitspec.__file__)')
case "$where" in "$tmp/venv/"*) ;; *) fail "splitspec imported from $where, not the venv" ;; esac
stubs=$(dirname "$where")/splitspec.pyi
[ -f "$stubs" ] || fail "no splitspec.pyi beside $where"
"$tmp/venv/bin/python" - "$stubs" <<'PY' || fail "the stubs do not describe the module"
import ast, sys, splitspec
tree = ast.parse(open(sys.argv[1]).read())
classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
public = {n for n in dir(splitspec) if not n.startswith("_") and isinstance(getattr(splitspec, n), type)}
missing = public - classes
assert not missing, missing
PY
"$tmp/venv/bin/pip" show splitspec >"$tmp/show"
grep -q "^Version: $(sed -n 's/^project(splitspec VERSION \([0-9.]*\).*/\1/p' "$source/CMakeLists.txt")$" "$tmp/show" ||
  fail "pip's version is not the project's: $(grep ^Version "$tmp/show")"

echo "== a greedy generation: the CLI's ids"
got=$("$tmp/venv/bin/python" - "$source" <<'PY'
import sys, splitspec
root = sys.argv[1]
o = splitspec.ClientOptions(verifier="local", target_dir=root + "/models/demo-target", draft_dir=root + "/models/demo-draft",
                            drafter="model", threads=1)
r = splitspec.Client(o).generate("Once upon a time", splitspec.Request(max_new_tokens=24))
print(r.ids)
PY
)
want=$("$build/bin/splitspec" generate --target "$source/models/demo-target" --draft "$source/models/demo-draft" \
  --prompt "Once upon a time" --max-new-tokens 24 --json --threads 1 |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["output_ids"])')
echo "  python: $got"
echo "  cli:    $want"
[ "$got" = "$want" ] || fail "pip-installed module generates other ids than the CLI"
echo "PASS"
