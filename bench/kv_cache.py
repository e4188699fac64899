#!/usr/bin/env python3
"""F32 against F16 KV cache, one run, interleaved ABBA:

- `bench forward` on the 50M model (configs/bench-50m.json, random weights
  written once per type by `convert`) at each weight type: k-token forward ms
  at a short and a long context, KV bytes and peak RSS against the goal of
  weights + KV cache + 60 MB;
- greedy agreement on the demo target: local-ar over Spec-Bench prompts with
  each cache, how many outputs are identical and where the others part.

  python3 bench/kv_cache.py [--bin build/bin/splitspec] [--reps 4] [--threads 1]
      [--types f16,q8_0,q4_0] [--prompts 20] [--out bench/results/kv_cache.md]
"""
import argparse
import json
import os
import statistics
import shutil
import subprocess
import sys
import tempfile

from startup_memory import interval, report  # same directory

KV = ["f32", "f16"]


def run(cmd, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.decode()[-2000:]}")
    return p.stdout.decode()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/bin/splitspec")
    ap.add_argument("--reps", type=int, default=4, help="ABBA blocks")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--types", default="f16,q8_0,q4_0")
    ap.add_argument("--contexts", default="128,1920")
    ap.add_argument("--prompts", type=int, default=20, help="Spec-Bench prompts for the agreement check (0: none)")
    ap.add_argument("--spec-bench", default="../shared/prompts/spec_bench.jsonl")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    contexts = [int(c) for c in args.contexts.split(",")]

    work = tempfile.mkdtemp(prefix="kv-cache-")
    types = args.types.split(",")
    for t in types:
        run([args.bin, "convert", "--random-init", "configs/bench-50m.json", "--tokenizer", "models/demo-target",
             "--dtype", t, "--out", f"{work}/{t}"], args.threads)
    # ms[(type, kv, ctx, k)] = one median per run; mem[(type, kv)] = (kv bytes, peak rss, weight bytes)
    ms, mem = {}, {}
    for block in range(args.reps):
        order = KV + KV[::-1]  # A B B A
        for kv in order:
            for t in types:
                out = run([args.bin, "bench", "forward", "--target", f"{work}/{t}", "--kv-cache", kv, "--contexts", args.contexts, "--new-tokens", "1,8",
                           "--min-seconds", "0.3", "--threads", str(args.threads), "--json"], args.threads)
                j = json.loads(out)
                for r in j["rows"]:
                    ms.setdefault((t, kv, r["context"], r["new_tokens"]), []).append(r["ms"])
                mem[(t, kv)] = (j["kv_cache_bytes"], j["peak_rss_bytes"], j["weight_bytes"])
        print(f"block {block + 1}/{args.reps} done", file=sys.stderr)

    lines = [f"# F32 against F16 KV cache\n",
             f"`python3 bench/kv_cache.py --reps {args.reps} --threads {args.threads}`: {args.reps} ABBA blocks "
             f"(f32, f16, f16, f32), one process per run, {args.threads} thread(s); the 50M model "
             f"(configs/bench-50m.json, random weights, cache capacity {max(contexts) + 8}). Each cell is the median "
             f"of the runs' medians; the ratio is f16 / f32 with a 95% bootstrap interval.\n",
             "| weights | context | k | f32 ms | f16 ms | f16 / f32 |", "|---|---|---|---|---|---|"]
    for t in types:
        for ctx in contexts:
            for k in (1, 8):
                a, b = ms[(t, "f16", ctx, k)], ms[(t, "f32", ctx, k)]
                r, lo, hi = interval(a, b)
                lines.append(f"| {t} | {ctx} | {k} | {statistics.median(b):.3f} | {statistics.median(a):.3f} | "
                             f"{r:.3f} [{lo:.3f}, {hi:.3f}] |")
    lines += ["", "Peak RSS of the last run of each, against the goal of weights + KV cache + 60 MB:", "",
              "| weights | weight MB | KV f32 MB | peak RSS f32 MB (goal) | KV f16 MB | peak RSS f16 MB (goal) |",
              "|---|---|---|---|---|---|"]
    for t in types:
        (k32, r32, w), (k16, r16, _) = mem[(t, "f32")], mem[(t, "f16")]
        goal = lambda kv: (w + kv) / 1e6 + 60
        lines.append(f"| {t} | {w / 1e6:.1f} | {k32 / 1e6:.1f} | {r32 / 1e6:.1f} ({goal(k32):.1f}) | {k16 / 1e6:.1f} | "
                     f"{r16 / 1e6:.1f} ({goal(k16):.1f}) |")
    shutil.rmtree(work)

    if args.prompts > 0 and os.path.exists(args.spec_bench):
        with open(args.spec_bench) as f:
            rows = [json.loads(l) for l in f if l.strip()][: args.prompts]
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
            for r in rows:
                f.write(json.dumps({"prompt": r["turns"][0]}) + "\n")
            prompts = f.name
        outs = {}
        for kv in KV:
            out = run([args.bin, "generate", "--mode", "local-ar", "--target", "models/demo-target", "--kv-cache", kv,
                       "--prompts-file", prompts, "--max-new-tokens", "64", "--ignore-eos", "--json",
                       "--threads", str(args.threads)], args.threads)
            outs[kv] = [json.loads(l)["output_ids"] for l in out.splitlines() if l.strip()]
        os.unlink(prompts)
        same = sum(a == b for a, b in zip(outs["f32"], outs["f16"]))
        parts = []
        for a, b in zip(outs["f32"], outs["f16"]):
            if a != b:
                parts.append(next(i for i, (x, y) in enumerate(zip(a, b)) if x != y))
        lines += ["", f"Greedy agreement on the demo target (local-ar, 64 tokens, the first {len(rows)} Spec-Bench "
                  f"prompts): {same} of {len(rows)} outputs identical"
                  + (f"; the others part at tokens {sorted(parts)}." if parts else ".")]
    elif args.prompts > 0:
        lines += ["", f"Greedy agreement skipped: {args.spec_bench} not found."]
    report(lines, args.out)


if __name__ == "__main__":
    main()
