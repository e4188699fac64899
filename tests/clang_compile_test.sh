#!/usr/bin/env bash
# The kernels' intrinsics also compile with clang: scripts/fuzz.sh builds the
# whole project with clang-14, and intrinsics headers differ between the two
# compilers (GCC's _mm_prefetch takes an enum, clang's is a macro), so a
# GCC-only build let a clang-only break stand from ef8765e to 8c3de5e. Each
# kernel source under common/kernels is checked with its own compile command
# from compile_commands.json, the compiler swapped for clang++-14 and the
# fuzz build's clang-14 shim force-included (tests/fuzz/clang14_compat.h).
#   tests/clang_compile_test.sh BUILD_DIR
set -euo pipefail
BUILD="${1:?usage: tests/clang_compile_test.sh BUILD_DIR}"
command -v clang++-14 >/dev/null || { echo "clang_compile_test: clang++-14 missing; scripts/setup.sh installs it" >&2; exit 1; }
SRC="$(cd "$(dirname "$0")/.." && pwd)"
python3 - "$BUILD/compile_commands.json" "$SRC/tests/fuzz/clang14_compat.h" <<'PY'
import json, re, shlex, subprocess, sys
shim = sys.argv[2]
entries = [e for e in json.load(open(sys.argv[1]))
           if re.search(r"/common/kernels/(kernels|linear|kquant|quant)[a-z0-9_]*\.cpp$", e["file"])]
if not entries:
    sys.exit("clang_compile_test: no kernel sources in compile_commands.json")
failed = []
for e in entries:
    args = shlex.split(e["command"])
    out = args.index("-o")
    del args[out:out + 2]
    cmd = ["clang++-14"] + args[1:] + ["-include", shim, "-fsyntax-only", "-Wno-unknown-warning-option"]
    r = subprocess.run(cmd, cwd=e["directory"], capture_output=True, text=True)
    print(("ok    " if r.returncode == 0 else "FAIL  ") + e["file"])
    if r.returncode != 0:
        print(r.stderr)
        failed.append(e["file"])
sys.exit(f"clang_compile_test: {len(failed)} of {len(entries)} failed" if failed else 0)
PY
