#!/usr/bin/env bash
# Builds the splitspec-server OCI image from Debian packages and this tree's
# binaries, with two Debian tools: mmdebstrap makes the root file system
# (Debian bookworm, the essential set plus the packages the binaries link),
# umoci packs it as an OCI image layout. No Dockerfile, no daemon.
#   deploy/image/build.sh [--gpu] [OUT_DIR (build/image)] [TAG (0.3.0; 0.3.0-gpu with --gpu)]
# --gpu: the GPU image the gpu overlay runs: the same programs, which must
# have been built with the CUDA backend (its runtime is linked in; no CUDA
# toolkit or library goes into the image: the node's NVIDIA container
# runtime mounts the driver's), the GPU overlay's server.json ("device":
# "cuda"), and the variables that make that runtime expose the GPU.
# Needs root (mmdebstrap's root mode; `sudo`), scripts/build.sh's binaries,
# and the Debian mirror. Afterwards:
#   skopeo copy oci:build/image/splitspec-server:0.3.0 docker://REGISTRY/splitspec-server:0.3.0
#   podman run --read-only -v ./models/demo-target:/models/target:ro oci:build/image/splitspec-server:0.3.0 ...
# The image: user 10001 (no root), splitspec-server as entrypoint, the
# splitspec CLI beside it (info and health from `kubectl exec`), no model
# (mounted at /models/target), nothing written outside /tmp.
set -euo pipefail
cd "$(dirname "$0")/../.."
GPU=0
if [ "${1:-}" = "--gpu" ]; then GPU=1; shift; fi
OUT="${1:-build/image}"
TAG="${2:-0.3.0}"
CONFIG=deploy/kubernetes/base/server.json
ENV=()
if [ "$GPU" = 1 ]; then
  [ -n "${2:-}" ] || TAG="$TAG-gpu"
  CONFIG=deploy/kubernetes/overlays/gpu/server.json
  ENV=(--config.env NVIDIA_VISIBLE_DEVICES=all --config.env NVIDIA_DRIVER_CAPABILITIES=compute,utility)
fi
BINARIES=(build/bin/splitspec-server build/bin/splitspec)
# The tokenizer's SentencePiece module, which the binaries dlopen from ../lib.
MODULES=(build/lib/libsplitspec_sentencepiece.so)
for b in "${BINARIES[@]}" "${MODULES[@]}"; do [ -x "$b" ] || { echo "image: $b is missing: run scripts/build.sh first"; exit 1; }; done
if [ "$GPU" = 1 ] && ! build/bin/splitspec-server --check-config --config "$CONFIG" --target models/demo-target >/dev/null; then
  echo "image: build/bin/splitspec-server has no CUDA backend: build where nvcc is found (scripts/build.sh)"; exit 1
fi
for t in mmdebstrap umoci readelf; do
  command -v "$t" >/dev/null || { echo "image: needs $t (apt-get install mmdebstrap umoci binutils)"; exit 2; }
done
[ "$(id -u)" -eq 0 ] || { echo "image: run as root (mmdebstrap --mode=root, umoci keeping file owners)"; exit 2; }

# The runtime packages: those owning the libraries the binaries name
# (DT_NEEDED); apt brings their own dependencies. The server and the CLI link
# no LibTorch (training, splitspec-train, is not in the image).
packages=(ca-certificates)
cache="$(ldconfig -p)"
while read -r lib; do
  path="$(awk -v l="$lib" '$1 == l && /x86-64/ && !found {print $NF; found = 1}' <<<"$cache")"
  [ -n "$path" ] || { echo "image: cannot find $lib"; exit 1; }
  pkg="$(dpkg -S "$path" 2>/dev/null || dpkg -S "$(readlink -f "$path")" 2>/dev/null || true)"
  [ -n "$pkg" ] || { echo "image: no Debian package owns $path"; exit 1; }
  packages+=("${pkg%%:*}")
done < <(for b in "${BINARIES[@]}" "${MODULES[@]}"; do readelf -d "$b" | sed -n 's/.*NEEDED.*\[\(.*\)\]/\1/p'; done | sort -u)
mapfile -t packages < <(printf '%s\n' "${packages[@]}" | sort -u)
echo "image: Debian packages: ${packages[*]}"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# Documentation, manuals and locales are left out of the image.
mmdebstrap --mode=root --variant=essential --include="$(IFS=,; echo "${packages[*]}")" \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --customize-hook='echo "splitspec:x:10001:10001:splitspec-server:/nonexistent:/usr/sbin/nologin" >>"$1/etc/passwd"' \
  --customize-hook='echo "splitspec:x:10001:" >>"$1/etc/group"' \
  --customize-hook='mkdir -p "$1/models/target" "$1/etc/splitspec/tls" "$1/etc/splitspec/auth" && chmod 1777 "$1/tmp"' \
  --customize-hook="copy-in ${BINARIES[*]} /usr/local/bin" \
  --customize-hook='mkdir -p "$1/usr/local/lib"' \
  --customize-hook="copy-in ${MODULES[*]} /usr/local/lib" \
  --customize-hook="copy-in $CONFIG /etc/splitspec" \
  --customize-hook='rm -rf "$1/var/cache/apt"/* "$1/var/lib/apt/lists"/* "$1/var/log"/*' \
  bookworm "$work/rootfs.tar"

# One layout holds both images (TAG and TAG-gpu); building one replaces only its tag.
mkdir -p "$OUT"
layout="$OUT/splitspec-server"
if [ -d "$layout" ]; then
  umoci rm --image "$layout:$TAG" 2>/dev/null || true
else
  umoci init --layout "$layout"
fi
umoci new --image "$layout:$TAG"
umoci unpack --image "$layout:$TAG" "$work/bundle"
tar -xf "$work/rootfs.tar" -C "$work/bundle/rootfs"
umoci repack --image "$layout:$TAG" "$work/bundle"
umoci config --image "$layout:$TAG" \
  --config.user 10001:10001 \
  --config.workingdir / \
  --config.entrypoint /usr/local/bin/splitspec-server \
  --config.cmd --config --config.cmd /etc/splitspec/server.json \
  --config.env OPENBLAS_NUM_THREADS=1 "${ENV[@]}" \
  --config.exposedports 50051/tcp --config.exposedports 50052/tcp --config.exposedports 9090/tcp \
  --config.volume /models/target \
  --config.label org.opencontainers.image.title=splitspec-server \
  --config.label "org.opencontainers.image.version=$TAG" \
  --config.label "org.opencontainers.image.revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)" \
  --config.label org.opencontainers.image.base.name=debian:bookworm
umoci gc --layout "$layout"
echo "image: $layout:$TAG ($(du -sh "$layout" | cut -f1) compressed)"
