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
# (fuzz_early_exits, fuzz_session_requests) link the project's libraries, so
# the project is configured with clang-14 and -fsanitize=address,undefined,
# fuzzer-no-link in $FUZZ_OUT/cmake (tests/fuzz/fuzz_targets.cmake adds the
# two programs; -pthread on every source, as gRPC's headers want); the first
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
  [fuzz_safetensors]="common/engine/safetensors.cpp common/util/mapped_file.cpp"
  [fuzz_model_config]="common/engine/model_config.cpp"
  [fuzz_server_config]="server/server_config.cpp"
  [fuzz_lut_tables]="common/drafting/lut_tables.cpp common/engine/safetensors.cpp common/util/mapped_file.cpp common/engine/weight_type.cpp"
)
# clang-14 has no _Float16 on x86-64, which weight_type.cpp converts halves
# with: __fp16 converts the same way, through compiler-rt's builtins (as
# tests/fuzz/fuzz_targets.cmake does for the project's build).
declare -A DIRECT_FLAGS=(
  [fuzz_lut_tables]="-D_Float16=__fp16 --rtlib=compiler-rt"
)
# Targets built with the project (gRPC, protobuf).
CMAKE_TARGETS=(fuzz_early_exits fuzz_session_requests)
# Extra libFuzzer flags per target. A session input runs real target
# forwards, so it may take seconds under the sanitizers (the 500-token prompt
# seed about 11 s): only one past 60 s is reported as slow, past 180 s it is a
# timeout (a finding).
declare -A FLAGS=(
  [fuzz_session_requests]="-timeout=180 -report_slow_units=60"
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
# The shipped configs, the demo target's real early exits and look-up
# tables, small hand-made valid files, and Session streams that the session
# target writes itself from the live demo target.
for t in "${ALL[@]}"; do rm -rf "$OUT/seeds/$t"; mkdir -p "$OUT/seeds/$t"; done
cp models/demo-target/config.json "$OUT/seeds/fuzz_model_config/target.json"
cp models/demo-draft/config.json "$OUT/seeds/fuzz_model_config/draft.json"
cp configs/server.json "$OUT/seeds/fuzz_server_config/"
python3 - "$OUT/seeds" <<'PY'
import json, struct, sys
seeds = sys.argv[1]

def safetensors(tensors, metadata=None):
    # tensors: (name, dtype, shape, raw bytes)
    header, blob = {}, b""
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(blob), len(blob) + len(data)]}
        blob += data
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + blob

def f32(vals): return struct.pack("<%df" % len(vals), *vals)
def f16(vals): return struct.pack("<%de" % len(vals), *vals)
def bf16(vals): return b"".join(struct.pack("<f", v)[2:] for v in vals)
def i32(vals): return struct.pack("<%di" % len(vals), *vals)
def i64(vals): return struct.pack("<%dq" % len(vals), *vals)
def write(target, name, data):
    with open(f"{seeds}/{target}/{name}", "wb") as f:
        f.write(data)

write("fuzz_safetensors", "tiny.safetensors",
      safetensors([("w", "F32", [2, 2], b"\0" * 16)], {"format": "pt"}))

# Look-up tables: flags byte (0: the demo target's vocabulary and tokenizer,
# 1: vocabulary 16, 2: vocabulary 16 and fingerprint "fuzz"), lut.json, NUL,
# lut.safetensors.
demo = "models/demo-target"
write("fuzz_lut_tables", "demo", b"\0" + open(f"{demo}/lut.json", "rb").read() + b"\0" +
      open(f"{demo}/lut.safetensors", "rb").read())
for flags, fp in ((1, ""), (2, "fuzz")):
    for order, slots in ((1, 4), (3, 4)):
        k, vocab = 2, 16
        side = json.dumps({"format": "splitspec-lut", "version": 1, "vocab_size": vocab, "k": k,
                           "order": order, "slots": slots, "tokenizer_fingerprint": fp}).encode()
        ids = [(3 * r + j) % vocab if (r + j) % 3 else -1 for r in range(vocab) for j in range(k)]
        probs = [0.5 if i >= 0 else 0.0 for i in ids]
        t = [("unigram.ids", "I32", [vocab, k], i32(ids)), ("unigram.probs", "F16", [vocab, k], f16(probs))]
        if order > 1:
            t += [("slots.keys", "I64", [slots], i64([0, 12345, 0, 77])),
                  ("slots.ids", "I32", [slots, k], i32([-1, -1, 5, 6, -1, -1, 7, -1])),
                  ("slots.probs", "F16", [slots, k], f16([0, 0, 0.75, 0.25, 0, 0, 1.0, 0]))]
        write("fuzz_lut_tables", f"tiny-order{order}-{flags}", bytes([flags]) + side + b"\0" + safetensors(t))

# Early exits: flags byte (bit 0: 0 the demo target, 1 a tiny config of
# hidden 4, 4 layers, vocabulary 16; bit 1: no early_exits.json),
# early_exits.json, NUL, early_exits.safetensors.
write("fuzz_early_exits", "demo", b"\0" + open(f"{demo}/early_exits.json", "rb").read() + b"\0" +
      open(f"{demo}/early_exits.safetensors", "rb").read())
real = json.load(open(f"{demo}/early_exits.json"))
h = 256
small = {"after_layers": [4], "bottleneck": 1, "hidden_size": h, "serve_layers": [4],
         "frequent_tokens": real.get("frequent_tokens", list(range(64)))[:64]}
write("fuzz_early_exits", "demo-bottleneck-1", b"\0" + json.dumps(small).encode() + b"\0" + safetensors([
    ("exits.4.norm.weight", "F32", [h], f32([1.0] * h)),
    ("exits.4.down_proj.weight", "F16", [1, h], f16([0.01] * h)),
    ("exits.4.up_proj.weight", "BF16", [h, 1], bf16([0.5] * h))]))
h, b = 4, 2
tiny = {"after_layers": [1, 3], "bottleneck": b, "hidden_size": h, "serve_layers": [3], "frequent_tokens": [5, 3, 9]}
tensors = []
for l in (1, 3):
    tensors += [(f"exits.{l}.norm.weight", "F32", [h], f32([1.0] * h)),
                (f"exits.{l}.down_proj.weight", "F16", [b, h], f16([0.25] * (b * h))),
                (f"exits.{l}.up_proj.weight", "BF16", [h, b], bf16([-0.5] * (b * h)))]
st = safetensors(tensors, {"format": "pt"})
write("fuzz_early_exits", "tiny", b"\1" + json.dumps(tiny).encode() + b"\0" + st)
write("fuzz_early_exits", "tiny-weights-only", b"\3" + b"\0" + st)
PY
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
