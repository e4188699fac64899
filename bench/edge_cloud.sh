#!/usr/bin/env bash
# Edge-cloud benchmark (issue: cloud-ar vs edge-sd over an emulated link).
# Starts splitspec-server on loopback with the demo target, then runs
# `splitspec bench edge-cloud`, which puts its own netem proxy in front of the
# server at each one-way delay. Client and server get one compute thread each
# (two cores in all). Extra arguments go to the bench, e.g. --num-prompts 10.
set -euo pipefail
cd "$(dirname "$0")/.."
prompts=${PROMPTS:-../shared/prompts/spec_bench.jsonl}
if [[ ! -f $prompts ]]; then
  echo "bench/edge_cloud.sh: $prompts not found (set PROMPTS=FILE.jsonl)" >&2
  exit 1
fi
[[ -x build/bin/splitspec-server ]] || ./scripts/build.sh
tmp=$(mktemp -d)
trap 'kill -TERM $server 2>/dev/null || true; wait $server 2>/dev/null || true; rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
build/bin/splitspec-server --target models/demo-target --listen 127.0.0.1:0 --port-file "$tmp/port" \
  --threads 1 --log-level warn &
server=$!
for _ in $(seq 600); do [[ -f $tmp/port ]] && break; sleep 0.1; done
[[ -f $tmp/port ]] || { echo "bench/edge_cloud.sh: the server did not start" >&2; exit 1; }
build/bin/splitspec bench edge-cloud --server "127.0.0.1:$(cat "$tmp/port")" --draft models/demo-draft \
  --prompts "$prompts" --threads 1 "$@"
