#!/usr/bin/env bash
# Builds the libFuzzer targets in tests/fuzz/ with clang-14 (ASan and UBSan
# on) and runs each for a bounded time: bad files must give splitspec::Error,
# never a crash, a sanitizer report or another exception. Prints executions
# and findings per target; exits 1 if any target found something (its input
# is kept under build/fuzz/findings/).
#   scripts/fuzz.sh [SECONDS_PER_TARGET (default 60)]
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET="${1:-60}"
for p in clang-14 libfuzzer-14-dev nlohmann-json3-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    { echo "fuzz: install $p first (sudo apt-get install $p)"; exit 2; }
done
OUT=build/fuzz
mkdir -p "$OUT/findings"
CXX="clang++-14 -std=c++17 -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I."

# Each target with the sources it needs (none of them links LibTorch).
declare -A SOURCES=(
  [fuzz_safetensors]="common/engine/safetensors.cpp common/util/mapped_file.cpp"
  [fuzz_model_config]="common/engine/model_config.cpp"
  [fuzz_server_config]="server/server_config.cpp"
)
# Seeds: the shipped configs and a small valid safetensors file.
mkdir -p "$OUT/seeds/fuzz_model_config" "$OUT/seeds/fuzz_server_config" "$OUT/seeds/fuzz_safetensors"
cp models/demo-target/config.json "$OUT/seeds/fuzz_model_config/target.json"
cp models/demo-draft/config.json "$OUT/seeds/fuzz_model_config/draft.json"
cp configs/server.json "$OUT/seeds/fuzz_server_config/"
python3 - "$OUT/seeds/fuzz_safetensors/tiny.safetensors" <<'PY'
import json, struct, sys
header = json.dumps({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
                     "__metadata__": {"format": "pt"}}).encode()
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(header)) + header + b"\0" * 16)
PY

status=0
printf "%-20s %12s %10s\n" target executions findings
for t in "${!SOURCES[@]}"; do
  $CXX "tests/fuzz/$t.cpp" ${SOURCES[$t]} -o "$OUT/$t"
  mkdir -p "$OUT/corpus/$t"
  log="$OUT/$t.log"
  set +e
  "$OUT/$t" -max_total_time="$SECONDS_PER_TARGET" -rss_limit_mb=2048 -artifact_prefix="$OUT/findings/$t-" \
    "$OUT/corpus/$t" "$OUT/seeds/$t" >"$log" 2>&1
  rc=$?
  set -e
  runs=$(grep -o "Done [0-9]* runs" "$log" | grep -o "[0-9]*" || echo "?")
  found=$(ls "$OUT/findings" | grep -c "^$t-" || true)
  printf "%-20s %12s %10s\n" "$t" "$runs" "$found"
  if [ "$rc" -ne 0 ] || [ "$found" -ne 0 ]; then status=1; echo "fuzz: $t found something; see $log"; fi
done
exit $status
