#!/usr/bin/env bash
# SplitSpec against llama.cpp, head to head, on the same models, prompts and
# threads: exactness, tokenization, 1- and k-token forwards, end-to-end
# decoding (ours: local-ar, local-sd, local-tree, recurrent; llama.cpp: plain
# and its draft-model and input-lookup speculative decoding), RSS, and the
# streamed target at Q4_0 against F32, and a 1B-class model in Llama 3.2 1B's
# shape at F16, Q8_0, Q4_0 and Q4_K_M (llama.cpp's own quantizer writes the
# quantized files; --sections billion runs it alone). A benchmark, not a test.
#
#   bench/vs_llamacpp.sh [--quick] [--threads 1,2] [--out bench/results/vs_llamacpp.md]
#
# llama.cpp comes from npm's node-llama-cpp (prebuilt for x64 and arm64),
# installed under build/llamacpp, never a dependency of SplitSpec. Its C
# library is called from bench/llamacpp_bench.c, compiled here against the
# llama.h of the very release it ships (from the package's source bundle; no
# llama.cpp code is kept in this repository). Speculative decoding has no C
# entry point there, so it runs through node-llama-cpp's JavaScript, whose
# per-token cost is stated beside it. Models are converted with our own
# `splitspec convert --to-gguf`. Runs one process at a time, interleaved ABBA.
set -euo pipefail
cd "$(dirname "$0")/.."
NLC_VERSION="${NLC_VERSION:-3.22.1}"
L=build/llamacpp
case "$(uname -m)" in
  x86_64) PKG=linux-x64 ;;
  aarch64) PKG=linux-arm64 ;;
  *) echo "vs_llamacpp: no prebuilt llama.cpp for $(uname -m)" >&2; exit 1 ;;
esac
[ -x build/bin/splitspec ] || ./scripts/build.sh
command -v npm >/dev/null || { echo "vs_llamacpp: npm is needed (apt-get install npm)" >&2; exit 1; }
if [ ! -d "$L/node_modules/@node-llama-cpp/$PKG" ]; then
  mkdir -p "$L"
  # The CPU build only: the package's optional CUDA and Vulkan builds are 600 MB.
  npm install --prefix "$L" --no-save --no-audit --no-fund --omit=optional --ignore-scripts \
    "node-llama-cpp@$NLC_VERSION" "@node-llama-cpp/$PKG@$NLC_VERSION" >&2
fi
BINS="$L/node_modules/@node-llama-cpp/$PKG/bins/$PKG"
if [ ! -f "$L/include/llama.h" ]; then
  tmp="$(mktemp -d)"
  git init -q "$tmp"
  git -C "$tmp" fetch -q "$PWD/$L/node_modules/node-llama-cpp/llama/gitRelease.bundle" HEAD
  git -C "$tmp" archive FETCH_HEAD include ggml/include | tar -x -C "$L"
  rm -rf "$tmp"
fi
# The 1B-class section's vocabulary (Llama 3's) comes with the test material.
[ -f "$L/src/models/ggml-vocab-llama-bpe.gguf" ] || ./scripts/setup_test_material.sh >&2
libllama="$(basename "$(ls "$BINS"/libllama.v*.so)")"
libggml="$(basename "$(ls "$BINS"/libggml.v*.so)")"
cc -O2 -Wall -I"$L/include" -I"$L/ggml/include" bench/llamacpp_bench.c -o "$L/llamacpp_bench" \
  -L"$BINS" -l:"$libllama" -l:"$libggml" -l:libggml-base.so -lm -Wl,-rpath,"$PWD/$BINS"
exec python3 bench/vs_llamacpp.py --splitspec build/bin/splitspec --llama "$L/llamacpp_bench" --bins "$BINS" \
  --node-modules "$L/node_modules" "$@"
