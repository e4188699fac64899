#!/usr/bin/env python3
"""splitspec-server's OpenAI-compatible endpoint end to end (ctest
Http.OpenAiClientAgainstTheServer): a real server process with bearer tokens
and --http-listen; the official `openai` npm client (scripts/
setup_test_material.sh installs it under build/) streams a greedy completion
whose text must equal `splitspec generate --mode cloud-ar`'s, gets the same
text whole with its usage, runs a chat completion streamed and whole, lists
the model, and gets 401 with a wrong token. Bad requests are tried with
urllib: each gets its status and an OpenAI error object. Exit 77 (skip)
without node or the npm package.

usage: openai_test.py BIN_DIR SOURCE_DIR MATERIAL_DIR
"""
import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

from harness import MAX_TOKENS, PROMPT, fail, openai_package, start_server, target

BIN, SOURCE, MATERIAL = sys.argv[1:4]
PACKAGE = openai_package(MATERIAL)
TARGET = target(SOURCE)


LAST_HEADERS = {}


def request(url, body=None, token="robot-1", method=None, content_type="application/json"):
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    req = urllib.request.Request(url, data=data, method=method or ("POST" if data is not None else "GET"))
    req.add_header("Content-Type", content_type)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            LAST_HEADERS.clear()
            LAST_HEADERS.update({k.lower(): v for k, v in r.headers.items()})
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        LAST_HEADERS.clear()
        LAST_HEADERS.update({k.lower(): v for k, v in e.headers.items()})
        return e.code, json.loads(e.read() or b"{}")


