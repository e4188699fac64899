#!/usr/bin/env bash
# One fuzz target of the suite (ctest label "fuzz"): its seeds written to a
# fresh directory, then the target run on them and their mutations for
# SECONDS (tests/fuzz/smoke_main.cpp).
#   tests/fuzz/run_smoke.sh BINARY TARGET SECONDS
set -euo pipefail
BIN="${1:?usage: run_smoke.sh BINARY TARGET SECONDS}"
TARGET="${2:?}"
SECONDS_TO_RUN="${3:?}"
SEEDS="$(mktemp -d)"
trap 'rm -rf "$SEEDS"' EXIT
"$(dirname "$0")/write_seeds.sh" "$SEEDS" >/dev/null
if [ "$TARGET" = fuzz_session_requests ]; then
  SPLITSPEC_FUZZ_WRITE_SEEDS="$SEEDS/$TARGET" OMP_NUM_THREADS=1 "$BIN" 0 "$SEEDS/$TARGET" >/dev/null
fi
OMP_NUM_THREADS=1 exec "$BIN" "$SECONDS_TO_RUN" "$SEEDS/$TARGET"
