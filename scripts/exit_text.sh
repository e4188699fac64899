#!/usr/bin/env bash
# Text for training the served early exit on the target's own output: the
# target's greedy continuations of corpus openings. Serving verifies drafts
# against text the target itself generates, and an exit distilled on that
# matches the final layer there more often than one distilled on the corpus
# (see the README's edge-fsd section).
#   [JOBS=2] scripts/exit_text.sh TARGET_DIR CORPUS_FILE OUT_DIR [COUNT]
# Writes OUT_DIR/train.txt and OUT_DIR/valid.txt (every fifth continuation),
# one continuation per line: the first 24 words of a randomly chosen corpus
# line (fixed seed, listed in OUT_DIR/openings.txt) followed by 128 greedily
# generated tokens.
set -euo pipefail
[[ $# -ge 3 ]] || { echo "usage: scripts/exit_text.sh TARGET_DIR CORPUS_FILE OUT_DIR [COUNT]" >&2; exit 2; }
# Paths as the caller gave them, before moving to the checkout for its binary.
target=$(realpath -m "$1") corpus=$(realpath -m "$2") out=$(realpath -m "$3") count=${4:-320}
cd "$(dirname "$0")/.."
[[ -f $corpus ]] || { echo "exit_text: $corpus not found" >&2; exit 1; }
[[ -x build/bin/splitspec ]] || { echo "exit_text: build/bin/splitspec missing (run scripts/build.sh)" >&2; exit 1; }
mkdir -p "$out"
: > "$out/train.txt"
: > "$out/valid.txt"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
python3 - "$corpus" "$count" > "$out/openings.txt" <<'PY'
import random, sys
lines = [l.strip() for l in open(sys.argv[1], encoding="utf-8") if len(l.split()) > 12]
random.seed(7)
random.shuffle(lines)
for l in lines[: int(sys.argv[2])]:
    print(" ".join(l.split()[:24]))
PY
# One generation per opening, JOBS at a time (one thread each), each into a
# file named by the opening's line, so the result does not depend on which
# finishes first.
parts="$out/parts"
rm -rf "$parts"
mkdir -p "$parts"
continue_opening() {  # LINE: the target's continuation of the LINE-th opening
  local opening
  opening=$(sed -n "$1p" "$out/openings.txt")
  build/bin/splitspec generate --mode local-ar --target "$target" --prompt "$opening" --max-new-tokens 128 --json |
    python3 -c 'import json, sys; print(sys.argv[1] + json.load(sys.stdin)["text"].replace("\n", " "))' "$opening" \
    > "$parts/$(printf %06d "$1")"
}
export -f continue_opening
export out target parts
seq "$(wc -l < "$out/openings.txt")" | xargs -P "${JOBS:-2}" -I{} bash -c 'set -euo pipefail; continue_opening {}'
i=0
for f in "$parts"/*; do
  i=$((i + 1))
  file=train.txt
  (( i % 5 == 0 )) && file=valid.txt
  cat "$f" >> "$out/$file"
done
rm -rf "$parts"
echo "exit_text: $(wc -l < "$out/train.txt") training and $(wc -l < "$out/valid.txt") held-out continuations in $out"
