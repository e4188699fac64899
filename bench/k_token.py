#!/usr/bin/env python3
"""k-token forward against 1-token, two builds in one run, interleaved ABBA.

Issue 24's goal: a k-token forward costs at most 1.3x a 1-token one at k = 5
and 1.5x at k = 8, at every weight type. Verification runs k-token forwards,
so this ratio is what speculative decoding pays for a round. For each weight
type of the 50M model (configs/bench-50m.json, random weights written once
per type by `convert`) and each thread count, both binaries run
`bench forward --new-tokens 1 5 8` in turn (A B B A per block). Reported: each
build's k=5 and k=8 over k=1 (medians over blocks), B's time over A's at
each k with a 95% bootstrap interval, and each run's own k=5 and k=8 over
its k=1 (one process times every k in turn, round by round, so a slow spell
of a shared VM, which slows the products more than the memory reads, is in
both terms of that ratio), their median and range.

  python3 bench/k_token.py --a OLD/splitspec --b build/bin/splitspec
      [--reps 4] [--threads 1,2] [--types f32,f16,bf16,q8_0,q4_0] [--context 128]
      [--model FILE.gguf] [--out bench/results/k_token.md]

--model measures one model file (a GGUF from llama.cpp's quantizer, say)
instead of the 50M model at each of --types.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from startup_memory import interval, report  # same directory

KS = [1, 5, 8]


def run(cmd, threads=1):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.decode()[-2000:]}")
    return p.stdout.decode()


def forward_ms(binary, model, threads, context):
    out = run([binary, "bench", "forward", "--target", model, "--contexts", str(context), "--new-tokens",
               *map(str, KS), "--threads", str(threads), "--min-seconds", "0.5", "--json"], threads)
    j = json.loads(out)
    return {r["new_tokens"]: r["ms"] for r in j["rows"]}, j["kernels"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True, help="baseline splitspec binary")
    ap.add_argument("--b", required=True, help="new splitspec binary")
    ap.add_argument("--reps", type=int, default=4, help="ABBA blocks")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--types", default="f32,f16,bf16,q8_0,q4_0")
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--model", default="", help="one model file or directory instead of the 50M model per type")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    models = {}
    if args.model:
        types = [os.path.basename(args.model.rstrip("/"))]
        models[types[0]] = args.model
        described = f"`{args.model}`"
    else:
        types = args.types.split(",")
        described = "50M model (configs/bench-50m.json)"
        work = tempfile.mkdtemp(prefix="k-token-")
        for t in types:
            models[t] = os.path.join(work, f"bench-50m-{t}")
            run([args.b, "convert", "--random-init", "configs/bench-50m.json", "--tokenizer", "models/demo-target",
                 "--dtype", t, "--out", models[t]])
    # samples[(type, threads, build)][k] = list of ms
    samples = {}
    kernels = {}
    for rep in range(args.reps):
        for t in types:
            for th in threads:
                for build in ("a", "b", "b", "a"):
                    ms, isa = forward_ms(getattr(args, build), models[t], th, args.context)
                    kernels[build] = isa
                    for k in KS:
                        samples.setdefault((t, th, build), {}).setdefault(k, []).append(ms[k])
                        samples[(t, th, build)].setdefault(("run", k), []).append(ms[k] / ms[1])
        print(f"block {rep + 1}/{args.reps} done", file=sys.stderr)

    lines = [f"# k-token forward over 1-token: A = `{args.a}`, B = `{args.b}`", "",
             f"{described}, context {args.context}, {args.reps} ABBA blocks, "
             f"kernels A {kernels.get('a')}, B {kernels.get('b')}. Ratios of medians; B/A with a 95% bootstrap "
             "interval. Goal: k=5 at most 1.3x and k=8 at most 1.5x the 1-token forward.", "",
             "| type | threads | A 1-token ms | A k=5, k=8 over k=1 | B 1-token ms | B k=5, k=8 over k=1 | "
             "B/A at k=1 | B/A at k=5 | B/A at k=8 |",
             "|---|---|---|---|---|---|---|---|---|"]
    for t in types:
        for th in threads:
            a, b = samples[(t, th, "a")], samples[(t, th, "b")]
            med = {build: {k: statistics.median(s[k]) for k in KS} for build, s in (("a", a), ("b", b))}
            ba = [interval(b[k], a[k]) for k in KS]
            lines.append(
                f"| {t} | {th} | {med['a'][1]:.3f} | {med['a'][5] / med['a'][1]:.2f}, {med['a'][8] / med['a'][1]:.2f} | "
                f"{med['b'][1]:.3f} | {med['b'][5] / med['b'][1]:.2f}, {med['b'][8] / med['b'][1]:.2f} | " +
                " | ".join(f"{r:.2f} ({lo:.2f}-{hi:.2f})" for r, lo, hi in ba) + " |")
    lines += ["", "Each run's own ratio, median (lowest-highest) over its runs:", "",
              "| type | threads | A k=5/k=1 | A k=8/k=1 | B k=5/k=1 | B k=8/k=1 |", "|---|---|---|---|---|---|"]
    for t in types:
        for th in threads:
            cells = []
            for build in ("a", "b"):
                for k in KS[1:]:
                    r = samples[(t, th, build)][("run", k)]
                    cells.append(f"{statistics.median(r):.2f} ({min(r):.2f}-{max(r):.2f})")
            lines.append(f"| {t} | {th} | " + " | ".join(cells) + " |")
    report(lines, args.out)


if __name__ == "__main__":
    main()
