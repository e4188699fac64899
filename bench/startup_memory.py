#!/usr/bin/env python3
"""Start-up time and resident memory of two builds of the CLI, one run,
interleaved ABBA: `splitspec --help` (no model), `generate` on the demo target
(process wall time, 32 tokens) and `bench forward` on the 50M model at every
weight type (its own peak RSS against the goal weights + KV cache + 60 MB,
and the 1-token decode ms).

  python3 bench/startup_memory.py --a OLD/bin/splitspec --b build/bin/splitspec \
      [--reps 4] [--out bench/results/startup_memory.md]

Both builds run the same model files, written once by B's `convert`.
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

TYPES = ["f32", "f16", "q8_0", "q4_0"]


def run(cmd):
    """Wall seconds and stdout of one process."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=dict(os.environ, OMP_NUM_THREADS="1"))
    out, err = p.communicate()
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}): {err.decode()[-2000:]}")
    return wall, out.decode()


def measured(cmd):
    """Like run(), with the child's peak RSS from /usr/bin/time."""
    with tempfile.NamedTemporaryFile("r") as f:
        wall, out = run(["/usr/bin/time", "-f", "%M", "-o", f.name] + cmd)
        rss = int(f.read().strip().splitlines()[-1]) * 1024
    return wall, rss, out


def interval(a, b, stat=statistics.median, n=2000, seed=1):
    """stat(a) / stat(b) with a 95% bootstrap interval."""
    rng = random.Random(seed)
    ratios = sorted(stat([rng.choice(a) for _ in a]) / stat([rng.choice(b) for _ in b]) for _ in range(n))
    return stat(a) / stat(b), ratios[int(0.025 * n)], ratios[int(0.975 * n)]


def report(lines, out):
    """Print the markdown lines, and write them to `out` if given."""
    text = "\n".join(lines) + "\n"
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True, help="baseline splitspec binary")
    ap.add_argument("--b", required=True, help="new splitspec binary")
    ap.add_argument("--reps", type=int, default=4, help="ABBA blocks")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="startup-memory-")
    models = {}
    for t in TYPES:
        d = os.path.join(work, f"bench-50m-{t}")
        run([args.b, "convert", "--random-init", "configs/bench-50m.json", "--tokenizer", "models/demo-target",
             "--dtype", t, "--out", d])
        models[t] = d
    cases = {"help": lambda s: [s, "--help"],
             "generate": lambda s: [s, "generate", "--target", "models/demo-target", "--prompt", "Once upon a time",
                                    "--max-new-tokens", "32", "--threads", "1"]}
    for t in TYPES:
        cases[f"forward-{t}"] = (lambda d: lambda s: [s, "bench", "forward", "--target", d, "--contexts", "128",
                                                      "--new-tokens", "1", "--min-seconds", "0.3", "--threads", "1",
                                                      "--json"])(models[t])
    res = {name: {"a": [], "b": []} for name in cases}
    for rep in range(args.reps):
        for side in ("a", "b", "b", "a"):
            for name, cmd in cases.items():
                wall, rss, out = measured(cmd(getattr(args, side)))
                r = {"wall_s": wall, "rss": rss}
                if name.startswith("forward"):
                    j = json.loads(out)
                    r.update(ms=j["rows"][0]["ms"], peak=j["peak_rss_bytes"], weights=j["weight_bytes"],
                             kv=j["kv_cache_bytes"])
                res[name][side].append(r)
    lines = [f"Baseline A: `{args.a}`; B: `{args.b}`. One run, {args.reps} ABBA blocks, 1 thread; "
             "medians, ratio B/A with a 95% bootstrap interval.", ""]
    lines += ["| case | A wall s | B wall s | B/A wall | A peak RSS MB | B peak RSS MB | B/A RSS |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    for name in cases:
        a, b = res[name]["a"], res[name]["b"]
        w = interval([x["wall_s"] for x in b], [x["wall_s"] for x in a])
        m = interval([x["rss"] for x in b], [x["rss"] for x in a])
        lines.append(f"| {name} | {statistics.median(x['wall_s'] for x in a):.3f} | "
                     f"{statistics.median(x['wall_s'] for x in b):.3f} | {w[0]:.2f} ({w[1]:.2f}-{w[2]:.2f}) | "
                     f"{statistics.median(x['rss'] for x in a) / 1e6:.0f} | {statistics.median(x['rss'] for x in b) / 1e6:.0f} | "
                     f"{m[0]:.2f} ({m[1]:.2f}-{m[2]:.2f}) |")
    lines += ["", "`bench forward`, the 50M model, context 128: its own peak RSS against the goal "
              "(weights + KV cache + 60 MB), and the 1-token decode.", "",
              "| type | weights MB | goal MB | A peak MB | B peak MB | B within goal | A 1-token ms | B 1-token ms | B/A ms |",
              "|---|---:|---:|---:|---:|---|---:|---:|---:|"]
    for t in TYPES:
        a, b = res[f"forward-{t}"]["a"], res[f"forward-{t}"]["b"]
        goal = b[0]["weights"] + b[0]["kv"] + 60e6
        pa = statistics.median(x["peak"] for x in a)
        pb = statistics.median(x["peak"] for x in b)
        ms = interval([x["ms"] for x in b], [x["ms"] for x in a])
        lines.append(f"| {t} | {b[0]['weights'] / 1e6:.0f} | {goal / 1e6:.0f} | {pa / 1e6:.0f} | {pb / 1e6:.0f} | "
                     f"{'yes' if pb <= goal else 'no'} | {statistics.median(x['ms'] for x in a):.3f} | "
                     f"{statistics.median(x['ms'] for x in b):.3f} | {ms[0]:.2f} ({ms[1]:.2f}-{ms[2]:.2f}) |")
    report(lines, args.out)


if __name__ == "__main__":
    main()
