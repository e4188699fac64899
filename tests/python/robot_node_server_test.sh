#!/usr/bin/env bash
# The ROS 2-shaped example against a real server (Python.RobotNodeExampleAgainstAServer):
# with the server verifier, no draft model and --tokenizer, both commands run
# and the long one is stopped by on_stop, not refused for its length. The
# stop comes 0.05 s after it: the demo target's whole context (506 tokens)
# took 0.24 s on a 2-vCPU Zen 5, so a later stop found it finished.
#
# usage: robot_node_server_test.sh PYTHON BIN_DIR SOURCE_DIR
set -euo pipefail
python=$1
bin=$2
source=$3
tmp=$(mktemp -d)
server_pid=
trap '[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT

"$bin/splitspec-server" --target "$source/models/demo-target" --listen 127.0.0.1:0 --port-file "$tmp/port" \
  --threads 1 2>"$tmp/server.log" &
server_pid=$!
for _ in $(seq 200); do [ -s "$tmp/port" ] && break; sleep 0.1; done
[ -s "$tmp/port" ] || { cat "$tmp/server.log"; echo "FAIL: the server did not start"; exit 1; }
out=$("$python" "$source/client/python/examples/robot_node.py" --verifier server --server "127.0.0.1:$(cat "$tmp/port")" \
  --drafter none --tokenizer "$source/models/demo-target" --stop-after 0.05 2>&1) || { echo "$out"; echo "FAIL: exit status"; exit 1; }
echo "$out"
grep -q "'Turn left at the': " <<<"$out" || { echo "FAIL: the first command did not finish"; exit 1; }
grep -q "'The robot picked up': cancelled" <<<"$out" || { echo "FAIL: the second command was not stopped"; exit 1; }
! grep -q "generation failed" <<<"$out" || { echo "FAIL: a generation failed"; exit 1; }
echo PASS
