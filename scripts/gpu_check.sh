#!/usr/bin/env bash
# The CUDA backend's checks on a GPU machine, in stages ordered by what
# matters most; each writes its results as it ends, so a later stage's
# failure or timeout loses nothing. From the repository root, with the pack
# of scripts/gpu_pack.sh at build/gpu/pack.tar.xz (the device tool carries
# build/gpu; no build happens there):
#   scripts/gpu_check.sh                      results in $OUT (the device tool's), else build/gpu-results
# Stages:
#   1. linear      the GPU's products against the CPU reference, bit for bit
#                  (quantized, every row count 1-64), float ones batch-invariant
#   2. invariance  every weight type x KV type: verification = steps, batch =
#                  each alone, tree = chain, chunked prefill = one prefill;
#                  taps, out of memory, random targets
#   3. numerics    the five families and the demo target, GPU against CPU:
#                  logits NMSE and greedy divergences (splitspec-gpu-bench compare)
#   4. end_to_end  a server on the GPU: cloud-ar, edge-sd, edge-fsd, server+lut
#                  greedy equal `generate --device cuda` alone; early verdicts
#                  leave before their forward ends (server debug log); sampled,
#                  the first token follows the target's distribution
#   5. speed       splitspec-gpu-bench speed: 1B and 8B shapes, BF16 and Q4_K_M
#   6. torch       bench/gpu_torch.py: transformers' Llama, eager and compiled
# Within GPU_CHECK_SECONDS (default 300) in all. At most 8 files come back:
# summary.md, logs.txt and six JSON files (bench/gpu_report.py turns them
# into bench/results/gpu_*.md).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
OUT="${OUT:-$ROOT/build/gpu-results}"
mkdir -p "$OUT"
BUDGET="${GPU_CHECK_SECONDS:-300}"
START=$SECONDS
SUMMARY="$OUT/summary.md"
LOGS="$OUT/logs.txt"
: >"$SUMMARY"
: >"$LOGS"
note() { echo "$*" | tee -a "$SUMMARY"; }
left() { echo $((BUDGET - (SECONDS - START))); }

PACK=build/gpu/pack.tar.xz
W=/tmp/splitspec-gpu
rm -rf "$W" && mkdir -p "$W"
if ! tar -xJf "$PACK" -C "$W"; then note "no pack at $PACK: run scripts/gpu_pack.sh here and carry build/gpu"; exit 1; fi
export LD_LIBRARY_PATH="$W/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
BIN="$W/bin"
note "# scripts/gpu_check.sh, commit $(tr '\n' ' ' <"$W/COMMIT")"
note "$(date -u +%Y-%m-%dT%H:%M:%SZ); $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)"
if ! "$BIN/splitspec-server" --check-config --target models/demo-target --device cuda >>"$LOGS" 2>&1; then
  note "the packed binaries do not run here (see logs.txt): rebuild the CUDA library on this machine"
  exit 1
fi

# stage NAME CAP_SECONDS COMMAND...: runs it within min(CAP, what is left),
# its output appended to logs.txt, one line in summary.md.
stage() {
  local name=$1 cap=$2
  shift 2
  local t=$(($(left) < cap ? $(left) : cap))
  if [ "$t" -lt 10 ]; then note "- $name: not run (the budget is spent)"; return; fi
  local t0=$SECONDS
  echo "==== $name (at most ${t}s)" >>"$LOGS"
  if declare -F "$1" >/dev/null; then
    # A function of this script, in a shell timeout can stop.
    timeout --kill-after=5 "$t" bash -c "$*" >>"$LOGS" 2>&1
  else
    timeout --kill-after=5 "$t" "$@" >>"$LOGS" 2>&1
  fi
  local rc=$?
  local verdict="passed"
  [ $rc -eq 0 ] || verdict="FAILED (exit $rc)"
  [ $rc -eq 124 ] && verdict="TIMED OUT after ${t}s"
  note "- $name: $verdict in $((SECONDS - t0))s"
}

