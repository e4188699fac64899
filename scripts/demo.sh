#!/usr/bin/env bash
# The main command: install, build, and generate text locally with a real
# model. (The edge-cloud demo replaces this once the server exists.)
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh

MODEL="${MODEL:-}"
if [ -z "$MODEL" ]; then
  if [ -f models/demo-target/config.json ]; then
    MODEL=models/demo-target
  elif [ -f ../shared/models/stories260K/config.json ]; then
    MODEL=../shared/models/stories260K
  else
    echo "demo: no model found; set MODEL=DIR to a Hugging Face LLaMA directory" >&2
    exit 1
  fi
fi
PROMPT="${PROMPT:-The President of the United States}"
echo "== splitspec generate --model $MODEL --prompt \"$PROMPT\" (sampled, seed 1)"
printf '%s' "$PROMPT"  # generate prints only the continuation
# Seeded sampling: small models loop under greedy decoding.
./build/bin/splitspec generate --model "$MODEL" --prompt "$PROMPT" --max-new-tokens 96 \
  --temperature 0.7 --top-k 40 --seed 1 --threads 2