def main():
    if not shutil.which("node") or not os.path.isfile(os.path.join(PACKAGE, "package.json")):
        print("SKIP: node or the openai npm package is missing (scripts/setup_test_material.sh installs it)")
        return 77
    tmp = tempfile.mkdtemp()
    tokens = os.path.join(tmp, "tokens")
    with open(tokens, "w") as f:
        f.write("robot-1\n")
    err = open(os.path.join(tmp, "server.err"), "w+")
    server, ports, _ = start_server(BIN, SOURCE, ["--auth-tokens-file", tokens, "--allow-insecure-tokens",
                                                  "--chat-template", "chatml", "--max-sessions", "1",
                                                  "--metrics-listen", "127.0.0.1:0"], err,
                                    want=("serving", "http", "metrics"))
    try:
        base = "http://127.0.0.1:%d/v1" % ports["http"]

        cli = subprocess.run([os.path.join(BIN, "splitspec"), "generate", "--mode", "cloud-ar", "--server",
                              "127.0.0.1:%d" % ports["serving"], "--tokenizer", TARGET, "--auth-token-file", tokens,
                              "--allow-insecure-tokens", "--prompt", PROMPT, "--max-new-tokens", str(MAX_TOKENS),
                              "--json"], capture_output=True, text=True)
        if cli.returncode != 0:
            fail("splitspec generate: " + cli.stderr)
        want = json.loads(cli.stdout)

        node = subprocess.run(["node", os.path.join(SOURCE, "tests", "http", "openai_client.mjs"), PACKAGE, base,
                               "robot-1", PROMPT, str(MAX_TOKENS)], capture_output=True, text=True, timeout=300)
        if node.returncode != 0:
            fail("the openai client: " + node.stderr + node.stdout)
        got = json.loads(node.stdout)
        print("cli:     ", json.dumps(want["text"]))
        print("streamed:", json.dumps(got["streamed"]), "in", got["streamed_chunks"], "chunks")
        print("chat:    ", json.dumps(got["chat"]))
        checks = [
            (got["streamed"] == want["text"], "the streamed text is not generate's"),
            (got["streamed_chunks"] > 1, "the completion was not streamed in pieces"),
            (got["whole"] == want["text"], "the whole text is not generate's"),
            (got["usage"]["completion_tokens"] == MAX_TOKENS, "usage.completion_tokens"),
            (got["usage"]["prompt_tokens"] == len(want["prompt_ids"]), "usage.prompt_tokens"),
            (got["usage"]["total_tokens"] == len(want["prompt_ids"]) + MAX_TOKENS, "usage.total_tokens"),
            (got.get("streamed_usage") == got["usage"], "stream_options.include_usage"),
            (got["whole_finish"] == "length" and got["streamed_finish"] == "length", "finish_reason"),
            (got["chat_role"] == "assistant" and got["chat"] == got["chat_streamed"] and got["chat"] != "",
             "the chat completion"),
            (got["models"] == ["demo-target"], "the model list"),
            (got["unauthorized"] == 401, "a wrong token"),
        ]
        for ok, what in checks:
            if not ok:
                fail(what + ": " + json.dumps(got))

        # Bad requests: a status and an OpenAI error object each.
        cases = [
            (base + "/models", None, None, 401),
            (base + "/completions", {"prompt": "x"}, "", 401),
            (base + "/completions", b"{not json", "robot-1", 400),
            (base + "/completions", {"prompt": "x", "n": 2}, "robot-1", 400),
            (base + "/completions", {"prompt": "x", "max_tokens": 0}, "robot-1", 400),
            (base + "/completions", {"prompt": "x", "temperature": 9}, "robot-1", 400),
            (base + "/completions", {"prompt": [1, 99999]}, "robot-1", 400),
            (base + "/completions", {"prompt": "x" * 20000}, "robot-1", 400),
            (base + "/chat/completions", {"messages": []}, "robot-1", 400),
            (base + "/chat/completions", {"messages": [{"role": "robot", "content": "x"}]}, "robot-1", 400),
            (base + "/nowhere", None, "robot-1", 404),
            # Numbers are integers in range, never truncated (16.7 is not 16,
            # 2^32 + 1 is not token 1).
            (base + "/completions", {"prompt": "x", "max_tokens": 16.7}, "robot-1", 400),
            (base + "/completions", {"prompt": "x", "n": 1.5}, "robot-1", 400),
            (base + "/completions", {"prompt": "x", "max_tokens": "16"}, "robot-1", 400),
            (base + "/completions", {"prompt": [4294967297]}, "robot-1", 400),
            (base + "/completions", {"prompt": [1, 2.5]}, "robot-1", 400),
            (base + "/completions", {"prompt": "x", "max_tokens": 18446744073709551615}, "robot-1", 400),
            # Bytes that are not UTF-8: a 400 naming the parser's reason.
            (base + "/completions", b'{"prompt": "\xff\xfe"}', "robot-1", 400),
            (base + "/chat/completions", b'{"messages": [{"role": "user", "content": "\xc3"}]}', "robot-1", 400),
            # Nesting past 32 levels is refused as the parser reaches it.
            (base + "/completions", b'{"prompt": ' + b"[" * 100 + b"]" * 100 + b"}", "robot-1", 400),
            (base + "/completions", b"[" * 2000000, "robot-1", 400),
        ]
        for url, body, token, status in cases:
            code, answer = request(url, body, token=token)
            if code != status or "message" not in answer.get("error", {}):
                fail("%s %s: %d %s, expected %d with an error" % (url, str(body)[:40], code, answer, status))
            if any(h.startswith("exception") for h in LAST_HEADERS):
                fail("%s %s: internals in the headers: %s" % (url, str(body)[:40], LAST_HEADERS))
        # Refused tokens are counted and logged as the gRPC door's are.
        err.seek(0)
        refusals = err.read().count("event=unauthenticated door=http")
        if refusals < 3:
            fail("the HTTP door's 401s were not logged (%d lines)" % refusals)
        # A body that is not JSON: 415, whatever its size.
        code, answer = request(base + "/completions", {"prompt": "x" * 9000}, content_type="application/x-www-form-urlencoded")
        message = answer.get("error", {}).get("message", "")
        if code != 415 or "Content-Type: application/json" not in message:
            fail("a form body: %d %s" % (code, answer))
        # The head decides before the body is read: a declared 50 MB body
        # gets its 413, and one without a token its 401, at once, with the
        # body never sent.
        def head_only(headers):
            with socket.create_connection(("127.0.0.1", ports["http"]), timeout=5) as s:
                s.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
                           "".join("%s: %s\r\n" % h for h in headers) + "\r\n").encode())
                t0 = time.monotonic()
                answer = s.recv(65536).decode(errors="replace")
                return answer, time.monotonic() - t0
        for headers, status in [([("Content-Length", "50000000"), ("Authorization", "Bearer robot-1")], "413"),
                                ([("Content-Length", "100000")], "401"),
                                ([("Transfer-Encoding", "chunked")], "401"),
                                ([("Content-Length", "10"), ("X-Big", "y" * 20000), ("Authorization", "Bearer robot-1")], "431")]:
            answer, took = head_only(headers)
            if not answer.startswith("HTTP/1.1 " + status) or took > 2:
                fail("head %s: %r after %.1f s, expected %s at once" % ([h[0] for h in headers], answer[:80], took, status))
        code, answer = request(base + "/completions")
        if code != 405:
            fail("GET /v1/completions: %d %s" % (code, answer))
        # A non-streamed request whose client goes stops its generation: its
        # session is free again at once, not when 4000 tokens are done.
        for _ in range(3):
            with socket.create_connection(("127.0.0.1", ports["http"]), timeout=5) as s:
                body = json.dumps({"prompt": PROMPT, "max_tokens": 4000, "temperature": 0}).encode()
                s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                          b"Authorization: Bearer robot-1\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
                time.sleep(0.5)
            t0 = time.monotonic()
            while time.monotonic() - t0 < 2:
                code, answer = request(base + "/completions", {"prompt": "x", "max_tokens": 2})
                if code != 429:
                    break
                time.sleep(0.05)
            if code != 200:
                fail("the session of a request whose client left is still held: %d %s" % (code, answer))
        # A stop string ends the text before it.
        code, answer = request(base + "/completions", {"prompt": PROMPT, "max_tokens": MAX_TOKENS, "temperature": 0,
                                                       "stop": [want["text"][10:14]]})
        text = answer["choices"][0]["text"]
        if code != 200 or answer["choices"][0]["finish_reason"] != "stop" or text != want["text"][:len(text)] or \
                want["text"][10:14] in text:
            fail("stop: %s" % answer)
        # A streamed request the server cannot admit (its one session is
        # taken) gets a 429 with Retry-After before any byte of a stream,
        # as the same request unstreamed does.
        # The one session may still be held a moment by the last request's
        # cancelled call (a stop string): the long stream retries until it
        # is admitted.
        for _ in range(100):
            held = http.client.HTTPConnection("127.0.0.1", ports["http"], timeout=60)
            held.request("POST", "/v1/completions", body=json.dumps({"prompt": PROMPT, "max_tokens": 4000,
                                                                     "temperature": 0, "stream": True}),
                         headers={"Content-Type": "application/json", "Authorization": "Bearer robot-1"})
            first = held.getresponse()
            if first.status != 429:
                break
            first.read()
            held.close()
            time.sleep(0.1)
        if first.status != 200 or not first.read(16):
            fail("the long stream did not start: %d" % first.status)
        for stream in (True, False):
            code, answer = request(base + "/completions", {"prompt": "x", "max_tokens": 2, "stream": stream})
            if code != 429 or "error" not in answer or LAST_HEADERS.get("retry-after") != "1":
                fail("a request past max_sessions (stream %s): %d %s %s" % (stream, code, answer, LAST_HEADERS))
        held.close()
        # The HTTP door's metrics and access log: status classes counted,
        # refused tokens among the unauthenticated, one line a request with
        # its id (also sent back as X-Request-Id).
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % ports["metrics"], timeout=30) as r:
            metrics = r.read().decode()
        for series in ('splitspec_http_requests_total{code="2xx"}', 'splitspec_http_requests_total{code="4xx"}'):
            m = re.search(re.escape(series) + r" (\d+)", metrics)
            if not m or int(m.group(1)) < 3:
                fail("metric %s: %s" % (series, m.group(0) if m else "missing"))
        m = re.search(r"splitspec_unauthenticated_requests_total (\d+)", metrics)
        if not m or int(m.group(1)) < 3:
            fail("401s are not among splitspec_unauthenticated_requests_total: %s" % (m.group(0) if m else "missing"))
        code, _ = request(base + "/models")
        if not LAST_HEADERS.get("x-request-id", "").startswith("req-"):
            fail("no X-Request-Id: %s" % LAST_HEADERS)
        line = "event=http_request id=%s " % LAST_HEADERS["x-request-id"]
        for _ in range(50):  # the line is written as the response goes out
            err.seek(0)
            if line in err.read():
                break
            time.sleep(0.1)
        else:
            fail("no access log line for request %s" % LAST_HEADERS["x-request-id"])
        # The requests ran as the server's own Generate calls.
        code, info = request(base + "/models")
        if code != 200:
            fail("models: %s" % info)
        print("PASS")
        return 0
    finally:
        server.terminate()
        server.wait(timeout=60)


if __name__ == "__main__":
    sys.exit(main())
