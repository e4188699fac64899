#!/usr/bin/env bash
# Configures and builds the whole project and its test suite with
# AddressSanitizer and UndefinedBehaviorSanitizer (GCC, its own build
# directory), runs ctest there and prints a summary: the tests' results and
# every sanitizer report, from the tests and from the programs they start
# (splitspec-server, the CLI), which write theirs under
# $BUILD_DIR/sanitizer-logs/.
#   scripts/sanitize.sh [CTEST_ARGS...]      e.g. scripts/sanitize.sh -R 'LutTables|EarlyExit'
# Environment:
#   SANITIZER        address (default: ASan and UBSan) or thread (TSan, in
#                    build-tsan; with tests/sanitizers/tsan.supp)
#   SANITIZE_DIR     build directory (default build-asan, build-tsan)
#   BUILD_TYPE       default RelWithDebInfo (at -O1 -g1: usable stacks, tests not too slow)
#   BUILD_JOBS       parallel compile jobs (default 2, as scripts/build.sh)
#   TEST_JOBS        parallel tests (default 2)
#   SANITIZE_BUILD   0: skip configure and build, run the tests only
#   SANITIZE_TARGETS build only these targets (default: all)
#   SANITIZE_LEAKS   0: no leak detection (default 1, with tests/sanitizers/lsan.supp)
#
# Not run here (ctest -E): the Python tests (an instrumented module in an
# uninstrumented python3 needs libasan preloaded), the package tests (they
# build examples, a client-only build and .debs without sanitizer flags) and the
# AArch64 kernels under QEMU (a cross build of its own, no sanitizers), and
# the test that makes a server's KV allocation fail: ASan's operator new
# reports out-of-memory and aborts instead of throwing std::bad_alloc, whose
# handling that test checks; and the GPU tests under the CPU emulator of CUDA
# (emulated.*), whose fibers switch stacks by hand, which ASan does not follow.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
SANITIZER="${SANITIZER:-address}"
case "$SANITIZER" in
  address) BUILD_DIR="${SANITIZE_DIR:-build-asan}" ;;
  thread) BUILD_DIR="${SANITIZE_DIR:-build-tsan}" ;;
  *) echo "sanitize.sh: SANITIZER must be address or thread, not '$SANITIZER'" >&2; exit 2 ;;
esac
case "$BUILD_DIR" in /*) ;; *) BUILD_DIR="$ROOT/$BUILD_DIR" ;; esac
BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}"
LOGS="$BUILD_DIR/sanitizer-logs"
EXCLUDE='^(Python\.|Package\.|emulated\.|LinearCheck\.Aarch64BodiesUnderQemu$|ServerLimits\.AnOpenThatRunsOutOfMemoryGetsAStatusAtOnce$)'

# Reports go to $LOGS/<tool>.<pid> (so that those of child processes are
# kept too) and end the process; UBSan prints a stack.
if [ "$SANITIZER" = thread ]; then
  SAN="-fsanitize=thread -fno-omit-frame-pointer"
  LINK="-fsanitize=thread"
  export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:log_path=$LOGS/tsan:suppressions=$ROOT/tests/sanitizers/tsan.supp:print_suppressions=0"
else
  SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
  LINK="-fsanitize=address,undefined"
  leaks="${SANITIZE_LEAKS:-1}"
  export ASAN_OPTIONS="halt_on_error=1:detect_leaks=$leaks:check_initialization_order=1:strict_init_order=1:detect_stack_use_after_return=0:log_path=$LOGS/asan"
  export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$LOGS/ubsan"
  export LSAN_OPTIONS="suppressions=$ROOT/tests/sanitizers/lsan.supp:print_suppressions=0"
fi

if [ "${SANITIZE_BUILD:-1}" != 0 ]; then
  # The same options as scripts/build.sh, the sanitizers on top (the build
  # itself runs the test binary: gtest_discover_tests lists its tests).
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" \
    "-DCMAKE_CXX_FLAGS=$SAN" \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1" \
    "-DCMAKE_EXE_LINKER_FLAGS=$LINK" \
    "-DCMAKE_SHARED_LINKER_FLAGS=$LINK" \
    "-DCMAKE_MODULE_LINKER_FLAGS=$LINK" >/dev/null
  mkdir -p "$LOGS"
  cmake --build "$BUILD_DIR" -j "${BUILD_JOBS:-2}" ${SANITIZE_TARGETS:+--target $SANITIZE_TARGETS}
fi

rm -rf "$LOGS"
mkdir -p "$LOGS"
set +e
ctest --test-dir "$BUILD_DIR" -j "${TEST_JOBS:-2}" --output-on-failure -E "$EXCLUDE" "$@" 2>&1 | tee "$BUILD_DIR/ctest.log"
rc=${PIPESTATUS[0]}
set -e

echo
echo "=== sanitize.sh summary ($BUILD_DIR) ==="
grep -E "tests passed|Total Test time" "$BUILD_DIR/ctest.log" || true
grep -A1000 "The following tests FAILED" "$BUILD_DIR/ctest.log" | grep -E "^\s+[0-9]+ - " || true
mapfile -t reports < <(find "$LOGS" -type f | sort)
echo "sanitizer reports: ${#reports[@]} (in $LOGS)"
for f in "${reports[@]}"; do
  echo "--- $f"
  grep -m1 -E "ERROR: (AddressSanitizer|LeakSanitizer)|WARNING: ThreadSanitizer|runtime error:" "$f" || head -3 "$f"
  grep -m8 -E "^ +#[0-9]+ " "$f" || true
  grep -m1 "SUMMARY:" "$f" || true
done
[ ${#reports[@]} -eq 0 ] || rc=1
exit "$rc"