# What a gtest run counted: a stage whose GPU tests all skipped did not pass.
counted() {
  python3 - "$1" <<'PY' | tee -a "$SUMMARY"
import json, sys
try:
    j = json.load(open(sys.argv[1]))
except Exception as e:
    print(f"  (no results: {e})"); sys.exit()
tests = [t for s in j["testsuites"] for t in s["testsuite"]]
skipped = [t["name"] for t in tests if t.get("result") == "SKIPPED"]
failed = [f'{t.get("classname", "")}.{t["name"]}' for t in tests if t.get("failures")]
print(f"  {len(tests)} tests, {len(failed)} failed, {len(skipped)} skipped" + (": " + ", ".join(failed) if failed else ""))
PY
}
stage linear 60 "$BIN/splitspec_backend_tests" --gtest_filter='GpuLinear.*:BlockArith.*:WarpMath.*' \
  --gtest_output="json:$OUT/gtest_linear.json"
counted "$OUT/gtest_linear.json"
stage invariance 90 "$BIN/splitspec_backend_tests" \
  --gtest_filter='EveryType/GpuForward.*:GpuDecoding.*:GpuTaps.*:GpuMemory.*:GpuRandom.*:CudaOpen.*:CpuBackend.*' \
  --gtest_output="json:$OUT/gtest_invariance.json"
counted "$OUT/gtest_invariance.json"

