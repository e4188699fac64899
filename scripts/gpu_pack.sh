#!/usr/bin/env bash
# Packs what scripts/gpu_check.sh runs on a GPU machine, from this machine's
# build (scripts/build.sh, with the CUDA backend: nvcc is on every machine
# here): the server, the CLI, the example client, the GPU test program, the
# GPU benchmark, the tokenizer's helper and module, the shared libraries
# they link but glibc's (the GPU machine's is newer; its libstdc++ and
# libgcc too), llama.cpp's vocabularies of the five families
# (scripts/setup_test_material.sh) and the benchmark prompts (../shared).
#   scripts/gpu_pack.sh   ->  build/gpu/pack.tar.xz
# The device tool carries build/gpu (64 MiB with the working tree, which
# holds the demo models): the pack stays under 30 MiB.
set -euo pipefail
cd "$(dirname "$0")/.."
B=build
OUT=build/gpu
BINS=(splitspec-server splitspec splitspec-example splitspec_backend_tests splitspec-gpu-bench splitspec-spm-serve)
MODULES=(libsplitspec_sentencepiece.so)
for b in "${BINS[@]}"; do [ -x "$B/bin/$b" ] || { echo "gpu_pack: $B/bin/$b is missing: scripts/build.sh (with nvcc) first"; exit 1; }; done
"$B/bin/splitspec-server" --check-config --target models/demo-target --device cuda >/dev/null ||
  { echo "gpu_pack: $B/bin/splitspec-server has no CUDA backend"; exit 1; }

stage="$OUT/stage"
rm -rf "$stage" "$OUT/pack.tar.xz"
mkdir -p "$stage/bin" "$stage/lib" "$stage/vocab"
for b in "${BINS[@]}"; do cp "$B/bin/$b" "$stage/bin/"; done
for m in "${MODULES[@]}"; do cp "$B/lib/$m" "$stage/lib/"; done
# Every library they load but glibc's own.
for f in "$stage"/bin/* "$stage"/lib/*.so; do ldd "$f"; done | awk '/=> \// {print $1, $3}' | sort -u |
  while read -r name path; do
    case "$name" in
      ld-linux*|libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libresolv.so*|libutil.so*|libnsl.so*|libanl.so*) ;;
      libstdc++.so*|libgcc_s.so*) ;;  # the GPU machine's are newer
      *) cp -L "$path" "$stage/lib/$name" ;;
    esac
  done
models=$B/llamacpp/src/models
for v in llama-bpe qwen2 phi-3 gpt-2; do
  if [ -f "$models/ggml-vocab-$v.gguf" ]; then cp "$models/ggml-vocab-$v.gguf" "$stage/vocab/"; else
    echo "gpu_pack: no $models/ggml-vocab-$v.gguf (scripts/setup_test_material.sh): that family is left out"; fi
done
[ -f ../shared/prompts/spec_bench.jsonl ] && cp ../shared/prompts/spec_bench.jsonl "$stage/" ||
  echo "gpu_pack: no ../shared/prompts/spec_bench.jsonl: the comparisons use built-in prompts"
git rev-parse --short HEAD >"$stage/COMMIT"
git status --porcelain --untracked-files=no | grep -q . && echo "dirty" >>"$stage/COMMIT" || true
tar -C "$stage" -cf - . | xz -9 -T0 >"$OUT/pack.tar.xz"
rm -rf "$stage"
size=$(stat -c %s "$OUT/pack.tar.xz")
echo "gpu_pack: $OUT/pack.tar.xz, $((size >> 20)) MiB ($(cat <(tar -tJf "$OUT/pack.tar.xz" | grep -c /lib/)) libraries)"
[ "$size" -lt $((30 << 20)) ] || { echo "gpu_pack: over 30 MiB: the device tool carries 64 MiB with the working tree"; exit 1; }
