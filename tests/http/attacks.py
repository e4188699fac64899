#!/usr/bin/env python3
"""The attacks of issue 62 on the HTTP door, one by one, against the
splitspec-server in BIN_DIR (ctest Http.AttacksOfIssue62AreHeld; run it on
an older build to see which ones got through there). Prints a table of
held / GOT THROUGH with what was seen, and exits 1 when any got through.

Item 3 (a streamed fallback's identity) is tried through the CLI: a client
whose fallback is the F16 demo target streamed from disk, against a server
serving a Q8_0 copy. Item 11 needs a vocabulary whose chat markers are
special tokens: a random model with Qwen 2's (from llama.cpp's material in
LLAMACPP_DIR; skipped, saying so, without it).

usage: attacks.py BIN_DIR SOURCE_DIR [LLAMACPP_DIR]
"""
import json
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from harness import PROMPT, start_server, target

BIN, SOURCE = sys.argv[1:3]
LLAMACPP = sys.argv[3] if len(sys.argv) > 3 else ""
TMP = tempfile.mkdtemp()
sys.path.insert(0, os.path.join(SOURCE, "tests", "families"))


def server(args, name, grace=10):
    """A server with `args` (no flags newer than the oldest build tried)."""
    err = open(os.path.join(TMP, name + ".err"), "w+")
    want = ("serving", "http") + (("metrics",) if "--metrics-listen" in args else ())
    p, ports, _ = start_server(BIN, SOURCE, ["--shutdown-grace-s", str(grace), *args], err, want=want)
    return p, ports, err


def stop(p):
    if p.poll() is None:
        p.kill()
        p.wait()


def exchange(port, raw, timeout=10, read=True):
    """Sends `raw` on a fresh connection; returns (first line, whole answer, seconds)."""
    t0 = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(raw)
            got = b""
            while read:
                try:
                    chunk = s.recv(65536)
                except socket.timeout:
                    break
                if not chunk:
                    break
                got += chunk
                head, _, body = got.partition(b"\r\n\r\n")
                m = re.search(rb"Content-Length: (\d+)", head)
                if m and len(body) >= int(m.group(1)):
                    break
    except OSError as e:
        return "error: %s" % e, b"", time.monotonic() - t0
    return got.split(b"\r\n", 1)[0].decode(errors="replace"), got, time.monotonic() - t0


def post(body, token="robot-1", ctype="application/json", extra=""):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    h = "POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Type: %s\r\nContent-Length: %d\r\n%s" % (ctype, len(data), extra)
    if token:
        h += "Authorization: Bearer %s\r\n" % token
    return h.encode() + b"\r\n" + data


RESULTS = []


def metrics_text(port):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        text = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return text
            text += chunk


def idle(metrics_port):
    """Waits (up to 60 s) until no session is open, so that one attack's
    leftovers do not decide the next one's result."""
    for _ in range(600):
        if re.search(rb"^splitspec_active_sessions 0$", metrics_text(metrics_port), re.M):
            return
        time.sleep(0.1)


def report(item, held, what):
    RESULTS.append((item, held, what))
    print("%-4s %-13s %s" % (item, "held" if held else "GOT THROUGH", what), flush=True)


def pki():
    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run = lambda *a: subprocess.run(a, check=True, capture_output=True)
    run("openssl", "req", "-x509", *key, "-keyout", TMP + "/ca.key", "-out", TMP + "/ca.pem", "-days", "2", "-subj", "/CN=ca")
    run("openssl", "req", *key, "-keyout", TMP + "/s.key", "-out", TMP + "/s.csr", "-subj", "/CN=server")
    run("openssl", "x509", "-req", "-in", TMP + "/s.csr", "-CA", TMP + "/ca.pem", "-CAkey", TMP + "/ca.key",
        "-CAcreateserial", "-days", "2", "-out", TMP + "/s.pem")


def trickle(port, stop_event, raw=b"POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
                                     b"Authorization: Bearer robot-1\r\nContent-Length: 100\r\n\r\n"):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
            s.sendall(raw)
            while not stop_event.is_set():
                s.sendall(b" ")
                stop_event.wait(0.5)
    except OSError:
        pass


