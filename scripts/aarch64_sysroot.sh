#!/usr/bin/env bash
# An AArch64 sysroot of Debian's arm64 -dev packages for cross-building the
# client (scripts/build_aarch64_client.sh). The packages are downloaded and
# unpacked under the build tree, not installed: Debian's amd64 and arm64
# libsentencepiece-dev cannot be installed side by side, and a cross build
# must not change the host's libraries. Safe to re-run: it stops early when
# the sysroot is complete.
#
#   scripts/aarch64_sysroot.sh [DIR]      (default build/aarch64-sysroot)
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(realpath -m "${1:-build/aarch64-sysroot}")"

# What libsplitspec, the CLI, the Python module and the client tests link;
# the rest of the closure comes from their dependencies. nlohmann-json and
# CLI11 are header-only (Architecture: all) but are found through the
# sysroot too, so that nothing of the host's is picked up.
PACKAGES=(libgrpc++-dev libprotobuf-dev libspdlog-dev libsentencepiece-dev libpcre2-dev
  libsleef-dev libgtest-dev nlohmann-json3-dev libcli11-dev pybind11-dev libpython3-dev
  libgomp1
  # The interpreter, to import the arm64 module under QEMU.
  python3.11-minimal)
# The cross compiler brings its own C and C++ runtimes (/usr/aarch64-linux-gnu);
# a second copy from the sysroot would shadow them. They are downloaded all
# the same, for their shlibs files: which package an arm64 .deb of ours
# depends on for each library it links (scripts/cpack_cross_depends.cmake).
SKIP='^(libc6|libc6-dev|libstdc\+\+6|libgcc-s1|libgcc-12-dev|libstdc\+\+-12-dev|linux-libc-dev|libcrypt1|libcrypt-dev|gcc-12-base|libgomp1|libasan8|libtsan2|libubsan1|liblsan0|libitm1|libatomic1|libhwasan0)$'

stamp="$root/.complete"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "${PACKAGES[*]}" ]; then
  echo "aarch64_sysroot: $root is complete"
  exit 0
fi

if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "aarch64_sysroot: adding the arm64 architecture to apt (downloads only; nothing arm64 is installed)"
  $SUDO dpkg --add-architecture arm64
  $SUDO apt-get update -qq
fi

# The dependency closure, arm64 packages and the architecture-independent
# ones the arm64 packages pull in (headers such as libabsl-dev's are arm64).
mapfile -t closure < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
    --no-breaks --no-replaces --no-enhances "${PACKAGES[@]/%/:arm64}" 2>/dev/null \
  | awk '/^[a-z0-9]/ {print $1}' | grep ':arm64$' | sed 's/:arm64$//' | sort -u)
[ ${#closure[@]} -gt 0 ] || { echo "aarch64_sysroot: apt-cache found no arm64 packages" >&2; exit 1; }

debs="$root.debs"
mkdir -p "$debs"
echo "aarch64_sysroot: downloading ${#closure[@]} packages into $debs"
# Virtual packages (no candidate) have no file to download; apt-cache lists
# their providers separately, which are in the closure.
want=()
for p in "${closure[@]}"; do
  compgen -G "$debs/${p}_*_arm64.deb" >/dev/null && continue
  if apt-cache show "$p:arm64" >/dev/null 2>&1; then want+=("$p:arm64"); fi
done
# As root, apt's download sandbox user cannot write into the build tree: say
# so to apt instead of printing its warning for every package.
apt_dl=(apt-get download -qq)
[ "$(id -u)" -eq 0 ] && apt_dl+=(-o APT::Sandbox::User=root)
[ ${#want[@]} -eq 0 ] || (cd "$debs" && "${apt_dl[@]}" "${want[@]}")
# Architecture-independent packages come without the :arm64 suffix.
for p in nlohmann-json3-dev libcli11-dev pybind11-dev; do
  (cd "$debs" && ls "${p}"_*.deb >/dev/null 2>&1 || "${apt_dl[@]}" "$p")
done

rm -rf "$root"
mkdir -p "$root"
for deb in "$debs"/*.deb; do
  pkg=$(dpkg-deb -f "$deb" Package)
  # Debian's shlibs lines: library name, soname version, dependency.
  dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./shlibs 2>/dev/null | grep -v '^#' >>"$root/shlibs" || true
  grep -Eq "$SKIP" <<<"$pkg" || dpkg-deb -x "$deb" "$root"
done
# Debian's dev symlinks are relative except a few that point at /lib or
# /usr/lib absolutely; re-point those into the sysroot.
find "$root" -type l -lname '/*' | while read -r link; do
  target="$(readlink "$link")"
  ln -sfn "$root$target" "$link"
done
# gRPC's CMake package insists its code generators exist beside it; they run
# on the build machine, so they are the host's (protobuf-compiler-grpc).
mkdir -p "$root/usr/bin"
for plugin in /usr/bin/grpc_*_plugin; do ln -sfn "$plugin" "$root/usr/bin/"; done
echo "${PACKAGES[*]}" > "$stamp"
echo "aarch64_sysroot: $root ready ($(du -sh "$root" | cut -f1))"