# The families as llama.cpp's vocabularies make them (tests/families), 256
# wide, at f32 and as our Q4_K_M; and the demo target.
numerics() {
  local work=$W/families
  mkdir -p "$work"
  python3 - "$ROOT/tests/families" "$W/vocab" "$work" <<'PY' || return 1
import json, os, sys
sys.path.insert(0, sys.argv[1])
from families_test import family_configs, gguf_token_count
class R:
    def vocab(self, name):
        p = os.path.join(sys.argv[2], f"ggml-vocab-{name}.gguf")
        if not os.path.exists(p): raise SystemExit(f"no {p}")
        return p
for name, (config, vocab, _) in family_configs(R()).items():
    wide = dict(config, hidden_size=256, intermediate_size=512)
    if "head_dim" in wide: wide["head_dim"] = 128
    json.dump(wide, open(os.path.join(sys.argv[3], name + ".json"), "w"))
    open(os.path.join(sys.argv[3], name + ".vocab"), "w").write(vocab)
PY
  local prompts=()
  [ -f "$W/spec_bench.jsonl" ] && prompts=(--prompts "$W/spec_bench.jsonl")
  local rc=0 results=()
  for cfg in "$work"/*.json; do
    local name
    name=$(basename "$cfg" .json)
    "$BIN/splitspec" convert --random-init "$cfg" --tokenizer "$(cat "$work/$name.vocab")" --seed 5 --scale 0.08 \
      --to-gguf "$work/$name-f32.gguf" || { rc=1; continue; }
    "$BIN/splitspec" convert --target "$work/$name-f32.gguf" --dtype q4_k_m --to-gguf "$work/$name-q4_k_m.gguf" || rc=1
    for m in "$work/$name-f32.gguf" "$work/$name-q4_k_m.gguf"; do
      [ -f "$m" ] || continue
      "$BIN/splitspec-gpu-bench" compare --target "$m" "${prompts[@]}" --prompts-count 8 --json "$m.json" || rc=1
      results+=("$m.json")
    done
  done
  "$BIN/splitspec-gpu-bench" compare --target models/demo-target "${prompts[@]}" --prompts-count 8 \
    --json "$work/demo-target.json" || rc=1
  results+=("$work/demo-target.json")
  python3 -c 'import json, os, sys; json.dump([json.load(open(p)) for p in sys.argv[2:] if os.path.exists(p)],
    open(sys.argv[1], "w"), indent=1)' "$OUT/compare.json" "${results[@]}"
  return $rc
}
export -f numerics
export W BIN OUT ROOT
stage numerics 60 numerics

# A server on the GPU and the CLI against it: every mode's greedy tokens are
# the GPU target's alone.
end_to_end() {
  local work=$W/e2e port
  mkdir -p "$work"
  "$BIN/splitspec-server" --target models/demo-target --device cuda --listen 127.0.0.1:0 --port-file "$work/port" \
    --log-level debug >"$work/server.log" 2>&1 &
  local server=$!
  for _ in $(seq 300); do [ -s "$work/port" ] && break; kill -0 $server 2>/dev/null || break; sleep 0.2; done
  [ -s "$work/port" ] || { cat "$work/server.log"; kill $server; return 1; }
  port=$(cat "$work/port")
  local rc=0
  python3 - "$BIN/splitspec" "127.0.0.1:$port" "$OUT/e2e.json" "$work/server.log" <<'PY' || rc=1
import json, re, subprocess, sys
cli, server, out, log = sys.argv[1:]
prompts = ["Once upon a time", "The little robot", "Lily wanted to", "One day, a big"]
def ids(args):
    r = subprocess.run([cli, "generate", "--max-new-tokens", "48", "--ignore-eos", "--json"] + args,
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0: raise SystemExit(r.stderr)
    j = json.loads(r.stdout.strip().splitlines()[-1])
    return j["output_ids"], j["stats"]
modes = {"cloud-ar": ["--mode", "cloud-ar"], "edge-sd": ["--mode", "edge-sd", "--draft", "models/demo-draft"],
         "edge-fsd": ["--mode", "edge-fsd", "--draft", "models/demo-draft"],
         "server+lut": ["--verifier", "server", "--drafter", "lut", "--tokenizer", "models/demo-target"]}
result, ok = {"prompts": {}}, True
for p in prompts:
    want, _ = ids(["--target", "models/demo-target", "--device", "cuda", "--prompt", p])
    row = {"gpu_alone": want}
    for name, args in modes.items():
        got, stats = ids(["--server", server, "--prompt", p] + args)
        row[name] = {"equal": got == want, "accepted_tokens": stats.get("accepted_tokens"), "rounds": stats.get("rounds")}
        ok = ok and got == want
        print(f"{name:10s} {'==' if got == want else '!='} gpu alone: {p!r}", flush=True)
    result["prompts"][p] = row
# Early verdicts against their round's forward end, by (session, round).
early, final = {}, {}
for line in open(log):
    m = re.search(r"session=(\d+) event=early_verdict round=(\d+) exit_layer=(\d+) since_queued_ms=([\d.]+)", line)
    if m: early.setdefault((m[1], m[2]), []).append((int(m[3]), float(m[4])))
    m = re.search(r"session=(\d+) event=final_verdict round=(\d+) .*forward_end_ms=([\d.]+)", line)
    if m: final[(m[1], m[2])] = float(m[3])
leads = [end - at for key, es in early.items() if key in final for (_, at) in es for end in [final[key]]]
result["early_verdicts"] = len(leads)
result["early_before_forward_end"] = sum(1 for d in leads if d > 0)
if leads:
    leads.sort()
    result["lead_ms_median"] = leads[len(leads) // 2]
    result["lead_ms_min"] = leads[0]
print(f"early verdicts: {len(leads)}, before their forward ended: {result['early_before_forward_end']}", flush=True)
ok = ok and leads and result["early_before_forward_end"] == len(leads)
result["passed"] = bool(ok)
json.dump(result, open(out, "w"), indent=1)
sys.exit(0 if ok else 1)
PY
  # Sampled: the first token's distribution through cloud-ar and edge-sd.
  "$BIN/splitspec-gpu-bench" distribution --server "127.0.0.1:$port" --target models/demo-target \
    --draft models/demo-draft --samples 400 --json "$work/distribution.json" || rc=1
  python3 -c 'import json, os, sys
e = json.load(open(sys.argv[1])) if os.path.exists(sys.argv[1]) else {}
if os.path.exists(sys.argv[2]): e["distribution"] = json.load(open(sys.argv[2]))
json.dump(e, open(sys.argv[1], "w"), indent=1)' "$OUT/e2e.json" "$work/distribution.json"
  kill -TERM $server
  wait $server
  return $rc
}
export -f end_to_end
stage end_to_end 90 end_to_end

stage speed 150 "$BIN/splitspec-gpu-bench" speed --json "$OUT/speed.json"
stage torch 150 python3 bench/gpu_torch.py --json "$OUT/torch.json" --budget-s "$(left)"
note "total $((SECONDS - START))s of ${BUDGET}s"
