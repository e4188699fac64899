#!/usr/bin/env python3
"""The draft beside a server on the same machine (issue 63): `bench edge-cloud`
at the client's default threads and at --threads 1 (and, with --old-bin, an
older build's default), ABBA, one server for all: the demo target at its
default threads with emulated 30:0.3 ms forwards, a 10 ms one-way link.
Prints each run's draft step (T_p) and edge-sd / cloud-ar, then medians with
bootstrap 95% intervals. Run it beside `yes > /dev/null` for a busy core.

  python3 bench/threads_shared.py [--rounds 4] [--old-bin DIR]
"""
import argparse, json, os, random, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
p.add_argument("--old-bin")
p.add_argument("--rounds", type=int, default=4)
p.add_argument("--prompts", default=os.path.join(ROOT, "..", "shared", "prompts", "spec_bench.jsonl"))
a = p.parse_args()
configs = {"default": (a.bin, "0"), "1 thread": (a.bin, "1")}
if a.old_bin:
    configs["old default"] = (a.old_bin, "0")
order = list(configs)
rounds = a.rounds
port_file = os.path.join(tempfile.mkdtemp(), "port")
srv = subprocess.Popen([os.path.join(a.bin, "splitspec-server"), "--target", os.path.join(ROOT, "models", "demo-target"),
                        "--listen", "127.0.0.1:0", "--port-file", port_file, "--emulate-forward-ms", "30:0.3",
                        "--log-level", "warn"], stderr=subprocess.DEVNULL)
while not (os.path.exists(port_file) and os.path.getsize(port_file)): time.sleep(0.1)
port = open(port_file).read().strip()
res = {c: {"tp": [], "speedup": []} for c in configs}
seq = []
for r in range(rounds):
    seq += order if r % 2 == 0 else order[::-1]
for c in seq:
    b, t = configs[c]
    out = subprocess.run([b + "/splitspec", "bench", "edge-cloud", "--server", "127.0.0.1:" + port, "--draft",
                          os.path.join(ROOT, "models", "demo-draft"), "--prompts", a.prompts,
                          "--num-prompts", "6", "--max-new-tokens", "64", "--delays-ms", "10", "--modes", "cloud-ar,edge-sd",
                          "--threads", t, "--json"], capture_output=True, text=True)
    row = json.loads(out.stdout)["rows"][0]
    res[c]["tp"].append(row["T_p_ms"])
    res[c]["speedup"].append(row["speedups"][0]["speedup"])
    print(c, ": T_p %.3f ms, edge-sd/cloud-ar %.3f" % (row["T_p_ms"], row["speedups"][0]["speedup"]), flush=True)
srv.terminate(); srv.wait()
def ci(xs):
    m = statistics.median(xs); bs = sorted(statistics.median(random.choices(xs, k=len(xs))) for _ in range(2000))
    return m, bs[50], bs[1949]
for c in configs:
    if res[c]["tp"]:
        print("%-12s draft step T_p median %.3f ms (95%% %.3f-%.3f)  speedup median %.3f (95%% %.3f-%.3f)  runs %d" %
              ((c,) + ci(res[c]["tp"]) + ci(res[c]["speedup"]) + (len(res[c]["tp"]),)))
