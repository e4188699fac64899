#!/usr/bin/env python3
"""Who made the control loop miss (issue 63): runs shared_cores.py's 1 kHz
loop (pinned to CPU 0) beside one `bench forward`, under `perf record` of
the scheduler's switches and wake-ups on CLOCK_MONOTONIC, then names, for
each deadline the loop missed while the forwards were timed, the tasks that
ran on CPU 0 in the 1.5 ms before it, and how long each of the forward's
threads ran on CPU 0 and CPU 1 in that window. Needs perf and the right to
trace (root, or perf_event_paranoid <= -1).

  python3 bench/loop_trace.py [--threads 0] [--seconds 4] -- BENCH_FORWARD_ARGS...
  e.g. python3 bench/loop_trace.py -- --target models/demo-target --new-tokens 5
"""
import argparse, collections, json, os, re, signal, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument("--bin", default=os.path.join(ROOT, "build", "bin", "splitspec"))
p.add_argument("--threads", default="0", help="bench forward --threads (0: the default)")
p.add_argument("--seconds", default="4", help="bench forward --min-seconds")
p.add_argument("forward", nargs="*", help="more bench forward arguments (after --)")
a = p.parse_args()

work = tempfile.mkdtemp(prefix="loop-trace-")
loop = subprocess.Popen([sys.executable, os.path.join(ROOT, "bench", "shared_cores.py"), "--control-loop"],
                        stdout=subprocess.PIPE, text=True)
time.sleep(0.5)
data = os.path.join(work, "perf.data")
fw = subprocess.run(["perf", "record", "-q", "-a", "-k", "mono", "-o", data, "-e", "sched:sched_switch",
                     "-e", "sched:sched_wakeup", "--", a.bin, "bench", "forward", "--contexts", "128",
                     "--threads", a.threads, "--min-seconds", a.seconds, "--json", *a.forward],
                    capture_output=True, text=True)
loop.send_signal(signal.SIGTERM)
ticks = json.loads(loop.communicate()[0])
if fw.returncode != 0:
    sys.exit(f"perf or bench forward failed ({fw.returncode}): {fw.stderr[-2000:]}")
out = json.loads(fw.stdout)
lo, hi = out["timed_steady_s"]
script = subprocess.run(["perf", "script", "-i", data, "-F", "comm,pid,tid,cpu,time,event,trace"],
                        capture_output=True, text=True).stdout
# The forward's threads: those of the process perf started (perf-exec until
# its exec), not other processes of the same name.
task = re.compile(r"^\s*(.*?)\s+(\d+)/(\d+)\s+\[")
bench_pid, ours = None, set()
for line in script.splitlines():
    m = task.match(line)
    if not m:
        continue
    if bench_pid is None and m[1] == "perf-exec":
        bench_pid = m[2]
    if m[2] == bench_pid:
        ours.add(int(m[3]))

# Each CPU's timeline: (start, end, comm, tid) from the switches.
switch = re.compile(r"\[(\d+)\]\s+([\d.]+):\s+sched:sched_switch: prev_comm=(.*?) prev_pid=(\d+) .*?"
                    r"==> next_comm=(.*?) next_pid=(\d+)")
spans, current = collections.defaultdict(list), {}
for line in script.splitlines():
    m = switch.search(line)
    if not m:
        continue
    cpu, t = int(m[1]), float(m[2])
    if cpu in current:
        start, comm, tid = current[cpu]
        spans[cpu].append((start, t, comm, tid))
    current[cpu] = (t, m[5], int(m[6]))
loop_tid = loop.pid

in_window = [t for t in ticks["ticks"] if lo <= t <= hi]
misses = [t for t in ticks["misses"] if lo <= t <= hi]
print(f"bench forward: {out['rows'][0]['ms']:.3f} ms a forward, threads {a.threads}; "
      f"loop: {len(misses)} misses in {len(in_window)} ticks ({1000 * len(misses) / max(1, len(in_window)):.1f} a thousand)")
for cpu in sorted(spans):
    ran = collections.Counter()
    for s, e, comm, tid in spans[cpu]:
        if tid in ours and min(e, hi) > max(s, lo):
            ran[tid] += min(e, hi) - max(s, lo)
    print(f"CPU {cpu}: the forward's threads ran " +
          (", ".join(f"{tid} {sec * 1000:.1f} ms" for tid, sec in ran.most_common()) or "not at all"))
blame = collections.Counter()
for m in misses:
    before = sorted({comm if tid not in ours else f"splitspec {tid}" for s, e, comm, tid in spans[0]
                     if e > m - 0.0015 and s < m and tid != loop_tid})
    for b in before:
        blame[b] += 1
    print(f"  miss at {m - lo:7.3f} s: CPU 0 ran {', '.join(before) or 'only the loop'} in the 1.5 ms before")
print("misses with each task on CPU 0 just before (swapper: the CPU was idle, the wake-up late):",
      dict(blame.most_common()))
