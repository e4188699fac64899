#!/usr/bin/env bash
# Installs every Debian package SplitSpec builds and runs with. Safe to re-run:
# it only calls apt-get when something is missing.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config
  libtorch-dev
  # Without it LibTorch falls back to reference BLAS and a k-token forward
  # costs k times a 1-token one, which defeats speculative decoding.
  libopenblas0-pthread
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  # The server's /metrics endpoint.
  prometheus-cpp-dev
  libspdlog-dev libgtest-dev libgmock-dev
  libsentencepiece-dev
  # Byte-level BPE pre-tokenizers: Unicode classes (\p{L}, \p{N}) and lookahead.
  libpcre2-dev
  # SLEEF: the vectorised exp of the forward kernels (LibTorch uses it too).
  libsleef-dev
  nlohmann-json3-dev libcli11-dev
  # The server's OpenAI-compatible HTTP endpoint: Boost.Beast over OpenSSL.
  libboost-dev libssl-dev
  # The Python module `splitspec` (client/python); without them it is skipped.
  # pip, venv and setuptools: `pip install ./client/python`, offline.
  pybind11-dev python3-dev python3-pip python3-venv python3-setuptools python3-wheel-whl
  # The ARM kernels and the client are cross-built and checked here too,
  # under emulation (scripts/test_arm_kernels.sh, tests/package/aarch64_test.sh;
  # scripts/aarch64_sysroot.sh downloads the arm64 libraries).
  g++-aarch64-linux-gnu qemu-user
  # llama.cpp's gguf-py (its GGUF writer, from the test material) needs
  # NumPy and PyYAML; the tests write models of new families with it.
  python3-numpy python3-yaml
  # The TLS tests make their certificates with the openssl command.
  openssl
  # scripts/setup_test_material.sh fetches Debian 11's CMake with it.
  curl xz-utils
  # The kernel sources are also checked with clang, which scripts/fuzz.sh
  # builds with (tests/clang_compile_test.sh); libomp-14-dev has clang's omp.h.
  clang-14 libomp-14-dev
)
# deploy/'s checks run on Node.js; a machine with Node from elsewhere keeps it.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then PACKAGES+=(nodejs npm); fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
else
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# kubectl, promtool and the schema packages that check deploy/, under build/tools.
"$(dirname "$0")/setup_deploy_tools.sh"
