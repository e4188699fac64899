#!/usr/bin/env python3
"""Per-token latency by compute thread count and OpenMP wait policy.

Since the kernels run on their own pool (common/kernels/pool.cpp) the wait
policy no longer reaches them; the sweep stays for the record of
bench/results/threads.md and for LibTorch's training threads.
bench/shared_cores.py measures the pool beside other work.

Issue 45: on 2-vCPU machines 2-thread runs stall now and then. For each
model, each configuration (threads: the default, 1, 2; OpenMP's wait policy:
as set by SplitSpec, spinning, sleeping) generates `--tokens` greedy tokens
`--runs` times through the Python module, each token timed as the round
loop commits it (what a robot's controller's callback waits on; Stats.token_ms). Configurations alternate run by run,
the order reversed every other block (ABBA). Reported per configuration: the
mean ms a token, the pooled p50 / p90 / p99 / max of per-token gaps, p99 over
p50, and the spread of the runs' means.

  python3 bench/threads.py [--models models/demo-target,...] [--runs 20]
      [--tokens 64] [--configs default,1,2,2:ACTIVE,2:PASSIVE] [--out bench/results/threads.md]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import splitspec
o = splitspec.ClientOptions()
o.verifier = "local"
o.drafter = "none"
o.target_dir = sys.argv[2]
o.threads = int(sys.argv[3])
c = splitspec.Client(o)
r = splitspec.Request()
r.max_new_tokens = int(sys.argv[4])
r.ignore_eos = True
res = c.generate("The quick brown fox", r)
# Timed inside the round loop (verdict to verdict, the prompt's round
# excluded), as a C++ controller's callback sees them, without this
# interpreter's own thread wake-ups.
print(json.dumps({"gaps_ms": list(res.stats.token_ms)}))
"""


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p / 100 * len(v)))]


def run_one(a, model, config):
    threads, _, policy = config.partition(":")
    env = dict(os.environ)
    env.pop("OMP_NUM_THREADS", None)
    env.pop("OMP_WAIT_POLICY", None)
    if policy:
        env["OMP_WAIT_POLICY"] = policy
    n = "0" if threads == "default" else threads
    p = subprocess.run([sys.executable, "-c", CHILD, a.python_dir, model, n, str(a.tokens)], capture_output=True,
                       text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"{model} {config}: {p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])["gaps_ms"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="models/demo-target", type=lambda s: s.split(","))
    p.add_argument("--configs", default="default,1,2,2:ACTIVE,2:PASSIVE", type=lambda s: s.split(","))
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--python-dir", default="build/python")
    p.add_argument("--machine", default=os.environ.get("MACHINE", "this machine"))
    p.add_argument("--out", default="")
    a = p.parse_args()
    if a.tokens < 3:
        sys.exit("threads: --tokens must be at least 3 (the first two arrivals are the prompt's)")
    lines = [f"# Per-token latency by threads and wait policy ({a.machine})", "",
             f"`python3 bench/threads.py --models {','.join(a.models)} --configs {','.join(a.configs)} "
             f"--runs {a.runs} --tokens {a.tokens}`: each configuration {a.runs} runs of {a.tokens} greedy "
             "tokens (local, no drafter), alternating ABBA; each token's time as the round loop commits it "
             "(Stats.token_ms), the prompt's round excluded. `default`: SplitSpec's own choice of threads (and "
             "wait policy).", ""]
    report = {}
    for model in a.models:
        gaps = {c: [] for c in a.configs}
        means = {c: [] for c in a.configs}
        for i in range(a.runs):
            order = a.configs if i % 2 == 0 else list(reversed(a.configs))
            for c in order:
                g = run_one(a, model, c)
                gaps[c].extend(g)
                means[c].append(statistics.mean(g))
        lines += [f"## {model}", "", "| threads:policy | mean ms/token | p50 | p90 | p99 | max | p99/p50 | run means min-max |",
                  "|---|---|---|---|---|---|---|---|"]
        report[model] = {}
        for c in a.configs:
            g = gaps[c]
            row = {"mean": statistics.mean(g), "p50": pct(g, 50), "p90": pct(g, 90), "p99": pct(g, 99), "max": max(g),
                   "run_min": min(means[c]), "run_max": max(means[c])}
            report[model][c] = row
            lines.append(f"| {c} | {row['mean']:.3f} | {row['p50']:.3f} | {row['p90']:.3f} | {row['p99']:.3f} | "
                         f"{row['max']:.2f} | {row['p99'] / row['p50']:.2f} | {row['run_min']:.3f}-{row['run_max']:.3f} |")
            print(model, c, json.dumps({k: round(v, 3) for k, v in row.items()}), flush=True)
        lines.append("")
    if a.out:
        with open(a.out, "w") as f:
            f.write("\n".join(lines) + "\n")
        with open(os.path.splitext(a.out)[0] + ".json", "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
