#!/usr/bin/env bash
# The main command: install, build, then the edge-cloud demo on loopback with
# the shipped demo pair. splitspec-server serves models/demo-target; the
# example client (client/examples/edge_cloud_example.cpp) drafts with
# models/demo-draft, streams the text of edge-sd, edge-fsd and cloud-ar,
# prints a stats table, and checks that greedy edge-sd and edge-fsd reproduce
# the target exactly.
# PROMPT=... and MAX_NEW_TOKENS=N override; the server log is shown at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh

PROMPT="${PROMPT:-The President of the United States}"
tmp=$(mktemp -d)
server=""
cleanup() {
  if [[ -n $server ]]; then kill -TERM "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

# Client and server share this machine: one compute thread each.
echo "== starting splitspec-server --target models/demo-target on 127.0.0.1 (free port)"
./build/bin/splitspec-server --config configs/server.json --listen 127.0.0.1:0 --port-file "$tmp/port" \
  --threads 1 2>"$tmp/server.log" &
server=$!
for _ in $(seq 600); do [[ -f $tmp/port ]] && break; sleep 0.1; done
if [[ ! -f $tmp/port ]]; then
  echo "demo: the server did not start:" >&2
  cat "$tmp/server.log" >&2
  exit 1
fi
address="127.0.0.1:$(cat "$tmp/port")"
echo "== server listening on $address"
echo
./build/bin/splitspec-example --server "$address" --draft models/demo-draft --lut models/demo-target/lut.safetensors \
  --prompt "$PROMPT" \
  --max-new-tokens "${MAX_NEW_TOKENS:-64}"
status=$?
echo
kill -TERM "$server"
wait "$server" || true
server=""
echo "== server log"
cat "$tmp/server.log"
exit $status
