#!/usr/bin/env bash
# Runs the image built by deploy/image/build.sh the way Kubernetes runs the
# Deployment, without a container runtime: the image's own entrypoint, user
# and environment (from its OCI config), its root file system mounted
# read-only, the demo target mounted read-only at /models/target, a tmpfs at
# /tmp, a TLS certificate and a token file where the Secrets go, in a private
# mount namespace. Then, from outside: health on the plaintext port, a TLS
# and token generation through the image's server whose ids must equal the
# local target's, writes refused, and SIGTERM draining to exit code 0.
#   deploy/image/smoke.sh [OUT_DIR (build/image)] [TAG (0.2.0)]
# Needs root (unshare, mount, chroot) and python3.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${1:-build/image}"
TAG="${2:-0.2.0}"
layout="$OUT/splitspec-server"
[ -d "$layout" ] || { echo "smoke: no image at $layout: run deploy/image/build.sh"; exit 1; }
CLI=build/bin/splitspec
work="$(mktemp -d)"
server_pid=""
cleanup() {
  [ -z "$server_pid" ] || kill -9 "$server_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

umoci unpack --image "$layout:$TAG" "$work/bundle" >/dev/null
# The process as the image describes it.
# (no value holds a space)
{ read -r user; read -r args; read -r env; } < <(python3 - "$work/bundle/config.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))["process"]
print(f'{p["user"]["uid"]}:{p["user"]["gid"]}', " ".join(p["args"]), " ".join(p["env"]), sep="\n")
PY
)
echo "smoke: image process: user $user, args: $args"

mkdir -p "$work/tls" "$work/auth"
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "/CN=splitspec-server" -addext "subjectAltName=IP:127.0.0.1" \
  -keyout "$work/tls/tls.key" -out "$work/tls/tls.crt" 2>/dev/null
echo "smoke-token" >"$work/auth/tokens"
chmod -R a+rX "$work/tls" "$work/auth"

# The server listens on the host's network: take ports nobody uses.
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
GRPC=$(port) HEALTH=$(port) METRICS=$(port)
rootfs="$work/bundle/rootfs"
unshare -m --propagation private sh -c '
  set -e
  r="$1"
  mount --bind "$r" "$r" && mount -o remount,bind,ro "$r"
  mount --bind models/demo-target "$r/models/target" && mount -o remount,bind,ro "$r/models/target"
  mount --bind "$2/tls" "$r/etc/splitspec/tls" 2>/dev/null || { echo "smoke: the image has no /etc/splitspec/tls"; exit 1; }
  mount --bind "$2/auth" "$r/etc/splitspec/auth"
  mount -t tmpfs -o size=64m tmpfs "$r/tmp"
  mount -t proc proc "$r/proc"
  mount --rbind /sys "$r/sys"
  mount --rbind /dev "$r/dev"
  exec env -i $3 OMP_NUM_THREADS=1 chroot --userspec="$4" "$r" $5 \
    --listen 127.0.0.1:$6 --health-listen 127.0.0.1:$7 --metrics-listen 127.0.0.1:$8
' smoke "$rootfs" "$work" "$env" "$user" "$args" "$GRPC" "$HEALTH" "$METRICS" >"$work/server.log" 2>&1 &
server_pid=$!

for _ in $(seq 100); do
  "$CLI" health --server "127.0.0.1:$HEALTH" >/dev/null 2>&1 && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$work/server.log"; echo "smoke: the server exited"; exit 1; }
  sleep 0.2
done
"$CLI" health --server "127.0.0.1:$HEALTH"

ids() { sed -n 's/.*"output_ids":\[\([0-9,]*\)\].*/\1/p'; }
remote="$("$CLI" generate --server "127.0.0.1:$GRPC" --tls-ca "$work/tls/tls.crt" --auth-token-file "$work/auth/tokens" \
  --draft models/demo-draft --prompt "Once upon a time" --max-new-tokens 32 --json | ids)"
local_ids="$("$CLI" generate --target models/demo-target --prompt "Once upon a time" --max-new-tokens 32 --json | ids)"
[ -n "$remote" ] && [ "$remote" = "$local_ids" ] || { echo "smoke: ids differ: image '$remote' local '$local_ids'"; exit 1; }
echo "smoke: a TLS + token generation through the image gives the local target's ids"
if "$CLI" generate --server "127.0.0.1:$GRPC" --tls-ca "$work/tls/tls.crt" --prompt hi --max-new-tokens 4 >/dev/null 2>&1; then
  echo "smoke: a generation without a token was served"; exit 1
fi

# Inside: who the server runs as, and that nothing outside /tmp is writable.
pid="$(pgrep -f "splitspec-server --config" | head -1)"
uid="$(awk '/^Uid:/ {print $2}' "/proc/$pid/status")"
[ "$uid" = "${user%%:*}" ] || { echo "smoke: the server runs as uid $uid"; exit 1; }
nsenter -t "$pid" -m chroot --userspec="$user" "$rootfs" /bin/sh -c \
  'touch /etc/x 2>/dev/null && exit 1; touch /models/target/x 2>/dev/null && exit 1; touch /tmp/x' ||
  { echo "smoke: the image's root or models are writable, or /tmp is not"; exit 1; }
echo "smoke: runs as uid $uid; / and /models/target read-only, /tmp writable"

kill -TERM "$pid"
set +e
wait "$server_pid"
rc=$?
set -e
grep -q "event=signal signal=SIGTERM" "$work/server.log" && [ "$rc" -eq 0 ] ||
  { cat "$work/server.log"; echo "smoke: SIGTERM ended the server with $rc"; exit 1; }
server_pid=""
echo "smoke: SIGTERM drained and exited 0; the image works"
