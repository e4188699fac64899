#!/usr/bin/env bash
# Runs the image built by deploy/image/build.sh the way Kubernetes runs the
# Deployment: the image's own entrypoint, user and environment (from its OCI
# config), its root file system read-only, the demo target read-only at
# /models/target, a tmpfs at /tmp, a TLS certificate and a token file where
# the Secrets go. Then, from outside: health on the plaintext port, a TLS and
# token generation through the image's server whose ids must equal the local
# target's, writes refused, and SIGTERM draining to exit code 0.
#   deploy/image/smoke.sh [--gpu] [--runtime crun|runc] [OUT_DIR (build/image)] [TAG (0.3.0; 0.3.0-gpu with --gpu)]
# --gpu: the GPU image (deploy/image/build.sh --gpu). On a machine with an
# NVIDIA GPU the host's driver library is bound in, as the NVIDIA container
# runtime does, and the image's ids must equal `splitspec generate --device
# cuda` alone; on one without, the image must refuse to start within a
# minute, naming why, and that is what is checked.
# Without --runtime it starts the process itself, in a private mount
# namespace with chroot. With one, an OCI runtime (Debian's crun or runc, the
# ones CRI-O and containerd call) runs the bundle that umoci unpacks, with
# the container's security context and resource limits read from
# deploy/kubernetes/base/deployment.yaml: capabilities dropped, no new
# privileges, its own PID, IPC, UTS and mount namespaces and cgroup. It keeps
# the host's network namespace, so the checks reach it on loopback, where a
# pod would have its own.
# Needs root (unshare, mount, chroot; or the runtime) and python3 (with
# python3-yaml for --runtime).
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNTIME=""
GPU=0
while [ $# -gt 0 ]; do
  case "$1" in
    --gpu) GPU=1; shift ;;
    --runtime)
      RUNTIME="${2:?--runtime needs crun or runc}"
      shift 2
      command -v "$RUNTIME" >/dev/null || { echo "smoke: no $RUNTIME (apt-get install $RUNTIME)"; exit 2; }
      python3 -c 'import yaml' 2>/dev/null || { echo "smoke: --runtime needs python3-yaml"; exit 2; } ;;
    *) break ;;
  esac
done
OUT="${1:-build/image}"
TAG="${2:-0.3.0}"
if [ "$GPU" = 1 ] && [ -z "${2:-}" ]; then TAG="$TAG-gpu"; fi
# The host's NVIDIA driver library, where there is a GPU: bound into the
# container as the NVIDIA container runtime would.
DRIVER=""
if [ "$GPU" = 1 ] && [ -e /dev/nvidia0 ]; then
  [ -z "$RUNTIME" ] || { echo "smoke: --gpu on a GPU machine runs without --runtime (the NVIDIA runtime hook is not emulated)"; exit 2; }
  DRIVER="$(dirname "$(ldconfig -p | awk '/libcuda\.so\.1 / {print $NF; exit}')")"
  [ -n "$DRIVER" ] && [ "$DRIVER" != . ] || { echo "smoke: /dev/nvidia0 but no libcuda.so.1 on this host"; exit 1; }