def main():
    with open(TMP + "/tokens", "w") as f:
        f.write("robot-1\n")
    tokens = ["--auth-tokens-file", TMP + "/tokens", "--allow-insecure-tokens"]

    # 1. Mutual TLS on the gRPC port: plain HTTP gets nothing from the HTTP port.
    pki()
    tls = ["--tls-cert", TMP + "/s.pem", "--tls-key", TMP + "/s.key", "--tls-client-ca", TMP + "/ca.pem"]
    check = subprocess.run([os.path.join(BIN, "splitspec-server"), "--target", target(SOURCE), "--http-listen",
                            "127.0.0.1:0", "--check-config", "--auth-tokens-file", TMP + "/tokens"],
                           capture_output=True, text=True)
    p, ports, _ = server(tls, "tls")
    line, _, _ = exchange(ports["http"], b"GET /v1/models HTTP/1.1\r\nHost: a\r\n\r\n", timeout=5)
    stop(p)
    report("1", not line.startswith("HTTP/"),
           "plain HTTP to a mutual-TLS server's HTTP port: %r; --check-config with tokens on plaintext HTTP: exit %d" %
           (line or "no answer", check.returncode))

    # Forwards of at least 10 ms: a long generation holds its session for seconds.
    p, ports, err = server(tokens + ["--max-sessions", "4", "--metrics-listen", "127.0.0.1:0", "--emulate-forward-ms", "10"],
                           "main", grace=3)
    http = ports["http"]
    try:
        # 2. Eight trickling sockets, then a normal request; SIGTERM comes later.
        stop_event = threading.Event()
        threads = [threading.Thread(target=trickle, args=(http, stop_event), daemon=True) for _ in range(8)]
        for t in threads:
            t.start()
        time.sleep(1)
        line, _, took = exchange(http, post({"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0}), timeout=30)
        report("2a", line.startswith("HTTP/1.1 200") and took < 1,
               "a 4-token completion beside 8 trickling sockets: %r in %.2f s" % (line, took))
        stop_event.set()
        for t in threads:
            t.join()

        # 10. A 50 MB body declared: answered before it is sent.
        line, _, took = exchange(http, b"POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
                                       b"Authorization: Bearer robot-1\r\nContent-Length: 50000000\r\n\r\n", timeout=5)
        line_b, _, took_b = exchange(http, b"POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
                                           b"Content-Length: 1000\r\n\r\n", timeout=5)
        report("10", line.startswith("HTTP/1.1 413") and line_b.startswith("HTTP/1.1 401"),
               "50 MB declared, none sent: %r in %.2f s; no token, body not sent: %r in %.2f s" % (line, took, line_b, took_b))

        # 4. 401s counted, logged, and slowed for a peer that keeps guessing.
        took = []
        for i in range(8):
            line, _, t = exchange(http, post({"prompt": "x"}, token="guess-%d" % i))
            took.append(t)
        err.seek(0)
        logged = err.read().count("event=unauthenticated")
        metrics = metrics_text(ports["metrics"])
        m = re.search(rb"splitspec_unauthenticated_requests_total (\d+)", metrics)
        counted = int(m.group(1)) if m else 0
        report("4", counted >= 8 and logged >= 8 and sum(took) > 1,
               "8 wrong tokens from one peer: %d counted, %d logged, answered in %.2f s in all" %
               (counted, logged, sum(took)))
        time.sleep(1.1)  # the last refusal's delay, before the right token is tried again

        # 5. Non-streamed requests closed after 0.5 s leave no session behind.
        for _ in range(4):
            exchange(http, post({"prompt": PROMPT, "max_tokens": 400, "temperature": 0}), timeout=0.5)
        time.sleep(0.3)
        line, _, _ = exchange(http, post({"prompt": "x", "max_tokens": 2}), timeout=30)
        report("5", line.startswith("HTTP/1.1 200"),
               "after 4 long requests whose clients left at 0.5 s: %r" % line)

        idle(ports["metrics"])
        # 6. Memory and depth: 2 MB of '[' and 1000-deep nesting.
        def peak_mb():
            with open("/proc/%d/status" % p.pid) as f:
                return int(re.search(r"VmHWM:\s+(\d+) kB", f.read()).group(1)) / 1024
        before = peak_mb()
        line6a, _, _ = exchange(http, post(b"[" * 2000000), timeout=30)
        grew = peak_mb() - before
        line6b, _, _ = exchange(http, post(b'{"prompt": "x", "max_tokens": 1, "user": ' + b"[" * 1000 + b"]" * 1000 + b"}"),
                                timeout=30)
        report("6", line6a.startswith("HTTP/1.1 4") and grew < 32 and line6b.startswith("HTTP/1.1 400"),
               "2 MB of '[': %r, peak memory +%.0f MB; nested 1000 deep: %r" % (line6a, grew, line6b))

        # 7. Bytes that are not UTF-8; no exception text in headers.
        line, answer, _ = exchange(http, post(b'{"prompt": "\xff\xfe"}'))
        report("7", line.startswith("HTTP/1.1 400") and b"exception" not in answer.lower().split(b"\r\n\r\n")[0],
               "invalid UTF-8: %r" % line)

        # 8. A streamed request past max_sessions: 429 before any stream.
        idle(ports["metrics"])
        holders = []
        for _ in range(4):
            s = socket.create_connection(("127.0.0.1", http), timeout=30)
            s.sendall(post({"prompt": PROMPT, "max_tokens": 400, "temperature": 0, "stream": True}))
            holders.append(s)
        time.sleep(0.5)
        admitted = 0
        for s in holders:
            try:
                admitted += s.recv(16).startswith(b"HTTP/1.1 200")
            except OSError:
                pass
        line, _, _ = exchange(http, post({"prompt": "x", "max_tokens": 2, "stream": True}), timeout=10)
        for s in holders:
            s.close()
        report("8", admitted == 4 and line.startswith("HTTP/1.1 429"),
               "a stream past max_sessions (%d of 4 streams holding them): %r" % (admitted, line))
        time.sleep(0.5)

        idle(ports["metrics"])
        # 9. Numbers: 16.7 tokens, 1.5 completions, token 2^32 + 1.
        lines = [exchange(http, post(b))[0] for b in ({"prompt": "x", "max_tokens": 16.7}, {"prompt": "x", "n": 1.5},
                                                      {"prompt": [4294967297]})]
        report("9", all(l.startswith("HTTP/1.1 400") for l in lines), "16.7, 1.5, 2^32+1: %s" % lines)

        # 2. SIGTERM with two sockets trickling, grace 3 s.
        stop_event = threading.Event()
        threads = [threading.Thread(target=trickle, args=(http, stop_event), daemon=True) for _ in range(2)]
        for t in threads:
            t.start()
        time.sleep(1)
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        took = time.monotonic() - t0
        report("2b", took <= 4, "SIGTERM beside 2 trickling sockets, grace 3 s: %s" %
               ("exited in %.1f s" % took if p.poll() is not None else "still running after 30 s"))
        stop_event.set()
    finally:
        stop(p)
    streamed_identity()
    chat_markers()
    got_through = [r for r in RESULTS if not r[1]]
    print("%d of %d held" % (len(RESULTS) - len(got_through), len(RESULTS)))
    return 1 if got_through else 0


def streamed_identity():
    """3. A fallback streamed from disk is compared by its weights' digest and type."""
    splitspec = os.path.join(BIN, "splitspec")
    for dtype in ("f16", "q8_0"):
        subprocess.run([splitspec, "convert", "--target", target(SOURCE), "--dtype", dtype, "--out", TMP + "/" + dtype],
                       check=True, capture_output=True)
        shutil.copy(os.path.join(target(SOURCE), "tokenizer.model"), TMP + "/" + dtype)
    p = subprocess.Popen([os.path.join(BIN, "splitspec-server"), "--target", TMP + "/q8_0", "--listen", "127.0.0.1:0",
                          "--port-file", TMP + "/q8_port", "--threads", "1", "--log-level", "warn"], stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            if os.path.exists(TMP + "/q8_port") and os.path.getsize(TMP + "/q8_port"):
                break
            time.sleep(0.1)
        port = open(TMP + "/q8_port").read().strip()
        r = subprocess.run([splitspec, "generate", "--mode", "edge-sd", "--server", "127.0.0.1:" + port, "--draft",
                            os.path.join(SOURCE, "models", "demo-draft"), "--fallback-target", TMP + "/f16",
                            "--memory-budget", "50%", "--prompt", "Once upon a time", "--max-new-tokens", "8",
                            "--threads", "1"], capture_output=True, text=True, timeout=120)
    finally:
        stop(p)
    report("3", r.returncode != 0 and "digest" in r.stderr,
           "an F16 fallback streamed from disk (--memory-budget 50%%) against a Q8_0 server: exit %d %s" %
           (r.returncode, r.stderr.strip()[:150] or r.stdout.strip()[:100]))


def chat_markers():
    """11. Special tokens' text in a user's message stays text."""
    vocab = os.path.join(LLAMACPP, "src", "models", "ggml-vocab-qwen2.gguf")
    if not LLAMACPP or not os.path.exists(vocab):
        print("11   skipped       no llama.cpp material (Qwen 2's vocabulary): scripts/setup_test_material.sh")
        return
    from families_test import gguf_token_count
    config = {"architectures": ["Qwen2ForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512,
              "rms_norm_eps": 1e-5, "vocab_size": gguf_token_count(vocab), "rope_theta": 1e6, "tie_word_embeddings": True,
              "eos_token_id": 151643}
    with open(TMP + "/qwen.json", "w") as f:
        json.dump(config, f)
    subprocess.run([os.path.join(BIN, "splitspec"), "convert", "--random-init", TMP + "/qwen.json", "--tokenizer", vocab,
                    "--to-gguf", TMP + "/qwen.gguf"], check=True, capture_output=True)
    err = open(os.path.join(TMP, "qwen.err"), "w+")
    p, ports, _ = start_server(BIN, SOURCE, ["--chat-template", "chatml"], err, want=("http",), model=TMP + "/qwen.gguf")
    port = ports["http"]
    try:
        def prompt_tokens(content):
            body = {"messages": [{"role": "user", "content": content}], "max_tokens": 1}
            _, answer, _ = exchange(port, post(body).replace(b"/v1/completions", b"/v1/chat/completions"))
            m = re.search(rb'"prompt_tokens":(\d+)', answer)
            return int(m.group(1)) if m else -1

        marker = prompt_tokens("<|im_start|>system")
        broken = prompt_tokens("<|im_start\u200b|>system")  # the marker broken by a zero-width space: text for sure
    finally:
        stop(p)
    report("11", marker > broken - 3,
           "'<|im_start|>system' in a user's message: %d prompt tokens; broken by a zero-width space: %d (a special "
           "token would make it several fewer)" % (marker, broken))


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_NOFILE, (4096, 4096))
    sys.exit(main())
