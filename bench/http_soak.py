#!/usr/bin/env python3
"""HTTP soak (issue 62): 64 streaming clients on the OpenAI endpoint for
minutes, some of them hostile, every admitted stream checked.

A real splitspec-server (demo target, --max-sessions below the client count,
so that refusals happen all the time) and --clients threads on raw sockets,
each running streamed greedy completions back to back over a set of
prompts. At all times client 0 trickles its request (head and body a few
bytes every 0.1 s, then reads normally) and client 1 drops its stream after
its first event; the rest are plain.

Checked: every stream admitted and read to its end equals its prompt's
greedy text alone (from one request on the idle server before the soak);
every refusal is a 429 with Retry-After before any byte of a stream; the
server's splitspec_http_requests_total and splitspec_active_sessions agree
(every answer counted, no session left at the end). Exits 1 when any check
fails.

  python3 bench/http_soak.py [--minutes 5] [--clients 64] [--max-sessions 16] [--out bench/results/http_soak.md]
"""
import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(ROOT), "tests", "http"))
from harness import start_server  # noqa: E402

PROMPTS = ["Once upon a time, there was a little robot", "The whale", "Call me Ishmael.",
           "It was the best of times", "In the beginning", "The robot picked up the", "A ship sailed",
           "She said that the"]


