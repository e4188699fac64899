#!/usr/bin/env python3
"""Run-to-run spread of local-tree under a memory budget.

Issue 45: local-tree runs were bimodal (slow runs drafted 2.5x as many
provisional tokens and stalled 3x as long on weights). This runs `--runs`
alternating runs (local-tree, then Std: streamed local-ar without the
pipeline, as a control for the machine's own drift) of the demo pair at a
budget, each over the same prompts, and reports per run the ms a token, the
provisional tokens, the weight stall and the bytes read; then each mode's
min / median / max, the coefficient of variation, and the largest gap
between consecutive sorted run times over the median (a bimodal set of runs
has one gap as large as the clusters' distance).

  python3 bench/local_tree_spread.py [--runs 10] [--budget 25%] [--prompts FILE] [--num-prompts 8]
      [--tokens 64] [--out bench/results/local_tree_spread.md]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def run(a, extra):
    cmd = [a.splitspec, "generate", "--target", a.target, "--prompts-file", a.jsonl, "--max-new-tokens",
           str(a.tokens), "--ignore-eos", "--json", "--threads", "1", "--memory-budget", a.budget, *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if p.returncode != 0:
        sys.exit(" ".join(cmd) + "\n" + p.stderr[-2000:])
    res = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    s = [r["stats"] for r in res]
    tokens = sum(x["new_tokens"] for x in s)
    return {"ms_per_token": sum(x["wall_ms"] for x in s) / tokens,
            "provisional_tokens": sum(x.get("provisional_tokens", 0) for x in s),
            "weight_stall_ms": sum(x.get("weight_stall_ms", 0) for x in s),
            "weight_bytes_read": sum(x.get("weight_bytes_read", 0) for x in s)}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--splitspec", default="build/bin/splitspec")
    p.add_argument("--target", default="models/demo-target")
    p.add_argument("--draft", default="models/demo-draft")
    p.add_argument("--prompts", default="../shared/prompts/spec_bench.jsonl")
    p.add_argument("--num-prompts", type=int, default=8)
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--budget", default="25%")
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--max-chars", type=int, default=1000, help="prompts longer than this are left out")
    p.add_argument("--machine", default=os.environ.get("MACHINE", "this machine"))
    p.add_argument("--out", default="")
    a = p.parse_args()
    if not os.path.exists(a.prompts):
        sys.exit(f"local_tree_spread: {a.prompts} not found (--prompts FILE.jsonl, Spec-Bench's format)")
    texts = []
    with open(a.prompts) as f:
        for line in f:
            j = json.loads(line)
            text = j["turns"][0] if "turns" in j else j["prompt"]
            # The demo target's context is 512: prompts that leave room to generate.
            if len(text) <= a.max_chars:
                texts.append(text)
    texts = texts[:: max(1, len(texts) // a.num_prompts)][:a.num_prompts]
    a.jsonl = os.path.join("build", "local_tree_spread.jsonl")
    os.makedirs("build", exist_ok=True)
    with open(a.jsonl, "w") as f:
        for t in texts:
            f.write(json.dumps({"prompt": t}) + "\n")
    modes = {"local-tree": ["--draft", a.draft, "--drafter", "model-tree"], "Std": ["--no-pipeline"]}
    rows = {m: [] for m in modes}
    for i in range(a.runs):
        for m in (modes if i % 2 == 0 else reversed(list(modes))):
            r = run(a, modes[m])
            rows[m].append(r)
            print(m, i, json.dumps({k: round(v, 3) for k, v in r.items()}), flush=True)
    lines = [f"# local-tree's spread at a {a.budget} budget ({a.machine})", "",
             f"`python3 bench/local_tree_spread.py --runs {a.runs} --budget {a.budget} --num-prompts {a.num_prompts} "
             f"--tokens {a.tokens}`: the demo pair, {len(texts)} Spec-Bench prompts x {a.tokens} tokens a run, greedy, "
             "1 thread, the target streamed from disk; runs alternate local-tree and Std.", "",
             "| mode | run | ms/token | provisional tokens | weight stall ms | bytes read |", "|---|---|---|---|---|---|"]
    for m in modes:
        for i, r in enumerate(rows[m]):
            lines.append(f"| {m} | {i} | {r['ms_per_token']:.3f} | {r['provisional_tokens']} | {r['weight_stall_ms']:.1f} | "
                         f"{r['weight_bytes_read'] / 1e6:.0f} MB |")
    lines += ["", "| mode | min | median | max | CV | largest gap / median |", "|---|---|---|---|---|---|"]
    for m in modes:
        v = sorted(r["ms_per_token"] for r in rows[m])
        gap = max(b - x for x, b in zip(v, v[1:])) if len(v) > 1 else 0.0
        med = statistics.median(v)
        lines.append(f"| {m} | {v[0]:.3f} | {med:.3f} | {v[-1]:.3f} | {statistics.pstdev(v) / statistics.mean(v):.3f} | "
                     f"{gap / med:.3f} |")
    print("\n".join(lines))
    if a.out:
        with open(a.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
