#!/usr/bin/env bash
# Builds the libFuzzer targets in tests/fuzz/ with clang-14 (ASan and UBSan
# on) and runs each for a bounded time: bad files must give splitspec::Error,
# and bad Session traffic an error status, never a crash, a sanitizer report
# or another exception. Prints executions and findings per target; exits 1 if
# any target found something (its input is kept under $FUZZ_OUT/findings/).
#   scripts/fuzz.sh [SECONDS_PER_TARGET (default 60)] [TARGET...]
# Environment:
#   FUZZ_OUT         output directory (default build/fuzz)
#   FUZZ_JOBS        parallel compile jobs for the targets built with the project (default 1)
#   FUZZ_KEEP_GOING  1: libFuzzer's fork mode, which records a finding and goes
#                    on fuzzing (-fork=1 -ignore_crashes=1 -ignore_ooms=1
#                    -ignore_timeouts=1), so one run collects several
#   FUZZ_SKIP_BUILD  1: run the binaries already built
#
# Targets of a few sources are compiled directly (seconds). The others
# (fuzz_early_exits, fuzz_session_requests, fuzz_http_requests) link the project's libraries, so
# the project is configured with clang-14 and -fsanitize=address,undefined,
# fuzzer-no-link in $FUZZ_OUT/cmake (tests/fuzz/fuzz_targets.cmake adds the
# programs; -pthread on every source, as gRPC's headers want); the first
# build takes a while, later ones are incremental.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
SECONDS_PER_TARGET="${1:-60}"
shift || true
for p in clang-14 libfuzzer-14-dev libclang-rt-14-dev libomp-14-dev nlohmann-json3-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    { echo "fuzz: install $p first (sudo apt-get install $p)"; exit 2; }
done
OUT="${FUZZ_OUT:-build/fuzz}"
case "$OUT" in /*) ;; *) OUT="$ROOT/$OUT" ;; esac
mkdir -p "$OUT/findings"
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
CXX="clang++-14 -std=c++17 -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I."

# Targets compiled directly, with the sources they need.
declare -A SOURCES=(
  [fuzz_safetensors]="common/weights/safetensors.cpp common/util/mapped_file.cpp"
  [fuzz_model_config]="common/model/model_config.cpp"
  [fuzz_server_config]="server/server_config.cpp"
  [fuzz_lut_tables]="common/drafting/lut_tables.cpp common/weights/safetensors.cpp common/util/mapped_file.cpp common/kernels/weight_type.cpp"
)
# clang-14 has no _Float16 on x86-64, which weight_type.cpp converts halves
# with: __fp16 converts the same way, through compiler-rt's builtins (as
# tests/fuzz/fuzz_targets.cmake does for the project's build).
declare -A DIRECT_FLAGS=(
  [fuzz_lut_tables]="-D_Float16=__fp16 --rtlib=compiler-rt"
)
# Targets built with the project (gRPC, protobuf).
CMAKE_TARGETS=(fuzz_early_exits fuzz_session_requests fuzz_http_requests)
# Extra libFuzzer flags per target. A session input runs real target
# forwards, so it may take seconds under the sanitizers (the 500-token prompt
# seed about 11 s): only one past 60 s is reported as slow, past 180 s it is a
# timeout (a finding).
declare -A FLAGS=(
  [fuzz_session_requests]="-timeout=180 -report_slow_units=60"
  [fuzz_http_requests]="-timeout=120 -report_slow_units=30"
)

ALL=(fuzz_model_config fuzz_safetensors fuzz_server_config fuzz_lut_tables "${CMAKE_TARGETS[@]}")
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=("${ALL[@]}")

# --- build -----------------------------------------------------------------
if [ "${FUZZ_SKIP_BUILD:-0}" != 1 ]; then
  need_cmake=()
  for t in "${TARGETS[@]}"; do
    if [ -n "${SOURCES[$t]:-}" ]; then
      $CXX ${DIRECT_FLAGS[$t]:-} "tests/fuzz/$t.cpp" ${SOURCES[$t]} -o "$OUT/$t"
    else
      need_cmake+=("$t")
    fi
  done
  if [ ${#need_cmake[@]} -gt 0 ]; then
    if [ ! -f "$OUT/cmake/build.ninja" ]; then
      CC=clang-14 CXX=clang++-14 cmake -S . -B "$OUT/cmake" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        "-DCMAKE_CXX_FLAGS=$SAN -fsanitize=fuzzer-no-link -pthread" \
        "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only" \
        "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined" \
        "-DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=address,undefined" \
        "-DCMAKE_MODULE_LINKER_FLAGS=-fsanitize=address,undefined" \
        -DBUILD_TESTING=OFF -DCMAKE_PROJECT_INCLUDE="$ROOT/tests/fuzz/fuzz_targets.cmake" >/dev/null
    fi
    cmake --build "$OUT/cmake" -j "${FUZZ_JOBS:-1}" --target "${need_cmake[@]}"
    for t in "${need_cmake[@]}"; do cp "$OUT/cmake/bin/$t" "$OUT/$t"; done
  fi
fi

# --- seeds -----------------------------------------------------------------
tests/fuzz/write_seeds.sh "$OUT/seeds"
if [ -x "$OUT/fuzz_session_requests" ]; then
  SPLITSPEC_FUZZ_WRITE_SEEDS="$OUT/seeds/fuzz_session_requests" "$OUT/fuzz_session_requests" >"$OUT/seeds.log" 2>&1 ||
    { echo "fuzz: writing the session seeds failed; see $OUT/seeds.log"; exit 1; }
fi

# --- run -------------------------------------------------------------------
status=0
printf "%-24s %12s %10s\n" target executions findings
for t in "${TARGETS[@]}"; do
  mkdir -p "$OUT/corpus/$t"
  log="$OUT/$t.log"
  keep=()
  [ "${FUZZ_KEEP_GOING:-0}" = 1 ] && keep=(-fork=1 -ignore_crashes=1 -ignore_ooms=1 -ignore_timeouts=1)
  stamp="$OUT/findings/.started-$t"
  touch "$stamp"
  set +e
  # One OpenMP thread: the machine's other core stays free.
  OMP_NUM_THREADS=1 "$OUT/$t" -max_total_time="$SECONDS_PER_TARGET" -rss_limit_mb=2048 \
    -artifact_prefix="$OUT/findings/$t-" ${FLAGS[$t]:-} "${keep[@]}" \
    "$OUT/corpus/$t" "$OUT/seeds/$t" >"$log" 2>&1
  rc=$?
  set -e
  if [ ${#keep[@]} -gt 0 ]; then
    runs=$(grep -o "^#[0-9]*: cov" "$log" | tail -1 | grep -o "[0-9]*" || true)
  else
    runs=$(grep -o "Done [0-9]* runs" "$log" | grep -o "[0-9]*" || true)
    # Stopped by a finding: the last status line's count.
    [ -n "$runs" ] || runs=$(grep -o "^#[0-9]*" "$log" | tail -1 | tr -d '#' || true)
  fi
  # This run's crashes, sanitizer reports, leaks, timeouts, running out of
  # memory (earlier runs' stay in findings/ and are not counted again); not
  # libFuzzer's slow-unit-* (kept beside them, for information).
  found=$(find "$OUT/findings" -type f -newer "$stamp" | grep -cE "/$t-(crash|leak|timeout|oom)-" || true)
  printf "%-24s %12s %10s\n" "$t" "${runs:-?}" "$found"
  if [ "$rc" -ne 0 ] || [ "$found" -ne 0 ]; then status=1; echo "fuzz: $t found something; see $log"; fi
done
exit $status
