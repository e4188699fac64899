#!/usr/bin/env python3
"""Slow sockets cannot take the HTTP door down (ctest Http.SlowClientsDoNotHoldTheDoor,
label slow).

A real server (request deadline 4 s, shutdown grace 3 s) with 64 slow sockets
kept open at all times: 24 trickling a request head a line every 0.5 s, 24
trickling a body a byte every 0.5 s after a complete head, 16 streaming
requests whose reader never reads. Beside them:
- a 4-token completion is answered whole within 1 s, every time;
- each trickling socket is closed by the server at the request deadline,
  however steadily it trickles;
- SIGTERM ends the process within shutdown_grace_s + 1 s.
Deadlines with margins: timing is the point of this test.

usage: slow_clients_test.py BIN_DIR SOURCE_DIR
"""
import json
import os
import re
import select
import signal
import socket
import statistics
import sys
import tempfile
import threading
import time

from harness import fail, start_server

BIN, SOURCE = sys.argv[1:3]
DEADLINE_S = 4
GRACE_S = 3


def post(body, stream=False):
    data = json.dumps(body).encode()
    return (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(data), data))


class Trickler(threading.Thread):
    """Keeps one slow socket open: reopened each time the server closes it."""

    def __init__(self, port, kind, lifetimes, stop):
        super().__init__(daemon=True)
        self.port, self.kind, self.lifetimes, self.stop = port, kind, lifetimes, stop

    def run(self):
        while not self.stop.is_set():
            try:
                s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
            except OSError:
                return
            opened = time.monotonic()
            try:
                if self.kind == "head":
                    s.sendall(b"POST /v1/completions HTTP/1.1\r\n")
                else:
                    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                              b"Content-Length: 1000\r\n\r\n")
                while not self.stop.is_set():
                    readable, _, _ = select.select([s], [], [], 0.5)
                    if readable and not s.recv(4096):
                        break  # closed by the server (an answer, if any, came first)
                    s.sendall(b"X-a: b\r\n" if self.kind == "head" else b" ")
            except OSError:
                pass
            if not self.stop.is_set():
                self.lifetimes.append(time.monotonic() - opened)
            s.close()


def main():
    tmp = tempfile.mkdtemp()
    err = open(os.path.join(tmp, "server.err"), "w+")
    server, ports, _ = start_server(BIN, SOURCE, ["--max-sessions", "24", "--http-request-timeout-s", str(DEADLINE_S),
                                                  "--shutdown-grace-s", str(GRACE_S)], err, want=("http",))
    port = ports["http"]
    try:
        stop = threading.Event()
        lifetimes = {"head": [], "body": []}
        threads = [Trickler(port, kind, lifetimes[kind], stop) for kind in ("head", "body") for _ in range(24)]
        for t in threads:
            t.start()
        readers = []
        for _ in range(16):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(("127.0.0.1", port))
            s.sendall(post({"prompt": "Once upon a time", "max_tokens": 4000, "temperature": 0, "stream": True}))
            readers.append(s)
        time.sleep(1)

        took = []
        for i in range(5):
            t0 = time.monotonic()
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.sendall(post({"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0}))
                answer = b""
                while b"\r\n\r\n" not in answer or len(answer.split(b"\r\n\r\n", 1)[1]) < int(
                        re.search(rb"Content-Length: (\d+)", answer).group(1) if b"Content-Length" in answer else 1 << 30):
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    answer += chunk
            took.append(time.monotonic() - t0)
            head, _, body = answer.partition(b"\r\n\r\n")
            if not head.startswith(b"HTTP/1.1 200") or json.loads(body)["usage"]["completion_tokens"] != 4:
                fail("a 4-token completion beside 64 slow sockets: %r" % answer[:200])
        print("4-token completion beside 64 slow sockets: median %.3f s, max %.3f s (5 runs)" %
              (statistics.median(took), max(took)))
        if max(took) > 1.0:
            fail("a 4-token completion took %.3f s (over 1 s)" % max(took))

        # Past the request deadline every trickler has been cut at least once.
        time.sleep(DEADLINE_S + 2.5)
        for kind, seen in lifetimes.items():
            if len(seen) < 24:
                fail("%s tricklers closed by the server: %d of 24 after %d s" % (kind, len(seen), DEADLINE_S + 3))
            print("%s tricklers: closed after %.2f-%.2f s (deadline %d s)" % (kind, min(seen), max(seen), DEADLINE_S))
            if min(seen) < DEADLINE_S - 0.5 or max(seen) > DEADLINE_S + 1.5:
                fail("%s tricklers were not closed at the deadline: %.2f-%.2f s" % (kind, min(seen), max(seen)))

        alive = sum(t.is_alive() for t in threads)
        t0 = time.monotonic()
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
        took = time.monotonic() - t0
        print("SIGTERM with %d slow sockets open: exited in %.2f s (grace %d s)" % (alive + len(readers), took, GRACE_S))
        if took > GRACE_S + 1:
            fail("SIGTERM took %.2f s, over shutdown_grace_s + 1 = %d s" % (took, GRACE_S + 1))
        stop.set()
        for s in readers:
            s.close()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
