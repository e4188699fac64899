#!/usr/bin/env python3
"""Chaos soak (issue 46): many robots generating at once for minutes while
their servers are killed and restarted under them, every generation checked
token for token.

Real processes on loopback: two splitspec-server replicas of the demo target,
each behind a `splitspec netem` proxy (one-way delay, jitter and packet loss), and
--clients client threads through the Python module, half on each replica.
Each client runs generations back to back, alternating greedy and seeded
sampling and edge-sd (the demo draft model) and cloud-ar, all with the
target as their fallback. A fault thread SIGKILLs a random replica every few
seconds and restarts it on the same port after a random pause.

Every generation is checked against its solo run (the same request, alone,
with no fault): the ids it returns must be the solo run's, and the ids it
streamed must be exactly those, each once. Sampled generations are
reproducible across a resume because the servers give no draft-length hint
(--draft-hint off) and the clients draft a fixed gamma (README, "Quick
start: a robot's controller").

Reported: generations, faults injected, tokens lost or duplicated (streamed
against returned), generations that differ from their solo run, errors (the
rate; of those, how many were Client.connect finding its replica down, which
issue 47's offline start removes), and generation latency p50/p99. The link has no packet loss: the
proxy delays TCP bytes, it cannot drop them (issue 48 adds loss emulation).

  python3 bench/soak.py [--minutes 3] [--clients 8] [--delay-ms 5] [--jitter-ms 3] [--out bench/results/soak.md]
"""
import argparse
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_file(path, proc, what, log):
    deadline = time.monotonic() + 60
    while not (os.path.exists(path) and os.path.getsize(path) > 0):
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError("%s did not start; see %s" % (what, log))
        time.sleep(0.005)
    with open(path) as f:
        return int(f.read().strip())


class Replica:
    """A server on a fixed port (so a restart comes back where clients look)
    and its netem proxy."""

    def __init__(self, name, args, tmp):
        self.name, self.args, self.tmp = name, args, tmp
        self.port = free_port()
        self.log = os.path.join(tmp, name + ".err")
        self.server = None
        self.start()
        port_file = os.path.join(tmp, name + ".proxy-port")
        self.proxy = subprocess.Popen(
            [os.path.join(args.build, "bin", "splitspec"), "netem", "--listen", "127.0.0.1:0", "--upstream",
             "127.0.0.1:%d" % self.port, "--delay-ms", str(args.delay_ms), "--jitter-ms", str(args.jitter_ms),
             "--loss", str(args.loss), "--seed", str(ord(name[0])), "--port-file", port_file],
            stdout=subprocess.DEVNULL, stderr=open(self.log + ".netem", "a"))
        self.address = "127.0.0.1:%d" % wait_for_file(port_file, self.proxy, "netem", self.log + ".netem")

    def start(self):
        port_file = os.path.join(self.tmp, self.name + ".port")
        if os.path.exists(port_file):
            os.remove(port_file)
        self.server = subprocess.Popen(
            [os.path.join(self.args.build, "bin", "splitspec-server"), "--target", self.args.target, "--listen",
             "127.0.0.1:%d" % self.port, "--port-file", port_file, "--threads", "1", "--log-level", "warn",
             "--draft-hint", "off", "--max-sessions", str(self.args.clients)],
            stdout=subprocess.DEVNULL, stderr=open(self.log, "a"))
        wait_for_file(port_file, self.server, "splitspec-server", self.log)

    def kill(self):
        self.server.send_signal(signal.SIGKILL)
        self.server.wait()

    def stop(self):
        for p in (self.server, self.proxy):
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait()


def options(splitspec, address, drafter, args):
    o = splitspec.ClientOptions()
    o.verifier = "server"
    o.drafter = drafter
    o.server = address
    if drafter == "model":
        o.draft_dir = args.draft
    o.threads = 1
    o.fallback_target_dir = args.target
    o.failback_interval = 0.5
    o.reconnect_budget = 5.0
    return o


def request(splitspec, kind, seed, args):
    r = splitspec.Request()
    r.max_new_tokens = args.max_new_tokens
    r.ignore_eos = True
    r.gamma = 4
    if kind == "sampled":
        r.temperature = 0.8
        r.seed = seed
    return r


