#!/usr/bin/env python3
"""What a fault costs a generation (issue 26): a splitspec-server killed with
SIGKILL mid-generation, then either restarted on the same port (resume) or
left dead with a fallback target on the client (failover).

Runs real processes on loopback through the Python module: each repeat starts
a server, streams an edge-sd generation (demo pair, greedy) and kills the
server once --kill-at tokens have arrived. Reports per scenario, as medians
with min-max over the repeats:
  break -> next verdict   Stats.switch_ms: from the client seeing the stream
                          break (at once on loopback: the peer resets) to the
                          verdict of the round verified again
  restart                 from the kill to the new server listening (resume),
                          and what the resume took after that
  usual round             wall time per round before the fault
  rounds retried          rounds whose verification was lost
and checks that each generation's ids equal an uninterrupted run's.

  python3 bench/faults.py [--build build] [--repeats 5] [--kill-at 100] [--out bench/results/faults.md]
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def start_server(bin_dir, target, listen, tmp):
    port_file = os.path.join(tmp, "port")
    if os.path.exists(port_file):
        os.remove(port_file)
    proc = subprocess.Popen(
        [os.path.join(bin_dir, "splitspec-server"), "--target", target, "--listen", listen, "--port-file", port_file,
         "--threads", "1", "--log-level", "warn"],
        stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "server.err"), "a"))
    deadline = time.monotonic() + 60
    while not (os.path.exists(port_file) and os.path.getsize(port_file) > 0):
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError("splitspec-server did not start; see " + os.path.join(tmp, "server.err"))
        time.sleep(0.002)
    with open(port_file) as f:
        return proc, "127.0.0.1:" + f.read().strip()


def options(splitspec, address, args, failback_s):
    o = splitspec.ClientOptions()
    o.verifier = "server"
    o.drafter = "model"
    o.server = address
    o.draft_dir = args.draft
    o.threads = 1
    if failback_s:
        o.fallback_target_dir = args.target
        o.failback_interval = failback_s
    return o


def request(splitspec, args):
    r = splitspec.Request()
    r.max_new_tokens = args.max_new_tokens
    r.ignore_eos = True
    return r


def one_run(splitspec, args, scenario, tmp, reference):
    """scenario: (name, failback interval in s or 0)."""
    name, failback_s = scenario
    bin_dir = os.path.join(args.build, "bin")
    servers = [start_server(bin_dir, args.target, "127.0.0.1:0", tmp)[0]]
    address = "127.0.0.1:" + open(os.path.join(tmp, "port")).read().strip()
    client = splitspec.Client(options(splitspec, address, args, failback_s))
    ids, times = [], {}
    restarter = None

    def restart():
        servers.append(start_server(bin_dir, args.target, address, tmp)[0])
        times["ready"] = time.monotonic()

    try:
        stream = client.stream_ids(args.prompt_ids, request(splitspec, args))
        times["start"] = time.monotonic()
        for token in stream:
            ids.append(token)
            if name != "none" and len(ids) == args.kill_at:
                times["kill"] = time.monotonic()
                servers[0].send_signal(signal.SIGKILL)
                servers[0].wait()
                if name == "resume":
                    # Off this thread: the generation resumes while we keep reading.
                    restarter = threading.Thread(target=restart)
                    restarter.start()
        result = stream.result
    finally:
        if restarter:
            restarter.join()
        for p in servers:
            p.send_signal(signal.SIGKILL)
            p.wait()
    s = result.stats
    row = {"ids": ids, "stats": s, "switch_ms": s.switch_ms}
    if "ready" in times:
        row["restart_ms"] = (times["ready"] - times["kill"]) * 1000
        # The break is seen at the kill (the peer resets the connection).
        row["after_restart_ms"] = s.switch_ms - row["restart_ms"]
    if s.rounds:
        row["round_ms"] = (s.wall_ms - s.switch_ms) / s.rounds
    if reference is not None:
        row["identical"] = ids == reference
    return row


def summary(values):
    values = [v for v in values if v == v]
    if not values:
        return "-"
    return "%.1f (%.1f-%.1f)" % (statistics.median(values), min(values), max(values))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--target", default=os.path.join(ROOT, "models", "demo-target"))
    p.add_argument("--draft", default=os.path.join(ROOT, "models", "demo-draft"))
    p.add_argument("--prompt", default="Once upon a time")
    p.add_argument("--max-new-tokens", type=int, default=400)
    p.add_argument("--kill-at", type=int, default=100)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", help="write the table here (markdown) as well")
    args = p.parse_args()
    sys.path.insert(0, os.path.join(args.build, "python"))
    import splitspec  # noqa: E402: from the build asked for

    args.prompt_ids = json.loads(subprocess.check_output(
        [os.path.join(args.build, "bin", "splitspec"), "tokenize", "--target", args.target, "--text", args.prompt,
         "--json"]))["ids"]

    scenarios = [("resume", 0), ("failover", 0.5)]
    rows = {s: [] for s in scenarios}
    with tempfile.TemporaryDirectory() as tmp:
        reference = one_run(splitspec, args, ("none", 0), tmp, None)["ids"]
        # Interleaved, so that drift in the machine's load hits all alike.
        for _ in range(args.repeats):
            for scenario in scenarios:
                rows[scenario].append(one_run(splitspec, args, scenario, tmp, reference))

    lines = [
        "| scenario | break -> next verdict, ms | restart, ms | of that, after the restart, ms | usual round, ms | "
        "rounds retried | resumes | failovers | fallback rounds | ids identical |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (name, failback_s), rs in rows.items():
        label = name if not failback_s else "%s (failback_interval %g s)" % (name, failback_s)
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %d/%d |" % (
            label,
            summary([r["switch_ms"] for r in rs]),
            summary([r.get("restart_ms", float("nan")) for r in rs]),
            summary([r.get("after_restart_ms", float("nan")) for r in rs]),
            summary([r.get("round_ms", float("nan")) for r in rs]),
            summary([r["stats"].retried_rounds for r in rs]),
            summary([r["stats"].resumes for r in rs]),
            summary([r["stats"].failovers for r in rs]),
            summary([r["stats"].fallback_rounds for r in rs]),
            sum(r["identical"] for r in rs), len(rs)))
    head = ("%d repeats, demo pair (edge-sd, gamma 4, greedy), %d new tokens, SIGKILL after token %d; "
            "client and server 1 thread each on one machine, loopback.\n\n" %
            (args.repeats, args.max_new_tokens, args.kill_at))
    text = head + "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    if not all(r["identical"] for rs in rows.values() for r in rs):
        sys.exit("a generation that survived a fault differs from the uninterrupted one")


if __name__ == "__main__":
    main()
