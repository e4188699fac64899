#!/usr/bin/env bash
# Ablations of edge-fsd (the early-exit edge-cloud paper, Fig. 4 and Table 7) on loopback (0 ms):
# pre-draft threads 1, 2, 4, 8; gamma 2..8; client queue priority / fifo /
# random against server queue priority / fifo. Pre-drafting every round (the
# default), so the adaptive switch does not hide what is measured.
# NUM_PROMPTS (default 10) prompts of 128 tokens per row; the thread and queue
# rows draft GAMMA (default 3, the operating point) tokens a round. SERVER_ARGS go to
# splitspec-server, e.g. "--early-exit-layers 2,4,6": with one exit there is
# one early verdict per round and threads and queues have nothing to order.
set -euo pipefail
cd "$(dirname "$0")/.."
prompts=${PROMPTS:-../shared/prompts/spec_bench.jsonl}
n=${NUM_PROMPTS:-10}
gamma=${GAMMA:-3}
[[ -x build/bin/splitspec-server ]] || ./scripts/build.sh
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d)
server=""
stop() { if [[ -n $server ]]; then kill -TERM "$server"; wait "$server" 2>/dev/null || true; server=""; fi; rm -f "$tmp/port"; }
trap 'stop; rm -rf "$tmp"' EXIT
start() {
  build/bin/splitspec-server --target models/demo-target --listen 127.0.0.1:0 --port-file "$tmp/port" \
    --threads 1 --log-level warn ${SERVER_ARGS:-} "$@" &
  server=$!
  for _ in $(seq 600); do [[ -f $tmp/port ]] && break; sleep 0.1; done
}
bench() {
  build/bin/splitspec bench edge-cloud --server "127.0.0.1:$(cat "$tmp/port")" --draft models/demo-draft \
    --prompts "$prompts" --num-prompts "$n" --delays-ms 0 --modes edge-sd,edge-fsd --threads 1 \
    --json "$@" | python3 -c '
import json, sys
r = json.load(sys.stdin)["rows"][0]
sd, fsd = r["edge-sd"], r["edge-fsd"]
s = next(s for s in r["speedups"] if s["from"] == "edge-sd" and s["to"] == "edge-fsd")
print("| %s | %.3f | %.3f | %.3fx (%.3f-%.3f) | %.3f | %.2f | %.3f |" % (sys.argv[1], sd["ms_per_token"],
      fsd["ms_per_token"], s["speedup"], s["ci95"][0], s["ci95"][1], fsd["cache_miss_rate"], fsd["avg_exit_layer"],
      fsd["T_r_ms"]))' "$LABEL"
}
echo "| setting | edge-sd ms/token | edge-fsd ms/token | SD->FSD (95% interval) | r | Avg EE | T_r ms |"
echo "|---|---|---|---|---|---|---|"
start
for t in 1 2 4 8; do LABEL="threads $t" bench --gamma "$gamma" --predraft-threads "$t"; done
for g in 2 3 4 5 6 7 8; do LABEL="gamma $g" bench --gamma "$g"; done
for q in priority fifo random; do LABEL="client $q / server priority" bench --gamma "$gamma" --predraft-queue "$q"; done
stop
start --early-exit-queue fifo
for q in priority fifo random; do LABEL="client $q / server fifo" bench --gamma "$gamma" --predraft-queue "$q"; done
stop