def percentile(values, q):
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(round(q * (len(v) - 1))))]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--target", default=os.path.join(ROOT, "models", "demo-target"))
    p.add_argument("--draft", default=os.path.join(ROOT, "models", "demo-draft"))
    p.add_argument("--minutes", type=float, default=3.0)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--delay-ms", type=float, default=5.0)
    p.add_argument("--jitter-ms", type=float, default=3.0)
    p.add_argument("--loss", type=float, default=0.01,
                   help="packet loss of each link; a lost packet arrives one 200 ms retransmission timeout late")
    p.add_argument("--fault-every-s", type=float, default=4.0, help="mean seconds between kills")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", help="write the report here (markdown) as well")
    args = p.parse_args()
    sys.path.insert(0, os.path.join(args.build, "python"))
    import splitspec  # noqa: E402: from the build asked for

    prompts = ["Once upon a time", "The little robot", "In the garden there was", "She looked at the sky and"]
    tokenize = os.path.join(args.build, "bin", "splitspec")
    prompt_ids = [json.loads(subprocess.check_output([tokenize, "tokenize", "--target", args.target, "--text", t,
                                                      "--json"]))["ids"] for t in prompts]
    rng = random.Random(args.seed)
    # What each client runs, in turn: (prompt, greedy|sampled, drafter, seed).
    plans = [(i % len(prompts), kind, drafter, 1000 + i)
             for i, (kind, drafter) in enumerate([(k, d) for k in ("greedy", "sampled") for d in ("model", "none")] * 2)]

    with tempfile.TemporaryDirectory() as tmp:
        replicas = [Replica("a", args, tmp), Replica("b", args, tmp)]
        try:
            # Solo runs: each request alone, on a quiet replica, no fault.
            solo = {}
            for plan in set(plans):
                prompt, kind, drafter, seed = plan
                client = splitspec.Client(options(splitspec, replicas[0].address, drafter, args))
                solo[plan] = list(client.generate_ids(prompt_ids[prompt], request(splitspec, kind, seed, args)).ids)

            lock = threading.Lock()
            results = []  # dicts per generation
            stop = threading.Event()

            def robot(index):
                replica = replicas[index % 2]
                clients = {}
                n = 0
                while not stop.is_set():
                    plan = plans[(index + n) % len(plans)]
                    n += 1
                    prompt, kind, drafter, seed = plan
                    row = {"plan": plan, "error": None, "at_connect": False}
                    t0 = time.monotonic()
                    try:
                        if drafter not in clients:
                            row["at_connect"] = True
                            clients[drafter] = splitspec.Client(options(splitspec, replica.address, drafter, args))
                            row["at_connect"] = False
                        stream = clients[drafter].stream_ids(prompt_ids[prompt], request(splitspec, kind, seed, args))
                        streamed = [t for t in stream]
                        result = stream.result
                        row["streamed"] = streamed
                        row["ids"] = list(result.ids)
                        s = result.stats
                        row["resumes"], row["failovers"], row["failbacks"] = s.resumes, s.failovers, s.failbacks
                    except Exception as e:  # an error is counted, and the robot goes on
                        row["error"] = str(e)
                        clients.pop(drafter, None)
                    row["ms"] = (time.monotonic() - t0) * 1000
                    with lock:
                        results.append(row)

            faults = []

            def chaos():
                while not stop.wait(rng.expovariate(1.0 / args.fault_every_s)):
                    r = rng.choice(replicas)
                    r.kill()
                    down = rng.uniform(0.2, 2.0)
                    faults.append((r.name, down))
                    if stop.wait(down):
                        r.start()
                        return
                    r.start()

            threads = [threading.Thread(target=robot, args=(i,)) for i in range(args.clients)]
            chaos_thread = threading.Thread(target=chaos)
            start = time.monotonic()
            for t in threads:
                t.start()
            chaos_thread.start()
            time.sleep(args.minutes * 60)
            stop.set()
            chaos_thread.join()
            for t in threads:
                t.join()
            elapsed = time.monotonic() - start
        finally:
            for r in replicas:
                r.stop()

    done = [r for r in results if r["error"] is None]
    errors = [r for r in results if r["error"] is not None]
    # Client.connect needs the server even with a fallback (issue 47): a
    # robot that connects while its replica is down gets an error at once.
    connect_errors = [r for r in errors if r["at_connect"]]
    lost_or_duplicated = 0
    differ = 0
    for r in done:
        want = solo[r["plan"]]
        if r["streamed"] != r["ids"]:
            # Tokens streamed but not returned, or returned but not streamed, or twice.
            lost_or_duplicated += abs(len(r["streamed"]) - len(r["ids"])) + sum(
                a != b for a, b in zip(r["streamed"], r["ids"]))
        if r["ids"] != want:
            differ += 1
    ms = [r["ms"] for r in done]
    by_kind = {}
    for r in done:
        key = (r["plan"][1], r["plan"][2])
        by_kind.setdefault(key, [0, 0])
        by_kind[key][0] += 1
        by_kind[key][1] += r["ids"] == solo[r["plan"]]
    lines = [
        "Chaos soak, %.1f min: %d clients (Python module) on two splitspec-server replicas of the demo target, each "
        "behind `splitspec netem` (%.0f ms one way, +/- %.0f ms jitter, %.1f%% packet loss, each a 200 ms retransmission), fallbacks on; a replica SIGKILLed "
        "every %.0f s on average and restarted after 0.2-2 s. %d new tokens a generation, gamma 4; the servers give no "
        "draft hint. All on one 2-vCPU machine." % (elapsed / 60, args.clients, args.delay_ms, args.jitter_ms,
                                                   100 * args.loss, args.fault_every_s, args.max_new_tokens),
        "",
        "| generations | faults injected | tokens lost or duplicated | differ from solo run | errors (rate) | "
        "of those, at connect | latency p50 / p99, ms | resumes | failovers | failbacks |",
        "|---|---|---|---|---|---|---|---|---|---|",
        "| %d | %d | %d | %d | %d (%.2f%%) | %d | %.0f / %.0f | %d | %d | %d |" % (
            len(done), len(faults), lost_or_duplicated, differ, len(errors),
            100.0 * len(errors) / max(1, len(results)), len(connect_errors), percentile(ms, 0.5), percentile(ms, 0.99),
            sum(r["resumes"] for r in done), sum(r["failovers"] for r in done), sum(r["failbacks"] for r in done)),
        "",
        "| requests | generations | identical to the solo run |",
        "|---|---|---|",
    ]
    for (kind, drafter), (n, same) in sorted(by_kind.items()):
        lines.append("| %s, %s | %d | %d |" % (kind, "edge-sd" if drafter == "model" else "cloud-ar", n, same))
    if errors:
        lines += ["", "Errors (first 5):", ""] + ["- " + e["error"].replace("\n", " ") for e in errors[:5]]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    if lost_or_duplicated or differ:
        sys.exit("soak: a generation lost, duplicated or changed tokens")


if __name__ == "__main__":
    main()