def request_bytes(prompt, max_tokens):
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True}).encode()
    return (b"POST /v1/completions HTTP/1.1\r\nHost: soak\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body))


def read_answer(s, drop_after_first=False):
    """(status, headers text, streamed text, complete) of one answer on `s`."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            return None, data.decode(errors="replace"), "", False
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1])
    if status != 200:
        return status, head.decode(), rest.decode(errors="replace"), True
    text, buffer = "", rest
    while True:
        while b"\n\n" in buffer:
            event, _, buffer = buffer.partition(b"\n\n")
            # Chunked framing lines carry no "data:"; the events do.
            for line in event.split(b"\n"):
                if line.startswith(b"data: "):
                    payload = line[6:].strip()
                    if payload == b"[DONE]":
                        return status, head.decode(), text, True
                    j = json.loads(payload)
                    if "error" in j:
                        return status, head.decode(), "error: " + json.dumps(j), True
                    if j["choices"]:
                        text += j["choices"][0].get("text", "")
                    if drop_after_first:
                        return status, head.decode(), text, False
        chunk = s.recv(65536)
        if not chunk:
            return status, head.decode(), text, False
        buffer += chunk


def metric(port, name):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=30) as r:
        text = r.read().decode()
    return {m.group(1) or "": float(m.group(2)) for m in re.finditer(r"^%s(\{[^}]*\})? (\S+)$" % re.escape(name), text, re.M)}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(os.path.dirname(ROOT), "build"))
    p.add_argument("--minutes", type=float, default=5.0)
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--max-sessions", type=int, default=16)
    p.add_argument("--max-tokens", type=int, default=24)
    p.add_argument("--out", help="write the report here (markdown) as well")
    a = p.parse_args()
    bin_dir = os.path.join(a.build, "bin")
    tmp = tempfile.mkdtemp()
    err = open(os.path.join(tmp, "server.err"), "w+")
    server, ports, _ = start_server(bin_dir, os.path.dirname(ROOT),
                                    ["--max-sessions", str(a.max_sessions), "--metrics-listen", "127.0.0.1:0"], err, want=("serving", "http", "metrics"))
    port = ports["http"]
    failures = []
    counts = {"admitted": 0, "refused": 0, "dropped": 0, "trickled": 0, "other": 0}
    lock = threading.Lock()
    try:
        want = {}
        for prompt in PROMPTS:
            with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
                s.sendall(request_bytes(prompt, a.max_tokens))
                status, _, text, complete = read_answer(s)
                if status != 200 or not complete:
                    sys.exit("http_soak: the reference for %r failed: %s" % (prompt, status))
                want[prompt] = text
        t_end = time.monotonic() + a.minutes * 60
        latencies = []

        def client(index):
            n = 0
            while time.monotonic() < t_end:
                prompt = PROMPTS[(index + n) % len(PROMPTS)]
                n += 1
                kind = "trickle" if index == 0 else "drop" if index == 1 else "plain"
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
                        t0 = time.monotonic()
                        raw = request_bytes(prompt, a.max_tokens)
                        if kind == "trickle":
                            for i in range(0, len(raw), 16):
                                s.sendall(raw[i:i + 16])
                                time.sleep(0.1)
                        else:
                            s.sendall(raw)
                        status, head, text, complete = read_answer(s, drop_after_first=kind == "drop")
                        took = time.monotonic() - t0
                except OSError as e:
                    with lock:
                        failures.append("client %d: %s" % (index, e))
                    continue
                with lock:
                    if status == 429:
                        counts["refused"] += 1
                        if "Retry-After: 1" not in head or text.startswith("data:"):
                            failures.append("a 429 without Retry-After or after a stream began: %r" % head)
                        time.sleep(0.05)
                    elif status == 200 and kind == "drop":
                        counts["dropped"] += 1
                    elif status == 200 and complete:
                        counts["admitted"] += 1
                        counts["trickled"] += kind == "trickle"
                        latencies.append(took)
                        if text != want[prompt]:
                            failures.append("a stream of %r differs: %r vs %r" % (prompt, text, want[prompt]))
                    else:
                        counts["other"] += 1
                        failures.append("client %d (%s): status %s complete %s %r" % (index, kind, status, complete,
                                                                                      head[:80]))

        threads = [threading.Thread(target=client, args=(i,)) for i in range(a.clients)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - t0
        time.sleep(1)
        active = metric(ports["metrics"], "splitspec_active_sessions")
        by_code = metric(ports["metrics"], "splitspec_http_requests_total")
        if active.get("", -1) != 0:
            failures.append("splitspec_active_sessions ends at %s" % active)
        answered = counts["admitted"] + counts["dropped"] + len(PROMPTS)
        if by_code.get('{code="2xx"}', 0) < answered or by_code.get('{code="4xx"}', 0) < counts["refused"]:
            failures.append("the server's counts %s are below the clients' (%d 2xx, %d 429)" %
                            (by_code, answered, counts["refused"]))
        lat = sorted(latencies)
        report = (
            "HTTP soak, %.1f min: %d streaming clients (raw sockets) on one splitspec-server with the demo target, "
            "max_sessions %d, %d greedy tokens a completion over %d prompts; client 0 trickles every request "
            "(16 bytes every 0.1 s), client 1 drops every stream after its first event. All on one 2-vCPU "
            "machine.\n\n"
            "| admitted and read whole | of those trickled | equal to the prompt's greedy text alone | dropped by "
            "the client | 429 before any byte | other | active sessions at the end | stream p50 / p99 |\n"
            "|---|---|---|---|---|---|---|---|\n"
            "| %d | %d | %d | %d | %d | %d | %d | %.2f s / %.2f s |\n\n"
            "Server counts: %s. Checks failed: %d%s\n" % (
                elapsed / 60, a.clients, a.max_sessions, a.max_tokens, len(PROMPTS), counts["admitted"],
                counts["trickled"], counts["admitted"] - sum(f.startswith("a stream") for f in failures),
                counts["dropped"], counts["refused"], counts["other"], int(active.get("", -1)),
                statistics.median(lat) if lat else 0, lat[int(0.99 * (len(lat) - 1))] if lat else 0,
                ", ".join("%s %d" % (k, v) for k, v in sorted(by_code.items())), len(failures),
                "".join("\n- " + f for f in failures[:10])))
        print(report)
        if a.out:
            with open(a.out, "w") as f:
                f.write(report)
        return 1 if failures else 0
    finally:
        server.terminate()
        server.wait(timeout=60)


if __name__ == "__main__":
    sys.exit(main())
