#!/usr/bin/env bash
# Local-mode benchmark (issue: a target larger than memory, streamed from
# disk). Runs `splitspec bench local` with the demo pair: Std, StdPL,
# local-sd, the paper's tree decoder (8 nodes, one per draft forward), our
# batched tree, tree + provisional, tree + fallback and tree + fallback +
# provisional, each prompt through every configuration in turn, at budgets
# of 25%, 10% and 50% of the target's weights as stored. Weights are read with O_DIRECT, so the page
# cache never holds them. Extra arguments go to the bench, e.g.
# --num-prompts 10 or --budgets 25%.
set -euo pipefail
cd "$(dirname "$0")/.."
prompts=${PROMPTS:-../shared/prompts/spec_bench.jsonl}
if [[ ! -f $prompts ]]; then
  echo "bench/local.sh: $prompts not found (set PROMPTS=FILE.jsonl)" >&2
  exit 1
fi
[[ -x build/bin/splitspec ]] || ./scripts/build.sh
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
build/bin/splitspec bench local --target models/demo-target --draft models/demo-draft --prompts "$prompts" \
  --num-prompts 40 --max-new-tokens 128 --budgets 25%,10%,50% --threads 1 \
  --configs std,stdpl,local-sd,tree/nodes=8/width=1,tree,tree+provisional,tree+fallback,tree+fallback+provisional "$@"