fi
layout="$OUT/splitspec-server"
[ -d "$layout" ] || { echo "smoke: no image at $layout: run deploy/image/build.sh"; exit 1; }
CLI=build/bin/splitspec
work="$(mktemp -d)"
server_pid=""
name="splitspec-smoke-$$"
cleanup() {
  [ -z "$server_pid" ] || kill -9 "$server_pid" 2>/dev/null || true
  [ -z "$RUNTIME" ] || "$RUNTIME" delete -f "$name" >/dev/null 2>&1 || true
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
if [ "$GPU" = 1 ]; then
  grep -q "NVIDIA_VISIBLE_DEVICES=all" <<<"$env" && grep -q "NVIDIA_DRIVER_CAPABILITIES=compute" <<<"$env" ||
    { echo "smoke: the GPU image does not ask the NVIDIA container runtime for the GPU ($env)"; exit 1; }
  [ -z "$DRIVER" ] || env="$env LD_LIBRARY_PATH=/usr/local/nvidia/lib64"
fi

mkdir -p "$work/tls" "$work/auth"
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "/CN=splitspec-server" -addext "subjectAltName=IP:127.0.0.1" \
  -keyout "$work/tls/tls.key" -out "$work/tls/tls.crt" 2>/dev/null
echo "smoke-token" >"$work/auth/tokens"
chmod -R a+rX "$work/tls" "$work/auth"

# The server listens on the host's network: take ports nobody uses.
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
GRPC=$(port) HEALTH=$(port) METRICS=$(port)
rootfs="$work/bundle/rootfs"
if [ -z "$RUNTIME" ]; then
  unshare -m --propagation private sh -c '
    set -e
    r="$1"
    if [ -n "$9" ]; then
      mkdir -p "$r/usr/local/nvidia/lib64"
      mount --bind "$9" "$r/usr/local/nvidia/lib64"
    fi
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
  ' smoke "$rootfs" "$work" "$env" "$user" "$args" "$GRPC" "$HEALTH" "$METRICS" "$DRIVER" >"$work/server.log" 2>&1 &
  server_pid=$!
else
  # The bundle's config, made what the Deployment's container would get.
  python3 - "$work" "$PWD/models/demo-target" deploy/kubernetes/base/deployment.yaml "$GRPC" "$HEALTH" "$METRICS" <<'PY'
import json, re, sys, yaml
work, models, manifest, grpc_port, health_port, metrics_port = sys.argv[1:]
deployment = yaml.safe_load(open(manifest))
container = next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "server")
security, limits = container["securityContext"], container["resources"]["limits"]
path = f"{work}/bundle/config.json"
c = json.load(open(path))
p = c["process"]
p["terminal"] = False
p["args"] += ["--listen", f"127.0.0.1:{grpc_port}", "--health-listen", f"127.0.0.1:{health_port}",
              "--metrics-listen", f"127.0.0.1:{metrics_port}"]
p["env"].append("OMP_NUM_THREADS=1")
assert security["capabilities"]["drop"] == ["ALL"], "the Deployment no longer drops ALL capabilities"
p["capabilities"] = {k: [] for k in ("bounding", "effective", "inheritable", "permitted", "ambient")}
p["noNewPrivileges"] = not security["allowPrivilegeEscalation"]
c["root"]["readonly"] = security["readOnlyRootFilesystem"]
c["hostname"] = "splitspec-server"
def bind(src, dst):
    return {"destination": dst, "type": "bind", "source": src, "options": ["rbind", "ro", "nosuid", "nodev"]}
c["mounts"] = [m for m in c["mounts"] if m["destination"] != "/models/target"] + [
    bind(models, "/models/target"), bind(f"{work}/tls", "/etc/splitspec/tls"),
    bind(f"{work}/auth", "/etc/splitspec/auth"),
    {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "size=64m"]}]
c["linux"]["namespaces"] = [n for n in c["linux"]["namespaces"] if n["type"] != "network"]
units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
memory, cpu = re.fullmatch(r"(\d+)(Ki|Mi|Gi)", str(limits["memory"])), str(limits["cpu"])
cpus = float(cpu.rstrip("m")) / (1000 if cpu.endswith("m") else 1)
c["linux"]["resources"]["memory"] = {"limit": int(memory[1]) * units[memory[2]]}
c["linux"]["resources"]["cpu"] = {"period": 100000, "quota": int(cpus * 100000)}
json.dump(c, open(path, "w"), indent=1)
print(c["linux"]["resources"]["memory"]["limit"], file=open(f"{work}/memory_limit", "w"))
PY
  "$RUNTIME" run --bundle "$work/bundle" "$name" >"$work/server.log" 2>&1 &
  server_pid=$!
  echo "smoke: $RUNTIME runs the bundle as container $name"
fi

if [ "$GPU" = 1 ] && [ -z "$DRIVER" ]; then
  # No GPU here: the image must refuse to start, soon and saying why.
  for _ in $(seq 300); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.2; done
  if kill -0 "$server_pid" 2>/dev/null; then echo "smoke: the GPU image still runs after a minute on a machine with no GPU"; exit 1; fi
  set +e
  wait "$server_pid"
  rc=$?
  set -e
  server_pid=""
  grep -q "device cuda: no NVIDIA driver or GPU" "$work/server.log" && [ "$rc" -ne 0 ] ||
    { cat "$work/server.log"; echo "smoke: the GPU image without a GPU exited $rc without saying why"; exit 1; }
  echo "smoke: no GPU here: the GPU image refused to start (exit $rc): $(grep -o 'device cuda: .*' "$work/server.log" | head -1)"
  exit 0
