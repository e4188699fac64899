#!/usr/bin/env python3
"""Forwards on shared cores (issue 63): each model's forward at the default
threads, 1 and 2, beside (a) nothing, (b) a busy process (`yes`, standing in
for a server's compute on the same cores) and (c) a 1 kHz control loop on
one core (0.2 ms of work a tick; a tick whose work ends past its deadline is
a miss), at normal priority and (d) at real-time priority (SCHED_FIFO 50, as
a robot's controller runs; needs the privilege, else that setting is left
out, saying so); on request also (e) a waker, 1 ms of work every 50 ms on
any core (a daemon's, or a VM agent's, periodic wake-ups: not a control
loop, and no reason to give up a thread). With --baseline, another build's
default runs too, interleaved. Thread counts interleaved ABBA within each
setting; medians of the runs' medians and p99s (`bench forward --json`), and
the control loop's misses per thousand ticks beside each thread count while
the forwards were timed (bench forward's timed_steady_s: not the model's
load before them); each with the runs' range.

  python3 bench/shared_cores.py [--rounds 2] [--model NAME=DIR:K ...] [--settings yes,...]
      [--min-seconds 2] [--baseline OTHER_SPLITSPEC] [--out FILE]
"""
import argparse, json, os, signal, statistics, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument("--bin", default=os.path.join(ROOT, "build", "bin", "splitspec"))
p.add_argument("--rounds", type=int, default=2)
p.add_argument("--model", action="append", help="NAME=PATH:K[:BUDGET] (default: the demo draft at k=1, the demo target at "
               "k=5, and build/vs_llamacpp/bench-1b-lq-q4_k_m.gguf at k=1 where it exists); BUDGET streams the "
               "weights from disk under it (bench forward --memory-budget), so its loader thread shares the cores too")
p.add_argument("--out")
p.add_argument("--settings", default="nothing,yes,control loop,real-time control loop",
               help="comma-separated, of: nothing, yes, control loop, real-time control loop, waker")
p.add_argument("--baseline", help="another splitspec binary whose default threads run beside each setting too")
p.add_argument("--min-seconds", default="2", help="each bench forward's length (a fresh process each run)")
p.add_argument("--control-loop", action="store_true", help=argparse.SUPPRESS)
p.add_argument("--waker", action="store_true", help=argparse.SUPPRESS)
a = p.parse_args()

if a.waker:  # 1 ms of work every 50 ms, on whichever core is free
    while True:
        end = time.monotonic() + 0.001
        while time.monotonic() < end: pass
        time.sleep(0.05)

if a.control_loop:  # the 1 kHz loop itself, pinned to CPU 0
    os.sched_setaffinity(0, {0})
    if os.environ.get("SHARED_CORES_RT"):
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(50))
    ticks, misses = [], []  # CLOCK_MONOTONIC times, comparable with the parent's
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    nxt = time.monotonic()
    while not stop:
        nxt += 0.001
        end = time.monotonic() + 0.0002
        while time.monotonic() < end: pass
        now = time.monotonic()
        ticks.append(now)
        if now > nxt:
            misses.append(now)
            nxt = now
        else:
            time.sleep(nxt - now)
    print(json.dumps({"ticks": ticks, "misses": misses}), flush=True)
    sys.exit(0)

models = a.model or [f"demo draft=models/demo-draft:1", f"demo target=models/demo-target:5"] + (
    ["1B Q4_K_M=build/vs_llamacpp/bench-1b-lq-q4_k_m.gguf:1"]
    if os.path.exists(os.path.join(ROOT, "build/vs_llamacpp/bench-1b-lq-q4_k_m.gguf")) else [])
# Each column: (binary, --threads).
threads = {"default": (a.bin, "0"), "1": (a.bin, "1"), "2": (a.bin, "2")}
if a.baseline:
    threads["default, baseline"] = (a.baseline, "0")
settings = [x for x in a.settings.split(",") if x]
unknown = set(settings) - {"nothing", "yes", "control loop", "real-time control loop", "waker"}
if unknown:
    sys.exit(f"unknown settings: {', '.join(sorted(unknown))}")
try:
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(50))
    os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
except PermissionError:
    if "real-time control loop" in settings:
        print("no privilege for SCHED_FIFO: the real-time control loop is left out", file=sys.stderr)
        settings.remove("real-time control loop")
rows = []
for setting in settings:
    for m in models:
        name, rest = m.split("=", 1)
        path, k, *budget = rest.split(":")
        res = {t: {"ms": [], "p99": [], "miss": []} for t in threads}
        order = list(threads)
        for r in range(a.rounds):
            for t in (order if r % 2 == 0 else order[::-1]):
                side = None
                if setting == "yes":
                    side = subprocess.Popen(["yes"], stdout=subprocess.DEVNULL)
                elif "control loop" in setting:
                    env = dict(os.environ, SHARED_CORES_RT="1") if setting.startswith("real-time") else None
                    side = subprocess.Popen([sys.executable, __file__, "--control-loop"], stdout=subprocess.PIPE,
                                            text=True, env=env)
                elif setting == "waker":
                    side = subprocess.Popen([sys.executable, __file__, "--waker"])
                binary, count = threads[t]
                out = subprocess.run([binary, "bench", "forward", "--target", os.path.join(ROOT, path), "--contexts", "128",
                                      "--new-tokens", k, "--threads", count, "--min-seconds", a.min_seconds, "--json",
                                      *(["--memory-budget", budget[0]] if budget else [])],
                                     capture_output=True, text=True, env={k_: v for k_, v in os.environ.items()
                                                                          if k_ != "OMP_NUM_THREADS"})
                so = ""
                if side:
                    side.terminate()
                    so, _ = side.communicate()
                if out.returncode != 0:
                    sys.exit(f"bench forward failed ({out.returncode}): {out.stderr[-2000:]}")
                if "control loop" in setting:
                    # Only the ticks while the forwards were timed: the load before
                    # them (seconds for the 1B model, on one thread) and the
                    # bandwidth probe after are not what the thread count changes.
                    c = json.loads(so)
                    lo, hi = json.loads(out.stdout)["timed_steady_s"]
                    ticks = sum(lo <= x <= hi for x in c["ticks"])
                    res[t]["miss"].append(1000.0 * sum(lo <= x <= hi for x in c["misses"]) / max(1, ticks))
                row = json.loads(out.stdout)["rows"][0]
                res[t]["ms"].append(row["ms"])
                res[t]["p99"].append(row["ms_p99"])
                print(setting, name, t, "ms %.3f p99 %.3f" % (row["ms"], row["ms_p99"]),
                      ("misses/1000 %.1f" % res[t]["miss"][-1]) if res[t]["miss"] else "", flush=True)
        for t in threads:
            rows.append((setting, name, k, t, res[t]))
# Each cell: the median of the runs' figures, and their range (one run per
# round: the spread between identical runs is this machine's noise).
def cell(xs, fmt):
    if not xs:
        return "-"
    return f"{statistics.median(xs):{fmt}} ({min(xs):{fmt}}-{max(xs):{fmt}})"
lines = ["| beside | model | k | threads | median ms (runs' range) | p99 ms (runs' range) | control-loop misses / 1000 ticks (runs' range) |",
         "|---|---|---|---|---|---|---|"]
for s, n, k, t, r in rows:
    lines.append(f"| {s} | {n} | {k} | {t} | {cell(r['ms'], '.3f')} | {cell(r['p99'], '.3f')} | {cell(r['miss'], '.1f')} |")
print("\n".join(lines))
if a.out:
    open(a.out, "w").write("\n".join(lines) + "\n")