fi
for _ in $(seq 100); do
  "$CLI" health --server "127.0.0.1:$HEALTH" >/dev/null 2>&1 && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$work/server.log"; echo "smoke: the server exited"; exit 1; }
  sleep 0.2
done
"$CLI" health --server "127.0.0.1:$HEALTH"

ids() { sed -n 's/.*"output_ids":\[\([0-9,]*\)\].*/\1/p'; }
remote="$("$CLI" generate --server "127.0.0.1:$GRPC" --tls-ca "$work/tls/tls.crt" --auth-token-file "$work/auth/tokens" \
  --draft models/demo-draft --prompt "Once upon a time" --max-new-tokens 32 --json | ids)"
device=cpu
[ "$GPU" = 0 ] || device=cuda
local_ids="$("$CLI" generate --target models/demo-target --device "$device" --prompt "Once upon a time" --max-new-tokens 32 --json | ids)"
[ -n "$remote" ] && [ "$remote" = "$local_ids" ] || { echo "smoke: ids differ: image '$remote' local '$local_ids'"; exit 1; }
echo "smoke: a TLS + token generation through the image gives the local target's ids"
if "$CLI" generate --server "127.0.0.1:$GRPC" --tls-ca "$work/tls/tls.crt" --prompt hi --max-new-tokens 4 >/dev/null 2>&1; then
  echo "smoke: a generation without a token was served"; exit 1
fi

# Inside: who the server runs as, and that nothing outside /tmp is writable.
writes='touch /etc/x 2>/dev/null && exit 1; touch /models/target/x 2>/dev/null && exit 1; touch /tmp/x'
if [ -z "$RUNTIME" ]; then
  pid="$(pgrep -f "splitspec-server --config" | head -1)"
  inside() { nsenter -t "$pid" -m chroot --userspec="$user" "$rootfs" /bin/sh -c "$1"; }
else
  pid="$("$RUNTIME" state "$name" | python3 -c 'import json, sys; print(json.load(sys.stdin)["pid"])')"
  inside() { "$RUNTIME" exec --user "$user" "$name" /bin/sh -c "$1"; }
  caps="$(awk '/^CapEff:/ {print $2}' "/proc/$pid/status")"
  [ "$caps" = "0000000000000000" ] || { echo "smoke: the server has capabilities $caps"; exit 1; }
  inside 'tr "\0" " " </proc/1/cmdline' | grep -q "^/usr/local/bin/splitspec-server " ||
    { echo "smoke: the server is not pid 1 of its own PID namespace"; exit 1; }
  # The memory limit the kernel enforces on the container's cgroup (v1 or v2).
  memcg="$(awk -F: '$2 == "memory" {print $3}' "/proc/$pid/cgroup")"
  if [ -n "$memcg" ]; then limit="$(cat "/sys/fs/cgroup/memory$memcg/memory.limit_in_bytes")"
  else limit="$(cat "/sys/fs/cgroup$(awk -F: '$1 == "0" {print $3}' "/proc/$pid/cgroup")/memory.max")"; fi
  [ "$limit" = "$(cat "$work/memory_limit")" ] || { echo "smoke: the container's memory limit is $limit"; exit 1; }
  echo "smoke: pid 1 of its own PID namespace, no capabilities, memory limit $limit bytes"
fi
uid="$(awk '/^Uid:/ {print $2}' "/proc/$pid/status")"
[ "$uid" = "${user%%:*}" ] || { echo "smoke: the server runs as uid $uid"; exit 1; }
inside "$writes" || { echo "smoke: the image's root or models are writable, or /tmp is not"; exit 1; }
echo "smoke: runs as uid $uid; / and /models/target read-only, /tmp writable"

if [ -z "$RUNTIME" ]; then kill -TERM "$pid"; else "$RUNTIME" kill "$name" TERM; fi
set +e
wait "$server_pid"
rc=$?
set -e
grep -q "event=signal signal=SIGTERM" "$work/server.log" && [ "$rc" -eq 0 ] ||
  { cat "$work/server.log"; echo "smoke: SIGTERM ended the server with $rc"; exit 1; }
server_pid=""
echo "smoke: SIGTERM drained and exited 0; the image works"
